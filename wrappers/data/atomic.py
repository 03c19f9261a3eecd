"""Writing a file so that a reader, or a run resumed after a crash, sees either the old file or the new one whole,
never a half-written one: the bytes go to a temp file beside the target, which is then renamed onto it (a rename
within one directory is atomic on POSIX filesystems)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["write_atomically"]

T = TypeVar("T")


def write_atomically(path: str | os.PathLike[str], write: Callable[[Path], T]) -> T:
    """Call ``write(tmp)`` to fill a temp file beside ``path``, then rename it onto ``path``; returns what ``write``
    returned. If ``write`` raises, ``path`` is left as it was and the temp file is removed. The temp name carries the
    process id, so processes writing the same path do not share a temp file (the last rename wins)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        result = write(tmp)
        os.replace(tmp, path)
        return result
    finally:
        tmp.unlink(missing_ok=True)
