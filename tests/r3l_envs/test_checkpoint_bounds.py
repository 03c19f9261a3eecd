"""Checkpoint bytes decode within bounds: small bytes never become a large state, and a keyed checkpoint is
refused unless its HMAC verifies under the reader's key (before anything is decoded)."""

import dataclasses
import hashlib
import json
import struct
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest

from r3l_envs import Checkpoint, checkpoint, codec, restore
from r3l_envs.checkpoint import KEY_VARIABLE
from r3l_envs.errors import CheckpointAuthError, CorruptCheckpointError

KEY = b"0123456789abcdef-a-key-of-32-byt"


def corridor_checkpoint():
    env = gym.make("r3ltest/Corridor-v0")
    env.reset(seed=0)
    env.step("right")
    return env, checkpoint(env)


def body(structure, blob=b""):
    text = json.dumps(structure).encode()
    return struct.pack(">I", len(text)) + text + blob


# ---------------------------------------------------------------------- bounded decoding
def test_repeated_references_to_the_same_bytes_are_refused():
    """Each reference to the same blob range would be a fresh copy: 1 MB of blob and 2,000 references decoded to
    2 GB before. The encoder writes every range once, so the decoder hands each byte out once."""
    blob = bytes(2**20)
    bomb = body(["l", *[["b", 0, len(blob)]] * 2000], blob)
    with pytest.raises(CorruptCheckpointError, match="more than once"):
        codec.decode(bomb)
    overlapping = body(["l", ["b", 0, 6], ["b", 4, 10]], bytes(10))
    with pytest.raises(CorruptCheckpointError, match="more than once"):
        codec.decode(overlapping)
    with pytest.raises(CorruptCheckpointError, match="refers to 4 of its 10"):
        codec.decode(body(["l", ["b", 0, 4]], bytes(10)))  # bytes nobody refers to: not the encoder's
    assert codec.decode(body(["l", ["b", 0, 4], ["b", 4, 10]], bytes(10))) == [bytes(4), bytes(6)]


def test_a_bomb_in_a_checkpoint_stays_in_bounded_memory():
    """Peak memory (the child's RSS high-water mark) grows by less than the input's size a few times over."""
    script = textwrap.dedent(
        """
        import json, resource, struct, sys
        from r3l_envs import codec
        from r3l_envs.errors import CorruptCheckpointError
        blob = bytes(2**20)
        text = json.dumps(["l", *[["b", 0, len(blob)]] * 1000]).encode()
        data = struct.pack(">I", len(text)) + text + blob
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            codec.decode(data)
        except CorruptCheckpointError:
            pass
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    growth = int(out.stdout.split()[-1])
    assert growth < 64 * 2**20, f"decoding a 1 MB bomb grew peak memory by {growth / 2**20:.0f} MiB"


def test_input_over_the_ceiling_is_refused_unread(monkeypatch):
    _, ckpt = corridor_checkpoint()
    data = ckpt.to_bytes()
    with pytest.raises(CorruptCheckpointError, match="over the ceiling"):
        Checkpoint.from_bytes(data, max_bytes=len(data) - 1)
    assert Checkpoint.from_bytes(data, max_bytes=len(data)) == ckpt
    monkeypatch.setenv(codec.MAX_BYTES_VARIABLE, str(len(data) - 1))
    with pytest.raises(CorruptCheckpointError, match=codec.MAX_BYTES_VARIABLE):
        Checkpoint.from_bytes(data)
    with pytest.raises(CorruptCheckpointError, match="over the ceiling"):
        codec.decode(ckpt.payload, max_bytes=10)
    monkeypatch.setenv(codec.MAX_BYTES_VARIABLE, "lots")
    with pytest.raises(ValueError, match="not a positive number"):
        Checkpoint.from_bytes(data)


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deep_nesting_is_a_typed_error(depth):
    text = ("[" * depth + "]" * depth).encode()
    with pytest.raises(CorruptCheckpointError):
        codec.decode(struct.pack(">I", len(text)) + text)


# ---------------------------------------------------------------------- keyed checkpoints
def test_a_keyed_checkpoint_round_trips_and_restores():
    env, ckpt = corridor_checkpoint()
    data = ckpt.to_bytes(key=KEY)
    assert data[:8] == b"R3LCKPTK" and data != ckpt.to_bytes()
    assert Checkpoint.from_bytes(data, key=KEY) == ckpt
    assert Checkpoint.from_bytes(ckpt.to_bytes(key=KEY.decode()), key=KEY) == ckpt  # str keys are their UTF-8
    expected = [env.step(a) for a in ["right", "wait"]]
    fresh = gym.make("r3ltest/Corridor-v0")
    restore(fresh, Checkpoint.from_bytes(data, key=KEY))
    assert [fresh.step(a) for a in ["right", "wait"]] == expected


def test_a_keyed_reader_refuses_a_wrong_or_missing_hmac():
    _, ckpt = corridor_checkpoint()
    with pytest.raises(CheckpointAuthError, match="does not verify"):
        Checkpoint.from_bytes(ckpt.to_bytes(key=b"another key, also 32 bytes long!"), key=KEY)
    with pytest.raises(CheckpointAuthError, match="no HMAC"):
        Checkpoint.from_bytes(ckpt.to_bytes(), key=KEY)
    with pytest.raises(CheckpointAuthError, match="pass the key"):
        Checkpoint.from_bytes(ckpt.to_bytes(key=KEY))
    data = bytearray(ckpt.to_bytes(key=KEY))
    data[-1] ^= 1
    with pytest.raises(CheckpointAuthError, match="does not verify"):
        Checkpoint.from_bytes(bytes(data), key=KEY)


def test_a_forger_without_the_key_cannot_get_a_body_read():
    """Re-signing works against the unkeyed digest (anyone can compute a sha256); it does not against the HMAC,
    which is checked before the body is decoded: a keyed reader never parses a stranger's body."""
    _, ckpt = corridor_checkpoint()
    forged = dataclasses.replace(ckpt, step=0)
    assert Checkpoint.from_bytes(forged.to_bytes()) == forged  # what an unkeyed digest does not stop
    with pytest.raises(CheckpointAuthError):
        Checkpoint.from_bytes(forged.to_bytes(), key=KEY)
    version = struct.pack(">H", 2)
    garbage = b"\xff" * 64
    unparsable = b"R3LCKPTK" + version + hashlib.sha256(version + garbage).digest() + garbage
    with pytest.raises(CheckpointAuthError):  # not CorruptCheckpointError from parsing it
        Checkpoint.from_bytes(unparsable, key=KEY)


def test_the_key_comes_from_the_environment(monkeypatch):
    _, ckpt = corridor_checkpoint()
    monkeypatch.setenv(KEY_VARIABLE, KEY.decode())
    data = ckpt.to_bytes()
    assert data[:8] == b"R3LCKPTK"
    assert Checkpoint.from_bytes(data) == ckpt
    with pytest.raises(CheckpointAuthError):
        Checkpoint.from_bytes(data, key=b"another key, also 32 bytes long!")
    monkeypatch.setenv(KEY_VARIABLE, "short")
    with pytest.raises(ValueError, match="at least 16"):
        ckpt.to_bytes()
