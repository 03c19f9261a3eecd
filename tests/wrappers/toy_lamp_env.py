"""A toy env added the way every env is added: this one module (the game and what it declares about itself)
plus one registration row (``test_env_contract.py``). Nothing in ``wrappers`` or ``r3l_learn`` names it.

Light the lamp: the task's switch sequence (two of ``press red``/``press green``/``press blue``, fixed per
task) turns it on. The env declares the ``textgame`` prompt family and an expert plan (the sequence).
"""

from __future__ import annotations

from typing import Any

from r3l_envs.core import TextEnv
from r3l_envs.splits import NumberedIds

BUTTONS = ("press red", "press green", "press blue")


class LampEnv(TextEnv):
    restore_kind = "native"
    prompt_family = "textgame"

    def __init__(self, *, split: str = "train", render_mode: str | None = None):
        super().__init__(split=split, render_mode=render_mode)
        self._ids = NumberedIds(f"lamp-{split}-", 4)
        self._code: tuple[str, ...] = ()
        self._pressed: list[str] = []

    @property
    def task_ids(self) -> NumberedIds:
        return self._ids

    def expert_actions(self, task_id: str) -> list[str]:
        self.validate_task_id(task_id)
        return list(self._code_of(task_id))

    def _code_of(self, task_id: str) -> tuple[str, ...]:
        i = self._ids.index_of(task_id)
        return BUTTONS[i % 3], BUTTONS[(i + 1) % 3]

    def _info(self) -> dict[str, Any]:
        won = tuple(self._pressed[-2:]) == self._code
        return {"admissible_actions": list(BUTTONS), "won": won, "score": 1.0 if won else 0.0}

    def _start(self, task_id: str) -> tuple[str, str, dict[str, Any]]:
        self._code, self._pressed = self._code_of(task_id), []
        return "A dark room with a lamp and three buttons.", "light the lamp", self._info()

    def _act(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if action in BUTTONS:
            self._pressed.append(action)
        info = self._info()
        return ("The lamp is on." if info["won"] else "The room stays dark."), float(info["won"]), info["won"], info

    def _save_state(self) -> list[str]:
        return list(self._pressed)

    def _load_state(self, state: list[str]) -> None:
        self._pressed = list(state)
