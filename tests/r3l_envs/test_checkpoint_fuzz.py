"""Fuzzing the checkpoint codec and frame: any input ends in a typed error or a correct result.

Hypothesis draws plain values (what checkpoints carry), arbitrary bytes, and damaged versions of real checkpoint
bytes. Inputs stay small, so every example is bounded in memory and time by construction.
"""

import contextlib

import gymnasium as gym
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from r3l_envs import Checkpoint, checkpoint, codec
from r3l_envs.errors import CheckpointError

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEY = b"a fuzzing key of thirty-two byte"

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(),
    st.binary(max_size=64),
    st.builds(np.float32, st.floats(width=32, allow_nan=False)),
)
hashable = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.binary(max_size=8))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.lists(inner, max_size=5).map(tuple),
        st.dictionaries(st.text(max_size=8), inner, max_size=5),
        st.dictionaries(hashable, inner, max_size=5),
        st.frozensets(hashable, max_size=5),
        st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6).map(lambda xs: np.array(xs, dtype=np.int32)),
    ),
    max_leaves=20,
)


def _equal(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@FUZZ
@given(values)
def test_every_plain_value_round_trips(value):
    assert _equal(codec.decode(codec.encode(value)), value)


@FUZZ
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_decode_or_raise_a_typed_error(data):
    with contextlib.suppress(CheckpointError):
        codec.decode(data)


def _real_checkpoint() -> Checkpoint:
    env = gym.make("r3ltest/Corridor-v0")
    env.reset(seed=0)
    env.step("right")
    return checkpoint(env)


REAL = _real_checkpoint()


@st.composite
def damaged(draw, data: bytes):
    """``data`` with a few bytes flipped, cut, inserted or a slice repeated."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "repeat"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[at : at + draw(st.integers(1, 16))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            data[at:at] = data[at : at + draw(st.integers(1, 64))] * draw(st.integers(1, 8))
    return bytes(data)


@FUZZ
@given(damaged(codec.encode(codec.decode(REAL.payload))))
def test_damaged_state_bytes_decode_or_raise_a_typed_error(data):
    with contextlib.suppress(CheckpointError):
        codec.decode(data)


@FUZZ
@given(st.sampled_from([None, KEY]), st.data())
def test_damaged_checkpoint_bytes_are_refused_or_equal(key, data):
    """A frame whose tag still verifies after the damage decodes to the very checkpoint written (the tag covers
    every byte); anything else is a typed error."""
    damaged_bytes = data.draw(damaged(REAL.to_bytes(key=key)))
    try:
        ckpt = Checkpoint.from_bytes(damaged_bytes, key=key)
    except CheckpointError:
        return
    assert ckpt == REAL
