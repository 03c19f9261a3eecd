"""Splits of procedural task sources: task-id sequences, and the rule that keeps splits disjoint by content.

Seeds alone do not make splits disjoint: two seeds can give the same puzzle or the same map, and with a small
task space most test seeds do (Countdown with 3 numbers <= 10 had all its 1,000 test puzzles in train). So a
generated task belongs to a split by *what the agent sees* of it, its content key, never by its seed:

* every env defines a content key per task (a JSON-able value: Countdown's numbers and target, a TextWorld
  game's texts and map, ...), and :func:`split_of` maps a stable hash of it into one share of
  :data:`SPLIT_SHARES`; the shares do not overlap, so no content can be in two splits;
* task ``index`` of a split is the first candidate of that index's own candidate stream (seeds derived from
  ``(split, index, attempt)``) whose content hashes into the split (:func:`pick_in_split`). Resolving an id
  stays a pure function of ``(split, index)`` and costs ``1 / share`` draws on average (1.25 for train, 10 for
  a held-out split); no enumeration of the other splits is needed.

A configuration with few distinct tasks may have none in some split: the draw then gives up after
:data:`MAX_DRAWS` candidates with :class:`SplitExhaustedError` instead of repeating another split's content.
The rule keeps splits disjoint, not duplicate-free: two indexes of one split may draw the same content.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from r3l_envs.errors import R3LEnvError

__all__ = [
    "MAX_DRAWS",
    "SPLIT_SHARES",
    "NumberedIds",
    "SplitExhaustedError",
    "candidate_seed",
    "content_digest",
    "pick_in_split",
    "split_of",
]

T = TypeVar("T")

#: Share of the content-hash space per split, in this order from 0 to 1. Held-out shares of 10 % keep the
#: cost of drawing a held-out task low (10 candidates on average) while leaving most content to train.
SPLIT_SHARES: Mapping[str, float] = {"train": 0.8, "valid": 0.1, "test": 0.1}

#: Candidates drawn for one task before giving up. With a 10 % share and plenty of content, 400 draws all
#: miss with probability 0.9**400 ~ 5e-19: only a configuration without content in the split ends up here.
MAX_DRAWS = 400


class SplitExhaustedError(R3LEnvError, LookupError):
    """No candidate of a task's stream has content in its split: the configuration has too few distinct
    tasks for that split. Ask for a larger configuration (more numbers, a higher level) or another split."""


def content_digest(content: Any) -> str:
    """sha256 (hex) of ``content``'s canonical JSON (sorted keys, no whitespace): equal content, equal digest."""
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_of(content: Any, shares: Mapping[str, float] = SPLIT_SHARES) -> str:
    """The split whose share of the hash space holds ``content`` (a JSON-able content key)."""
    position = int(content_digest(["r3l-split", content])[:16], 16) / 2**64  # uniform in [0, 1)
    edge = 0.0
    for split, share in shares.items():
        edge += share
        if position < edge:
            return split
    return next(reversed(list(shares)))  # float rounding at the top edge


def candidate_seed(namespace: str, split: str, index: int, attempt: int) -> int:
    """A 32-bit seed for candidate ``attempt`` of task ``index`` of ``split``: stable across processes."""
    text = f"{namespace}/{split}/{index}/{attempt}"
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "big")


def pick_in_split(
    split: str,
    draw: Callable[[int], T | None],
    content_of: Callable[[T], Any],
    *,
    what: str,
    valid: Callable[[T], bool] | None = None,
    shares: Mapping[str, float] = SPLIT_SHARES,
    max_draws: int = MAX_DRAWS,
) -> tuple[int, T]:
    """The first ``(attempt, candidate)`` of ``draw(0), draw(1), ...`` whose content lies in ``split``.

    Args:
        split: one of ``shares``.
        draw: candidate ``attempt`` of the task (a pure function of the attempt), or ``None`` for a failed
            candidate (e.g. an unsolvable game); failed candidates count towards ``max_draws``.
        content_of: the candidate's content key (JSON-able; see :func:`split_of`).
        what: names the task in the error message (e.g. ``"Countdown(num_numbers=3) test task 7"``).
        valid: an expensive check (e.g. a planner) run only on candidates in ``split``; a candidate it refuses
            counts as failed.

    Raises:
        SplitExhaustedError: no candidate among ``max_draws`` has content in ``split`` (and passes ``valid``).
    """
    if split not in shares:
        raise ValueError(f"split must be one of {list(shares)}, got {split!r}")
    failed = 0
    seen: set[str] = set()
    for attempt in range(max_draws):
        candidate = draw(attempt)
        if candidate is None:
            failed += 1
            continue
        content = content_of(candidate)
        if split_of(content, shares) != split:
            seen.add(content_digest(content))
        elif valid is None or valid(candidate):
            return attempt, candidate
        else:
            failed += 1
    raise SplitExhaustedError(
        f"{what}: none of {max_draws} candidates is a task of split {split!r} ({len(seen)} distinct contents "
        f"drawn, all in other splits; {failed} failed candidates). This configuration has too few distinct tasks "
        f"for a {split!r} split disjoint from the others: choose a larger configuration."
    )


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
