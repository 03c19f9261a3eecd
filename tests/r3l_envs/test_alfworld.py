"""r3l/ALFWorld-v0 on the real engine, with games from the offline generator (built once into the user cache)."""

from __future__ import annotations

import json
import random
import shutil

import gymnasium as gym
import pytest

import r3l_envs
from r3l_envs.errors import DataNotFoundError

pytest.importorskip("alfworld")

ENV_ID = "r3l/ALFWorld-v0"


def make(**kwargs) -> gym.Env:
    kwargs.setdefault("max_tasks", 6)  # one task of each of the six task types
    return gym.make(ENV_ID, **kwargs)


@pytest.fixture(scope="session")
def env():
    env = make()
    yield env
    env.close()


@pytest.mark.slow
def test_check_env_passes():
    small = make(max_tasks=2)  # the two smallest households: check_env plays many short episodes
    r3l_envs.check_env(small)
    small.close()


@pytest.mark.slow
@pytest.mark.parametrize("index", range(6))
def test_expert_wins_and_checkpoint_is_exact_for_every_task_type(env, index):
    from r3l_envs.alfworld import TASK_TYPES

    task_id = env.unwrapped.task_ids[index]
    obs, info = env.reset(options={"task_id": task_id})
    assert info["source"] == "generated" and info["task"] in obs
    assert "policy_commands" not in info and "walkthrough" not in info
    plan = env.unwrapped.expert_plan()
    k = len(plan) // 2
    for action in plan[:k]:
        env.step(action)
    ckpt = r3l_envs.checkpoint(env)
    original = [env.step(a) for a in plan[k:]]
    assert original[-1][2] and original[-1][4]["won"] and sum(s[1] for s in original) == 1.0
    rng = random.Random(index)
    env.unwrapped.validate_task_id(task_id)
    r3l_envs.restore(env, ckpt)
    for _ in range(5):  # diverge
        *_, info = env.step(rng.choice(env.unwrapped._episode.info["admissible_actions"]))
    r3l_envs.restore(env, ckpt)  # native: same episode
    assert [env.step(a) for a in plan[k:]] == original
    env.reset(options={"task_id": task_id})
    r3l_envs.restore(env, ckpt)  # after a reset the planner ids are gone: verified replay
    assert [env.step(a) for a in plan[k:]] == original
    fresh = make()
    r3l_envs.restore(fresh, r3l_envs.Checkpoint.from_bytes(ckpt.to_bytes()))
    assert [fresh.step(a) for a in plan[k:]] == original
    fresh.close()
    assert json.loads((env.unwrapped._path.parent / "traj_data.json").read_text())["task_type"] == TASK_TYPES[index]


def test_garbage_actions_get_nothing_happens(env):
    _, info0 = env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    for action in ["", "x" * 100_000, "\x00\x1b[31m", "🙂 ☃", "fly to the moon"]:
        obs, reward, terminated, _, info = env.step(action)
        assert obs == "Nothing happens." and reward == 0.0 and not terminated
    assert info["admissible_actions"] == info0["admissible_actions"]


def test_two_instances_in_one_process_do_not_interfere(env):
    other = make()
    _, a_info = env.reset(options={"task_id": env.unwrapped.task_ids[2]})
    _, b_info = other.reset(options={"task_id": other.unwrapped.task_ids[3]})
    for i in range(6):
        a = env.step(a_info["admissible_actions"][i % len(a_info["admissible_actions"])])
        b = other.step(b_info["admissible_actions"][i % len(b_info["admissible_actions"])])
        a_info, b_info = a[4], b[4]
    solo = make()
    _, s_info = solo.reset(options={"task_id": env.unwrapped.task_ids[2]})
    for i in range(6):
        s = solo.step(s_info["admissible_actions"][i % len(s_info["admissible_actions"])])
        s_info = s[4]
    assert s == a
    other.close()
    solo.close()


def test_official_loader_reads_the_download_layout(env, tmp_path):
    """A fixture in alfworld-download's layout (json_2.1.1/<split>/<task>/<trial>/) made from generated games."""
    env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    trial = env.unwrapped._path.parent
    for split in ("train", "valid_seen", "valid_unseen"):
        target = tmp_path / "json_2.1.1" / split / "pick_and_place_simple-Thing-None-Place-1" / "trial_T0"
        shutil.copytree(trial, target)
    unsolvable = tmp_path / "json_2.1.1" / "train" / "pick_and_place_simple-X-None-Y-2" / "trial_T1"
    shutil.copytree(trial, unsolvable)
    game = json.loads((unsolvable / "game.tw-pddl").read_text())
    (unsolvable / "game.tw-pddl").write_text(json.dumps({**game, "solvable": False}))

    official = gym.make(ENV_ID, split="valid_seen", data_path=str(tmp_path))
    assert list(official.unwrapped.task_ids) == ["pick_and_place_simple-Thing-None-Place-1/trial_T0"]
    obs, info = official.reset(seed=0)
    assert info["source"] == "official" and info["task"] in obs
    train = gym.make(ENV_ID, split="train", data_path=str(tmp_path))
    assert len(train.unwrapped.task_ids) == 1  # the unsolvable game is skipped, as ALFWorld does
    with pytest.raises(DataNotFoundError, match="alfworld-download"):
        gym.make(ENV_ID, split="train", data_path=str(tmp_path / "nowhere"))
