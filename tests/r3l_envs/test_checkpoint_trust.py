"""Checkpoint bytes from anywhere: restoring never executes them, and every malformed body is a typed error.

Checkpoint bytes were once a pickle, so a forged body reached the unpickler; garbage gave an
untyped ``KeyError``; an altered payload was accepted and changed the state.
"""

import dataclasses
import hashlib
import pickle
import struct
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from r3l_envs import Checkpoint, checkpoint, codec, restore
from r3l_envs.checkpoint import FORMAT_VERSION
from r3l_envs.errors import CheckpointVersionError, CorruptCheckpointError, UnencodableStateError

MAGIC = b"R3LCKPT\x00"


class RunsCode:
    """Unpickling this creates ``path``: the proof that a reader executed what it read."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return Path.touch, (Path(self.path),)


def framed(version, body, *, digest_version=True):
    """Bytes in the checkpoint frame with a correct digest (format 1 digests the body only)."""
    head = struct.pack(">H", version)
    digest = hashlib.sha256(head + body if digest_version else body).digest()
    return MAGIC + head + digest + body


def corridor(**kwargs):
    env = gym.make("r3ltest/Corridor-v0", **kwargs)
    env.reset(seed=0)
    env.step("right")
    return env


def state_of(env):
    return env.unwrapped._checkpoint_state(), env.unwrapped.np_random.bit_generator.state


def old_format_bytes(ckpt):
    """What format 1 (the pickled format) wrote for ``ckpt``: a pickle whose payload is a pickle."""
    fields = {k: v for k, v in ckpt.__dict__.items() if k not in ("digest", "authenticated")}
    fields["format_version"] = 1
    fields["payload"] = pickle.dumps(codec.decode(ckpt.payload))
    return framed(1, pickle.dumps(fields), digest_version=False)


# ---------------------------------------------------------------------- bytes that would run code
def test_a_pickle_that_runs_code_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    evil = pickle.dumps({"env_id": RunsCode(marker)})
    for data in (framed(1, evil, digest_version=False), framed(FORMAT_VERSION, evil), MAGIC + evil):
        with pytest.raises((CheckpointVersionError, CorruptCheckpointError)):
            Checkpoint.from_bytes(data)
    assert not marker.exists()


def test_a_payload_that_would_run_code_is_refused_at_restore_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    env = corridor()
    ckpt = checkpoint(env)
    payload = pickle.dumps({"env": RunsCode(marker), "wrappers": []})
    forged = dataclasses.replace(ckpt, payload=payload, digest=hashlib.sha256(payload).hexdigest())
    before = state_of(env)
    with pytest.raises(CorruptCheckpointError):
        restore(env, Checkpoint.from_bytes(forged.to_bytes()))
    with pytest.raises(CorruptCheckpointError):
        restore(env, forged)
    assert not marker.exists() and state_of(env) == before


# ---------------------------------------------------------------------- damaged bytes
def test_every_truncation_and_every_flipped_byte_is_refused():
    data = checkpoint(corridor()).to_bytes()
    for cut in range(len(data)):
        with pytest.raises(CorruptCheckpointError):
            Checkpoint.from_bytes(data[:cut])
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        with pytest.raises((CorruptCheckpointError, CheckpointVersionError)):
            Checkpoint.from_bytes(bytes(flipped))


def test_textworld_checkpoint_with_a_flipped_byte_is_refused_and_changes_nothing():
    pytest.importorskip("textworld")
    env = gym.make("r3l/TextWorld-v0", max_tasks=2)
    _, info = env.reset(seed=0)
    env.step(info["admissible_actions"][0])
    ckpt = checkpoint(env)
    data = ckpt.to_bytes()
    _, info = env.reset(seed=1)
    before = env.unwrapped._checkpoint_state()["episode"]
    for i in [*range(len(MAGIC) + 34), *range(len(MAGIC) + 34, len(data), 101)]:
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        with pytest.raises((CorruptCheckpointError, CheckpointVersionError)):
            restore(env, Checkpoint.from_bytes(bytes(flipped)))
    for i in range(0, len(ckpt.payload), 211):  # altered in memory after capture
        payload = bytearray(ckpt.payload)
        payload[i] ^= 0x01
        with pytest.raises(CorruptCheckpointError, match="altered after capture"):
            restore(env, dataclasses.replace(ckpt, payload=bytes(payload)))
    assert env.unwrapped._checkpoint_state()["episode"] == before
    restore(env, Checkpoint.from_bytes(data))  # the intact bytes still restore
    assert env.unwrapped._checkpoint_state()["episode"].actions == ckpt_actions(ckpt)


def ckpt_actions(ckpt):
    return codec.decode(ckpt.payload)["env"]["episode"].actions


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"garbage",
        codec.encode({}),
        codec.encode([1, 2]),
        codec.encode({"env_id": 3}),
        b"\xff" * 40,
        b"\x00\x00\x00\x05[1,2]",  # a list without its tag
        b"\xff\xff\xff\xff{}",  # announces 4 GB of structure
    ],
)
def test_garbage_bodies_with_a_valid_frame_raise_the_typed_error(body):
    with pytest.raises(CorruptCheckpointError):
        Checkpoint.from_bytes(framed(FORMAT_VERSION, body))


def test_fields_of_the_wrong_type_raise_the_typed_error():
    ckpt = checkpoint(corridor())
    for name, value in [("step", "3"), ("step", True), ("wrappers", ["x"]), ("restore_kind", "teleport")]:
        fields = {**ckpt.__dict__, name: value}
        with pytest.raises(CorruptCheckpointError):
            Checkpoint.from_bytes(framed(FORMAT_VERSION, codec.encode(fields)))


# ---------------------------------------------------------------------- well-formed data, not a checkpoint's state
def _forge(ckpt, mutate):
    state = codec.decode(ckpt.payload)
    replaced = mutate(state)
    state = state if replaced is None else replaced
    payload = codec.encode(state)
    return dataclasses.replace(ckpt, payload=payload, digest=hashlib.sha256(payload).hexdigest())


def _set(path, value):
    def mutate(state):
        *parents, last = path
        target = state
        for key in parents:
            target = target[key] if isinstance(key, str) else getattr(target, key[0])
        if isinstance(last, str):
            target[last] = value
        else:
            setattr(target, last[0], value)

    return mutate


@pytest.mark.parametrize(
    "mutate",
    [
        lambda state: {"x": 1},
        lambda state: [],
        _set(["wrappers"], []),
        _set(["env", "episode"], {"task_id": "corridor-train-00000"}),
        _set(["env", "episode", ("step",)], 7),
        _set(["env", "episode", ("actions",)], [b"right"]),
        _set(["env", "episode", ("digests",)], []),
        _set(["env", "rng"], {"bit_generator": "seed"}),  # would call np.random.seed()
        _set(["env", "rng"], {"bit_generator": "PCG64", "state": {"state": "x", "inc": 1}}),
        _set(["env", "rng_seed"], "zero"),
    ],
)
def test_malformed_state_is_refused_before_the_env_changes(mutate):
    env = corridor()
    forged = _forge(checkpoint(env), mutate)
    other = corridor()
    other.step("left")
    before = state_of(other)
    global_rng = np.random.get_state()[1].copy()
    with pytest.raises(CorruptCheckpointError):
        restore(other, Checkpoint.from_bytes(forged.to_bytes()))
    assert state_of(other) == before and (np.random.get_state()[1] == global_rng).all()


def test_native_state_an_env_cannot_load_is_the_typed_error_and_demands_a_reset():
    env = gym.make("r3l/WebShop-v0", num_products=300)
    env.reset(seed=0)
    forged = _forge(checkpoint(env), _set(["env", "native"], "not a session"))
    with pytest.raises(CorruptCheckpointError, match="does not fit WebShopEnv"):
        restore(env, forged)
    with pytest.raises(gym.error.ResetNeeded):
        env.unwrapped.step("search[shoes]")
    env.reset(seed=0)


def test_textworld_refuses_a_frotz_state_that_would_reach_c_out_of_bounds():
    """jericho's set_state memcpy()s, sets pointers at offsets and strcpy()s into an 8 KB buffer unchecked."""
    pytest.importorskip("textworld")
    env = gym.make("r3l/TextWorld-v0", max_tasks=2)
    _, info = env.reset(seed=0)
    env.step(info["admissible_actions"][0])
    ckpt = checkpoint(env)
    forgeries = [
        (0, np.zeros(10, np.uint8)),  # RAM shorter than the memcpy
        (1, np.zeros(2048, np.int64)),  # stack of another dtype
        (2, 10**9),  # pc far outside the story
        (3, 10**6),  # sp outside the stack
        (4, -1),  # fp before it
        (6, 300),  # opcode past a byte
        (7, (1, 0)),  # rng without its counter
        (8, b"x" * 9000),  # narrative past the strcpy buffer
    ]
    for index, value in forgeries:

        def mutate(state, index=index, value=value):
            snap = state["env"]["native"]
            snap.frotz = (*snap.frotz[:index], value, *snap.frotz[index + 1 :])

        with pytest.raises(CorruptCheckpointError, match="frotz"):
            restore(env, _forge(ckpt, mutate))
    restore(env, ckpt)  # the genuine one still restores
    assert env.step(info["admissible_actions"][0])[4]["step"] == 2


