"""Learning at an equal sampling budget: R³L vs GRPO, RAFT and OPMD, R³L's ablations, self vs oracle reflection.

Usage (``benchmarks/learning.py`` is this module's command line)::

    python -m benchmarks.learning --mode quick                  # minutes (tiny budgets)
    python -m benchmarks.learning --mode cpu --time-budget 240  # resumable; rerun to continue
    python -m benchmarks.learning --mode gpu --jobs 2           # --device cuda
    python -m benchmarks.learning --mode fair --jobs 2 --threads 1 --out-root runs/fair  # the fair-rules rerun
    python -m benchmarks.learning --mode quick --report-only    # re-aggregate existing runs
    python -m benchmarks.learning --from-json benchmarks/results/learning_fair.json  # re-render a saved report

The pre-registered study (:mod:`benchmarks.learning_study.prereg`), from a start model made by ``r3l warmup``::

    python -m benchmarks.learning --mode prereg-valid --model PATH --time-budget 240   # resumable
    python -m benchmarks.learning --mode prereg-valid --model PATH --preregister       # writes results/prereg.json
    git add benchmarks/results/prereg.json && git commit ...                           # before the test stage
    python -m benchmarks.learning --mode prereg --model PATH --time-budget 240         # resumable

On a CPU of another kind than the registered one, an amendment (:mod:`benchmarks.learning_study.amendments`) admits
it, declared there before any run and committed::

    python -m benchmarks.learning --mode prereg --model PATH --declare-kind   # writes results/prereg-amendments.json

Where seeds another kind began can no longer be made, seed quotas (:mod:`benchmarks.learning_study.quota`) replace
the registered seeds, declared once before any run they admit and committed::

    python -m benchmarks.learning --mode prereg --model PATH --declare-seeds  # appends to prereg-amendments.json

On a fresh machine (no run directories) a sweep or report continues from the committed report of the same mode
(``benchmarks/results/learning.json`` for the pre-registered comparison, ``learning_fair.json`` for the fair mode,
...): its finished runs count as done for the same cells (made on another CPU kind
too; the page says which), and only the rest run. ``--no-saved`` uses the run directories alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import results_page
from r3l_learn.policies.device import cpu_kind

from . import BENCHMARKS, ROOT, quota
from .aggregate import aggregate
from .amendments import AMENDMENTS_JSON, declaration, declare, kind_amendments, read_amendments, seed_amendment
from .child import register_setup
from .grid import CPU_AUTOCAST, ENVS, METHODS, MODES, Method, Mode, Run, build_grid, run_name
from .prereg import (
    PREREG_JSON,
    PREREG_MODES,
    TEST,
    VALID,
    check_registered,
    git_commit,
    main_methods,
    read_prereg,
    read_warmup,
    registration,
    test_mode,
    uncommitted,
    valid_mode,
    write_prereg,
)
from .report import rewrite_report, section_of, write_report
from .scheduler import sweep

logger = logging.getLogger("bench.learning")


def build_parser() -> argparse.ArgumentParser:
    """The options of ``python -m benchmarks.learning``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=sorted({*MODES, *PREREG_MODES}), default="quick")
    parser.add_argument("--out-root", type=Path, default=None, help="run directories (default runs/learning/MODE)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run (default: free cores / jobs)")
    parser.add_argument("--envs", nargs="*", default=None, help="run only these envs (the page shows the whole grid)")
    parser.add_argument("--methods", nargs="*", default=None, help="run only these methods")
    parser.add_argument("--seeds", nargs="*", type=int, default=None, help="run only these seeds")
    parser.add_argument(
        "--model", default=None, help="override the mode's model (prereg modes: the start model folder, required)"
    )
    parser.add_argument("--device", default=None, help="override the mode's device (e.g. cuda)")
    parser.add_argument("--time-budget", type=float, default=None, help="minutes; then stop (resumable)")
    parser.add_argument(
        "--start-within",
        type=float,
        default=None,
        help="minutes; then no run starts and the runs in flight finish (a machine wiped at the end of a session "
        "loses an interrupted run's checkpoint, never a finished run)",
    )
    parser.add_argument("--run-timeout", type=float, default=None, help="minutes per run; then interrupt it")
    parser.add_argument(
        "--micro-batch-size", type=int, default=None, help="override for this invocation's runs (memory only)"
    )
    parser.add_argument("--rerun-stale", action="store_true", help="delete and rerun runs of another configuration")
    parser.add_argument("--keep-checkpoints", action="store_true", help="keep finished runs' checkpoints")
    parser.add_argument("--report-only", action="store_true", help="aggregate the existing runs; run nothing")
    parser.add_argument(
        "--saved",
        type=Path,
        default=None,
        help="the committed report whose finished runs count as done where no run dir holds them "
        "(default: the mode's own RESULTS_DIR/learning*.json, when it is of the same mode)",
    )
    parser.add_argument("--no-saved", action="store_true", help="use only the run directories under --out-root")
    parser.add_argument("--no-report", action="store_true", help="run; do not write RESULTS.md")
    parser.add_argument("--results-md", type=Path, default=results_page.RESULTS_MD)
    parser.add_argument("--results-dir", type=Path, default=results_page.RESULTS_DIR)
    parser.add_argument(
        "--plots-dir", type=Path, default=None, help="where the plots go (default benchmarks/learning/MODE; cpu: ..)"
    )
    parser.add_argument(
        "--from-json", type=Path, default=None, help="render the page and plots again from a saved learning.json"
    )
    parser.add_argument(
        "--preregister",
        action="store_true",
        help="prereg-valid: write RESULTS_DIR/prereg.json from the finished valid stage (commit it before prereg)",
    )
    parser.add_argument("--force", action="store_true", help="with --preregister: replace an existing prereg.json")
    parser.add_argument(
        "--declare-kind",
        action="store_true",
        help="prereg: admit this CPU kind by an amendment (RESULTS_DIR/prereg-amendments.json; commit it before runs)",
    )
    parser.add_argument(
        "--declare-seeds",
        action="store_true",
        help="prereg: replace the registered seeds by seed quotas, by an amendment (commit it before runs it admits)",
    )
    parser.add_argument("--note", default=None, help="with --declare-*: what else the amendment should disclose")
    return parser


