"""The oracle's ``plan`` option: ``"step"`` names the expert's next action at the pivot, ``"rest"`` the whole rest of
the plan, so a retry that can only do what the guidance names wins with the second and not with the first."""

import re

import gymnasium as gym
import pytest

from wrappers import RolloutConfig
from wrappers.retry.oracle import OracleReflector, expert_plan
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig

pytest.importorskip("transformers")

ENV = "r3l/TextWorld-v0"  # cooking level 1: a six-step plan
DETOUR = "look"
PIVOT = 2


def follower(plan):
    """Plays the plan for ``PIVOT`` turns, then detours; once guided, plays the actions the guidance names, in
    order, one per turn since the guidance, and detours when they run out (it knows nothing else)."""

    def rule(prompt_text):
        if "What to do instead" not in prompt_text:
            done = prompt_text.count("<|im_start|>assistant") - 1  # the generation prompt opens one more
            return f"<action>{plan[done] if done < PIVOT else DETOUR}</action>"
        after = prompt_text.rsplit("What to do instead:", 1)[1]
        named = re.findall(r"'([^']+)'", after.split("\n", 1)[0])
        done = after.count("<|im_start|>assistant") - 1
        return f"<action>{named[done] if done < len(named) else DETOUR}</action>"

    return rule


def _retry(plan_option):
    from r3l_learn.policies.scripted import ScriptedPolicy

    env = gym.make(ENV)
    task = env.unwrapped.task_ids[0]
    plan = expert_plan(env, task)
    env.close()
    assert len(plan) >= PIVOT + 3 and DETOUR not in plan
    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=len(plan) + 2))
    rr = ReflectRetry(ENV, ScriptedPolicy(follower(plan)), OracleReflector(plan=plan_option), config)
    try:
        (group,) = rr.collect([task], seed=0)
    finally:
        rr.close()
    base, retry = group.trajectories
    return plan, base, retry


def test_rest_names_every_remaining_action_in_order_and_the_retry_wins():
    plan, base, retry = _retry("rest")
    refl = base.metadata["reflection"]
    assert not base.won and refl["pivot"] == PIVOT
    assert re.findall(r"'([^']+)'", refl["suggestion"]) == plan[PIVOT:]
    assert retry.won and [t.action for t in retry.turns] == plan


def test_step_names_one_action_and_the_same_follower_is_lost_after_it():
    plan, base, retry = _retry("step")
    refl = base.metadata["reflection"]
    assert re.findall(r"'([^']+)'", refl["suggestion"]) == [plan[PIVOT]]
    assert not retry.won and [t.action for t in retry.turns[: PIVOT + 2]] == [*plan[: PIVOT + 1], DETOUR]


def test_the_default_is_step_and_a_bad_plan_option_is_refused():
    assert OracleReflector().plan == "step"
    with pytest.raises(ValueError, match="plan must be one of"):
        OracleReflector(plan="all")
