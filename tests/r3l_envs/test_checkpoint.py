"""Checkpoint/restore through the gym.make wrapper stack: exactness, isolation, typed errors."""

import dataclasses
import hashlib
import pickle
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest

import r3l_envs
from r3l_envs import Checkpoint, checkpoint, codec, restore
from r3l_envs.checkpoint import FORMAT_VERSION
from r3l_envs.errors import (
    CheckpointMismatchError,
    CheckpointVersionError,
    CorruptCheckpointError,
    ReplayDivergenceError,
    UnsupportedWrapperError,
)

IDS = ["r3ltest/Corridor-v0", "r3ltest/ReplayCorridor-v0"]


def with_state(ckpt, state):
    """``ckpt`` holding ``state`` instead, with a matching digest: a checkpoint as a forger would make it."""
    payload = codec.encode(state)
    return dataclasses.replace(ckpt, payload=payload, digest=hashlib.sha256(payload).hexdigest())


def play(env, actions):
    out = []
    for a in actions:
        out.append(env.step(a))
        if out[-1][2] or out[-1][3]:
            break
    return out


@pytest.mark.parametrize("env_id", IDS)
def test_restore_into_same_and_fresh_env_continues_identically(env_id):
    env = gym.make(env_id)
    env.reset(seed=3)
    play(env, ["right", "left", "right"])
    ckpt = checkpoint(env)
    rest = ["right", "wait", "right", "right", "left", "right", "right", "right"]
    expected = play(env, rest)

    play(env, ["left"] * 3)  # diverge
    restore(env, ckpt)
    assert play(env, rest) == expected

    fresh = gym.make(env_id)
    restore(fresh, Checkpoint.from_bytes(ckpt.to_bytes()))
    assert play(fresh, rest) == expected


def test_native_env_also_restores_by_verified_replay():
    env = gym.make("r3ltest/Corridor-v0")
    env.reset(seed=1)
    play(env, ["right", "right"])
    ckpt = checkpoint(env)
    expected = play(env, ["right"] * 5)
    env.reset(seed=9)
    restore(env, ckpt, via="replay")
    assert play(env, ["right"] * 5) == expected


def test_restore_at_last_step_before_time_limit_truncates_at_the_same_step():
    env = gym.make("r3ltest/Corridor-v0", max_episode_steps=4)
    env.reset(seed=0)
    play(env, ["wait"] * 3)
    ckpt = checkpoint(env)
    *_, truncated, _ = env.step("wait")
    assert truncated
    fresh = gym.make("r3ltest/Corridor-v0", max_episode_steps=4)
    fresh.reset(seed=5)
    restore(fresh, ckpt)
    *_, truncated, info = fresh.step("wait")
    assert truncated and info["step"] == 4


def test_checkpoint_pickles_and_records_its_origin():
    env = gym.make("r3ltest/Corridor-v0", length=7)
    _, info = env.reset(seed=2)
    env.step("right")
    ckpt = checkpoint(env)
    assert pickle.loads(pickle.dumps(ckpt)) == ckpt
    assert (ckpt.env_id, ckpt.env_kwargs, ckpt.task_id, ckpt.step) == (
        "r3ltest/Corridor-v0",
        {"length": 7},
        info["task_id"],
        1,
    )
    assert ckpt.library_version == r3l_envs.__version__ and len(ckpt.digest) == 64


def _state(env):
    return env.unwrapped._checkpoint_state(), env.unwrapped.np_random.bit_generator.state


@pytest.mark.parametrize(
    "make_other",
    [
        lambda: gym.make("r3ltest/ReplayCorridor-v0"),  # other env id
        lambda: gym.make("r3ltest/Corridor-v0", length=9),  # other kwargs
        lambda: gym.make("r3ltest/Corridor-v0", max_episode_steps=3),  # other wrapper stack
    ],
)
def test_foreign_checkpoint_raises_and_changes_nothing(make_other):
    env = gym.make("r3ltest/Corridor-v0")
    env.reset(seed=0)
    ckpt = checkpoint(env)
    other = make_other()
    other.reset(seed=4)
    other.step("right")
    before = _state(other)
    with pytest.raises(CheckpointMismatchError):
        restore(other, ckpt)
    assert _state(other) == before


def test_corrupted_truncated_and_newer_bytes_raise_typed_errors():
    env = gym.make("r3ltest/Corridor-v0")
    env.reset(seed=0)
    data = bytearray(checkpoint(env).to_bytes())
    flipped = bytearray(data)
    flipped[-10] ^= 0xFF
    for bad in (bytes(flipped), bytes(data[:-5]), b"not a checkpoint", b""):
        with pytest.raises(CorruptCheckpointError):
            Checkpoint.from_bytes(bad)
    newer = bytearray(data)
    newer[8:10] = (FORMAT_VERSION + 1).to_bytes(2, "big")
    with pytest.raises(CheckpointVersionError):
        Checkpoint.from_bytes(bytes(newer))


