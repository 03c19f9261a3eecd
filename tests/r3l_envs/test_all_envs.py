"""Every registered id passes check_env, pickles and deep-copies exactly, and the same seed plays the same episode
in two processes."""

import copy
import json
import pickle
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import r3l_envs

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# id -> make() kwargs that work offline on any machine. Real-data envs read small fixture files written in the
# official schemas. Adding an env to the registry without adding it here fails test_every_id_is_checked.
OFFLINE_KWARGS: dict[str, dict] = {
    "r3l/Countdown-v0": {},
    "r3l/GSMSymbolic-v0": {"num_tasks": 50},
    "r3l/ReasoningGym-v0": {"num_tasks": 50},
    "r3l/CHAMP-v0": {},
    "r3l/GSM8K-v0": {"data_path": str(FIXTURES / "math" / "gsm8k")},
    "r3l/MATH500-v0": {"data_path": str(FIXTURES / "math" / "math500")},
    "r3l/OlympiadBench-v0": {"data_path": str(FIXTURES / "math" / "olympiadbench")},
    "r3l/WebShop-v0": {"num_products": 300},
    "r3l/TextWorld-v0": {"max_tasks": 2},
    "r3l/ALFWorld-v0": {"max_tasks": 2},
    "r3l/ScienceWorld-v0": {"tasks": ["find-non-living-thing"]},
}
MARKS = {"r3l/ScienceWorld-v0": [pytest.mark.java]}


def _params(extra_java_marks=()):
    return [
        pytest.param(i, marks=[*MARKS.get(i, []), *(extra_java_marks if i in MARKS else ())])
        for i in sorted(OFFLINE_KWARGS)
    ]


def test_every_id_is_checked():
    assert set(r3l_envs.list_envs()) == set(OFFLINE_KWARGS), "add the new id to OFFLINE_KWARGS"


@pytest.mark.parametrize("env_id", _params())
def test_check_env(env_id):
    with gym.make(env_id, **OFFLINE_KWARGS[env_id]) as env:
        r3l_envs.check_env(env)


def _action(info, rng):
    pool = info["admissible_actions"] or ["The answer is 42.", "\\boxed{7}", "look around"]
    return pool[int(rng.integers(len(pool)))]


# Each ScienceWorld copy starts a JVM (~1 s, ~200 MB): that case is slow too.
@pytest.mark.parametrize("env_id", _params(extra_java_marks=[pytest.mark.slow]))
def test_pickle_and_deepcopy_before_reset_and_mid_episode(env_id):
    """One rule for every env: a copy is rebuilt from the constructor arguments and restored from a checkpoint,
    so it plays on exactly like the original (and separately from it), before reset and mid-episode."""
    env = gym.make(env_id, **OFFLINE_KWARGS[env_id])
    before = pickle.loads(pickle.dumps(env))
    obs, info = env.reset(seed=1)
    assert before.reset(seed=1) == (obs, info)
    rng = np.random.default_rng(0)
    for _ in range(2):
        action = _action(info, rng)
        step = env.step(action)
        assert before.step(action) == step
        info = step[4]
    before.close()
    copies = [pickle.loads(pickle.dumps(env)), copy.deepcopy(env)]
    for _ in range(4):
        action = _action(info, rng)
        step = env.step(action)
        assert [c.step(action) for c in copies] == [step, step]
        info = step[4]
        if step[2] or step[3]:
            break
    for e in (env, *copies):
        e.close()


_PLAY = """
import json, sys, gymnasium as gym, numpy as np, r3l_envs
env_id, kwargs = sys.argv[1], json.loads(sys.argv[2])
env = gym.make(env_id, **kwargs)
rng = np.random.default_rng(0)
obs, info = env.reset(seed=123)
out = [obs, info]
for _ in range(4):
    pool = info["admissible_actions"] or ["The answer is 42.", "\\\\boxed{7}", "look"]
    obs, reward, terminated, truncated, info = env.step(pool[int(rng.integers(len(pool)))])
    out.append([obs, reward, terminated, truncated, info])
    if terminated or truncated:
        break
print(json.dumps(out, default=str))
"""


@pytest.mark.slow
@pytest.mark.parametrize("env_id", _params())
def test_same_seed_same_episode_in_two_processes(env_id):
    args = [sys.executable, "-c", _PLAY, env_id, json.dumps(OFFLINE_KWARGS[env_id])]
    first, second = (subprocess.run(args, capture_output=True, text=True, check=True).stdout for _ in range(2))
    assert first == second and len(json.loads(first)) > 2
