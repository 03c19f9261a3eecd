"""The per-user cache folder, and building things into it atomically.

Generated games, indexes and converted models live under ``$R3L_CACHE_DIR`` (default ``~/.cache/r3l``).
Several processes (pytest-xdist workers, parallel rollouts) may ask for the same entry at once, so an entry
is built in a private temporary folder next to its final place and moved there with one ``os.rename``: a
reader sees either no entry or a complete one, and a failed build leaves nothing behind.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["build_dir_once", "cache_root"]

logger = logging.getLogger(__name__)


def cache_root() -> Path:
    """``$R3L_CACHE_DIR`` if set, else ``~/.cache/r3l`` (not created here)."""
    root = os.environ.get("R3L_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "r3l"


def build_dir_once(path: str | os.PathLike[str], build: Callable[[Path], None]) -> Path:
    """Return the folder ``path``, building it first with ``build(tmp_folder)`` if it does not exist yet.

    ``build`` writes everything into the empty folder it is given; that folder then becomes ``path`` in one
    atomic rename. If another process finished the same entry first, its copy wins and ours is discarded
    (builders must be deterministic, so both are the same). If ``build`` raises, its partial output is
    removed and the exception propagates.
    """
    final = Path(path)
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError as exc:
            # Another builder won the race: rename onto a non-empty folder fails with one of these.
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not final.is_dir():
                raise
            logger.debug("cache entry %s was built concurrently; keeping the other copy", final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
