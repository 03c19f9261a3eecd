"""Checks that a saved jericho (frotz) machine state is one the story could have reached, before it is loaded.

jericho's ``set_state`` copies what it is given into the interpreter unchecked, and the interpreter trusts
its memory: a forged state made it spin forever, halt on a runtime error, or index C arrays out of bounds.
A state saved between two turns has a known shape, which this module checks against the story file the way
a Quetzal restore checks a save file (release, serial and checksum), and further:

- RAM: jericho saves dynamic memory only (the header's static-memory base, so static and high memory come
  from the story file itself). Its header must equal the one the interpreter sets up at load (the story's
  plus what the interpreter writes), except Flags 2, which games write; the object table must be a tree (parents,
  siblings and children in range, each child on its parent's list once, no cycles) whose entries point to
  the story's property tables; the property tables' layout (short names, sizes, numbers) and the
  abbreviations table must be the story's, since Z-code can change property values but not their layout.
- Registers: the engine waits for input, so the next opcode is a read and the PC is just past that read
  opcode in the story's code (high memory).
- Stack: sp right under the current routine's locals (its evaluation stack is empty at a read), and
  frame_count frames chained from fp to the stack's top as frotz's ``call`` writes them (store type, local
  count, argument count, previous fp), each returning into the story's code.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["StoryLayout", "check_frotz_state", "story_layout"]

_HEADER_SIZE = 64
_FLAGS2 = (0x10, 0x11)  # the only header bytes a game writes
_READ_OPCODES = (228, 246)  # z_read (VAR 0xE4) and z_read_char (VAR 0xF6): where run_free() stops
_OBJECT_ENTRY = 14  # versions 4-8: 6 attribute bytes, parent, sibling, child, property table address
_DEFAULTS_TABLE = 63 * 2
_ABBREVIATIONS = 96 * 2
_NARRATIVE_MAX = 8191  # jericho strcpy()s the narrative into an 8,192-byte buffer


@dataclass(frozen=True)
class StoryLayout:
    """What a story file fixes about the machine states it can reach."""

    dynamic_size: int
    high_base: int
    code_end: int
    code: bytes  # the whole story file (the PC and return addresses are checked against its bytes)
    objects_at: int  # address of object 1's entry
    n_objects: int
    frozen: np.ndarray  # addresses of dynamic-memory bytes no Z-code changes, and ...
    frozen_values: np.ndarray  # ... their values in the story


def _word(data: bytes, address: int) -> int:
    return data[address] << 8 | data[address + 1]


def _layout_of(story: bytes) -> StoryLayout:
    version = story[0]
    if not 4 <= version <= 8 or len(story) < _HEADER_SIZE:
        raise ValueError(f"story file version {version} is not a Z-machine version 4-8 story")
    dynamic_size, high_base, objects = _word(story, 0x0E), _word(story, 0x04), _word(story, 0x0A)
    scale = 4 if version <= 5 else 8
    code_end = min(len(story), _word(story, 0x1A) * scale or len(story))
    objects_at = objects + _DEFAULTS_TABLE
    # Inform places the property tables right after the object entries: the lowest one ends the table.
    n_objects, lowest, address = 0, dynamic_size, objects_at
    while address + _OBJECT_ENTRY <= min(lowest, dynamic_size):
        lowest = min(lowest, _word(story, address + 12))
        n_objects += 1
        address += _OBJECT_ENTRY
    frozen: list[int] = []
    for index in range(n_objects):
        entry = objects_at + index * _OBJECT_ENTRY
        frozen += [entry + 12, entry + 13]
        frozen += _property_layout(story, _word(story, entry + 12), dynamic_size)
    abbreviations = _word(story, 0x18)
    if abbreviations + _ABBREVIATIONS <= dynamic_size:
        frozen += range(abbreviations, abbreviations + _ABBREVIATIONS)
    where = np.unique(np.asarray(frozen, dtype=np.int64))
    values = np.frombuffer(story, dtype=np.uint8, count=dynamic_size)[where]
    return StoryLayout(dynamic_size, high_base, code_end, story, objects_at, n_objects, where, values)


def _property_layout(story: bytes, table: int, end: int) -> list[int]:
    """Addresses of a property table's layout bytes: name length, name, each size/number byte, terminator."""
    name_words = story[table]
    layout = list(range(table, table + 1 + 2 * name_words))
    address = table + 1 + 2 * name_words
    while address < end:
        first = story[address]
        layout.append(address)
        if first == 0:
            break
        if first & 0x80:
            layout.append(address + 1)
            size = story[address + 1] & 0x3F or 64
            address += 2 + size
        else:
            address += 1 + (2 if first & 0x40 else 1)
    return layout


_layouts: dict[tuple[str, int, int], StoryLayout] = {}
_layouts_lock = threading.Lock()


def story_layout(path: str | Path) -> StoryLayout:
    """The :class:`StoryLayout` of the story file at ``path`` (read once per process and file version)."""
    stat = Path(path).stat()
    key = (str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)
    with _layouts_lock:
        layout = _layouts.get(key)
    if layout is None:
        layout = _layout_of(Path(path).read_bytes())
        with _layouts_lock:
            if len(_layouts) >= 32:
                _layouts.clear()
            _layouts[key] = layout
    return layout