# ---------------------------------------------------------------------- versions
def test_versions_newer_unknown_and_old_pickle_format():
    env = corridor()
    ckpt = checkpoint(env)
    body = ckpt.to_bytes()[len(MAGIC) + 34 :]
    with pytest.raises(CheckpointVersionError, match="newer"):
        Checkpoint.from_bytes(framed(FORMAT_VERSION + 1, body))
    with pytest.raises(CorruptCheckpointError, match="does not exist"):
        Checkpoint.from_bytes(framed(0, body))
    old = old_format_bytes(ckpt)
    with pytest.raises(CheckpointVersionError, match="trusted=True"):
        Checkpoint.from_bytes(old)
    converted = Checkpoint.from_bytes(old, trusted=True)  # your own old file: read once, write anew
    assert converted == ckpt and Checkpoint.from_bytes(converted.to_bytes()) == ckpt
    expected = [env.step(a) for a in ["right", "wait", "right"]]
    fresh = gym.make("r3ltest/Corridor-v0")
    restore(fresh, converted)
    assert [fresh.step(a) for a in ["right", "wait", "right"]] == expected


# ---------------------------------------------------------------------- the codec itself
@dataclasses.dataclass
class Record:
    name: str
    values: list


codec.register_type(Record)


def test_codec_round_trips_every_type_checkpoints_carry():
    value = {
        "none": None,
        "bools": (True, False),
        "ints": [0, -1, 2**63 - 1, -(2**63), 2**200, -(3**150)],
        "floats": [0.0, -0.0, 1.5, float("inf"), -float("inf"), 1e-308],
        "str": "héllo ☃ 𝔘 \x00 \ud800",
        "bytes": b"\x00\xff",
        "nested": [{"a": (1, [2, {3: "x"}])}, ()],
        (1, "key"): frozenset({1, 2}),
        "set": {"b", "a"},
        "arrays": [np.arange(6, dtype=np.uint8).reshape(2, 3), np.zeros((0, 4)), np.array([True, False])],
        "scalars": [np.int64(-5), np.float32(0.25), np.uint8(7)],
        "record": Record("r", [1, Record("inner", [])]),
    }
    out = codec.decode(codec.encode(value))
    arrays = out.pop("arrays")
    expected_arrays = value.pop("arrays")
    assert out == value and type(out["nested"][0]["a"]) is tuple and type(out["record"]) is Record
    for got, want in zip(arrays, expected_arrays):
        assert got.dtype == want.dtype and got.shape == want.shape and (got == want).all() and got.flags.writeable
    assert [type(x) for x in out["scalars"]] == [np.int64, np.float32, np.uint8]


