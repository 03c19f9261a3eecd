"""The multi-attempt math env, and its six registered task sources.

An episode is one problem. The agent replies; the env extracts the final answer, grades it, and says
"correct" or "incorrect" with the attempts left — never the gold answer. Reward 1.0 on the first correct
attempt; the episode ends on success or when ``max_attempts`` replies have been graded. A reply with no
extractable answer still uses an attempt, and the observation explains the accepted answer formats.

``info`` carries, besides the contract keys (``admissible_actions`` is ``None``: answers are free text),
``attempt`` (attempts used), ``correct`` (was the last attempt correct) and ``grading`` (how it was graded:
``"ok"``, ``"no_answer"``, ``"timeout"``, ``"error"``, ``"too_long"``, ``"invalid"``; ``None`` before the
first attempt). The gold answer is privileged: :meth:`MathEnv.reference_answer` is the only way to read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from r3l_envs.core import TextEnv
from r3l_envs.math.answers import equation_value
from r3l_envs.math.sources import (
    ChampSource,
    CountdownSource,
    GSM8KSource,
    GSMSymbolicSource,
    MATH500Source,
    MathTask,
    OlympiadBenchSource,
    ReasoningGymSource,
    TaskSource,
)

__all__ = [
    "ChampEnv",
    "CountdownEnv",
    "GSM8KEnv",
    "GSMSymbolicEnv",
    "MATH500Env",
    "MathEnv",
    "OlympiadBenchEnv",
    "ReasoningGymEnv",
]

#: Replies graded per episode unless ``max_attempts`` says otherwise.
DEFAULT_MAX_ATTEMPTS = 3


class MathEnv(TextEnv):
    """A multi-attempt answer-checking env over any :class:`~r3l_envs.math.sources.TaskSource`.

    Args:
        source: where the problems come from and how replies are graded.
        max_attempts: replies graded per episode (default 3).
        equation_answers: also read a bare equation line ``lhs = value`` as ``value``
            (:func:`~r3l_envs.math.answers.equation_value`; for answers that are values, not Countdown's expressions).
        grading_timeout: hard limit in seconds on grading one reply (math-verify runs in a subprocess).
        render_mode: ``"ansi"``, ``"human"`` or ``None``.
    """

    restore_kind = "native"
    prompt_family = "math"
    is_math = True

    def __init__(
        self,
        source: TaskSource,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        equation_answers: bool = False,
        grading_timeout: float = 5.0,
        render_mode: str | None = None,
    ):
        super().__init__(split=source.split, render_mode=render_mode)
        if int(max_attempts) < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if not grading_timeout > 0:
            raise ValueError(f"grading_timeout must be > 0 seconds, got {grading_timeout}")
        self.source = source
        self.max_attempts = int(max_attempts)
        self.equation_answers = bool(equation_answers)
        self.grading_timeout = float(grading_timeout)
        self._task: MathTask | None = None
        self._attempts = 0
        self._solved = False
        self._correct = False
        self._grading: str | None = None

    @property
    def task_ids(self) -> Sequence[str]:
        return self.source.task_ids

    @property
    def current_task(self) -> MathTask:
        """The current task with its source payload (e.g. a Countdown puzzle). Privileged: it holds the gold."""
        if self._task is None:
            raise RuntimeError("no task yet: call reset() first")
        return self._task

    def reference_answer(self) -> str:
        """The gold answer of the current task (privileged: for evaluation and debugging, not for agents)."""
        if self._task is None:
            raise RuntimeError("no task yet: call reset() first")
        return self._task.reference

    @classmethod
    def turn_limit(cls, kwargs: Mapping[str, Any]) -> int | None:
        """Every turn is a graded attempt, so an episode ends after ``max_attempts`` turns."""
        return int(kwargs.get("max_attempts", DEFAULT_MAX_ATTEMPTS))

    @property
    def max_turns(self) -> int:
        return self.max_attempts

    def expert_actions(self, task_id: str) -> list[str]:
        """The one action that wins ``task_id``: its reference answer (privileged; the env is left as it is)."""
        self.validate_task_id(task_id)
        return [self.source.task(task_id).reference]

    # ------------------------------------------------------------------ TextEnv hooks
    def _start(self, task_id: str) -> tuple[str, str, dict[str, Any]]:
        self._task = self.source.task(task_id)
        self._attempts, self._solved, self._correct, self._grading = 0, False, False, None
        attempts = "one attempt" if self.max_attempts == 1 else f"{self.max_attempts} attempts"
        observation = f"{self._task.problem}\n\n{self.source.answer_hint} You have {attempts}."
        return observation, self._task.problem, self._info()

    def _act(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        assert self._task is not None
        reply = equation_value(action) if self.equation_answers else action
        outcome = self.source.grade(self._task, reply, self.grading_timeout)
        self._attempts += 1
        self._correct, self._grading = outcome.correct, outcome.status
        if outcome.correct:
            self._solved = True
            return f"Correct! {outcome.detail}".strip(), 1.0, True, self._info()
        left = self.max_attempts - self._attempts
        remaining = "No attempts left." if left == 0 else f"{left} attempt{'s' if left > 1 else ''} left."
        if outcome.status == "no_answer":
            message = f"No final answer found in your reply. Accepted formats: {self.source.accepted_formats}."
        elif outcome.status == "timeout":
            message = "Incorrect: your answer could not be checked in time (it is too complex)."
        elif outcome.status == "too_long":
            message = "Incorrect: your final answer is too long to be a final answer."
        else:
            message = f"Incorrect. {outcome.detail}".strip()
        return f"{message} {remaining}", 0.0, left == 0, self._info()

    def _info(self) -> dict[str, Any]:
        return {
            "admissible_actions": None,
            "won": self._solved,
            "score": 1.0 if self._solved else 0.0,
            "attempt": self._attempts,
            "correct": self._correct,
            "grading": self._grading,
        }

    def _save_state(self) -> dict[str, Any]:
        assert self._task is not None
        return {
            "task_id": self._task.task_id,
            "attempts": self._attempts,
            "solved": self._solved,
            "correct": self._correct,
            "grading": self._grading,
        }

    def _load_state(self, state: dict[str, Any]) -> None:
        task = self.source.task(state["task_id"])  # validates the id before anything changes
        self._task = task
        self._attempts, self._solved = state["attempts"], state["solved"]
        self._correct, self._grading = state["correct"], state["grading"]


class CountdownEnv(MathEnv):
    """``r3l/Countdown-v0``: reach the target with + - * / and parentheses; procedural, offline."""

    def __init__(
        self,
        split: str = "train",
        *,
        num_tasks: int | None = None,
        num_numbers: int = 4,
        max_number: int = 100,
        **kwargs: Any,
    ):
        if kwargs.get("equation_answers"):
            raise ValueError("Countdown's answer is an expression: equation_answers would grade '... = 24' as '24'")
        super().__init__(CountdownSource(split, num_tasks, num_numbers, max_number), **kwargs)


class GSMSymbolicEnv(MathEnv):
    """``r3l/GSMSymbolic-v0``: reasoning-gym's GSM-Symbolic grade-school problems; procedural, offline."""

    def __init__(self, split: str = "train", *, num_tasks: int | None = None, **kwargs: Any):
        super().__init__(GSMSymbolicSource(split, num_tasks), **kwargs)


class ReasoningGymEnv(MathEnv):
    """``r3l/ReasoningGym-v0``: any of reasoning-gym's procedural datasets with an answer to grade; offline.

    Args:
        dataset: the reasoning-gym dataset, e.g. ``"chain_sum"`` (short sums a small model can start on),
            ``"basic_arithmetic"``, ``"leg_counting"``.
        split: ``"train"``, ``"valid"`` or ``"test"`` (disjoint seeds and disjoint questions).
        num_tasks: tasks in the split (default 10,000 train, 500 valid, 500 test).
        dataset_config: the dataset's own keywords, e.g. ``{"max_terms": 3}`` for ``chain_sum``.
        **kwargs: :class:`MathEnv`'s (``max_attempts``, ``grading_timeout``, ``render_mode``).
    """

    def __init__(
        self,
        dataset: str = "chain_sum",
        split: str = "train",
        *,
        num_tasks: int | None = None,
        dataset_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        super().__init__(ReasoningGymSource(dataset, split, num_tasks, dataset_config), **kwargs)


class ChampEnv(MathEnv):
    """``r3l/CHAMP-v0``: the 270 CHAMP competition problems (splits ``all``, ``train``, ``test``); offline."""

    def __init__(self, split: str = "all", **kwargs: Any):
        super().__init__(ChampSource(split), **kwargs)


class GSM8KEnv(MathEnv):
    """``r3l/GSM8K-v0``: the official GSM8K files (``data_path=``, ``$R3L_DATA_DIR/gsm8k/`` or the HF cache)."""

    def __init__(self, split: str = "train", *, data_path: str | Path | None = None, **kwargs: Any):
        super().__init__(GSM8KSource(split, data_path), **kwargs)


class MATH500Env(MathEnv):
    """``r3l/MATH500-v0``: MATH-500 ``test.jsonl`` (``data_path=``, ``$R3L_DATA_DIR/math500/`` or the HF cache)."""

    def __init__(self, split: str = "test", *, data_path: str | Path | None = None, **kwargs: Any):
        super().__init__(MATH500Source(split, data_path), **kwargs)


class OlympiadBenchEnv(MathEnv):
    """``r3l/OlympiadBench-v0``: one OlympiadBench subset file (``data_path=``, ``$R3L_DATA_DIR/olympiadbench/``)."""

    def __init__(
        self,
        split: str = "test",
        *,
        data_path: str | Path | None = None,
        subset: str = "OE_TO_maths_en_COMP",
        **kwargs: Any,
    ):
        super().__init__(OlympiadBenchSource(split, data_path, subset), **kwargs)
