"""The ``r3l`` command line: ``tour``, ``envs``, ``check``, ``train``, ``eval``, ``warmup`` and ``show``
(``r3l --help``).

One vocabulary across subcommands: an env is ``--env ID`` with ``--env-kwargs KEY=VALUE ...``; ``--actions``,
``--dtype``, ``--autocast``, ``--device``, ``--rollout-backend``, ``--seed`` and ``--max-new-tokens`` mean the same
and default the same in ``train`` and ``eval``; every help lists each flag once, with its default and choices.

Errors end a command with one line on stderr, never a traceback: an error of the library (the typed errors of
``r3l_envs``, ``wrappers`` and ``r3l_learn``: bad data, a checkpoint that cannot resume, an unknown model) prints
``r3l COMMAND: error: MESSAGE`` and exits 1 (``-v`` adds the traceback); a usage error exits 2 (argparse); Ctrl-C
exits 130 with a one-line message, a closed pipe (``r3l show ... | head``) quietly. Any other exception is a bug
and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import traceback
from typing import Any

from r3l_learn.cli.args import env_id_problem, key_value, list_one_spelling, parse_kwargs
from r3l_learn.loop.config import ACTION_MODES, ACTIONS_HELP, action_flags
from wrappers.data.safe_text import one_line  # a file name or an error quoting a file: escaped, never split or obeyed

logger = logging.getLogger(__name__)

# `r3l --help` prints its epilog as written (a table): keep it within 80 columns
_DOCS = "More: the project README (also the package description) and the R³L paper,\narXiv 2601.03715."
_EXIT_STATUS = """exit status:
  0    done
  1    an error of r3l (bad data, a checkpoint that cannot resume, an unknown
       model...), printed as one line "r3l COMMAND: error: MESSAGE" on stderr;
       -v adds the traceback
  2    a usage error (an unknown flag or a bad value)
  130  interrupted (Ctrl-C)
  141  the output's reader went away (r3l show ... | head)"""

_VERBOSE_HELP = "log at INFO level; an error prints its traceback too"

#: the status of a command ended by an error of the library (2 is argparse's, for usage errors)
LIBRARY_ERROR_STATUS = 1


class _TopHelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """``r3l --help``: defaults in every flag's help, and the epilog as written (the exit status table)."""


def library_errors() -> tuple[type[Exception], ...]:
    """The errors the library raises for a violated contract or bad input, which the CLI prints as one line: the
    bases of ``r3l_envs`` and ``r3l_learn`` and the typed errors of ``wrappers`` (which has no common base).

    Imported when an error is being handled, so that a command pays nothing for them.
    """
    from r3l_envs.errors import R3LEnvError
    from r3l_learn.errors import R3LLearnError
    from wrappers.collectors.ray import WorkerLostError
    from wrappers.data.trajectory import DataFormatError
    from wrappers.retry.expert import NoExpertPlanError

    return R3LEnvError, R3LLearnError, DataFormatError, NoExpertPlanError, WorkerLostError


def _require_env(command: str, env_id: str) -> None:
    problem = env_id_problem(env_id)
    if problem:
        raise SystemExit(f"r3l {command}: {problem}")


def _env_kwargs(args: argparse.Namespace) -> dict[str, object]:
    """``--env-kwargs`` plus the older positional ``key=value`` words (both still accepted)."""
    return {**parse_kwargs(args.kwargs), **parse_kwargs(args.env_kwargs)}


def _envs(_: argparse.Namespace) -> int:
    import r3l_envs

    for env_id in r3l_envs.list_envs():
        print(env_id)
    return 0


