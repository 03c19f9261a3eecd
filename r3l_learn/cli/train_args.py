"""``r3l train``: every :class:`r3l_learn.loop.train.TrainConfig` field as a flag, on top of an optional preset.

The flags come from the config dataclass through ``transformers.HfArgumentParser`` (types, ``Optional``,
``Literal`` choices, aliases); each field's help and choices live in its metadata, so the help cannot drift from
the config. Three additions on top of it:

* each flag is listed once, as ``--out-dir`` (the ``--out_dir`` spelling and aliases still parse), and a boolean
  as ``--fill, --no-fill``;
* the two container fields take several words: ``--env-kwargs KEY=VALUE ...`` and ``--ablations NAME ...``;
* a flag's default is shown in its help but not filled in, so that the run knows which flags were *given*.
  Precedence: the config's defaults < ``--preset`` < the run's saved ``config.json`` (with ``--resume``) <
  flags given on the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import typing
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser

from r3l_learn.cli.args import BooleanFlag, key_value, list_one_spelling, parse_kwargs

__all__ = ["ConfigArgumentParser", "add_train_arguments", "config_from_args", "run_train"]

logger = logging.getLogger(__name__)


class ConfigArgumentParser(HfArgumentParser):
    """``HfArgumentParser`` that also takes ``dict`` fields as ``KEY=VALUE`` words and ``tuple`` fields as
    several words (it parses neither), and booleans as ``--x/--no-x`` (where it has ``--x [X]`` beside
    ``--no-x``)."""

    @staticmethod
    def _parse_dataclass_field(parser: argparse.ArgumentParser, field: dataclasses.Field) -> None:
        origin = typing.get_origin(field.type)
        if origin not in (dict, tuple) and field.type is not bool:
            HfArgumentParser._parse_dataclass_field(parser, field)
            return
        kwargs = dict(field.metadata)
        aliases = kwargs.pop("aliases", [])
        options = [f"--{field.name.replace('_', '-')}"] + ([f"--{field.name}"] if "_" in field.name else [])
        if field.type is bool:
            parser.add_argument(*options, *aliases, action=BooleanFlag, dest=field.name, **kwargs)
            return
        if origin is dict:
            kwargs["type"] = key_value
        parser.add_argument(*options, *aliases, nargs="*", dest=field.name, **kwargs)


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--preset``, ``--resume``, the ablation shortcuts and one flag per config field to ``parser`` (an
    :class:`ConfigArgumentParser`, e.g. a subparser made with ``parser_class=ConfigArgumentParser``)."""
    from r3l_learn.algorithms.catalog import ABLATIONS
    from r3l_learn.loop.presets import PRESETS
    from r3l_learn.loop.train import TrainConfig

    if not isinstance(parser, ConfigArgumentParser):
        raise TypeError(f"add_train_arguments needs a ConfigArgumentParser, got {type(parser).__name__}")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="start from a named configuration (r3l_learn/loop/presets.py)",
    )
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out-dir")
    for flag in sorted(ABLATIONS):
        parser.add_argument(
            f"--{flag.replace('_', '-')}",
            dest=f"ablation_{flag}",
            action="store_true",
            default=argparse.SUPPRESS,
            help=f"shortcut for --ablations {flag} (default: False)",
        )
    before = len(parser._actions)
    parser._add_dataclass_arguments(TrainConfig)
    defaults = {f.name: _default(f) for f in dataclasses.fields(TrainConfig)}
    for action in parser._actions[before:]:
        if action.dest not in defaults:
            continue
        shown = defaults[action.dest]
        if isinstance(shown, dict):  # containers as they are typed
            shown = " ".join(f"{k}={v}" for k, v in shown.items()) or "none"
        elif isinstance(shown, tuple):
            shown = " ".join(map(str, shown)) or "none"
        action.help = f"{action.help or ''} (default: {shown})".replace("%", "%%")
        action.default = argparse.SUPPRESS  # absent from the namespace unless given: presets keep their values
    list_one_spelling(parser)


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def config_from_args(args: argparse.Namespace) -> Any:
    """The :class:`TrainConfig` the flags describe (see the module docstring for precedence)."""
    from r3l_learn.loop.presets import PRESETS
    from r3l_learn.loop.train import TrainConfig, config_from_dict

    names = {f.name for f in dataclasses.fields(TrainConfig)}
    given = {k: v for k, v in vars(args).items() if k in names}
    if "env_kwargs" in given:
        given["env_kwargs"] = parse_kwargs(given["env_kwargs"])
    ablations = [k.removeprefix("ablation_") for k, v in vars(args).items() if k.startswith("ablation_") and v]
    if ablations:
        given["ablations"] = sorted(set(given.get("ablations", [])) | set(ablations))
    values: dict[str, Any] = dict(PRESETS[args.preset]) if args.preset else {}
    saved = Path(given.get("out_dir", values.get("out_dir", TrainConfig.out_dir))) / "config.json"
    if args.resume and saved.is_file():
        from r3l_learn.loop.state import read_saved_config

        values.update(read_saved_config(saved))  # checked: a ResumeError for anything a run does not write
    values.update(given)
    return config_from_dict(values)


def run_train(args: argparse.Namespace) -> int:
    """``r3l train``: run the configured training and print where it went and how the evals moved."""
    from r3l_learn.loop.train import train

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
    if result.already_finished:
        print(
            f"already finished: all {config.steps} steps were done before; nothing was trained and the final eval "
            "was not run again (raise --steps to train further)"
        )
    if summary.is_file():
        print(summary.read_text(encoding="utf-8"), end="")
    for label, ev in (("before", result.eval_before), ("after", result.eval_after)):
        if ev is not None:
            print(f"\neval {label} training:")
            print("\n".join(ev.lines()))
    return 0
