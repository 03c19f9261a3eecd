"""Forged TextWorld checkpoints: re-signed bodies (valid sha256 digests) whose engine or logic state is not the game's.

The digests have no key, so anyone can re-sign an altered body. A native TextWorld checkpoint carries jericho's
Z-machine memory, stack and registers and TextWorld's logic state: restore must refuse what the game could not
have produced, before the env changes, and an engine that still misbehaves must end in a typed error within its
budget, never spin (random RAM used to spin at 100 % CPU, beyond the reach of Ctrl-C).
"""

from __future__ import annotations

import dataclasses
import hashlib

import gymnasium as gym
import numpy as np
import pytest

import r3l_envs
from r3l_envs import Checkpoint, codec
from r3l_envs.errors import CheckpointAuthError, CorruptCheckpointError, EngineError

pytest.importorskip("textworld")

from r3l_envs.textworld.frotz_state import story_layout

SEP = "\x1f"
RAM, STACK, PC, SP, FP, FRAMES, OPCODE = range(7)


@pytest.fixture(scope="module")
def game():
    """An env two moves into a cooking game, its checkpoint there, and what the rest of the walkthrough shows."""
    env = gym.make("r3l/TextWorld-v0", game_type="cooking", difficulty=1, max_tasks=2)
    env.reset(options={"task_id": env.unwrapped.task_ids[0]})
    walk = env.unwrapped.walkthrough()
    for action in walk[:2]:
        env.step(action)
    ckpt = r3l_envs.checkpoint(env)
    rest = walk[2:]
    expected = [env.step(a) for a in rest]
    yield env, ckpt, rest, expected
    env.close()


def resigned(ckpt: Checkpoint, mutate) -> Checkpoint:
    """``ckpt`` with its TextWorld snapshot changed by ``mutate(snapshot)``, re-signed as a forger would: the
    payload digest and the header digest of the bytes are recomputed, so only the content can betray it."""
    state = codec.decode(ckpt.payload)
    mutate(state["env"]["native"])
    payload = codec.encode(state)
    forged = dataclasses.replace(ckpt, payload=payload, digest=hashlib.sha256(payload).hexdigest())
    # trusted=True: read as bytes their holder vouches for (or a key holder wrote), the checks are all that stands
    # between them and the engine; unvouched bytes restore by replay (test_unauthenticated_bytes_restore_by_replay)
    return Checkpoint.from_bytes(forged.to_bytes(), trusted=True)


def frotz_field(index: int, change):
    """A mutation of one field of jericho's state tuple: ``change(old_value, state) -> new_value``."""

    def mutate(snap):
        fields = list(snap.frotz)
        fields[index] = change(fields[index], fields)
        snap.frotz = tuple(fields)

    return mutate


def ram_bytes(change):
    """A mutation of the saved RAM (a copy): ``change(ram, layout)`` edits it in place."""

    def edit(ram, fields):
        ram = ram.copy()
        change(ram, _layout())
        return ram

    return frotz_field(RAM, edit)


_LAYOUT = {}


def _layout():
    return _LAYOUT["layout"]


@pytest.fixture(autouse=True)
def _story_layout(game):
    env = game[0]
    _LAYOUT["layout"] = story_layout(env.unwrapped._layers()[2]._jericho.story_file.decode())


def assert_untouched(env, ckpt, rest, expected):
    """The env goes on from where it was, and the genuine checkpoint still restores exactly."""
    assert [env.step(a) for a in rest] == expected
    r3l_envs.restore(env, ckpt)
    assert [env.step(a) for a in rest] == expected


def start_over(env, ckpt):
    r3l_envs.restore(env, ckpt)


def _word(ram, address, value):
    ram[address], ram[address + 1] = value >> 8, value & 0xFF


def _object_entry(layout, number):
    return layout.objects_at + (number - 1) * 14


# ---------------------------------------------------------------------- engine memory
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_ram_with_valid_digests_is_refused_at_restore(game, seed):
    env, ckpt, rest, expected = game
    start_over(env, ckpt)
    noise = np.random.default_rng(seed)
    forged = resigned(ckpt, frotz_field(RAM, lambda ram, _: noise.integers(0, 256, ram.shape, dtype=np.uint8)))
    with pytest.raises(CorruptCheckpointError, match="frotz RAM"):
        r3l_envs.restore(env, forged)
    assert_untouched(env, ckpt, rest, expected)


