"""Adding an env is one env module plus one registration row: the toy lamp env (``toy_lamp_env.py``) gets its
prompt family, an oracle plan and oracle-driven retries from what it declares, with no edit anywhere else."""

import re

import gymnasium as gym
import pytest

import r3l_envs
from r3l_envs.core import TextEnv
from wrappers import RolloutConfig
from wrappers.prompts import FAMILIES, template_for
from wrappers.retry.oracle import OracleReflector, expert_plan
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig

# The one registration row (the env module is toy_lamp_env.py, importable from this folder).
if "r3ltest/Lamp-v0" not in gym.registry:
    gym.register(id="r3ltest/Lamp-v0", entry_point="toy_lamp_env:LampEnv", max_episode_steps=6)

TASK = "lamp-train-000000"  # its switch sequence: press red, press green


def test_the_declaration_is_read_from_the_registered_id_without_making_the_env():
    info = r3l_envs.env_info("r3ltest/Lamp-v0")
    assert info == r3l_envs.EnvInfo(prompt_family="textgame", is_math=False, has_expert_plan=True)
    assert template_for("r3ltest/Lamp-v0") is FAMILIES["textgame"]


def test_a_made_env_gives_the_same_declaration_and_its_expert_plan_wins():
    env = gym.make("r3ltest/Lamp-v0")
    assert template_for(env) is FAMILIES["textgame"] and r3l_envs.env_info(env).has_expert_plan
    plan = expert_plan(env, TASK)
    assert plan == ["press red", "press green"]
    env.reset(options={"task_id": TASK})
    results = [env.step(action) for action in plan]
    assert results[-1][2] and results[-1][4]["won"]


def test_an_env_without_an_expert_gets_no_plan_and_an_oracle_says_so():
    env = gym.make("r3ltest/Corridor-v0")
    assert r3l_envs.env_info(env) == r3l_envs.EnvInfo() and expert_plan(env, "corridor-train-000000") is None
    assert template_for(env) is FAMILIES["generic"]


class _Undeclared(TextEnv):
    prompt_family = "no-such-family"


def test_an_unknown_declared_family_is_a_clear_error():
    gym.register(id="r3ltest/Undeclared-v0", entry_point=_Undeclared)
    try:
        with pytest.raises(ValueError, match=r"no-such-family.*FAMILIES"):
            template_for("r3ltest/Undeclared-v0")
    finally:
        del gym.registry["r3ltest/Undeclared-v0"]


def presser(prompt_text):
    """Presses red forever (right once, then wrong), unless the oracle's guidance names the buttons to press:
    then presses them in order, one per turn since the guidance."""
    if "From here, do:" not in prompt_text:
        return "<action>press red</action>"
    guided = prompt_text.rsplit("From here, do:", 1)
    named = re.findall(r"'([^']+)'", guided[1].split("\n", 1)[0])
    done = guided[1].count("<|im_start|>assistant") - 1  # the generation prompt opens one more
    return f"<action>{named[min(done, len(named) - 1)]}</action>"


def test_the_oracle_retries_the_toy_env_from_its_first_deviation():
    pytest.importorskip("transformers")
    from r3l_learn.policies.scripted import ScriptedPolicy

    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=3))
    rr = ReflectRetry("r3ltest/Lamp-v0", ScriptedPolicy(presser), OracleReflector(reveal_steps=2), config)
    (group,) = rr.collect([TASK], seed=0)
    rr.close()
    base, retry = group.trajectories
    assert [t.action for t in base.turns] == ["press red"] * 3 and not base.won
    refl = base.metadata["reflection"]
    assert refl["pivot"] == 1 and refl["pivot_rule"] == "first_deviation" and "'press green'" in refl["suggestion"]
    assert retry.pivot == 1 and retry.won and retry.metadata["pivot_rule"] == "first_deviation"
    assert [t.action for t in retry.turns] == ["press red", "press green"]
    assert base.metadata["template"] == "textgame"
