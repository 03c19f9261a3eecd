"""The ``r3l`` command line: ``r3l demo``, ``r3l envs``, ``r3l check ID [key=value ...]``."""

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

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
