"""Task-id sequences for procedural task sources (no list of a million strings in memory)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

__all__ = ["NumberedIds"]


class NumberedIds(Sequence[str]):
    """The ids ``f"{prefix}{index:0{width}d}"`` for ``index`` in ``range(count)``, computed on demand.

    Procedural sources derive each task from its index, so the id is stable across processes and versions
    as long as the generator is (the generator's version is part of every checkpoint).
    """

    def __init__(self, prefix: str, count: int, width: int = 6):
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        # Grow the width for counts beyond 10**width, so that ids stay distinct; smaller counts keep their ids.
        self.prefix, self.count, self.width = prefix, int(count), max(width, len(str(max(count - 1, 0))))
        self._pattern = re.compile(re.escape(prefix) + r"(\d+)")

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        if index < 0:
            index += self.count
        if not 0 <= index < self.count:
            raise IndexError(f"task index {index} out of range for {self.count} tasks")
        return f"{self.prefix}{index:0{self.width}d}"

    def __contains__(self, task_id: object) -> bool:
        return self.index_of(task_id) is not None

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(self.count))

    def index_of(self, task_id: object) -> int | None:
        """The index encoded in ``task_id``, or ``None`` if it is not one of these ids."""
        if not isinstance(task_id, str):
            return None
        match = self._pattern.fullmatch(task_id)
        if match is None or len(match.group(1)) != self.width:
            return None
        index = int(match.group(1))
        return index if index < self.count else None

    def __repr__(self) -> str:
        return f"NumberedIds({self.prefix!r}, {self.count})"
