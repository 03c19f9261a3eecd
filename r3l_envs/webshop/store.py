"""Read-only, memory-mapped record files and the once-only, concurrency-safe build of a catalogue folder.

A catalogue folder holds, for ``products`` and ``goals``, a ``NAME.jsonl`` blob (one JSON record per line) and
``NAME.offsets.npy`` (the byte offset of every record, plus the end). Readers map both read-only: every env in
every process shares the same page-cache pages, and a record is decoded only when a page shows it.

:func:`build_once` creates a folder at most once per machine: under an exclusive file lock it builds into a
temporary sibling and renames it into place, so concurrent builders (pytest-xdist workers, several training
processes) wait for the first one and then all read its result; a crash mid-build leaves no half folder.
"""

from __future__ import annotations

import fcntl
import json
import logging
import mmap
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RecordFile", "build_once", "cache_root", "write_records"]

logger = logging.getLogger(__name__)

#: Written last into a finished folder; its presence means the folder is complete.
COMPLETE_MARKER = "complete.json"


def cache_root() -> Path:
    """``$R3L_CACHE_DIR`` or ``~/.cache/r3l``: where built catalogues and indexes live."""
    return Path(os.environ.get("R3L_CACHE_DIR") or Path.home() / ".cache" / "r3l")


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


def build_once(folder: Path, build: Callable[[Path], None]) -> Path:
    """Make sure ``folder`` exists and is complete, running ``build(tmp_folder)`` at most once machine-wide."""
    if (folder / COMPLETE_MARKER).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock_path = folder.parent / f".{folder.name}.lock"
    with open(lock_path, "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            if (folder / COMPLETE_MARKER).exists():  # another process built it while we waited
                return folder
            if folder.exists():  # a folder without the marker is debris of an older crash
                shutil.rmtree(folder)
            tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
            tmp.chmod(0o755)  # mkdtemp makes it private; the finished catalogue is plain read-only data
            try:
                logger.info("building %s", folder)
                build(tmp)
                (tmp / COMPLETE_MARKER).write_text(json.dumps({"folder": folder.name}))
                os.replace(tmp, folder)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return folder