def test_codec_is_deterministic_for_sets():
    assert codec.encode({"z", "a", "m"}) == codec.encode({"m", "z", "a"})


@pytest.mark.parametrize(
    "value", [object(), np.array([object()]), bytearray(b"x"), np.array(["text"]), lambda: 1, Path("x")]
)
def test_codec_refuses_what_it_cannot_carry(value):
    with pytest.raises(UnencodableStateError):
        codec.encode({"state": [value]})


def test_an_unregistered_record_is_refused_at_checkpoint_time():
    class Opaque:
        pass

    class Holding(gym.Wrapper):
        def checkpoint_state(self):
            return Opaque()

        def restore_state(self, state):
            pass

    env = Holding(gym.make("r3ltest/Corridor-v0"))
    env.reset(seed=0)
    with pytest.raises(UnencodableStateError, match="register_type"):
        checkpoint(env)


def raw(structure, blob=b""):
    """Bytes in the codec's layout: the length of the JSON structure, the structure, the blob."""
    text = structure.encode()
    return struct.pack(">I", len(text)) + text + blob


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x00",  # no length
        raw('["t", 1'),  # JSON cut short
        b"\x00\x00\x00\x02\xff\xfe",  # not UTF-8
        raw('["x", 1]'),  # unknown tag
        raw("[]"),
        raw('["d", 1]'),  # a key without a value
        raw('["d", ["l"], null]'),  # a list as a dict key
        raw('["o", "os.system", {"command": "touch /tmp/x"}]'),  # a type nobody registered
        raw('["a", "|O8", [1], 0, 8]', bytes(8)),  # object dtype
        raw('["a", "|u1", [5], 0, 2]', b"ab"),  # shape and bytes disagree
        raw('["a", "|u1", [-2], 0, 0]'),  # negative shape
        raw('["b", 0, 10]', b"abc"),  # a blob range past the end
        raw('["b", 2, 1]', b"abc"),
        raw('["l",' * 100 + "1" + "]" * 100),  # deeper than MAX_DEPTH
        raw("[" * 100_000 + "]" * 100_000),  # deeper than the JSON parser goes
    ],
)
def test_codec_decode_refuses_malformed_bytes_with_the_typed_error(data):
    with pytest.raises(CorruptCheckpointError):
        codec.decode(data)


def test_codec_refuses_a_record_with_other_fields():
    good = codec.encode(Record("r", []))
    renamed = good.replace(b"values", b"valuez")
    with pytest.raises(CorruptCheckpointError, match="fields"):
        codec.decode(renamed)
