"""One calibration configuration, its file name, and the targets a chosen configuration must meet."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

#: Where the measurements go, one JSON per configuration (``chosen.json`` names the chosen one per env).
RESULTS_DIR = Path(__file__).resolve().parents[1] / "results" / "calibration"

#: The ranges a configuration must reach (measured over >= ``MIN_EPISODES`` held-out episodes).
TARGETS = {
    "base_success": (0.05, 0.25),
    "retry_success_min": 0.30,
    "retry_over_base_min": 2.0,
    "fixed_habit_success_max": 0.10,
    "random_success_max": 0.10,
    "min_episodes": 200,
    "min_distinct_test_tasks": 200,
}


@dataclass(frozen=True)
class CalibrationConfig:
    """What one measurement runs.

    Attributes:
        env_id: a registered env id.
        env_kwargs: its ``gym.make`` kwargs (``split`` is always ``"test"``, set by the harness).
        max_turns: the turn budget of every episode (base, retry, random, fixed sequence alike).
        temperature: the sampling temperature of the model (constrained mode: the softmax over the admissible
            actions' mean log-likelihoods).
        oracle_plan: how much of the expert plan the oracle's guidance names: ``"step"`` (one action) or ``"rest"``.
        model: an embedded model name or a local HF folder (a warmed-up model, say).
        constrained: choose among admissible actions by log-likelihood (else free text).
        episodes: test tasks played by the model, one base episode each (task ids ``0 .. episodes - 1``).
        random_per_task: random-policy episodes per test task.
        train_plans: expert plans of this many train tasks are fixed-sequence candidates.
        seed: sampling and env seed.
    """

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 8
    temperature: float = 1.0
    oracle_plan: Literal["step", "rest"] = "step"
    model: str = "smollm2-135m-instruct"
    constrained: bool = True
    episodes: int = 48
    random_per_task: int = 2
    train_plans: int = 100
    seed: int = 0

    def env_key(self) -> str:
        """The env part of the file name, e.g. ``textworld-treasure_hunter-d5``."""
        name = self.env_id.split("/")[-1].rsplit("-v", 1)[0].lower()
        parts = [name] + [str(v) if k != "difficulty" else f"d{v}" for k, v in sorted(self.env_kwargs.items())]
        return _slug("-".join(parts))

    def key(self) -> str:
        """The file name (without ``.json``): the env key and every lever, e.g.
        ``textworld-treasure_hunter-d5__t8_T1.0_rest_smollm2-135m-instruct_n48``."""
        mode = "" if self.constrained else "_free"
        model = _slug(Path(self.model).name if "/" in self.model else self.model)
        return (
            f"{self.env_key()}__t{self.max_turns}_T{self.temperature:g}_{self.oracle_plan}_{model}{mode}"
            f"_n{self.episodes}_s{self.seed}"
        )

    def path(self, results: Path = RESULTS_DIR) -> Path:
        return results / f"{self.key()}.json"

    def as_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def verdict(result: dict[str, Any]) -> dict[str, bool]:
    """Which targets a measurement meets (each one named), from its numbers."""
    low, high = TARGETS["base_success"]
    base, retry = result["base_success"], result["retry_success"]
    return {
        "base_in_range": low <= base <= high,
        "retry_at_least_min": retry is not None and retry >= TARGETS["retry_success_min"],
        "retry_at_least_2x_base": retry is not None and retry >= TARGETS["retry_over_base_min"] * base,
        "fixed_habit_at_most_max": result["fixed_habit_success"] <= TARGETS["fixed_habit_success_max"],
        "random_at_most_max": result["random_success"] <= TARGETS["random_success_max"],
        "enough_episodes": result["episodes"] >= TARGETS["min_episodes"],
        "enough_distinct_test_tasks": result["distinct_test_tasks"] >= TARGETS["min_distinct_test_tasks"],
    }
