"""Checkpoints go through Gymnasium's own wrappers: each one's state is saved and restored exactly, in the same
instance and in a fresh ``gym.make``, on the corridor and (``RecordEpisodeStatistics``) on every registered id."""

import time
from collections import deque

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import wrappers as gw
from test_all_envs import OFFLINE_KWARGS, _action, _params

import r3l_envs
from r3l_envs import Checkpoint, checkpoint, restore
from r3l_envs.errors import CorruptCheckpointError, UnsupportedWrapperError

ACTIONS = ["right", "wait", "right", "left", "right", "right", "right", "wait", "right", "right"]

# name -> wrapper factory over an env from gym.make; every one keeps a state that changes as the episode goes.
WRAPPERS = {
    "RecordEpisodeStatistics": lambda env: gw.RecordEpisodeStatistics(env, buffer_length=3),
    "Autoreset": gw.Autoreset,
    "TimeAwareObservation": lambda env: gw.TimeAwareObservation(gym.wrappers.TimeLimit(env, 50), flatten=False),
    "NormalizeReward": gw.NormalizeReward,
    "StickyAction": lambda env: gw.StickyAction(env, repeat_action_probability=0.5, repeat_action_duration=(1, 3)),
    "DelayObservation": lambda env: gw.DelayObservation(env, delay=2),
    "FrameStackObservation": lambda env: gw.FrameStackObservation(env, stack_size=3),
    "RenderCollection": gw.RenderCollection,
    "TransformObservation": lambda env: gw.TransformObservation(env, str.upper, env.observation_space),
    "TransformAction": lambda env: gw.TransformAction(env, str.lower, env.action_space),
    "TransformReward": lambda env: gw.TransformReward(env, lambda r: 2 * r),
    "ClipReward": lambda env: gw.ClipReward(env, 0.0, 0.5),
    "RepeatAction": lambda env: gw.RepeatAction(env, 2),
}


def make(name):
    return WRAPPERS[name](gym.make("r3ltest/Corridor-v0", render_mode="ansi"))


def comparable(step):
    """A step (or reset) result with the wall-clock episode time, which no restore can replay, taken out."""
    *head, info = step
    info = dict(info)
    if "episode" in info:
        info["episode"] = {k: v for k, v in info["episode"].items() if k != "t"}
    return _plain((*head, info))


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def play(env, actions):
    """The steps of ``actions``, resetting (seeded) where an episode ends, as a training loop would."""
    out = []
    for action in actions:
        step = env.step(action)
        out.append(comparable(step))
        if step[2] or step[3]:
            out.append(comparable(env.reset(seed=len(out))))
    return out


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_restore_through_a_gymnasium_wrapper_is_exact(name):
    env = make(name)
    env.reset(seed=0)
    play(env, ACTIONS[:4])
    ckpt = checkpoint(env)
    ckpt = Checkpoint.from_bytes(ckpt.to_bytes())
    expected = play(env, ACTIONS)
    restore(env, ckpt)  # the same instance, after it played on
    assert play(env, ACTIONS) == expected
    fresh = make(name)  # a fresh gym.make of the same stack
    restore(fresh, ckpt)
    assert play(fresh, ACTIONS) == expected


def test_record_episode_statistics_state_travels():
    """Returns, lengths, the episode count and the queues are restored; the running time goes on from the
    elapsed time saved, not from the other process's clock."""
    env = make("RecordEpisodeStatistics")
    env.reset(seed=0)
    play(env, ACTIONS * 3)
    ckpt = checkpoint(env)
    fresh = make("RecordEpisodeStatistics")
    restore(fresh, ckpt)
    for name in ("episode_count", "episode_returns", "episode_lengths"):
        assert getattr(fresh, name) == getattr(env, name)
    for name in ("return_queue", "length_queue", "time_queue"):
        assert getattr(fresh, name) == getattr(env, name) and getattr(fresh, name).maxlen == 3
    # the episode's clock goes on from the elapsed time saved: not earlier than the original's start (no time
    # invented), not after now (not restarted at the restore)
    assert env.episode_count > 0 and env.episode_start_time <= fresh.episode_start_time <= time.perf_counter()


@pytest.mark.parametrize("env_id", _params(extra_java_marks=[pytest.mark.slow]))
def test_record_episode_statistics_on_every_id(env_id):
    def wrapped():
        return gw.RecordEpisodeStatistics(gym.make(env_id, **OFFLINE_KWARGS[env_id]))

    env = wrapped()
    _, info = env.reset(seed=3)
    rng = np.random.default_rng(0)
    step = env.step(_action(info, rng))
    ckpt = Checkpoint.from_bytes(checkpoint(env).to_bytes())
    actions, expected, info = [], [], step[4]
    for _ in range(3):
        if expected and (expected[-1][2] or expected[-1][3]):
            break
        actions.append(_action(info, rng))
        step = env.step(actions[-1])
        expected.append(comparable(step))
        info = step[4]
    counts = (env.episode_returns, env.episode_lengths, env.episode_count)
    for target in (env, wrapped()):
        restore(target, ckpt)
        assert [comparable(target.step(a)) for a in actions] == expected
        assert (target.episode_returns, target.episode_lengths, target.episode_count) == counts
        target.close()


def test_a_forged_wrapper_state_is_refused_and_changes_nothing():
    env = make("RecordEpisodeStatistics")
    env.reset(seed=0)
    play(env, ACTIONS[:2])
    state = r3l_envs.codec.decode(checkpoint(env).payload)
    before = (env.episode_lengths, list(env.return_queue))
    env_state_before = env.unwrapped._checkpoint_state()
    for forged in ({"episode_count": 1}, {**state["wrappers"][0], "return_queue": [0.0] * 4}):
        state["wrappers"][0] = forged
        ckpt = _with_state(checkpoint(env), state)
        with pytest.raises(CorruptCheckpointError):
            restore(env, ckpt)
        assert (env.episode_lengths, list(env.return_queue)) == before
        assert env.unwrapped._checkpoint_state()["episode"] == env_state_before["episode"]
    assert isinstance(env.return_queue, deque)


def _with_state(ckpt, state):
    import dataclasses
    import hashlib

    payload = r3l_envs.codec.encode(state)
    return dataclasses.replace(ckpt, payload=payload, digest=hashlib.sha256(payload).hexdigest())


def test_a_subclass_of_a_stateless_transform_is_not_taken_for_stateless():
    class Counting(gw.TransformReward):
        def __init__(self, env):
            super().__init__(env, lambda r: r)
            self.calls = 0

    env = Counting(gym.make("r3ltest/Corridor-v0"))
    env.reset(seed=0)
    with pytest.raises(UnsupportedWrapperError, match="Counting"):
        checkpoint(env)
