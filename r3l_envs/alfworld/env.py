"""``r3l/ALFWorld-v0``: ALFWorld's text households on the real engine (TextWorld PDDL env + fast-downward).

Games are the official ones when ``data_path=`` or ``$ALFWORLD_DATA`` points at them, else games from the
offline generator (``info["source"] == "generated"``). Checkpoints are native everywhere: they hold the
planner's state id, the PDDL env's facts and what the engine derived for that state, so a restore re-derives
nothing. In the episode that took the checkpoint the state id is enough (about a millisecond); any other
episode, env instance or process of the same id and kwargs first loads the game if needed, then restarts the
planner at the checkpoint's facts (:func:`r3l_envs.alfworld.planner.rebase`, a few milliseconds, whatever the
step) and remembers that state, so restoring the same checkpoint again is as fast as in its own episode. Not
thread-safe: use one env per thread (or per process). The engine's repeated work is memoised in memory
(:mod:`r3l_envs.alfworld.speedups`) with bit-identical transcripts.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from r3l_envs.alfworld import engine, planner, snapshot
from r3l_envs.alfworld.games import generated_game, generated_ids, official_games, official_root
from r3l_envs.codec import register_type
from r3l_envs.core import TextEnv
from r3l_envs.errors import UnknownTaskError

__all__ = ["ALFWorldEnv"]

_GOAL = re.compile(r"Your task is to: (.*?)\s*$", re.S)
_serial = itertools.count()


@register_type
@dataclass
class _Snapshot:
    """Native state of an ALFWorld episode; ``token`` names the planner registry its state id belongs to."""

    token: tuple[str, int]
    engine: dict[str, Any]  # see r3l_envs.alfworld.snapshot
    won: bool


class ALFWorldEnv(TextEnv):
    """ALFWorld households (six task types), official or generated.

    Args:
        split: generated data: ``"train"``, ``"valid"``, ``"test"``; official data: ``"train"``,
            ``"valid_seen"``, ``"valid_unseen"``.
        data_path: the folder ``alfworld-download`` filled (default ``$ALFWORLD_DATA``); without either,
            games come from the offline generator.
        max_tasks: keep only the first ``max_tasks`` ids of the split (CI, small curricula).
        render_mode: ``"ansi"``, ``"human"`` or ``None``.

    ``r3l/ALFWorld-v0`` truncates at 50 steps, ALFWorld's own episode limit; the R³L paper's budget of 25 turns is
    the ``paper-alfworld`` preset's ``max_turns`` (r3l_learn/loop/presets.py).
    """

    restore_kind = "native"
    prompt_family = "textgame"

    def __init__(
        self,
        split: str = "train",
        data_path: str | None = None,
        max_tasks: int | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(split=split, render_mode=render_mode)
        if max_tasks is not None and not (isinstance(max_tasks, int) and max_tasks >= 1):
            raise ValueError(f"max_tasks must be a positive int or None, got {max_tasks!r}")
        root = official_root(data_path)
        self.source = "official" if root is not None else "generated"
        self._official = official_games(root, split) if root is not None else None
        ids: Sequence[str] = tuple(self._official) if self._official is not None else generated_ids(split)
        self._ids = ids[:max_tasks] if max_tasks is not None else ids
        self._generated = generated_ids(split) if self._official is None else None
        self._engine: Any = None
        self._path: Any = None
        self._instance = uuid.uuid4().hex
        self._token: tuple[str, int] = (self._instance, -1)  # this engine's planner registry (one per episode)
        # Foreign (token, state id) -> the id of that state in this registry, for checkpoints restored here.
        self._adopted: dict[tuple[tuple[str, int], int], int] = {}
        self._won = False

    @property
    def task_ids(self) -> Sequence[str]:
        return self._ids

    # ------------------------------------------------------------------ TextEnv hooks
    def _start(self, task_id: str) -> tuple[str, str, dict[str, Any]]:
        self._load_game(self._game_path(task_id))
        state = self._engine.reset()
        self._new_registry()
        self._won = False
        match = _GOAL.search(state.feedback)
        return state.feedback, match.group(1) if match else "", self._info(state)

    def _act(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        state, _, _ = self._engine.step(action)
        reward = 1.0 if state["won"] and not self._won else 0.0
        self._won = self._won or bool(state["won"])
        return state.feedback, reward, bool(state["won"]), self._info(state)

    def _save_state(self) -> _Snapshot:
        return _Snapshot(token=self._token, engine=snapshot.save(engine.core(self._engine)), won=self._won)

    def _load_state(self, snap: _Snapshot) -> None:
        state_id = self._local_state_id(snap)
        if state_id is None:
            raise ValueError("ALFWorld snapshot of another planner registry: restore it through r3l_envs.restore")
        snapshot.load(engine.core(self._engine), {**snap.engine, "state_id": state_id})
        self._won = snap.won

    def _restore_state(self, state: dict[str, Any], *, via: Any, rollback: bool = True) -> None:
        snap = state["native"]
        if via == "native" and isinstance(snap, _Snapshot) and self._local_state_id(snap) is None:
            self._adopt(state["episode"].task_id, snap)
        super()._restore_state(state, via=via, rollback=rollback)

    def _local_state_id(self, snap: _Snapshot) -> int | None:
        """The id that ``snap``'s planner state has in this engine's registry, if it has one."""
        if snap.token == self._token:
            return snap.engine["state_id"]
        return self._adopted.get((snap.token, snap.engine["state_id"]))

    def _adopt(self, task_id: str, snap: _Snapshot) -> None:
        """Load ``task_id``'s game if needed and restart the planner at ``snap``'s state (a new registry)."""
        self._load_game(self._game_path(task_id))
        state_id = planner.rebase(engine.core(self._engine), snap.engine)
        self._new_registry()
        self._adopted[(snap.token, snap.engine["state_id"])] = state_id

    def _load_game(self, path: Any) -> None:
        """Have the engine hold the game at ``path`` (a new engine for another game)."""
        if path == self._path and self._engine is not None:
            return
        if self._engine is not None:
            self._engine.close()
        self._engine, self._path = None, None  # a failed start leaves no engine of another game behind
        self._engine, self._path = engine.start(path), path

    def _new_registry(self) -> None:
        """The planner's registry was replaced: earlier state ids of this engine are void."""
        self._token = (self._instance, next(_serial))
        self._adopted.clear()

    # ------------------------------------------------------------------ privileged information
    def expert_actions(self, task_id: str) -> list[str]:
        """The plan that wins ``task_id`` from its start (resets this env to that task)."""
        self.reset(options={"task_id": task_id})
        return self.expert_plan()

    def expert_plan(self) -> list[str]:
        """Commands that win from the current state (privileged: for oracles and tests).

        While the episode has followed the game's walkthrough (the planner's plan from the start, stored when
        the game was made), this is the rest of it; otherwise the planner replans from the current state,
        which takes seconds in a large household.
        """
        if self._episode is None:
            raise RuntimeError("call reset() first: the expert plan belongs to the current episode")
        played = [action.strip() for action in self._episode.actions]  # the engine strips commands too
        walkthrough = list(engine.core(self._engine).walkthrough or [])
        if walkthrough and walkthrough[: len(played)] == played:
            return walkthrough[len(played) :]
        return engine.replan(self._path, played)

    # ------------------------------------------------------------------ internals
    def _game_path(self, task_id: str) -> Any:
        if self._official is not None:
            return self._official[task_id]
        index = self._generated.index_of(task_id) if self._generated is not None else None
        if index is None:
            raise UnknownTaskError(f"{task_id!r} is not a task id of this ALFWorld split; see env.task_ids")
        return generated_game(self.split, index)

    def _info(self, state: Any) -> dict[str, Any]:
        won = bool(state["won"])
        return {
            "admissible_actions": list(state["admissible_commands"]),
            "won": won,
            "score": 1.0 if won else 0.0,
            "source": self.source,
        }

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        super().close()