def resolve_mode(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[Mode, dict[str, Method]]:
    """The mode to run and its methods: a fixed mode of ``MODES``, or a stage of the pre-registered study (the
    test stage built from ``RESULTS_DIR/prereg.json``, and refused where it differs from it)."""
    if args.mode not in PREREG_MODES:
        mode = MODES[args.mode]
        return (dataclasses.replace(mode, model=args.model) if args.model else mode), METHODS
    if not args.model:
        parser.error(f"--mode {args.mode} needs --model PATH: the start model folder (made by r3l warmup)")
    if args.mode == VALID:
        return valid_mode(args.model)
    registered, amendments = read_registration(args.results_dir)
    problems = check_registered(registered, args.model, amendments=amendments)
    if problems:
        raise SystemExit("the test stage would not run what was pre-registered: " + "; ".join(problems))
    return test_mode(registered, args.model, seed_plan=(seed_amendment(amendments) or {}).get("seeds"))


def read_registration(results_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The committed pre-registration and its amendments (exits with the reason where either is missing,
    malformed or not committed)."""
    path, amendments_path = results_dir / PREREG_JSON, results_dir / AMENDMENTS_JSON
    try:
        registered, amendments = read_prereg(path), read_amendments(amendments_path)
    except (FileNotFoundError, ValueError) as err:
        raise SystemExit(str(err)) from None
    for p in (path, amendments_path):
        if p.exists() and uncommitted(p):
            raise SystemExit(f"{p} is not committed: commit it before the test stage runs")
    return registered, amendments


def declare_kind(args: argparse.Namespace, command: str) -> None:
    """Append the amendment admitting this CPU kind to ``RESULTS_DIR/prereg-amendments.json`` (refused where the
    kind needs none or is admitted, where test-stage runs were made on it, or where the start model is not the
    registered recipe rebuilt)."""
    registered, amendments = read_registration(args.results_dir)
    kind = cpu_kind()
    made = [run_name(*r) for r in runs_made(args, kind)]
    path = append_amendment(
        args,
        amendments,
        lambda declared: declare(
            registered,
            amendments,
            kind=kind,
            autocast=CPU_AUTOCAST,
            warmup=read_warmup(args.model),
            runs_made_here=made,
            declared=declared,
        ),
        command,
    )
    logger.info(
        "%s: CPU kind %r admitted (autocast %s); commit it before the test stage runs here", path, kind, CPU_AUTOCAST
    )


def append_amendment(
    args: argparse.Namespace,
    amendments: list[dict[str, Any]],
    make: Callable[[dict[str, Any]], dict[str, Any]],
    command: str,
) -> Path:
    """Make an amendment (``make``, given its :func:`~benchmarks.learning_study.amendments.declaration`; a
    refusal exits with its reason) and append it to ``RESULTS_DIR/prereg-amendments.json``; returns that path."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    try:
        amendment = make(declaration(command, git_commit(), now, args.note))
    except ValueError as err:
        raise SystemExit(str(err)) from None
    path = args.results_dir / AMENDMENTS_JSON
    path.write_text(json.dumps([*amendments, amendment], indent=2) + "\n")
    return path


def runs_made(args: argparse.Namespace, kind: str | None = None) -> list[tuple[str, str, int]]:
    """The test-stage runs begun or finished so far, as (env, method, seed): the committed report's (those made on
    CPU kind ``kind`` only, where given) and the run directories under the out-root (this machine's)."""
    saved = load_saved(args.saved or args.results_dir / f"{section_of(TEST)}.json", TEST)
    made = [
        (s["env"], s["method"], int(s["seed"]))
        for s in (saved or {}).get("runs", [])
        if (kind is None or s.get("machine") == kind) and (s.get("finished") or s.get("steps_logged"))
    ]
    out_root = args.out_root or ROOT / "runs" / "learning" / TEST
    for path in sorted(out_root.glob("*/*/seed*/metrics.jsonl")):
        env, method, seed = path.parent.relative_to(out_root).parts
        made.append((env, method, int(seed.removeprefix("seed"))))
    return list(dict.fromkeys(made))


def declare_seeds(args: argparse.Namespace, command: str) -> None:
    """Append the amendment replacing the registered seeds by seed quotas to ``RESULTS_DIR/prereg-amendments.json``
    (refused where quotas are declared already, or where runs of seeds only the quotas admit were made, on any
    kind)."""
    registered, amendments = read_registration(args.results_dir)
    admitted = quota.runs_admitted(runs_made(args), main_methods(registered), registered["settings"]["test"])
    path = append_amendment(
        args,
        amendments,
        lambda declared: quota.declare_seeds(amendments, admitted_made=admitted, declared=declared),
        command,
    )
    logger.info("%s: seed quotas declared; commit it before the test stage runs again", path)


def default_plots_dir(mode: str) -> Path:
    """Where a mode's plots go: ``benchmarks/learning`` for the cpu mode (its committed page links them there),
    ``benchmarks/learning/MODE`` for the others, so one mode's plots never overwrite another's."""
    return BENCHMARKS / "learning" if mode == "cpu" else BENCHMARKS / "learning" / mode


def load_saved(path: Path, mode: str) -> dict[str, Any] | None:
    """The committed report at ``path`` if it is one of mode ``mode`` (else ``None``: another mode's runs are
    other cells); a file that is not a learning report is an error, not silently ignored."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not {"mode", "runs", "configs"} <= set(data):
        raise SystemExit(f"{path} is not a learning report (no mode, runs and configs): pass --saved or --no-saved")
    return data if data["mode"].get("name") == mode else None


def refuse_another_start_model(
    saved: dict[str, Any], model: str, saved_path: Path, admitted: Sequence[dict[str, Any] | None] | None = None
) -> None:
    """A committed run stands for its cell only if this start model is the one it started from: the path in a
    run's config names a folder, which a fresh machine fills again with ``r3l warmup`` (bit for bit, from the same
    settings, on the same CPU kind), so the ``warmup.json`` records are what must agree. ``admitted``: the records
    the pre-registered study admits (the registered one and each amendment's; the test stage has checked this
    model against its kind's), one of which the committed report's must be."""
    if saved.get("warmup") is None:
        return
    if admitted is not None:
        if saved["warmup"] not in admitted:
            raise SystemExit(
                f"the runs committed in {saved_path} started from a model whose warmup.json is neither the "
                "pre-registered one nor one an amendment admits: they are not runs of this study"
            )
    elif saved["warmup"] != read_warmup(model):
        raise SystemExit(
            f"the runs committed in {saved_path} started from a model whose warmup.json differs from {model}'s: make "
            "the start model again from its record (the guide's command), or pass --no-saved to run every cell here"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the grid of a mode (what is not done yet) and write its report; or only report, from runs or JSON."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    if args.from_json is not None:
        name = json.loads(args.from_json.read_text()).get("mode", {}).get("name", "")
        plots_dir = args.plots_dir or default_plots_dir(name)
        rewrite_report(args.from_json, results_md=args.results_md, results_dir=args.results_dir, plots_dir=plots_dir)
        logger.info("%s: section %r rendered again from %s", args.results_md, section_of(name), args.from_json)
        return 0
    if args.preregister and args.mode != VALID:
        parser.error(f"--preregister registers the valid stage's choices: use it with --mode {VALID}")

    # A sweep started in the background (nohup, &) inherits SIGINT ignored; stopping it must still let the runs in
    # flight save their checkpoints, so SIGINT and SIGTERM both raise KeyboardInterrupt in the sweeping thread.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    command = "python -m benchmarks.learning " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    if args.declare_kind or args.declare_seeds:
        flag = "--declare-kind" if args.declare_kind else "--declare-seeds"
        if args.mode != TEST or not args.model or (args.declare_kind and args.declare_seeds):
            parser.error(f"{flag} amends the test stage: use one with --mode {TEST} --model PATH")
        (declare_kind if args.declare_kind else declare_seeds)(args, command)
        return 0
    mode, methods = resolve_mode(args, parser)
    logger.info("CPU: %s; CPU modes use autocast %s", cpu_kind(), CPU_AUTOCAST)
    if args.device:
        mode = dataclasses.replace(mode, device=args.device)
    for name, given, known in (("envs", args.envs, ENVS), ("methods", args.methods, methods)):
        unknown = sorted(set(given or ()) - set(known))
        if unknown:
            parser.error(f"unknown {name} {unknown}; choose among {sorted(known)}")
    out_root = args.out_root or ROOT / "runs" / "learning" / mode.name

    def only(run: Run) -> bool:
        return (
            (args.envs is None or run.env_key in args.envs)
            and (args.methods is None or run.method_key in args.methods)
            and (args.seeds is None or run.seed in args.seeds)
        )

    saved_path = args.saved or args.results_dir / f"{section_of(mode.name)}.json"
    saved = None if args.no_saved else load_saved(saved_path, mode.name)
    if saved is not None:
        admitted = None
        if mode.name == TEST:
            registered, amendments = read_registration(args.results_dir)
            admitted = [registered.get("warmup")] + [a["warmup"] for a in kind_amendments(amendments)]
        refuse_another_start_model(saved, mode.model, saved_path, admitted)
        logger.info("finished runs of %s count as done where no run dir holds them", saved_path)
    if args.report_only:
        runs = build_grid(mode, out_root, methods=methods)
    else:
        runs, _ = sweep(
            mode,
            out_root=out_root,
            methods=methods,
            only=only,
            jobs=args.jobs,
            threads=args.threads,
            time_budget_min=args.time_budget,
            start_within_min=args.start_within,
            run_timeout_min=args.run_timeout,
            rerun_stale=args.rerun_stale,
            keep_checkpoints=args.keep_checkpoints,
            overrides={"micro_batch_size": args.micro_batch_size} if args.micro_batch_size else None,
            command=command,
            saved=saved,
        )
    data = None
    if not args.no_report:
        log = out_root / "sweeps.jsonl"
        history = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.is_file() else []
        for setup in {r.setup for r in runs if r.setup}:
            register_setup(setup)
        data = write_report(
            mode,
            runs,
            command=command.strip(),
            results_md=args.results_md,
            results_dir=args.results_dir,
            plots_dir=args.plots_dir or default_plots_dir(mode.name),
            history=history,
            methods=methods,
            saved=saved,
        )
        logger.info("%s: section %r; %d cells missing", args.results_md, section_of(mode.name), len(data["missing"]))
    if args.preregister:
        cells = data["cells"] if data else aggregate(mode, runs, methods, saved=saved)["cells"]
        path = args.results_dir / PREREG_JSON
        try:
            write_prereg(registration(cells, mode, command=command.strip()), path, force=args.force)
        except (ValueError, FileExistsError) as err:
            raise SystemExit(str(err)) from None
        logger.info("%s written: commit it before running --mode prereg", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
