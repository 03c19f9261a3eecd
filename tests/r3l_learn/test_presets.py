"""The ``paper-*`` presets carry the R3L paper's settings (R3L.md §4: max turns ALFWorld 25, WebShop 15,
ScienceWorld 30, math 3 attempts; 512 new tokens per turn), and their turn budget is the one that applies: it is
within each env's own registered limit (ALFWorld 50, ScienceWorld 100), and a rollout stops there."""

import gymnasium as gym
import pytest

import r3l_envs  # noqa: F401  (registers the ids)
from r3l_learn.loop.presets import PRESETS
from r3l_learn.loop.train import config_from_dict

PAPER_TURNS = {"paper-alfworld": 25, "paper-webshop": 15, "paper-sciworld": 30}


@pytest.mark.parametrize("name", sorted(PAPER_TURNS))
def test_paper_presets_carry_the_papers_turn_budget_and_generation_length(name):
    config = config_from_dict(dict(PRESETS[name]))
    assert config.max_turns == PAPER_TURNS[name] and config.max_new_tokens == 512
    assert config.max_turns <= gym.spec(config.env).max_episode_steps  # the env's own limit never cuts first


def test_paper_math_preset_gives_three_attempts_and_512_tokens():
    config = config_from_dict(dict(PRESETS["paper-math"]))
    assert config.env_kwargs["max_attempts"] == 3 and config.max_turns is None and config.max_new_tokens == 512


def test_the_presets_turn_budget_stops_an_alfworld_episode_before_the_registered_limit():
    from r3l_learn.policies.scripted import ScriptedPolicy
    from wrappers import RolloutConfig, rollout

    config = config_from_dict(dict(PRESETS["paper-alfworld"]))
    env = gym.make(config.env, max_tasks=1)
    assert env.spec.max_episode_steps == 50
    traj = rollout(env, ScriptedPolicy(["<action>look</action>"]), config=RolloutConfig(max_turns=config.max_turns))
    assert traj.num_turns == 25 and traj.stop_reason == "max_turns"
