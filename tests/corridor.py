"""A minimal TextEnv subclass for testing the contract machinery itself (not a stand-in for a real env).

A windy corridor: walk from a random start to cell ``length``; each move fails with probability 0.3, drawn
from the env's own RNG, so checkpoints must carry the RNG state for restores to be exact.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from r3l_envs.core import TextEnv
from r3l_envs.splits import NumberedIds


class Corridor(TextEnv):
    restore_kind = "native"

    def __init__(self, *, split: str = "train", length: int = 6, render_mode: str | None = None):
        super().__init__(split=split, render_mode=render_mode)
        self.length = length
        self._ids = NumberedIds(f"corridor-{split}-", 5)
        self._pos = 0

    @property
    def task_ids(self) -> NumberedIds:
        return self._ids

    def _info(self) -> dict[str, Any]:
        won = self._pos >= self.length
        return {"admissible_actions": ["left", "right", "wait"], "won": won, "score": self._pos / self.length}

    def _start(self, task_id: str) -> tuple[str, str, dict[str, Any]]:
        self._pos = self._ids.index_of(task_id) % 3 + int(self.np_random.integers(2))
        return f"You are at cell {self._pos} of {self.length}.", f"reach cell {self.length}", self._info()

    def _act(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if action not in ("left", "right", "wait"):
            return f"Nothing happens. You are at cell {self._pos} of {self.length}.", 0.0, False, self._info()
        before = self._pos
        if action != "wait" and self.np_random.random() > 0.3:
            self._pos = max(0, self._pos + (1 if action == "right" else -1))
        info = self._info()
        reward = 1.0 if info["won"] and before < self.length else 0.0
        return f"You are at cell {self._pos} of {self.length}.", reward, info["won"], info

    def _save_state(self) -> int:
        return self._pos

    def _load_state(self, state: int) -> None:
        self._pos = state


class ReplayCorridor(Corridor):
    """The same game, restored by verified replay only."""

    restore_kind = "replay"


def register() -> None:
    for name, cls in (("Corridor-v0", Corridor), ("ReplayCorridor-v0", ReplayCorridor)):
        if f"r3ltest/{name}" not in gym.registry:
            gym.register(f"r3ltest/{name}", entry_point=f"{__name__}:{cls.__name__}", max_episode_steps=12)
