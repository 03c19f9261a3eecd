"""Envs pickle and deep-copy by one rule: rebuilt from their constructor arguments, restored from a checkpoint.

These use the test corridor (its moves draw from the env's RNG, so a copy must carry the RNG exactly); every
registered env is round-tripped in ``test_all_envs.py``.
"""

import copy
import pickle

import gymnasium as gym
import pytest
from corridor import Corridor

import r3l_envs
from r3l_envs.errors import CheckpointVersionError, EnvPicklingError

COPIES = {"pickle": lambda env: pickle.loads(pickle.dumps(env)), "deepcopy": copy.deepcopy}
ACTIONS = ["right", "wait", "left", "left", "right", "wait"] * 2  # never reaches the end: the time limit does


def play(env, actions):
    out = []
    for action in actions:
        out.append(env.step(action))
        if out[-1][2] or out[-1][3]:
            break
    return out


@pytest.mark.parametrize("how", sorted(COPIES))
def test_a_copy_continues_exactly_and_independently(how):
    env = gym.make("r3ltest/Corridor-v0")  # TimeLimit 12: the copy must truncate at the same step
    before = COPIES[how](env)
    assert before.reset(seed=7) == env.reset(seed=7)
    play(env, ACTIONS[:3]), play(before, ACTIONS[:3])
    mid = COPIES[how](env)
    assert mid is not env and mid.unwrapped is not env.unwrapped
    expected = play(env, ACTIONS[3:])
    assert expected[-1][3], "the episode should end by the time limit, so truncation is compared too"
    assert play(mid, ACTIONS[3:]) == expected
    assert play(before, ACTIONS[3:]) == expected
    assert mid.spec == env.spec and r3l_envs.checkpoint(mid).env_id == "r3ltest/Corridor-v0"


def test_a_copy_before_reset_keeps_the_constructor_arguments_and_rng():
    env = Corridor(length=9)
    _ = env.np_random  # seeded lazily: the copy must draw the same numbers
    clone = pickle.loads(pickle.dumps(env))
    assert clone.length == 9 and clone.spec is None
    assert clone.np_random.random() == env.np_random.random()


def test_a_closed_env_copies_as_closed():
    env = gym.make("r3ltest/Corridor-v0")
    env.reset(seed=0)
    env.close()
    with pytest.raises(r3l_envs.errors.EnvClosedError):
        copy.deepcopy(env).reset(seed=0)


def test_unpicklable_constructor_arguments_raise_a_typed_error():
    class Gusty(Corridor):
        def __init__(self, gusts):
            super().__init__()
            self.gusts = gusts

    env = Gusty(gusts=(g for g in range(3)))
    for how in COPIES.values():
        with pytest.raises(EnvPicklingError, match=r"r3l_envs\.checkpoint"):
            how(env)


def test_a_pickle_from_another_library_version_is_refused():
    env = gym.make("r3ltest/Corridor-v0").unwrapped
    env.reset(seed=0)
    rebuild, args = env.__reduce__()
    cls, init_args, kwargs, spec, _, state = args
    with pytest.raises(CheckpointVersionError, match=r"pickled by r3l 0\.0\.1"):
        rebuild(cls, init_args, kwargs, spec, "0.0.1", state)
