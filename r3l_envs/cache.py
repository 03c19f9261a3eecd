"""The per-user cache folder, and building things into it once, atomically.

Generated games, catalogues, indexes and converted models live under ``$R3L_CACHE_DIR`` (default
``~/.cache/r3l``). Several processes (pytest-xdist workers, parallel rollouts) may ask for the same entry at
once, so an entry is built under an exclusive file lock (at most one builder per entry on the machine; the
others wait and then use its result) into a private temporary folder that becomes the entry with one atomic
rename: a reader sees either no entry or a complete one, and a failed build leaves nothing behind.
"""

from __future__ import annotations

import fcntl
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
    atomic rename. Concurrent callers for the same ``path`` wait for the one that builds. If ``build`` raises,
    its partial output is removed and the exception propagates.
    """
    final = Path(path)
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            if final.is_dir():  # another process built it while we waited
                return final
            tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
            tmp.chmod(0o755)  # mkdtemp makes it private; cache entries are plain shared data
            try:
                logger.info("building %s", final)
                build(tmp)
                os.rename(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return final
