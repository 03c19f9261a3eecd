"""``python -m benchmarks.calibration run|choose|table``: measure configurations, mark the one chosen per env, and
print them all as a table.

``run`` measures every combination of the ``--turns``, ``--temperature`` and ``--oracle-plan`` values given (the
model is loaded once) and writes one JSON per combination; a configuration whose JSON exists is skipped unless
``--force``. The model-free baselines (random admissible policy, train-plan fixed sequences, distinct test tasks)
depend only on the env, the turn budget and the tasks, so they are measured once per (env, turns, episodes) and
kept in ``baselines/``; each configuration adds the model's own most common action sequences as fixed-sequence
candidates. ``choose ENV KEY`` records the chosen configuration of an env in ``chosen.json``.

Example::

    OMP_NUM_THREADS=1 python -m benchmarks.calibration run --env-kwargs '{"game_type": "treasure_hunter",
        "difficulty": 5}' --turns 8 --temperature 1.0 0.5 --oracle-plan step rest --episodes 48
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import subprocess
import sys
import time
from itertools import product
from pathlib import Path
from typing import Any

from benchmarks.calibration.baselines import fixed_habit_success, random_success, train_plans
from benchmarks.calibration.config import RESULTS_DIR, TARGETS, CalibrationConfig, verdict
from benchmarks.calibration.model_runs import base_and_retry
from benchmarks.calibration.tasks import distinct_tasks, make_env, task_ids

logger = logging.getLogger("benchmarks.calibration")

#: The model's most common base sequences added as fixed-sequence candidates, and the random policy's.
COMMON_SEQUENCES = 20


def machine() -> dict[str, Any]:
    """Where a measurement ran: host, CPU, cores, threads, the load when it ended and the code's commit."""
    import torch

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False, cwd=Path(__file__).parent
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "python": platform.python_version(),
        "commit": commit,
    }


def baselines(config: CalibrationConfig, results: Path, *, force: bool, progress: bool) -> dict[str, Any]:
    """Random admissible success, the train plans' best fixed sequence and the distinct test tasks (cached)."""
    name = (
        f"{config.env_key()}__t{config.max_turns}_n{config.episodes}_r{config.random_per_task}"
        f"_p{config.train_plans}_s{config.seed}"
    )
    path = results / "baselines" / f"{name}.json"
    if path.is_file() and not force:
        return json.loads(path.read_text())
    start = time.perf_counter()
    test = make_env(config.env_id, config.env_kwargs, "test")
    train = make_env(config.env_id, config.env_kwargs, "train")
    try:
        ids = task_ids(test, config.episodes)
        rand = random_success(
            test, ids, max_turns=config.max_turns, per_task=config.random_per_task, seed=config.seed, progress=progress
        )
        plans = train_plans(train, task_ids(train, config.train_plans))
        candidates = {plan: "train expert plan" for plan in plans}
        for seq, _ in rand.pop("sequences").most_common(COMMON_SEQUENCES):
            candidates.setdefault(seq, "common random-policy sequence")
        modal = _modal(plans)
        if modal:
            candidates.setdefault(modal, "most common action at each step of the train plans")
        fixed = fixed_habit_success(test, ids, candidates, max_turns=config.max_turns, progress=progress)
        out = {
            "test_tasks": ids,
            "distinct_test_tasks": distinct_tasks(test, ids),
            "random": rand,
            "fixed_habit": fixed,
            "train_plans": len(plans),
            "train_plan_mean_length": sum(map(len, plans)) / max(len(plans), 1),
            "seconds": time.perf_counter() - start,
        }
    finally:
        test.close()
        train.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_dumps(out))
    return out


def _dumps(value: Any) -> str:
    """JSON text of a measurement (numpy scalars as plain numbers)."""
    return json.dumps(value, indent=1, default=lambda o: o.item() if hasattr(o, "item") else repr(o)) + "\n"


