"""``r3l train``: every :class:`r3l_learn.train.TrainConfig` field as a flag, on top of an optional preset.

Precedence: the config's defaults < ``--preset`` < the run's saved ``config.json`` (with ``--resume``) < flags
given on the command line. Flag help comes from the comments on the config's fields, so it cannot drift.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

__all__ = ["add_train_arguments", "config_from_args", "run_train"]

_COMMENT = re.compile(r"^\s+(\w+):[^#]*#\s*(.+)$")


def _field_help() -> dict[str, str]:
    from r3l_learn.train import TrainConfig

    found = (_COMMENT.match(line) for line in inspect.getsource(TrainConfig).splitlines())
    return {m.group(1): m.group(2).replace("%", "%%") for m in found if m}


def _base_type(hint: Any) -> Any:
    """``int | None`` -> ``int``; other hints unchanged."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return hint


def _optional(kind: type) -> Any:
    def parse(text: str) -> Any:
        return None if text.lower() == "none" else kind(text)

    parse.__name__ = kind.__name__
    return parse


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--preset``, ``--resume``, the ablation shortcuts and one flag per config field."""
    from r3l_learn.algorithms import ABLATIONS
    from r3l_learn.presets import PRESETS
    from r3l_learn.train import TrainConfig

    parser.add_argument("--preset", choices=sorted(PRESETS), help="start from a named configuration")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out-dir")
    for flag in ABLATIONS:
        parser.add_argument(
            f"--{flag.replace('_', '-')}",
            dest=f"ablation_{flag}",
            action="store_true",
            default=argparse.SUPPRESS,
            help=f"R3L ablation: {flag.replace('_', ' ')}",
        )
    helps = _field_help()
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        flag, hint = f"--{f.name.replace('_', '-')}", hints[f.name]
        kw: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": helps.get(f.name)}
        base = _base_type(hint)
        if base is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
        elif f.name == "env_kwargs":
            parser.add_argument(flag, nargs="*", metavar="KEY=VALUE", **kw)
        elif f.name == "ablations":
            parser.add_argument(flag, nargs="*", choices=sorted(ABLATIONS), **kw)
        elif base in (int, float, str):
            parser.add_argument(flag, type=_optional(base) if base is not hint else base, **kw)
        else:
            raise TypeError(f"TrainConfig.{f.name}: no command-line form for {hint}")


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`TrainConfig` the flags describe (see the module docstring for precedence)."""
    from r3l_learn.cli import _parse_kwargs
    from r3l_learn.presets import PRESETS
    from r3l_learn.train import TrainConfig, config_from_dict

    given = {k: v for k, v in vars(args).items() if k in {f.name for f in dataclasses.fields(TrainConfig)}}
    if "env_kwargs" in given:
        given["env_kwargs"] = _parse_kwargs(given["env_kwargs"])
    ablations = [k.removeprefix("ablation_") for k, v in vars(args).items() if k.startswith("ablation_") and v]
    if ablations:
        given["ablations"] = sorted(set(given.get("ablations", [])) | set(ablations))
    values: dict[str, Any] = dict(PRESETS[args.preset]) if args.preset else {}
    saved = Path(given.get("out_dir", values.get("out_dir", TrainConfig.out_dir))) / "config.json"
    if args.resume and saved.is_file():
        values.update(json.loads(saved.read_text(encoding="utf-8")))
    values.update(given)
    return config_from_dict(values)


def run_train(args: argparse.Namespace) -> int:
    from r3l_learn.train import train

    try:
        config = config_from_args(args)
    except ValueError as exc:
        raise SystemExit(f"r3l train: {exc}") from exc
    result = train(config, resume=args.resume)
    print(f"run directory: {result.out_dir}")
    summary = result.out_dir / "summary.txt"
    if result.interrupted:
        print(f"interrupted after step {result.steps_done}; continue with the same command plus --resume")
        return 130
    if summary.is_file():
        print(summary.read_text(encoding="utf-8"), end="")
    for label, ev in (("before", result.eval_before), ("after", result.eval_after)):
        if ev is not None:
            print(f"\neval {label} training:")
            print("\n".join(ev.lines()))
    return 0
