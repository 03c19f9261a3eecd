"""What each env declares (``r3l_envs.env_info``): read from the registered id without making the env, the same
from a made env, and true to the env (a math env's expert action is its reference answer, and it wins)."""

import gymnasium as gym
import pytest

import r3l_envs
from r3l_envs import EnvInfo, env_info
from r3l_envs.math.envs import CountdownEnv

FAMILIES = {
    "r3l/ALFWorld-v0": "textgame",
    "r3l/TextWorld-v0": "textgame",
    "r3l/ScienceWorld-v0": "textgame",
    "r3l/WebShop-v0": "webshop",
    **dict.fromkeys(
        ["r3l/Countdown-v0", "r3l/GSMSymbolic-v0", "r3l/CHAMP-v0", "r3l/GSM8K-v0", "r3l/MATH500-v0"], "math"
    ),
    "r3l/OlympiadBench-v0": "math",
    "r3l/ReasoningGym-v0": "math",
}


def test_every_registered_env_declares_its_family_math_and_expert():
    assert sorted(FAMILIES) == r3l_envs.list_envs()
    for env_id, family in FAMILIES.items():
        math = family == "math"
        expected = EnvInfo(prompt_family=family, is_math=math, has_expert_plan=True, max_turns=3 if math else None)
        assert env_info(env_id) == expected


def test_the_declaration_needs_no_env_instance():
    with pytest.raises(Exception, match="GSM8K"):  # no data here: making the env fails ...
        gym.make("r3l/GSM8K-v0", data_path="/nonexistent")
    assert env_info("r3l/GSM8K-v0").is_math  # ... reading its declaration does not


def test_a_made_env_declares_what_its_id_does():
    env = gym.make("r3l/Countdown-v0")
    assert env_info(env) == env_info("r3l/Countdown-v0")


def test_unknown_ids_raise_gymnasiums_error_and_foreign_envs_declare_nothing():
    with pytest.raises(gym.error.Error, match="Countdown"):
        env_info("r3l/Countdwn-v0")
    assert env_info(gym.make("CartPole-v1")) == EnvInfo()


@pytest.mark.parametrize("env_id", ["r3l/Countdown-v0", "r3l/GSMSymbolic-v0"])
def test_a_math_envs_expert_action_is_its_reference_answer_and_wins(env_id):
    env = gym.make(env_id)
    task = env.unwrapped.task_ids[3]
    (answer,) = env.unwrapped.expert_actions(task)
    env.reset(options={"task_id": task})
    assert answer == env.unwrapped.reference_answer()
    _, reward, terminated, _, info = env.step(answer)
    assert reward == 1.0 and terminated and info["won"]


def test_the_turn_limit_is_declared_by_id_with_kwargs_and_by_a_made_env():
    assert env_info("r3l/Countdown-v0").max_turns == 3  # max_attempts' default
    assert env_info("r3l/Countdown-v0", {"max_attempts": 5}).max_turns == 5  # the kwargs it would be made with
    assert env_info(gym.make("r3l/Countdown-v0", max_attempts=2)).max_turns == 2
    assert env_info(CountdownEnv(max_attempts=4)).max_turns == 4  # made directly: no spec to read
    assert env_info("r3l/TextWorld-v0").max_turns is None  # only a TimeLimit (or the caller) stops a game


@pytest.mark.parametrize("attempts", [1, 2])
def test_a_math_episode_ends_at_its_declared_turn_limit(attempts):
    env = gym.make("r3l/Countdown-v0", max_attempts=attempts)
    limit = env_info(env).max_turns
    env.reset(seed=0)
    ended = [env.step("no answer here")[2] for _ in range(limit)]
    assert ended == [False] * (limit - 1) + [True]