def _cycle(ram, layout):
    # Make the first parented object its own sibling: a child list that never ends.
    for number in range(1, layout.n_objects + 1):
        entry = _object_entry(layout, number)
        if ram[entry + 6] or ram[entry + 7]:
            _word(ram, entry + 8, number)
            return


def _orphan(ram, layout):
    # Give an object a parent whose child list does not hold it.
    entry = _object_entry(layout, layout.n_objects)
    _word(ram, entry + 6, 1 if ram[_object_entry(layout, 1) + 10 : _object_entry(layout, 1) + 12].any() else 2)
    _word(ram, entry + 8, 0)


RAM_FORGERIES = {
    "zeroed": lambda ram, layout: ram.fill(0),
    "release number": lambda ram, layout: _word(ram, 0x02, 9999),
    "serial": lambda ram, layout: ram.__setitem__(slice(0x12, 0x18), 0x30),
    "parent past the objects": lambda ram, layout: _word(ram, _object_entry(layout, 1) + 6, layout.n_objects + 1),
    "sibling cycle": _cycle,
    "orphan": _orphan,
    "property table moved": lambda ram, layout: _word(ram, _object_entry(layout, 1) + 12, 64),
    "property layout": lambda ram, layout: ram.__setitem__(int(layout.frozen[-200]), ram[int(layout.frozen[-200])] ^ 1),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(RAM_FORGERIES))
def test_ram_the_story_cannot_reach_is_refused(game, name):
    env, ckpt, rest, expected = game
    start_over(env, ckpt)
    with pytest.raises(CorruptCheckpointError, match="frotz"):
        r3l_envs.restore(env, resigned(ckpt, ram_bytes(RAM_FORGERIES[name])))
    assert_untouched(env, ckpt, rest, expected)


# ---------------------------------------------------------------------- stack and registers
def _random_stack(stack, fields):
    return np.random.default_rng(0).integers(0, 256, stack.shape, dtype=np.uint8)


def _stack_word(offset_from_fp, change):
    """Change the native-endian stack word at ``fp + offset`` (a frame's link words)."""

    def edit(stack, fields):
        words = np.frombuffer(stack.tobytes(), dtype=np.uint16).copy()
        at = fields[FP] + offset_from_fp
        words[at] = change(int(words[at]))
        return np.frombuffer(words.tobytes(), dtype=np.uint8).copy()

    return edit


REGISTER_FORGERIES = {
    "random stack": (STACK, _random_stack),
    "frame link": (STACK, _stack_word(1, lambda w: w - 3)),
    "return address outside the code": (STACK, _stack_word(3, lambda w: 0)),
    "store type": (STACK, _stack_word(0, lambda w: w | 0x3000)),
    "pc one byte on": (PC, lambda pc, f: pc + 1),
    "pc in data": (PC, lambda pc, f: 100),
    "opcode not the read at pc": (OPCODE, lambda op, f: 246),
    "opcode not a read": (OPCODE, lambda op, f: 0),
    "sp above the locals": (SP, lambda sp, f: f[FP] + 1),
    "sp with room to push below the stack": (SP, lambda sp, f: 0),
    "fp at the top of the stack": (FP, lambda fp, f: 1024),
    "fp moved": (FP, lambda fp, f: fp + 1),
    "one frame more": (FRAMES, lambda n, f: n + 1),
    "one frame fewer": (FRAMES, lambda n, f: n - 1),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(REGISTER_FORGERIES))
def test_corrupted_stack_or_registers_are_refused(game, name):
    env, ckpt, rest, expected = game
    start_over(env, ckpt)
    index, change = REGISTER_FORGERIES[name]
    with pytest.raises(CorruptCheckpointError, match="frotz"):
        r3l_envs.restore(env, resigned(ckpt, frotz_field(index, change)))
    assert_untouched(env, ckpt, rest, expected)


# ---------------------------------------------------------------------- logic state
def _replace_in_facts(old, new):
    def mutate(snap):
        snap.facts = [f.replace(old, new) for f in snap.facts]

    return mutate


