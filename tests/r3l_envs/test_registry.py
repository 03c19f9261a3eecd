"""Importing r3l_envs registers every id; unknown ids get gymnasium's error; every env passes check_env."""

import gymnasium as gym
import pytest

import r3l_envs


def test_every_id_is_namespaced_and_versioned():
    ids = r3l_envs.list_envs()
    assert "r3l/Countdown-v0" in ids
    assert all(i.startswith("r3l/") and i.rsplit("-v", 1)[1].isdigit() for i in ids)


def test_unknown_ids_get_gymnasiums_error_with_a_suggestion():
    with pytest.raises(gym.error.Error, match="Countdown"):
        gym.make("r3l/Countdwn-v0")
    with pytest.raises(gym.error.Error):
        gym.make("r3l/Countdown-v9")


def test_bad_action_battery_leaves_the_env_working():
    env = gym.make("r3ltest/Corridor-v0")
    _, info = env.reset(seed=0)
    for action in r3l_envs.checker.BAD_ACTIONS:
        obs, reward, *_, step_info = env.step(action)
        assert isinstance(obs, str) and reward == 0.0
        assert step_info["score"] == info["score"]  # nothing moved
    with pytest.raises(TypeError, match="actions are str"):
        env.step(None)