def _modal(plans: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The sequence of the most common action at each position of ``plans`` (a habit a learner could form)."""
    from collections import Counter

    length = max(map(len, plans), default=0)
    return tuple(
        Counter(p[i] for p in plans if len(p) > i).most_common(1)[0][0]
        for i in range(length)
        if any(len(p) > i for p in plans)
    )


def measure(config: CalibrationConfig, policy: Any, results: Path, *, force: bool, progress: bool) -> dict[str, Any]:
    """One configuration's full measurement (see the package docstring), as written to its JSON."""
    start = time.perf_counter()
    base = baselines(config, results, force=force, progress=progress)
    ids = base["test_tasks"]
    model = base_and_retry(
        config.env_id,
        config.env_kwargs,
        policy,
        ids,
        max_turns=config.max_turns,
        temperature=config.temperature,
        oracle_plan=config.oracle_plan,
        constrained=config.constrained,
        seed=config.seed,
        progress=progress,
    )
    # The model's own most common action sequences are fixed-habit candidates too.
    common = {seq: "common base-model sequence" for seq, _ in model.pop("base_sequences").most_common(COMMON_SEQUENCES)}
    test = make_env(config.env_id, config.env_kwargs, "test")
    try:
        own = fixed_habit_success(test, ids, common, max_turns=config.max_turns, progress=progress)
    finally:
        test.close()
    fixed = max([base["fixed_habit"], own], key=lambda f: f["success"])
    result = {
        "config": config.as_dict(),
        "key": config.key(),
        "env_key": config.env_key(),
        "split": "test",
        "base_success": model["base_success"],
        "retry_success": model["retry_success"],
        "fixed_habit_success": fixed["success"],
        "fixed_habit_best": fixed["best"],
        "random_success": base["random"]["success"],
        "episodes": model["bases"],
        "distinct_test_tasks": base["distinct_test_tasks"],
        "details": {
            "model": {k: v for k, v in model.items() if k not in ("base_success", "retry_success")},
            "random": base["random"],
            "fixed_habit_candidates": {"train_plans_and_random": base["fixed_habit"], "model_sequences": own},
            "train_plans": base["train_plans"],
            "train_plan_mean_length": base["train_plan_mean_length"],
        },
        "targets": TARGETS,
        "command": shlex.join([sys.executable.rsplit("/", 1)[-1], "-m", "benchmarks.calibration", *sys.argv[1:]]),
        "machine": machine(),
        "load_avg": list(os.getloadavg()),
        "wall_seconds": time.perf_counter() - start,
        "baseline_seconds": base["seconds"],
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    result["meets"] = verdict(result)
    return result


def _run(args: argparse.Namespace) -> int:
    kwargs = json.loads(args.env_kwargs)
    if not isinstance(kwargs, dict):
        raise SystemExit("--env-kwargs must be a JSON object")
    configs = [
        CalibrationConfig(
            env_id=args.env,
            env_kwargs=kwargs,
            max_turns=turns,
            temperature=temp,
            oracle_plan=plan,
            model=args.model,
            constrained=not args.free_text,
            episodes=args.episodes,
            random_per_task=args.random_per_task,
            train_plans=args.train_plans,
            seed=args.seed,
        )
        for turns, temp, plan in product(args.turns, args.temperature, args.oracle_plan)
    ]
    todo = [c for c in configs if args.force or not c.path(args.results).is_file()]
    for c in configs:
        if c not in todo:
            print(f"skip {c.key()} (its JSON exists; --force measures it again)")
    if not todo:
        return 0
    policy = _load(args)
    for config in todo:
        result = measure(config, policy, args.results, force=args.force, progress=not args.no_progress)
        path = config.path(args.results)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_dumps(result))
        print(_line(result), flush=True)
    return 0


def _load(args: argparse.Namespace) -> Any:
    from r3l_learn.policies.hf import HFPolicy

    return HFPolicy.from_pretrained(args.model, dtype=args.dtype)


def _line(r: dict[str, Any]) -> str:
    retry = "n/a" if r["retry_success"] is None else f"{r['retry_success']:.3f}"
    return (
        f"{r['key']}: base {r['base_success']:.3f} retry {retry} fixed {r['fixed_habit_success']:.3f} "
        f"random {r['random_success']:.3f} episodes {r['episodes']} tasks {r['distinct_test_tasks']} "
        f"({r['wall_seconds']:.0f} s, load {r['load_avg'][0]:.1f}) meets {sum(r['meets'].values())}/{len(r['meets'])}"
    )


def _choose(args: argparse.Namespace) -> int:
    path = args.results / f"{args.key}.json"
    if not path.is_file():
        raise SystemExit(f"no measurement {path}")
    result = json.loads(path.read_text())
    chosen_path = args.results / "chosen.json"
    chosen = json.loads(chosen_path.read_text()) if chosen_path.is_file() else {}
    chosen[args.env] = {
        "key": args.key,
        "file": path.name,
        "why": args.why,
        "meets": result["meets"],
        **{k: result[k] for k in ("base_success", "retry_success", "fixed_habit_success", "random_success")},
        **{k: result[k] for k in ("episodes", "distinct_test_tasks")},
    }
    chosen_path.write_text(json.dumps(chosen, indent=1, sort_keys=True) + "\n")
    print(f"{args.env}: chose {args.key}")
    return 0


def _table(args: argparse.Namespace) -> int:
    """A markdown table of every measured configuration (the chosen ones marked)."""
    chosen_path = args.results / "chosen.json"
    chosen = json.loads(chosen_path.read_text()) if chosen_path.is_file() else {}
    marks = {c["key"]: env for env, c in chosen.items()}
    print("| configuration | base | oracle retry (failed bases) | best fixed sequence | random | episodes | tasks |")
    print("|---|---|---|---|---|---|---|")
    for path in sorted(args.results.glob("*.json")):
        if path.name == "chosen.json":
            continue
        r = json.loads(path.read_text())
        m = r["details"]["model"]
        retry = f"{r['retry_success']:.1%}" if r["retry_success"] is not None else "n/a"
        retry += f" ({m['retry_wins']}/{m['failed_bases']})"
        mark = f" **chosen: {marks[r['key']]}**" if r["key"] in marks else ""
        print(
            f"| {r['key']}{mark} | {r['base_success']:.1%} ({m['base_wins']}/{m['bases']}) | {retry} "
            f"| {r['fixed_habit_success']:.1%} | {r['random_success']:.1%} | {r['episodes']} "
            f"| {r['distinct_test_tasks']} |"
        )
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.calibration", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="measure configurations (one JSON each)")
    run.add_argument("--env", default="r3l/TextWorld-v0", help="registered env id")
    run.add_argument("--env-kwargs", default="{}", help="gym.make kwargs as a JSON object (the split is test)")
    run.add_argument("--turns", type=int, nargs="+", default=[8], help="turn budgets to try")
    run.add_argument("--temperature", type=float, nargs="+", default=[1.0], help="sampling temperatures to try")
    run.add_argument("--oracle-plan", nargs="+", default=["step"], choices=["step", "rest"], help="oracle guidance")
    run.add_argument("--model", default="smollm2-135m-instruct", help="embedded model name or HF folder")
    run.add_argument("--dtype", default="auto")
    run.add_argument("--free-text", action="store_true", help="free-text replies instead of constrained choice")
    run.add_argument("--episodes", type=int, default=48, help="test tasks, one base episode each")
    run.add_argument("--random-per-task", type=int, default=2)
    run.add_argument("--train-plans", type=int, default=100, help="train tasks whose expert plans are candidates")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--results", type=Path, default=RESULTS_DIR)
    run.add_argument("--force", action="store_true", help="measure again even where a JSON exists")
    run.add_argument("--no-progress", action="store_true")
    run.set_defaults(func=_run)
    choose = sub.add_parser("choose", help="mark one measured configuration as the env's chosen one")
    choose.add_argument("env", help="a name for the env, e.g. textworld-navigation")
    choose.add_argument("key", help="the configuration's key (its JSON's file name without .json)")
    choose.add_argument("--why", default="", help="why this one (e.g. the only one in range, or the closest)")
    choose.add_argument("--results", type=Path, default=RESULTS_DIR)
    choose.set_defaults(func=_choose)
    table = sub.add_parser("table", help="print a markdown table of every measured configuration")
    table.add_argument("--results", type=Path, default=RESULTS_DIR)
    table.set_defaults(func=_table)
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parser().parse_args(argv)
    return args.func(args)
