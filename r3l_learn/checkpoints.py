"""Training checkpoints: one dict per file (trainable weights, optimiser, RNG states, step, data cursor,
config), written atomically so a crash mid-save never leaves a half file that ``--resume`` would pick up."""

from __future__ import annotations

import logging
import os
import pickle
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
    """The global RNG states a training step may touch (python, numpy, torch CPU and CUDA), as plain data and
    tensors only, so that :func:`load_checkpoint` can read them back with ``torch.load(weights_only=True)``."""
    algorithm, key, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (algorithm, [int(k) for k in key], int(pos), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    algorithm, key, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((algorithm, np.asarray(key, dtype=np.uint32), pos, has_gauss, cached))
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
    """Read a checkpoint written by :func:`save_checkpoint`.

    It is read with ``torch.load(weights_only=True)``: tensors, numbers, strings and containers only, so a file
    that someone else crafted cannot run code when it is resumed (a full pickle load would). A file holding any
    other object (as did those written before 2026-11-24, with numpy arrays in their RNG state) raises
    :class:`ResumeError`.
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ResumeError(
            f"{path}: refused: it holds objects other than tensors and plain data, which a safe load does not "
            f"read ({str(exc).splitlines()[0]}); a checkpoint from an older r3l cannot be resumed: start a new "
            "--out-dir"
        ) from exc
    except (OSError, RuntimeError, EOFError) as exc:
        raise ResumeError(f"{path}: unreadable checkpoint ({exc}); delete it to resume from an older one") from exc
