"""The flags of ``r3l warmup`` and its command (the warm-up itself is :mod:`r3l_learn.loop.warmup`)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from r3l_learn.cli.args import BooleanFlag, key_value
from r3l_learn.loop.config import ACTION_MODES
from r3l_learn.loop.progress import progress_default
from r3l_learn.loop.warmup import WarmupConfig, warmup
from r3l_learn.policies.models import DEFAULT_MODEL

__all__ = ["add_warmup_arguments", "rebuild_command", "run_warmup_cli"]


def add_warmup_arguments(parser: Any) -> None:
    """The flags of ``r3l warmup`` (besides ``--env``/``--env-kwargs``), each default from :class:`WarmupConfig`."""
    d = WarmupConfig()
    add = parser.add_argument
    add("--out", required=True, default=argparse.SUPPRESS, help="the model folder to write, new or empty (required)")
    add("--model", default=DEFAULT_MODEL, help="the starting model: an embedded model name or a local HF folder")
    add("--episodes", type=int, default=d.episodes, help="train-split base episodes (episode i: seed --seed + i)")
    add("--epochs", type=int, default=d.epochs, help="passes over the guided examples")
    add("--lr", type=float, default=d.lr, help="AdamW learning rate")
    add("--seed", type=int, default=d.seed, help="seeds the episodes, sampling, example order and torch")
    add("--batch-size", type=int, default=d.batch_size, help="episodes played together, and examples per step")
    add("--actions", choices=ACTION_MODES, default=d.actions, help="the action mode the retries will use")
    add("--temperature", type=float, default=d.temperature, help="the bases' sampling temperature")
    add("--max-turns", type=int, default=d.max_turns, help="turns per episode; None: the env's own limit")
    add("--max-new-tokens", type=int, default=d.max_new_tokens, help="new tokens per free-text turn of a base")
    add("--plan", choices=("step", "rest"), default=d.plan, help="the oracle's guidance: the next step(s) or the rest")
    add("--reveal-steps", type=int, default=d.reveal_steps, help="with --plan step: expert actions the guidance names")
    add(
        "--targets",
        choices=("named", "suffix"),
        default=d.targets,
        help="named: only the turns the guidance names carry loss; suffix: every expert turn from the pivot",
    )
    add(
        "--unguided",
        action=BooleanFlag,
        default=d.unguided,
        help="also train each pivot turn without guidance on the action the base chose (an anchor)",
    )
    add("--grad-clip", type=float, default=d.grad_clip, help="the gradient norm is clipped to this")
    add("--device", default="cpu", help='"cpu" or "cuda[:i]"')
    add(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bars on a terminal, a start and an end line per phase elsewhere; --no-progress: none",
    )


def run_warmup_cli(args: Any, env_kwargs: dict[str, Any]) -> int:
    """``r3l warmup``: run :func:`warmup` from parsed flags and print where the model went."""
    config = WarmupConfig(**{k: v for k, v in vars(args).items() if k in WarmupConfig.__dataclass_fields__})
    with progress_default(args.progress):
        record = warmup(
            args.env, args.out, model=args.model, config=config, env_kwargs=env_kwargs, device=args.device,
            progress=args.progress,
        )  # fmt: skip
    data = record["data"]
    print(
        f"warm-up: {data['examples']} examples ({data['target_tokens']} target tokens) from {data['bases']} "
        f"train-split episodes; loss {record['loss_before']:.3f} -> {record['final_loss']:.3f}"
    )
    print(f"model: {args.out} (r3l train/eval --model {args.out}); record: {Path(args.out) / 'warmup.json'}")
    return 0


def rebuild_command(record: Mapping[str, Any], out: str | Path) -> str:
    """The ``r3l warmup`` command that replays the recipe a ``warmup.json`` records (``record``) into the new folder
    ``out``, as one shell line.

    Every setting is spelled out, defaults included: a recipe is seldom the defaults (a start model warmed up with
    ``--epochs 3 --lr 2e-5`` is not rebuilt by the defaults' 2 epochs at 1e-5), and defaults may change. The one
    exception is ``max_turns=None`` (the env's own limit), which has no spelling but the default. The rebuild is
    bit for bit on a CPU of the kind that wrote the record; elsewhere its losses may differ in the last digits."""
    words = ["r3l", "warmup", "--env", str(record["env_id"])]
    if record.get("env_kwargs"):
        words += ["--env-kwargs", *(_key_value_word(k, v) for k, v in record["env_kwargs"].items())]
    words += ["--model", str(record["model"])]
    for name, value in record["settings"].items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        elif value is not None:
            words += [flag, str(value)]
    return shlex.join([*words, "--out", str(out)])


def _key_value_word(key: str, value: Any) -> str:
    """``key=value`` that ``--env-kwargs`` parses back to ``value``: text stays bare unless it reads as a literal
    (``"5"`` is written ``'5'``), anything else is written as its literal."""
    bare = f"{key}={value}"
    return bare if isinstance(value, str) and key_value(bare)[1] == value else f"{key}={value!r}"