def _add_fact(fact):
    def mutate(snap):
        snap.facts = [*snap.facts, fact]

    return mutate


def _set(name, value):
    def mutate(snap):
        setattr(snap, name, value(getattr(snap, name)) if callable(value) else value)

    return mutate


def _admit(command):
    def mutate(snap):
        snap.last["admissible_actions"] = sorted([*snap.last["admissible_actions"], command])

    return mutate


LOGIC_FORGERIES = {
    "unknown predicate": (_add_fact(f"flying{SEP}P{SEP}P"), "predicate"),
    "unknown entity": (_replace_in_facts(f"r_0{SEP}r", f"r_9{SEP}r"), "entity"),
    "entity of another type": (_replace_in_facts(f"r_0{SEP}r", f"r_0{SEP}c"), "predicate|entity"),
    "broken constraint": (_add_fact(f"open{SEP}c_0{SEP}c"), "constraint"),
    "fact twice": (_set("facts", lambda facts: [*facts, facts[0]]), "distinct"),
    "valid action dropped": (_set("valid_actions", lambda actions: actions[1:]), "valid actions"),
    "interpreter escape made admissible": (_admit("\\U"), "admissible"),
    "last action of no rule": (_set("last_action", ("fly", (), (), "fly", None, None)), "last action"),
    "negative moves": (_set("moves", -1), "moves"),
    "best score past 1": (_set("best", 2.0), "scores"),
    "tracked infos": (_set("tracked", {"score": "all"}), "tracked"),
    "snapshot of another task than the episode": (_set("task_id", "tw-cooking-d1-train-00001"), "another task"),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(LOGIC_FORGERIES))
def test_logic_state_the_game_cannot_produce_is_refused(game, name):
    env, ckpt, rest, expected = game
    start_over(env, ckpt)
    mutate, message = LOGIC_FORGERIES[name]
    with pytest.raises(CorruptCheckpointError, match=message):
        r3l_envs.restore(env, resigned(ckpt, mutate))
    assert_untouched(env, ckpt, rest, expected)


@pytest.mark.timeout(300)
def test_a_forged_snapshot_of_another_task_leaves_the_current_engine_in_place(game):
    env, ckpt, rest, expected = game
    other = gym.make("r3l/TextWorld-v0", game_type="cooking", difficulty=1, max_tasks=2)
    other.reset(options={"task_id": other.unwrapped.task_ids[1]})
    theirs = r3l_envs.checkpoint(other)
    other.close()
    start_over(env, ckpt)
    with pytest.raises(CorruptCheckpointError):
        r3l_envs.restore(env, resigned(theirs, _add_fact(f"flying{SEP}P{SEP}P")))
    assert_untouched(env, ckpt, rest, expected)


# ---------------------------------------------------------------------- the watchdog
# The "thread" timeout: a signal handler cannot run while the interpreter spins inside one ctypes call.
@pytest.mark.timeout(120, method="thread")
def test_a_spinning_engine_ends_in_engine_error_and_the_env_recovers(game):
    """Random RAM set into the engine directly (as a state that got past the checks would be) makes the
    interpreter loop inside one ctypes call; the watchdog halts it and the step raises EngineError."""
    env, ckpt, rest, expected = game
    start_over(env, ckpt)
    base = env.unwrapped
    frotz = base._layers()[2]._jericho
    state = list(frotz.get_state())
    state[RAM] = np.random.default_rng(0).integers(0, 256, state[RAM].shape, dtype=np.uint8)
    frotz.set_state(tuple(state))
    base.engine_budget_s = 0.5
    try:
        with pytest.raises(EngineError, match="budget"):
            env.step("look")
    finally:
        base.engine_budget_s = type(base).engine_budget_s
    with pytest.raises(gym.error.ResetNeeded):
        env.step("look")
    _, info = env.reset(options={"task_id": ckpt.task_id})
    assert info["step"] == 0 and info["admissible_actions"]
    r3l_envs.restore(env, ckpt)
    assert [env.step(a) for a in rest] == expected


