"""Every example runs as written, in its small configuration (``--small``): the CI check that the examples a new
user reads first still work. Each is loaded from its file and its ``main(argv)`` called in this process (no
second interpreter start-up); what it returns is checked, not its log."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str):
    """The example module ``examples/<name>.py``, imported under a private name."""
    spec = importlib.util.spec_from_file_location(f"r3l_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_every_example_is_tested_here():
    tested = {"envs_checkpoint", "grpo_with_reflect_retry", "trl_grpo", "openai_reflector", "ray_collect"}
    assert {p.stem for p in EXAMPLES.glob("*.py")} == tested


def test_envs_checkpoint_restores_exactly_and_branches():
    reports = example("envs_checkpoint").main(["--small"])
    assert [r.env_id for r in reports] == ["r3l/Countdown-v0", "r3l/TextWorld-v0"]
    for r in reports:
        assert r.identical and r.branched and r.steps_after > 0 and r.checkpoint_bytes > 0
    assert {r.restore_kind for r in reports} <= {"native", "replay"}


def test_grpo_with_reflect_retry_trains_on_groups_with_signal():
    pytest.importorskip("torch")
    (step,) = example("grpo_with_reflect_retry").main(["--small"])
    assert (step["trajectories"], step["retries"], step["samples"]) == (8, 4, 8)
    assert step["retries_beat_base"] == 4  # the oracle reveals the answer: every retry wins, every base fails
    assert step["loss"] != 0.0 and math.isfinite(step["loss"])


@pytest.mark.parametrize("mode", ["reflect_retry", "episodes"])
def test_trl_grpo_trains_two_steps(mode):
    pytest.importorskip("trl")
    steps = example("trl_grpo").main(["--small", "--mode", mode])
    assert len(steps) == 2
    if mode == "reflect_retry":
        assert all(s["r3l/retries"] == 0.5 for s in steps)  # N=2: one base and its retry
    else:
        assert all(s.get("r3l/retries", 0.0) == 0.0 for s in steps)


def test_openai_reflector_and_policy_through_a_served_model():
    pytest.importorskip("openai")
    out = example("openai_reflector").main(["--small"])
    assert out["eval"].episodes == 2 and out["exact_turns"] == out["turns"] == 2
    (group,) = out["groups"]
    bases = [t for t in group.trajectories if t.kind == "base"]
    assert bases and all(t.metadata["reflection"]["source"] == "openai:tiny-random" for t in bases)
    # the tiny random model's replies are noise: each is counted by its reason, the collect goes on
    assert out["stats"]["bases"] == len(bases)
    assert out["stats"]["reflections_parsed"] + sum(out["stats"]["reflection_failures"].values()) == len(bases)
    assert not any(math.isnan(x) for t in group.trajectories for x in t.behavior_logprobs)


@pytest.mark.ray
def test_ray_collect_survives_a_killed_worker_with_identical_groups():
    pytest.importorskip("ray")
    out = example("ray_collect").main(["--small"])
    assert out["identical"] and len(out["killed"]) == 1 and out["replacements"] >= 1
    (group,) = out["groups"]
    assert [t.kind for t in group.trajectories] == ["base", "retry"]
    assert group.trajectories[1].won and not group.trajectories[0].won
