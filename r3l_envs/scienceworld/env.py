"""``r3l/ScienceWorld-v0``: the real ScienceWorld engine (Java, shipped in the ``scienceworld`` wheel).

What differs from upstream's Python ``ScienceWorldEnv``, and why:

* **Fast steps.** Upstream's ``step()`` enumerates every valid action-object combination on every step, most of
  its step time in a furnished room. We play the engine's own step directly (through a small compiled helper that
  also skips upstream's run history and debug output; see :mod:`~r3l_envs.scienceworld.jvm`; steps/s of both in
  ``benchmarks/RESULTS.md``) and compute the valid actions only when asked: ``admissible_actions=True``
  fills ``info["admissible_actions"]`` on every step at that cost; otherwise it is ``None`` and
  :meth:`ScienceWorldEnv.admissible_actions` computes it once.
* **Reward.** ``reward`` is the increase of the engine's cumulative score / 100, so an episode's rewards sum to
  its final ``score``. ``info["score"]`` is the current score / 100 in [0, 1]. When the agent fails a task
  (e.g. focuses on the wrong object) the engine reports -100: we report ``score = 0`` and
  ``info["failed"] = True``, end the episode (as upstream does), and the failing step's reward is minus the
  progress lost, so the sum stays equal to the final score (0). ``info["raw_score"]`` keeps the engine's value.
  ``won`` is the engine's "task completed" flag (never true on a failed task).
* **Canonical text.** Object listings come out in hash-set order; the agent sees them sorted
  (:mod:`r3l_envs.scienceworld.canonical`), and verified replay compares the same canonical text.
* **Deterministic engine.** With ``deterministic=True`` (default) the JVM runs with a constant identity hash
  (``-XX:hashCode=2``), which makes the engine's hash-set iteration order — and hence which of two identical
  objects an ambiguous command picks, gold paths and rare ±1 sensor readings — repeatable across JVMs.
* **Restore = verified replay**: ScienceWorld has no save/load. ``_start`` reloads the task (the engine's own
  ``reset`` is a reload too, and would regenerate the gold path once it was ever requested, ~2 s) and replays.
* **JVM lifecycle** is owned by :class:`~r3l_envs.scienceworld.jvm.ScienceWorldJVM`: one JVM per env, started
  on first use, restarted by ``reset()``/``restore()`` after it died.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from r3l_envs.core import TextEnv
from r3l_envs.errors import EngineError
from r3l_envs.scienceworld.canonical import canonical_observation
from r3l_envs.scienceworld.jvm import ScienceWorldJVM
from r3l_envs.scienceworld.splits import TaskIds, parse_task_id, resolve_tasks, split_variations

__all__ = ["ScienceWorldEnv"]

logger = logging.getLogger(__name__)

#: Longest action handed to the engine; its parser never matches anything longer, so longer ones are refused
#: here with the same answer (unparsed input does not advance the world).
MAX_ACTION_CHARS = 1000
_NO_MATCH = "No known action matches that input."
#: ScienceWorld's simplifications ("easy" = all that suit the task); combine them with commas.
SIMPLIFICATIONS = (
    "easy",
    "teleportAction",
    "selfWateringFlowerPots",
    "openContainers",
    "openDoors",
    "noElectricalAction",
)
_DETERMINISTIC_OPTIONS = ("-XX:+UnlockExperimentalVMOptions", "-XX:hashCode=2")


class ScienceWorldEnv(TextEnv):
    """ScienceWorld (30 elementary-science task types, thousands of variations) as an r3l ``TextEnv``.

    Args:
        split: ``"train"``, ``"dev"``/``"valid"``, ``"test"`` (ScienceWorld's variation split), ``"r3l_train"``
            / ``"r3l_test"`` (the R³L paper's task-type split) or ``"all"``; see :mod:`.splits`.
        tasks: restrict to these task names/numbers (``"boil"``, ``"1-1"``); ``None`` for all 30.
        simplification: ScienceWorld simplifications, comma-separated; ``"easy"`` (the default, as in the
            paper) means teleport, open doors, self-watering pots and (except for electrical tasks) no
            electrical actions. ``""`` for none.
        admissible_actions: compute ``info["admissible_actions"]`` on every step (~10–150 ms per step, it is
            the engine's full action-object enumeration). Off by default; see :meth:`admissible_actions`.
        deterministic: run the JVM with a constant identity hash so the engine is repeatable (see above).
        start_timeout: seconds to wait for the JVM to start.
        java_options: extra JVM options, e.g. ``["-Xmx1g"]`` to bound the heap when running many envs (a JVM
            sizes its heap from the machine's memory; ~0.8 GB resident after a few episodes on a 24 GB machine).
        render_mode: ``"ansi"`` or ``"human"``.

    ``r3l/ScienceWorld-v0`` truncates at 100 steps, ScienceWorld's own ``envStepLimit`` default; the R³L paper's
    budget of 30 turns is the ``paper-sciworld`` preset's ``max_turns`` (r3l_learn/loop/presets.py).
    """

    restore_kind = "replay"
    prompt_family = "textgame"

    def __init__(
        self,
        *,
        split: str = "train",
        tasks: str | Iterable[str] | None = None,
        simplification: str = "easy",
        admissible_actions: bool = False,
        deterministic: bool = True,
        start_timeout: float = 60.0,
        java_options: Iterable[str] = (),
        render_mode: str | None = None,
    ):
        super().__init__(split=split, render_mode=render_mode)
        split_variations("boil", 8, split)  # validates the split name before any JVM starts
        self.tasks = resolve_tasks(tasks)
        self.simplification = self._check_simplification(simplification)
        self.with_admissible_actions = bool(admissible_actions)
        options = (*(_DETERMINISTIC_OPTIONS if deterministic else ()), *java_options)
        self.jvm = ScienceWorldJVM(start_timeout=start_timeout, java_options=options)
        self._task_ids: TaskIds | None = None
        self._loaded: tuple[str, int] | None = None  # (task, variation) the engine holds
        self._score100 = 0
        self._gold: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ engine access
    def _engine(self) -> ScienceWorldJVM:
        """The running JVM, started (or restarted after a death) if needed."""
        self._check_open()
        if not self.jvm.running:
            if self.jvm.dead:
                logger.warning("restarting the ScienceWorld JVM (pid %s died)", self.jvm.pid)
            self.jvm.start()
            self._loaded = None
        return self.jvm

    @property
    def task_ids(self) -> TaskIds:
        """Task ids of this split; the first access starts the JVM (variation counts come from the engine)."""
        if self._task_ids is None:
            jvm = self._engine()
            counts = {task: int(jvm.call("getTaskMaxVariations", task)) for task in self.tasks}
            self._task_ids = TaskIds(self.tasks, counts, self.split)
        return self._task_ids

    @staticmethod
    def _check_simplification(simplification: str) -> str:
        parts = [p for p in simplification.split(",") if p]
        unknown = [p for p in parts if p not in SIMPLIFICATIONS]
        if unknown:
            raise ValueError(f"unknown ScienceWorld simplification(s) {unknown}; choose from {SIMPLIFICATIONS}")
        return ",".join(parts)

    # ------------------------------------------------------------------ TextEnv hooks
    def _start(self, task_id: str) -> tuple[str, str, dict[str, Any]]:
        task, variation = parse_task_id(task_id)
        jvm = self._engine()
        simplification = self.simplification
        if "noElectricalAction" in simplification and ("power-component" in task or "conductivity" in task):
            raise ValueError(f"task {task!r} needs electrical actions: drop noElectricalAction from simplification")
        error = jvm.call("load", task, variation, simplification, False)
        if error:
            raise EngineError(f"ScienceWorld could not load {task_id!r}: {error}")
        self._loaded = (task, variation)
        self._score100 = 0
        goal = str(jvm.call("getTaskDescription"))
        # Upstream's reset() also plays "look around" as the first move: gold paths and timings assume it.
        look, _, _, info = self._act("look around")
        # Some tasks give credit at once (e.g. for starting in the right room). Rewards count from 0, so the
        # first step's reward includes it and an episode's rewards always sum to its final score.
        self._score100 = 0
        return f"{goal}\n\n{look}", goal, info

    def _act(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        jvm = self.jvm
        if self.jvm.dead or self._loaded is None:
            raise EngineError(jvm._dead_message())
        if len(action) > MAX_ACTION_CHARS:
            observation = f"{_NO_MATCH} (Actions are at most {MAX_ACTION_CHARS} characters.)"
            raw, completed = float(jvm.call("getScore")), bool(jvm.call("getCompleted"))
        else:
            observation, raw, completed = jvm.step(action)
        # The engine's score is 1.0 exactly when every ordered subgoal is done (optional ones add < 1/n), and -1.0
        # on failure; its "completed" flag counts only then.
        completed = completed and raw > 0.99
        score100 = round(100 * raw)  # the engine's own integer scale (upstream rounds the same way)
        failed = score100 < 0
        clamped = max(0, min(100, score100))
        reward = (clamped - self._score100) / 100
        self._score100 = clamped
        info = {
            "admissible_actions": self._valid_actions() if self.with_admissible_actions else None,
            "won": completed and not failed,
            "score": clamped / 100,
            "raw_score": score100 / 100,
            "failed": failed,
        }
        return canonical_observation(observation), reward, completed or failed, info

    def canonical_observation(self, observation: str) -> str:
        return canonical_observation(observation)

    def _replay(self, episode: Any) -> None:
        # Verification needs observations only: skip the costly valid-action enumeration on replayed steps
        # (the restored info, admissible actions included, comes from the checkpoint).
        with_admissible, self.with_admissible_actions = self.with_admissible_actions, False
        try:
            super()._replay(episode)
        finally:
            self.with_admissible_actions = with_admissible

    # ------------------------------------------------------------------ extras
    def _valid_actions(self) -> list[str]:
        return sorted(self.jvm.call_preserving_random("getValidActionObjectCombinations"))

    def admissible_actions(self) -> list[str]:
        """The engine's valid action-object combinations in the current state, sorted (10–150 ms a call).

        Calling it does not change the episode: the engine's random state is saved and put back around it.
        """
        self._check_open()
        if self._loaded is None or self._episode is None:
            raise EngineError("no episode is running: call reset() first")
        return self._valid_actions()

    def expert_actions(self, task_id: str) -> list[str]:
        """The gold action sequence of ``task_id`` (:meth:`gold_actions`; no reset needed)."""
        return self.gold_actions(task_id)

    def gold_actions(self, task_id: str | None = None) -> list[str]:
        """ScienceWorld's gold action sequence for ``task_id`` (default: the current task), after the first look.

        Generating it costs ~0.5–3 s and reloads the engine, so the running episode (if any) is replayed
        afterwards (verified); results are cached per task id.
        """
        self._check_open()
        if task_id is None:
            if self._episode is None:
                raise EngineError("no episode is running: pass a task_id or call reset() first")
            task_id = self._episode.task_id
        self.validate_task_id(task_id)
        if task_id not in self._gold:
            task, variation = parse_task_id(task_id)
            jvm = self._engine()
            jvm.call("load", task, variation, self.simplification, True)
            self._gold[task_id] = [str(a) for a in jvm.call("getGoldActionSequence")]
            self._loaded = None
            if self._episode is not None:
                self._replay(self._episode)
        return list(self._gold[task_id])

    def close(self) -> None:
        """Stop the JVM (no Java process is left behind) and mark the env closed."""
        self.jvm.close()
        super().close()