def check_frotz_state(state: Any, layout: StoryLayout, live_header: np.ndarray, stack_size: int) -> None:
    """Raise ``ValueError`` naming the first thing in ``state`` that the story could not have produced.

    Args:
        state: jericho's ``get_state()`` tuple, from a checkpoint.
        layout: the story's :class:`StoryLayout`.
        live_header: the first 64 bytes of the interpreter's memory for this story, as it loads the story.
        stack_size: the interpreter's stack size in bytes (``getStackSize()``).
    """
    if not (isinstance(state, tuple) and len(state) == 9):
        raise ValueError("frotz state is not a 9-tuple")
    ram, stack, pc, sp, fp, frame_count, opcode, rng, narrative = state
    for name, array, size in (("RAM", ram, layout.dynamic_size), ("stack", stack, stack_size)):
        if not (isinstance(array, np.ndarray) and array.dtype == np.uint8 and array.shape == (size,)):
            raise ValueError(f"frotz {name} is not {size} bytes")
    ints = (pc, sp, fp, frame_count, opcode, *(rng if isinstance(rng, tuple) else ()))
    if not (isinstance(rng, tuple) and len(rng) == 3 and all(isinstance(v, (int, np.integer)) for v in ints)):
        raise ValueError("frotz registers are not integers")
    pc, sp, fp, frame_count, opcode = map(int, (pc, sp, fp, frame_count, opcode))
    words = stack_size // 2
    limits = (
        ("pc", pc, layout.code_end),
        ("sp", sp, words + 1),
        ("fp", fp, words + 1),
        ("frame count", frame_count, words // 4 + 1),
        ("opcode", opcode, 256),
        ("rng interval", rng[1], 1 << 31),
        ("rng counter", rng[2], 1 << 31),
    )
    for name, value, end in limits:
        if not 0 <= value < end:
            raise ValueError(f"frotz {name} {value} is outside [0, {end})")
    if not -(1 << 63) <= rng[0] < 1 << 63:
        raise ValueError("frotz rng seed does not fit a C long")
    if not (isinstance(narrative, bytes) and len(narrative) <= _NARRATIVE_MAX and b"\0" not in narrative):
        raise ValueError(f"frotz narrative is not bytes of at most {_NARRATIVE_MAX}")
    if opcode not in _READ_OPCODES or not layout.high_base < pc or layout.code[pc - 1] != opcode:
        raise ValueError(f"frotz pc {pc} / opcode {opcode} is not an input instruction of the story's code")
    _check_ram(ram, layout, live_header)
    _check_frames(np.frombuffer(stack.tobytes(), dtype=np.uint16), sp, fp, frame_count, layout)


def _check_ram(ram: np.ndarray, layout: StoryLayout, live_header: np.ndarray) -> None:
    header = ram[:_HEADER_SIZE].copy()
    header[list(_FLAGS2)] = live_header[list(_FLAGS2)]
    if not np.array_equal(header, live_header):
        changed = np.flatnonzero(header != live_header).tolist()
        raise ValueError(f"frotz RAM header differs from the story's at bytes {changed[:8]}")
    if not np.array_equal(ram[layout.frozen], layout.frozen_values):
        where = layout.frozen[np.flatnonzero(ram[layout.frozen] != layout.frozen_values)[:4]].tolist()
        raise ValueError(f"frotz RAM changes the layout of the story's objects or strings (at {where})")
    n = layout.n_objects
    entries = ram[layout.objects_at : layout.objects_at + n * _OBJECT_ENTRY].reshape(n, _OBJECT_ENTRY).astype(int)
    parent, sibling, child = (entries[:, k] << 8 | entries[:, k + 1] for k in (6, 8, 10))
    if max(parent.max(initial=0), sibling.max(initial=0), child.max(initial=0)) > n:
        raise ValueError(f"frotz object table links to an object past the {n} objects")
    # Walk every object's child list: each member has that parent, and together they hold every parented object.
    seen = 0
    for owner in np.flatnonzero(child).tolist():
        member, length = int(child[owner]), 0
        while member:
            length += 1
            if length > n or parent[member - 1] != owner + 1:
                raise ValueError(f"frotz object tree is broken under object {owner + 1}")
            member = int(sibling[member - 1])
        seen += length
    if seen != np.count_nonzero(parent) or np.any(sibling[parent == 0]):
        raise ValueError("frotz object tree has objects on no parent's list, or on a list with no parent")


def _check_frames(stack: np.ndarray, sp: int, fp: int, frame_count: int, layout: StoryLayout) -> None:
    words = len(stack)
    frame = fp
    if frame_count and fp + 4 > words:
        raise ValueError(f"frotz fp {fp} leaves no room for the current frame ({frame_count} frames)")
    locals_here = (int(stack[fp]) >> 8 & 0xF) if frame_count else 0
    # At a read the routine's evaluation stack is empty (the read is a statement): sp sits on its locals. A lower
    # sp would leave frotz, whose pushes are unchecked, room to write below the stack array.
    if sp != fp - locals_here:
        raise ValueError(f"frotz sp {sp} is not at the current frame's locals (fp {fp}, {locals_here} locals)")
    for depth in range(frame_count):
        if frame + 4 > words:
            raise ValueError(f"frotz stack frame {depth} at {frame} runs past the stack")
        info, previous, pc_low, pc_high = (int(v) for v in stack[frame : frame + 4])
        store_type, n_args = info >> 12, info & 0xFF
        back_to = pc_high << 9 | pc_low
        caller = previous + 1
        caller_locals = (int(stack[caller]) >> 8 & 0xF) if depth + 1 < frame_count and caller < words else 0
        if store_type > 1 or n_args > 7 or pc_low > 0x1FF:
            raise ValueError(f"frotz stack frame {depth} is not a call frame")
        if not layout.high_base <= back_to < layout.code_end:
            raise ValueError(f"frotz stack frame {depth} returns to {back_to}, outside the story's code")
        if not frame + 4 <= caller - caller_locals or caller > words:
            raise ValueError(f"frotz stack frame {depth} links to a frame at {caller} that does not enclose it")
        frame = caller
    if frame != words:
        raise ValueError(f"frotz stack frames end at {frame}, not at the top of the stack ({words})")
