"""The finished batches of an eval, kept on disk so that an eval stopped part-way resumes where it stopped.

An eval plays its episodes in batches, and a batch's trajectories depend only on the policy's weights, the env, the
batch's reset seeds and tasks, and the batch's sampling seed (:func:`wrappers.rollout_batch` seeds every round from
it, and the policies sample on a forked RNG). A batch finished before an interruption is therefore exactly the batch
an uninterrupted eval would have played: keeping it is not an approximation. The folder's batches count only for
the identity they were played under (the eval's settings and a key naming the weights); under any other, the folder
is emptied first.

Layout: ``identity.json``, then per finished batch ``batch-NNNNN.jsonl`` (its trajectories, :func:`save_jsonl`) and
``batch-NNNNN.json`` (its wall and CPU seconds), the latter written last, so a batch counts once both are there.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wrappers import Trajectory, save_jsonl
from wrappers.data import DataFormatError, load_jsonl, write_atomically

__all__ = ["FinishedBatch", "FinishedBatches", "weights_key"]

logger = logging.getLogger(__name__)

IDENTITY = "identity.json"
#: the largest identity or cost file read (they name settings, task ids, seconds: anything bigger was not written here)
MAX_SMALL_FILE_BYTES = 1 << 20


@dataclass
class FinishedBatch:
    """One batch an earlier attempt finished: its trajectories and what it cost."""

    trajectories: list[Trajectory]
    wall_s: float
    cpu_s: float


class FinishedBatches:
    """The batches of one eval finished so far, in ``folder``, for one ``identity`` (plain JSON values: the settings
    that decide what a batch plays, and a key naming the policy's weights, e.g. :func:`weights_key`)."""

    def __init__(self, folder: str | os.PathLike[str], identity: dict[str, Any]):
        self.folder = Path(folder)
        # as it reads back from the file (a value JSON has no form for is named by its repr)
        self.identity = json.loads(json.dumps(identity, sort_keys=True, default=repr))
        if self._read_identity() != self.identity:
            self.clear()
            self.folder.mkdir(parents=True)
            _write_text(self.folder / IDENTITY, json.dumps(self.identity, sort_keys=True))

    def load(self, sizes: list[int]) -> list[FinishedBatch]:
        """The batches finished so far, from the first on, while each is whole: batch ``i`` must hold ``sizes[i]``
        readable trajectories. The first that is missing, unreadable or of another size ends the list (and is
        removed, with every later one, so that it is played again)."""
        found: list[FinishedBatch] = []
        for index, size in enumerate(sizes):
            batch = self._read(index, size)
            if batch is None:
                self._remove_from(index, len(sizes))
                break
            found.append(batch)
        return found

    def save(self, index: int, trajectories: list[Trajectory], wall_s: float, cpu_s: float) -> None:
        """Keep batch ``index`` (its trajectories first, its cost last: the cost file marks it finished)."""
        trajs, cost = self._paths(index)
        save_jsonl(trajs, trajectories)
        _write_text(cost, json.dumps({"episodes": len(trajectories), "wall_s": wall_s, "cpu_s": cpu_s}))

    def clear(self) -> None:
        """Remove the folder (the eval finished, or the batches in it were played under another identity)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def _read_identity(self) -> Any:
        path = self.folder / IDENTITY
        try:
            if path.stat().st_size > MAX_SMALL_FILE_BYTES:
                return None
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none yet, or not one this module wrote: the folder starts over
            return None

    def _read(self, index: int, size: int) -> FinishedBatch | None:
        trajs, cost = self._paths(index)
        try:
            if cost.stat().st_size > MAX_SMALL_FILE_BYTES:
                return None
            spent = json.loads(cost.read_text(encoding="utf-8"))
            wall, cpu = float(spent["wall_s"]), float(spent["cpu_s"])
            trajectories = list(itertools.islice(load_jsonl(trajs), size + 1))  # one more tells a longer file
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, DataFormatError) as err:
            logger.warning("%s: batch %d cannot be read (%s); it is played again", self.folder, index, err)
            return None
        if len(trajectories) != size or not all(isinstance(t, Trajectory) for t in trajectories):
            logger.warning("%s: batch %d is not %d trajectories; it is played again", self.folder, index, size)
            return None
        return FinishedBatch(trajectories, wall, cpu)

    def _remove_from(self, index: int, count: int) -> None:
        for i in range(index, count):
            for path in self._paths(i):
                path.unlink(missing_ok=True)

    def _paths(self, index: int) -> tuple[Path, Path]:
        stem = self.folder / f"batch-{index:05d}"
        return stem.with_suffix(".jsonl"), stem.with_suffix(".json")


def weights_key(model: Any) -> str:
    """A digest of every parameter's name, dtype, shape and bytes of ``model`` (a ``torch.nn.Module``): names the
    weights a batch was played with."""
    import torch  # here, not at import: importing evaluate (for ``r3l --help``, say) must not load torch

    digest = hashlib.blake2b(digest_size=16)
    for name, param in model.named_parameters():
        tensor = param.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{tensor.dtype}|{tuple(param.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().data)
    return digest.hexdigest()


def _write_text(path: Path, text: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