@pytest.mark.timeout(120, method="thread")
def test_a_checkpoint_that_passes_every_check_but_loops_ends_in_engine_error(game):
    """Global variables are the game's to change, so no check can refuse this one: global 28 of this game set
    to 0 makes the story loop without ever asking for input. The watchdog halts it within its budget."""
    env, ckpt, rest, expected = game
    start_over(env, ckpt)
    layout = _layout()
    globals_at = int(layout.code[0x0C]) << 8 | layout.code[0x0D]
    r3l_envs.restore(env, resigned(ckpt, ram_bytes(lambda ram, _: _word(ram, globals_at + 2 * 28, 0))))
    base = env.unwrapped
    base.engine_budget_s = 0.5
    try:
        with pytest.raises(EngineError, match="budget"):
            for _ in range(3):  # it loops on the first or second move
                env.step("look")
    finally:
        base.engine_budget_s = type(base).engine_budget_s
    r3l_envs.restore(env, ckpt)
    assert [env.step(a) for a in rest] == expected


@pytest.mark.timeout(120, method="thread")
def test_a_runtime_error_halt_is_an_engine_error_not_an_observation(game):
    """Globals are the game's to change, so noise there passes the checks; the Z-machine then halts on a
    runtime error, which used to come back as the observation 'Emulator halted due to runtime error.'."""
    env, ckpt, rest, expected = game
    start_over(env, ckpt)
    layout = _layout()
    globals_at = int(layout.code[0x0C]) << 8 | layout.code[0x0D]

    def noise(ram, _):
        ram[globals_at : globals_at + 480] = np.random.default_rng(0).integers(0, 256, 480, dtype=np.uint8)

    r3l_envs.restore(env, resigned(ckpt, ram_bytes(noise)))
    with pytest.raises(EngineError, match="runtime error"):
        env.step("look")
    r3l_envs.restore(env, ckpt)
    assert [env.step(a) for a in rest] == expected


@pytest.mark.timeout(120, method="thread")
def test_genuine_checkpoints_restore_after_a_forged_state_wrote_into_the_header(game):
    """Global 236 of this game set to 0 passes the checks, and the next move writes into the memory header.
    Checkpoints are compared with the header as the interpreter loads it, not with that damaged engine."""
    env, ckpt, rest, expected = game
    start_over(env, ckpt)
    layout = _layout()
    globals_at = int(layout.code[0x0C]) << 8 | layout.code[0x0D]
    r3l_envs.restore(env, resigned(ckpt, ram_bytes(lambda ram, _: _word(ram, globals_at + 2 * 236, 0))))
    env.step("look")
    frotz = env.unwrapped._layers()[2]._jericho
    state = frotz.get_state()
    assert not np.array_equal(state[RAM][:6], np.frombuffer(layout.code[:6], dtype=np.uint8))  # it did write
    r3l_envs.restore(env, ckpt)
    assert [env.step(a) for a in rest] == expected


def test_unauthenticated_bytes_restore_by_replay(game):
    """Unkeyed bytes nobody vouched for never reach frotz's memory: restore replays their (sanitised) actions on a
    genuine engine, so forged RAM is ignored and the continuation is the genuine one; asking for a native load
    of them is refused."""
    env, ckpt, rest, expected = game
    noise = np.random.default_rng(0)
    state = codec.decode(ckpt.payload)
    fields = list(state["env"]["native"].frotz)
    fields[RAM] = noise.integers(0, 256, fields[RAM].shape, dtype=np.uint8)
    state["env"]["native"] = dataclasses.replace(state["env"]["native"], frotz=tuple(fields))
    payload = codec.encode(state)
    forged = dataclasses.replace(ckpt, payload=payload, digest=hashlib.sha256(payload).hexdigest())
    unvouched = Checkpoint.from_bytes(forged.to_bytes())
    assert not unvouched.authenticated and ckpt.authenticated
    with pytest.raises(CheckpointAuthError, match="authenticated"):
        r3l_envs.restore(env, unvouched, via="native")
    r3l_envs.restore(env, unvouched)  # by replay
    assert [env.step(a) for a in rest] == expected
    key = b"a key the checkpoint's writer holds"
    keyed = Checkpoint.from_bytes(ckpt.to_bytes(key=key), key=key)
    assert keyed.authenticated
    r3l_envs.restore(env, keyed, via="native")
    assert [env.step(a) for a in rest] == expected