def test_checkpoint_from_another_library_version_or_task_raises():
    env = gym.make("r3ltest/Corridor-v0")
    env.reset(seed=0)
    ckpt = checkpoint(env)
    old = Checkpoint(**{**ckpt.__dict__, "library_version": "0.0.1"})
    with pytest.raises(CheckpointVersionError):
        restore(env, old)
    alien = Checkpoint(**{**ckpt.__dict__, "task_id": "corridor-train-999999"})
    with pytest.raises(CheckpointMismatchError, match="not in split"):
        restore(env, alien)


def test_replay_divergence_raises_and_rolls_back():
    env = gym.make("r3ltest/ReplayCorridor-v0")
    env.reset(seed=0)
    play(env, ["right", "right"])
    ckpt = checkpoint(env)
    state = codec.decode(ckpt.payload)
    state["env"]["episode"].digests[2] = "0" * 16  # what the engine showed at step 2 "was" something else
    diverging = with_state(ckpt, state)

    env.reset(seed=1)
    env.step("left")
    before = env.unwrapped._checkpoint_state()
    with pytest.raises(ReplayDivergenceError, match="diverged at step 2"):
        restore(env, diverging)
    assert env.unwrapped._checkpoint_state()["episode"] == before["episode"]
    env.step("right")  # and it keeps working


def test_unreproducible_engine_raises_and_demands_a_reset():
    env = gym.make("r3ltest/ReplayCorridor-v0")
    env.reset(seed=0)
    play(env, ["right", "right"])
    ckpt = checkpoint(env)
    env.unwrapped.length = 99  # the engine now answers differently: neither the restore nor a rollback can work
    with pytest.raises(ReplayDivergenceError, match="diverged at step 0"):
        restore(env, ckpt)
    with pytest.raises(gym.error.ResetNeeded):
        env.unwrapped.step("right")


def test_unknown_wrapper_is_refused_with_a_fix():
    class Stateful(gym.Wrapper):
        pass

    env = Stateful(gym.make("r3ltest/Corridor-v0"))
    env.reset(seed=0)
    with pytest.raises(UnsupportedWrapperError, match="register_wrapper_state"):
        checkpoint(env)

    class Counting(gym.Wrapper):
        def __init__(self, env):
            super().__init__(env)
            self.calls = 0

        def step(self, action):
            self.calls += 1
            return super().step(action)

        def checkpoint_state(self):
            return self.calls

        def restore_state(self, state):
            self.calls = state

    env = Counting(gym.make("r3ltest/Corridor-v0"))
    env.reset(seed=0)
    env.step("wait")
    ckpt = checkpoint(env)
    env.step("wait")
    restore(env, ckpt)
    assert env.calls == 1


def test_same_seed_same_episode_in_two_processes():
    code = textwrap.dedent(
        """
        import sys; sys.path.insert(0, "tests")
        import corridor, gymnasium as gym, r3l_envs
        corridor.register()
        env = gym.make("r3ltest/Corridor-v0")
        out = [env.reset(seed=11)[0]] + [env.step("right")[0] for _ in range(5)]
        print(repr(out))
        """
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True) for _ in range(2)]
    assert runs[0].stdout == runs[1].stdout and "cell" in runs[0].stdout


def test_alfworld_replay_divergence_raises_the_typed_error_and_rolls_back():
    """ALFWorld overrides _restore_state: the rollback after a diverging replay must reach it (it raised TypeError)."""
    pytest.importorskip("alfworld")
    env = gym.make("r3l/ALFWorld-v0", max_tasks=2)
    _, info = env.reset(seed=0)
    env.step(info["admissible_actions"][0])
    ckpt = checkpoint(env)
    state = codec.decode(ckpt.payload)
    state["env"]["episode"].digests[1] = "0" * 16
    diverging = with_state(ckpt, state)
    env.reset(seed=1)
    before = env.unwrapped._checkpoint_state()["episode"]
    with pytest.raises(ReplayDivergenceError, match="diverged at step 1"):
        restore(env, diverging, via="replay")
    assert env.unwrapped._checkpoint_state()["episode"] == before


def test_an_episode_record_written_under_its_former_name_still_decodes():
    from r3l_envs import codec
    from r3l_envs.core import EpisodeRecord

    record = EpisodeRecord(task_id="t", task="a task", observation="hello", info={"won": False})
    data = codec.encode(record)
    assert b"r3l_envs.core.EpisodeRecord" in data
    size = int.from_bytes(data[:4], "big")  # a 4-byte length of the JSON structure, the structure, the blob
    text = data[4 : 4 + size].replace(b"r3l_envs.core.EpisodeRecord", b"r3l_envs.core._Episode")
    former = len(text).to_bytes(4, "big") + text + data[4 + size :]
    assert codec.decode(former) == record == codec.decode(data)
