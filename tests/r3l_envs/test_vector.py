"""Gymnasium vector envs over every registered id: async with and without shared memory plays like single envs.

Shared memory is ``AsyncVectorEnv``'s default, and for a ``Text`` space gymnasium's own buffer returned
1,048,576 ``"0"`` characters at every step while rewards looked normal (:mod:`r3l_envs.text_space`).
"""

import copy
import pickle

import gymnasium as gym
import pytest
from test_all_envs import OFFLINE_KWARGS, _params

import r3l_envs
from r3l_envs.core import TextSpace
from r3l_envs.text_space import SharedTexts

SEEDS = [3, 4]
FALLBACK_ACTIONS = ["The answer is 42.", "look around"]


def _kwargs(env_id):
    """The offline kwargs; math envs grade in a subprocess with a time limit, which async workers on a loaded
    machine can exceed (a grading timeout is another observation), so theirs is generous here."""
    extra = {"grading_timeout": 300.0} if r3l_envs.env_info(env_id).is_math else {}
    return {**OFFLINE_KWARGS[env_id], **extra}


def _act(info, step):
    pool = info["admissible_actions"] or FALLBACK_ACTIONS
    return pool[step % len(pool)]


def _single_env_runs(env_id):
    """What two separate envs show for two steps (stopping at the first end of an episode)."""
    runs = []
    for seed in SEEDS:
        with gym.make(env_id, **_kwargs(env_id)) as env:
            obs, info = env.reset(seed=seed)
            steps, actions = [], []
            for i in range(2):
                actions.append(_act(info, i))
                obs_i, reward, terminated, truncated, info = env.step(actions[-1])
                steps.append((obs_i, reward, terminated, truncated))
                if terminated or truncated:
                    break
            runs.append((obs, actions, steps))
    return runs


# Each ScienceWorld worker starts a JVM: that case is slow too.
@pytest.mark.parametrize("env_id", _params(extra_java_marks=[pytest.mark.slow]))
def test_async_vector_env_shows_the_text_with_and_without_shared_memory(env_id):
    runs = _single_env_runs(env_id)
    n_steps = min(len(steps) for _, _, steps in runs)
    for shared_memory in (True, False):
        envs = gym.make_vec(
            env_id,
            num_envs=len(SEEDS),
            vectorization_mode="async",
            vector_kwargs={"shared_memory": shared_memory},
            **_kwargs(env_id),
        )
        try:
            obs, _ = envs.reset(seed=SEEDS)
            assert tuple(obs) == tuple(first for first, _, _ in runs), f"reset, shared_memory={shared_memory}"
            for i in range(n_steps):
                obs, rewards, terminated, truncated, _ = envs.step(tuple(actions[i] for _, actions, _ in runs))
                got = list(zip(obs, rewards.tolist(), terminated.tolist(), truncated.tolist()))
                assert got == [steps[i] for _, _, steps in runs], f"step {i}, shared_memory={shared_memory}"
        finally:
            envs.close()


def test_shared_memory_carries_any_text_up_to_the_limit_and_reads_live():
    """Unicode, lone surrogates, control characters and a full-length text survive the buffer; the view reads
    what the workers wrote last, and copies of it are plain tuples (what ``copy=True`` hands out)."""
    from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

    space = TextSpace(max_length=8)
    memory = create_shared_memory(space, n=3)
    view = read_from_shared_memory(space, memory, n=3)
    assert tuple(view) == ("", "", "")
    texts = ["héllo ☃", "\ud800\x00\n", "𝔘" * 8]
    for index, text in enumerate(texts):
        write_to_shared_memory(space, index, text, memory)
    assert tuple(view) == tuple(texts) and view[1:] == tuple(texts[1:]) and len(view) == 3
    assert copy.deepcopy(view) == tuple(texts) and type(copy.deepcopy(view)) is tuple
    assert pickle.loads(pickle.dumps(view)) == tuple(texts)
    write_to_shared_memory(space, 2, "", memory)
    assert view[2] == "" and view == ("héllo ☃", "\ud800\x00\n", "")
    assert isinstance(view, SharedTexts)
    with pytest.raises(ValueError, match="longer than the space admits"):
        write_to_shared_memory(space, 0, "x" * 9, memory)
    with pytest.raises(TypeError, match="str"):
        write_to_shared_memory(space, 0, b"bytes", memory)
