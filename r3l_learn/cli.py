"""The ``r3l`` command line: ``demo``, ``envs``, ``check``, ``train``, ``eval`` and ``show`` (``r3l --help``)."""

from __future__ import annotations

import argparse
import ast
import logging
import sys


def _parse_kwargs(pairs: list[str]) -> dict[str, object]:
    """``["split=test", "max_attempts=5"]`` -> ``{"split": "test", "max_attempts": 5}``."""
    kwargs: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"r3l: expected key=value, got {pair!r}")
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[key] = value
    return kwargs


def _envs(_: argparse.Namespace) -> int:
    import r3l_envs

    for env_id in r3l_envs.list_envs():
        print(env_id)
    return 0


def _check(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import r3l_envs

    env = gym.make(args.env_id, **_parse_kwargs(args.kwargs))
    r3l_envs.check_env(env)
    print(f"{args.env_id}: check_env passed")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from r3l_learn.demo import run_demo

    run_demo(episodes=args.episodes, seed=args.seed)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from r3l_learn.evaluate import evaluate, load_policy
    from wrappers import RolloutConfig, SamplingParams

    policy = load_policy(args.model, dtype=args.dtype, device=args.device, seed=args.seed)
    sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    config = RolloutConfig(
        sampling=sampling, max_turns=args.max_turns, history=args.history, constrained=args.actions == "constrained"
    )
    name = args.env.rsplit("/", 1)[-1]
    out = args.out or f"r3l-eval-{name}-{args.split}.jsonl"
    summary, _ = evaluate(
        args.env,
        policy,
        episodes=args.episodes,
        split=args.split,
        config=config,
        batch_size=args.batch_size,
        seed=args.seed,
        env_kwargs=_parse_kwargs(args.kwargs),
        out=out,
    )
    print("\n".join(summary.lines()))
    print(f"trajectories: {out}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from r3l_learn.train_cli import run_train

    return run_train(args)


def _show(args: argparse.Namespace) -> int:
    from pathlib import Path

    from wrappers.data import TrajectoryGroup, load_jsonl
    from wrappers.show import render_html, render_text

    groups = [g for g in load_jsonl(args.path) if isinstance(g, TrajectoryGroup)][: args.limit]
    if not groups:
        raise SystemExit(f"r3l show: {args.path} holds no trajectory groups (write them with wrappers.save_jsonl)")
    print(render_text(groups))
    if args.html:
        Path(args.html).write_text(render_html(groups, title=f"r3l show {args.path}"), encoding="utf-8")
        print(f"wrote {args.html}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="r3l", description="Reflect-then-Retry RL for LLM agents on text envs.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="play a few offline math episodes, showing checkpoint/restore")
    demo.add_argument("--episodes", type=int, default=3)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=_demo)

    envs = sub.add_parser("envs", help="list the registered environment ids")
    envs.set_defaults(func=_envs)

    check = sub.add_parser("check", help="run r3l_envs.check_env on an env")
    check.add_argument("env_id")
    check.add_argument("kwargs", nargs="*", help="make() kwargs as key=value")
    check.set_defaults(func=_check)

    tr = sub.add_parser("train", help="train a policy with R3L or a baseline (presets: --preset cpu-demo, ...)")
    from r3l_learn.train_cli import add_train_arguments

    add_train_arguments(tr)
    tr.set_defaults(func=_train)

    ev = sub.add_parser("eval", help="evaluate a model on an env; writes the trajectories as JSONL")
    ev.add_argument("--env", required=True, help="env id, e.g. r3l/Countdown-v0")
    ev.add_argument("--model", default="smollm2-135m-instruct", help="embedded model name, HF folder, or tiny-random")
    ev.add_argument("--episodes", type=int, default=10)
    ev.add_argument("--split", default="test")
    ev.add_argument("--batch-size", type=int, default=8, help="episodes played (and generated for) together")
    ev.add_argument(
        "--actions",
        choices=["constrained", "free"],
        default="constrained",
        help="constrained: choose among admissible actions by likelihood where the env lists them",
    )
    ev.add_argument("--temperature", type=float, default=0.4, help="R3L evaluates at 0.4; 0 is greedy")
    ev.add_argument("--max-new-tokens", type=int, default=256)
    ev.add_argument("--max-turns", type=int, default=None, help="default: the env's step limit")
    ev.add_argument("--history", type=int, default=None, help="keep only the last k turns in the context")
    ev.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto", help="auto: bf16 where native")
    ev.add_argument("--device", default="cpu")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--out", default=None, help="JSONL path (default r3l-eval-<Env>-<split>.jsonl)")
    ev.add_argument("kwargs", nargs="*", help="make() kwargs as key=value")
    ev.set_defaults(func=_eval)

    show = sub.add_parser("show", help="render trajectory groups (base beside retry, pivot marked)")
    show.add_argument("path", help="a JSONL file of TrajectoryGroups (wrappers.save_jsonl)")
    show.add_argument("--html", default=None, help="also write the view as a static HTML page here")
    show.add_argument("--limit", type=int, default=None, help="show at most this many groups")
    show.set_defaults(func=_show)

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
