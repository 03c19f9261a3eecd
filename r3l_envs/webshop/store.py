"""Read-only, memory-mapped record files: how a catalogue folder stores products and goals.

A catalogue folder holds, for ``products`` and ``goals``, a ``NAME.jsonl`` blob (one JSON record per line) and
``NAME.offsets.npy`` (the byte offset of every record, plus the end). Readers map both read-only: every env in
every process shares the same page-cache pages, and a record is decoded only when a page shows it.

Catalogue folders are built once per machine by :func:`r3l_envs.cache.build_dir_once`.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RecordFile", "write_records"]

logger = logging.getLogger(__name__)


def write_records(folder: Path, name: str, records: Iterable[dict[str, Any]]) -> int:
    """Write ``records`` as ``NAME.jsonl`` + ``NAME.offsets.npy`` in ``folder``; return how many."""
    offsets = [0]
    with open(folder / f"{name}.jsonl", "wb") as f:
        for record in records:
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
            f.write(line)
            offsets.append(offsets[-1] + len(line))
    np.save(folder / f"{name}.offsets.npy", np.asarray(offsets, dtype=np.int64))
    return len(offsets) - 1


class RecordFile:
    """Random access to the records of one ``NAME.jsonl`` through read-only memory maps."""

    def __init__(self, folder: Path, name: str):
        self.path = folder / f"{name}.jsonl"
        self._offsets = np.load(folder / f"{name}.offsets.npy", mmap_mode="r")
        with open(self.path, "rb") as f:
            # An empty file cannot be mapped; a catalogue always has records, but keep the reader total.
            self._blob = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(f.fileno()).st_size else b""

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self):
            raise IndexError(f"record {index} out of range for {len(self)} records in {self.path}")
        start, end = int(self._offsets[index]), int(self._offsets[index + 1])
        return json.loads(self._blob[start:end])

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("RecordFile maps a file; pickle the catalogue's spec and reopen it instead")