def _check(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import r3l_envs

    words = list(args.words)
    env_id = args.env or (words.pop(0) if words and "=" not in words[0] else None)
    if env_id is None:
        raise SystemExit("r3l check: give the env id, e.g. `r3l check --env r3l/Countdown-v0`")
    _require_env("check", env_id)
    kwargs = {**parse_kwargs(words), **parse_kwargs(args.env_kwargs)}
    env = gym.make(env_id, **kwargs)
    r3l_envs.check_env(env)
    print(f"{env_id}: check_env passed")
    return 0


def _tour(args: argparse.Namespace) -> int:
    from r3l_learn.cli.demo import run_demo

    if args.command == "demo":
        print("note: `r3l demo` is now `r3l tour` (`make demo` trains a model; this is the model-free tour)\n")
    run_demo(episodes=args.episodes, seed=args.seed)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from r3l_learn.loop.evaluate import evaluate, load_policy
    from r3l_learn.loop.progress import progress_default
    from r3l_learn.policies.device import resolve_autocast
    from wrappers import RolloutConfig, SamplingParams

    _require_env("eval", args.env)
    env_kwargs = _env_kwargs(args)
    autocast = resolve_autocast(args.autocast, args.device)
    # a vLLM engine has no separate compute precision: it runs in the one autocast chose, else in --dtype
    dtype = "bfloat16" if args.rollout_backend == "vllm" and autocast == "bf16" else args.dtype
    with progress_default(args.progress):  # loading (and a first use's model conversion) reports as a phase
        policy = load_policy(args.model, dtype=dtype, device=args.device, seed=args.seed, backend=args.rollout_backend)
    if autocast == "bf16" and hasattr(policy, "autocast"):
        import torch

        policy.autocast = torch.bfloat16
    sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    flags = action_flags(args.actions)
    config = RolloutConfig(sampling=sampling, max_turns=args.max_turns, history=args.history, **flags)
    name = args.env.rsplit("/", 1)[-1]
    out = args.out or os.path.join(args.out_dir or ".", f"r3l-eval-{name}-{args.split}.jsonl")
    batches = f"{out}.batches"  # the finished batches, kept until the eval is complete
    if not args.resume:
        shutil.rmtree(batches, ignore_errors=True)
    try:
        summary, _ = evaluate(
            args.env,
            policy,
            episodes=args.episodes,
            split=args.split,
            config=config,
            batch_size=args.batch_size,
            seed=args.seed,
            env_kwargs=env_kwargs,
            out=out,
            progress=args.progress,
            resume=batches,
            resume_key=_policy_key(policy, args, autocast),
        )
    except KeyboardInterrupt as stop:  # evaluate() summarises and writes the finished episodes before it re-raises
        summary = getattr(stop, "summary", None)
        if summary is None or not summary.episodes:
            raise
    print("\n".join(summary.lines()))
    print(f"trajectories: {out}")
    if getattr(summary, "interrupted", False):
        print(
            f"r3l eval: interrupted; the {summary.episodes} finished episode(s) are in {out}, and the same command "
            f"continues from the finished batches kept in {batches}",
            file=sys.stderr,
        )
        return 130
    return 0


def _policy_key(policy: Any, args: argparse.Namespace, autocast: str) -> str:
    """What decides the replies besides the eval's settings: the model (its weights' digest where they are here,
    else its name), and the engine, precision and device that compute with it."""
    from r3l_learn.loop.eval_resume import weights_key

    model = getattr(policy, "model", None)
    weights = weights_key(model) if hasattr(model, "named_parameters") else args.model
    return f"{weights}|{args.rollout_backend}|{args.dtype}|{autocast}|{args.device}"


def _warmup(args: argparse.Namespace) -> int:
    from r3l_learn.cli.warmup_args import run_warmup_cli

    _require_env("warmup", args.env)
    return run_warmup_cli(args, _env_kwargs(args))


def _train(args: argparse.Namespace) -> int:
    from r3l_learn.cli.train_args import run_train

    return run_train(args)


def _show(args: argparse.Namespace) -> int:
    from wrappers.view.show import load_viewable, render_text
    from wrappers.view.show_html import render_html

    try:
        items = load_viewable(args.path, limit=args.limit, max_line_bytes=args.max_line_bytes, max_depth=args.max_depth)
    except library_errors():  # a typed error names the file and the line: main() prints it
        raise
    except FileNotFoundError:
        raise SystemExit(f"r3l show: no such file: {one_line(str(args.path))}") from None
    except (OSError, ValueError) as exc:
        raise SystemExit(f"r3l show: cannot read {one_line(str(args.path))}: {one_line(str(exc))}") from None
    if not items:
        raise SystemExit(f"r3l show: {one_line(str(args.path))} holds no trajectories or trajectory groups")
    print(render_text(items, max_lines=args.max_lines))
    if args.html:
        from pathlib import Path

        decode = _show_decoder(args.tokenizer) if args.tokenizer else None
        Path(args.html).write_text(render_html(items, title=f"r3l show {args.path}", decode=decode), encoding="utf-8")
        print(f"wrote {args.html}")
    return 0


def _show_decoder(name_or_path: str):
    """The ``decode`` of the tokenizer in a folder, or of an embedded model (``r3l show --tokenizer``)."""
    from pathlib import Path

    from transformers import AutoTokenizer

    from r3l_learn.errors import ModelNotFoundError
    from r3l_learn.policies.models import resolve_model

    try:
        folder = name_or_path if Path(name_or_path).is_dir() else resolve_model(name_or_path)
    except ModelNotFoundError as exc:
        raise SystemExit(f"r3l show: {exc}") from None
    return AutoTokenizer.from_pretrained(folder).decode


def _add_env_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    helptext = "a registered env id (`r3l envs` lists them)"
    if required:  # no default to show
        parser.add_argument("--env", required=True, default=argparse.SUPPRESS, help=f"{helptext} (required)")
    else:
        parser.add_argument("--env", default=None, help=helptext)
    parser.add_argument(
        "--env-kwargs",
        "--env_kwargs",
        nargs="*",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="gym.make kwargs",
    )


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``r3l`` argument parser (every subcommand's help shows defaults and choices). ``train``'s flags come
    from its config, which imports torch: they are built only when ``command`` is ``train`` or ``None`` (all)."""
    from r3l_learn.loop.evaluate import BACKENDS
    from r3l_learn.policies.backends import ROLLOUT_BACKENDS
    from r3l_learn.policies.models import DEFAULT_MODEL

    full = command in (None, "train")
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser
    if full:
        from r3l_learn.cli.train_args import ConfigArgumentParser, add_train_arguments

        parser_class = ConfigArgumentParser
    parser = parser_class(
        prog="r3l",
        description="Reflect-then-Retry RL for LLM agents on text envs.",
        epilog=f"{_EXIT_STATUS}\n\n{_DOCS}",
        formatter_class=_TopHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_parser(name: str, helptext: str | None, description: str | None = None, **kw) -> argparse.ArgumentParser:
        """A subcommand listed in ``r3l --help`` with one line, ``helptext`` (unlisted when None)."""
        listed = {} if helptext is None else {"help": helptext}
        subparser = sub.add_parser(
            name,
            description=description or helptext,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
            **listed,
            **kw,
        )
        # -v after the command too; SUPPRESS: absent unless given, so it never undoes a -v given before the command
        subparser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=_VERBOSE_HELP)
        return subparser

    tour_help = "a model-free tour: a scripted solver plays offline Countdown, with checkpoint/restore shown"
    # `demo`, the old name of `tour`, still works but is not listed (`make demo` is a training run)
    for name, helptext in (("tour", "a model-free tour: a scripted solver plays Countdown"), ("demo", None)):
        tour = add_parser(name, helptext, description=tour_help)
        tour.add_argument("--episodes", type=int, default=3, help="episodes to play")
        tour.add_argument("--seed", type=int, default=0, help="seed of the first episode")
        tour.set_defaults(func=_tour)

    envs = add_parser("envs", "list the registered environment ids")
    envs.set_defaults(func=_envs)

    check = add_parser("check", "run r3l_envs.check_env on an env")
    _add_env_arguments(check, required=False)
    check.add_argument("words", nargs="*", metavar="ENV [KEY=VALUE ...]", help="older spelling of --env/--env-kwargs")
    check.set_defaults(func=_check)

    tr = add_parser(
        "train",
        "train a policy with R³L or a baseline",
        description="train a policy with R³L or a baseline (--preset cpu-demo: what make demo runs)",
        epilog=_DOCS,
    )
    if full:
        add_train_arguments(tr)
    tr.set_defaults(func=_train)

    ev = add_parser("eval", "evaluate a model on an env; writes trajectories as JSONL", epilog=_DOCS)
    _add_env_arguments(ev, required=True)
    ev.add_argument(
        "--model", default=DEFAULT_MODEL, help='an embedded model name, a local HF folder, or "tiny-random"'
    )
    ev.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a live bar on a terminal, a start and an end line per phase elsewhere; --no-progress: none",
    )
    ev.add_argument("--episodes", type=int, default=10, help="episodes to play (episode i resets with seed --seed + i)")
    ev.add_argument("--split", default="test", help="the split the episodes' tasks come from")
    ev.add_argument("--batch-size", type=int, default=8, help="episodes played (and generated for) together")
    ev.add_argument(
        "--actions",
        choices=ACTION_MODES,
        default="free",
        help=ACTIONS_HELP,
    )
    ev.add_argument("--temperature", type=float, default=0.4, help="sampling temperature (R³L evaluates at 0.4)")
    ev.add_argument("--max-new-tokens", type=int, default=256, help="new tokens per agent turn")
    ev.add_argument("--max-turns", type=int, default=None, help="turns per episode; None: the env's own limit")
    ev.add_argument("--history", type=int, default=None, help="keep only the last k turns in the context")
    ev.add_argument(
        "--dtype", choices=["float32", "bfloat16", "auto"], default="float32", help="weights; auto: bf16 where native"
    )
    ev.add_argument(
        "--autocast",
        choices=["auto", "off", "bf16"],
        default="auto",
        help="bf16 compute over the weights; auto: only where the device computes bf16 natively",
    )
    ev.add_argument("--device", default="cpu", help='"cpu" or "cuda[:i]"')
    engines = "; ".join(f"{name}: {ROLLOUT_BACKENDS.summary(name)}" for name in BACKENDS)
    ev.add_argument("--rollout-backend", choices=BACKENDS, default="hf", help=f"who generates: {engines}")
    ev.add_argument("--seed", type=int, default=0, help="seeds the episodes and sampling")
    ev.add_argument("--out", default=None, help="JSONL file to write; None: r3l-eval-<Env>-<split>.jsonl in --out-dir")
    ev.add_argument("--out-dir", default=None, help="directory of the default --out file; None: the current one")
    ev.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="play only the batches an interrupted run of the same command did not finish (kept in OUT.batches; "
        "the result is the uninterrupted one); --no-resume: play every batch again",
    )
    ev.add_argument("kwargs", nargs="*", type=key_value, metavar="KEY=VALUE", help="older spelling of --env-kwargs")
    ev.set_defaults(func=_eval)

    wu = add_parser("warmup", "teach a model to follow guidance (SFT on guided expert turns)")
    _add_env_arguments(wu, required=True)
    from r3l_learn.cli.warmup_args import add_warmup_arguments

    add_warmup_arguments(wu)
    wu.set_defaults(func=_warmup, kwargs=[])

    show = add_parser(
        "show",
        "render trajectories or groups (base beside retry)",
        description="render trajectories or groups (base beside retry, pivot marked)",
    )
    show.add_argument("path", help="a JSONL file of Trajectories or TrajectoryGroups (wrappers.save_jsonl)")
    show.add_argument("--html", default=None, help="also write the view as a static HTML page here")
    show.add_argument("--limit", type=int, default=None, help="show at most this many groups or trajectories")
    show.add_argument(
        "--max-lines", type=int, default=6, help="lines shown per turn (the rest is counted); 0: no limit"
    )
    show.add_argument(
        "--tokenizer",
        default=None,
        help="decode the HTML page's token view with this tokenizer (a folder, or an embedded model's name); "
        "without it a reply shows as its text and the context as token counts",
    )
    from wrappers.data.jsonl import MAX_DEPTH, MAX_LINE_BYTES

    show.add_argument(
        "--max-line-bytes",
        type=int,
        default=MAX_LINE_BYTES,
        help="refuse a line longer than this many bytes (the file is untrusted: this bounds memory)",
    )
    show.add_argument("--max-depth", type=int, default=MAX_DEPTH, help="refuse JSON nested deeper than this")
    show.set_defaults(func=_show)
    for each in (parser, *sub.choices.values()):
        list_one_spelling(each)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``r3l`` command line; returns the exit status."""
    words = sys.argv[1:] if argv is None else argv
    command = next((w for w in words if not w.startswith("-")), None)
    args = build_parser(command or "").parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"r3l {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`r3l show ... | head`): stop quietly, as `cat` does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that flushing stdout at exit does not raise again
        return 141
    except library_errors() as exc:  # bad input or state, said by the message; anything else is a bug
        if args.verbose:
            traceback.print_exc()
        print(f"r3l {args.command}: error: {one_line(str(exc)) or type(exc).__name__}", file=sys.stderr)
        return LIBRARY_ERROR_STATUS


if __name__ == "__main__":
    sys.exit(main())
