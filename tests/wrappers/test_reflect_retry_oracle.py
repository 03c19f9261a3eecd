"""The oracle reflector on every offline env with an expert plan: a base leaves the plan at a known turn, the
oracle names that turn as the pivot, the retry restarts from the restored state and, guided, wins."""

import gymnasium as gym
import pytest

import r3l_envs
from wrappers import RolloutConfig
from wrappers.retry.oracle import OracleReflector, expert_plan
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig

pytest.importorskip("transformers")

DETOUR = "inventory"  # what the base does from turn 2 on, instead of the plan
PIVOT = 2

ENVS = [
    pytest.param("r3l/TextWorld-v0", id="textworld"),
    pytest.param("r3l/ALFWorld-v0", id="alfworld"),
    pytest.param("r3l/WebShop-v0", id="webshop"),
    pytest.param("r3l/ScienceWorld-v0", id="scienceworld", marks=[pytest.mark.java, pytest.mark.slow]),
]


def plan_follower(plan):
    """Plays the plan for two turns, then detours forever, unless guidance is in the context: then the plan."""

    def rule(prompt_text):
        done = prompt_text.count("<|im_start|>assistant") - 1  # the generation prompt opens one more
        guided = "What to do instead" in prompt_text
        if guided or done < PIVOT:
            return f"<action>{plan[min(done, len(plan) - 1)]}</action>"
        return f"<action>{DETOUR}</action>"

    return rule


@pytest.mark.parametrize("env_id", ENVS)
def test_oracle_pivot_restore_and_guided_retry(env_id):
    from r3l_learn.policies.scripted import ScriptedPolicy

    env = gym.make(env_id)
    task = env.unwrapped.task_ids[0]
    plan = expert_plan(env, task)
    assert len(plan) > PIVOT and plan[PIVOT] != DETOUR
    policy = ScriptedPolicy(plan_follower(plan))
    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=len(plan) + 1), keep_checkpoints=True)
    rr = ReflectRetry(env_id, policy, OracleReflector(), config)
    (group,) = rr.collect([task], seed=0)
    base, retry = group.trajectories
    assert not base.won and base.num_turns == len(plan) + 1
    refl = base.metadata["reflection"]
    assert refl["source"] == "oracle" and refl["outcome"] == "failure" and refl["pivot"] == PIVOT
    assert repr(plan[PIVOT]) in refl["suggestion"]
    # restored state: a fresh env restored from the base's checkpoint before turn p has played the base's prefix
    fresh = gym.make(env_id)
    r3l_envs.restore(fresh, base.turns[PIVOT].checkpoint)
    assert r3l_envs.checkpoint(fresh).step == PIVOT
    assert (
        retry.kind == "retry"
        and retry.pivot == PIVOT
        and retry.turns[PIVOT].observation == base.turns[PIVOT].observation
    )
    cut = base.turns[PIVOT].span[0]
    assert retry.token_ids[:cut] == base.token_ids[:cut]
    assert "What to do instead" not in policy.decode(retry.token_ids)
    # the guided retry plays the plan (ScienceWorld's gold path has trailing steps after the task is done)
    assert [t.action for t in retry.turns] == plan[: retry.num_turns] and retry.won and retry.metadata["beat_base"]
    assert sorted(s.kind for s in group.samples) == ["guided_retry", "reflection"]
    rr.close()
