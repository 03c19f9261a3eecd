"""Training checkpoints: one dict per file (trainable weights, optimiser, RNG states, step, data cursor,
config), written atomically so a crash mid-save never leaves a half file that ``--resume`` would pick up."""

from __future__ import annotations

import logging
import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from r3l_learn.errors import R3LLearnError

__all__ = ["ResumeError", "latest_checkpoint", "load_checkpoint", "rng_state", "save_checkpoint", "set_rng_state"]

logger = logging.getLogger(__name__)

_NAME = re.compile(r"step-(\d{6,})\.pt$")


class ResumeError(R3LLearnError):
    """A checkpoint that cannot continue this run (missing, unreadable, or from another configuration)."""


def rng_state() -> dict[str, Any]:
    """The global RNG states a training step may touch (python, numpy, torch CPU and CUDA)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(directory: str | os.PathLike[str], step: int, state: dict[str, Any], *, keep: int = 2) -> Path:
    """Write ``state`` as ``directory/step-NNNNNN.pt`` (temp file + rename) and keep the newest ``keep``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:06d}.pt"
    tmp = directory / f".{path.name}.{os.getpid()}.partial"
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    for old in _checkpoints(directory)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    logger.info("saved checkpoint %s", path)
    return path


def _checkpoints(directory: Path) -> list[Path]:
    found = [p for p in directory.glob("step-*.pt") if _NAME.search(p.name)]
    return sorted(found, key=lambda p: int(_NAME.search(p.name).group(1)))


def latest_checkpoint(directory: str | os.PathLike[str]) -> Path | None:
    """The newest complete checkpoint in ``directory`` (``None`` if there is none)."""
    directory = Path(directory)
    found = _checkpoints(directory) if directory.is_dir() else []
    return found[-1] if found else None


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (it holds numpy/python RNG states, so it is loaded
    with ``weights_only=False``: only load checkpoints you made)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, RuntimeError, EOFError) as exc:
        raise ResumeError(f"{path}: unreadable checkpoint ({exc}); delete it to resume from an older one") from exc
