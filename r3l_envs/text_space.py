"""The observation and action space of every r3l env: any ``str`` up to a length, and how it is shared.

:class:`TextSpace` admits every Python string. Its handlers for gymnasium's shared memory (``AsyncVectorEnv``'s
default) live here, registered with the class, so every process that makes or unpickles a space has them.

gymnasium keeps a ``Text`` observation in shared memory as indices into the space's charset, and reads the
buffer once, when the vector env is built. For numpy spaces that read is a live array view; for ``Text`` it
is a tuple of strings, so every step would return the same text: ``max_length`` ``"0"`` characters, since the
observations are not in the charset. These handlers, registered for :class:`TextSpace` only, store each env's
observation as its UTF-8 bytes behind their length, and the read returns :class:`SharedTexts`, a live view that
decodes what the workers wrote last, as the numpy views do. ``AsyncVectorEnv(copy=True)`` (the default)
deep-copies it into a plain tuple of ``str``, which is what ``shared_memory=False`` returns.
"""

from __future__ import annotations

import multiprocessing as mp
import string
import struct
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, overload

from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

__all__ = ["MAX_TEXT", "SharedTexts", "TextSpace"]

#: Longest observation or action the spaces admit, in characters.
MAX_TEXT = 1 << 20

_LENGTH = struct.Struct("<Q")  # bytes of UTF-8 in the slot
_UTF8_MAX = 4  # bytes per character at most (lone surrogates, kept with "surrogatepass", take 3)


class TextSpace(spaces.Text):
    """Any Python ``str`` of at most ``max_length`` characters.

    ``gymnasium.spaces.Text`` only admits characters of an explicit charset, and the charset that would admit
    every observation (all of Unicode) costs ~100 MB as a frozenset. So membership accepts every string, and
    ``sample()`` draws short printable-ASCII strings (the charset below), which is what a checker needs.
    """

    def __init__(self, max_length: int = MAX_TEXT, *, min_length: int = 0, seed: int | None = None):
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:  # a megabyte of noise helps nobody: keep samples short
            length = int(self.np_random.integers(self.min_length, min(self.max_length, 64) + 1))
            return super().sample(mask=(length, None))
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"TextSpace({self.min_length}, {self.max_length})"


def _slot_size(space: TextSpace) -> int:
    return _LENGTH.size + _UTF8_MAX * space.max_length


class SharedTexts(Sequence[str]):
    """A live, read-only view of the ``n`` texts in a shared buffer; copies and pickles are tuples of str."""

    def __init__(self, space: TextSpace, shared_memory: Any, n: int):
        self._buffer = memoryview(shared_memory.get_obj()).cast("B")
        self._slot = _slot_size(space)
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._n)))
        if not -self._n <= index < self._n:
            raise IndexError(f"index {index} out of range for {self._n} envs")
        start = (index % self._n) * self._slot
        (length,) = _LENGTH.unpack_from(self._buffer, start)
        body = start + _LENGTH.size
        return bytes(self._buffer[body : body + length]).decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(self._n))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (SharedTexts, tuple)):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # the contents change under it

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return tuple, (tuple(self),)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r:.200})"


@create_shared_memory.register(TextSpace)
def _create(space: TextSpace, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array("B", n * _slot_size(space))  # zeroed: every slot starts as ""


@read_from_shared_memory.register(TextSpace)
def _read(space: TextSpace, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


@write_to_shared_memory.register(TextSpace)
def _write(space: TextSpace, index: int, value: str, shared_memory: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"a TextSpace observation is a str, got {type(value).__name__}")
    if len(value) > space.max_length:
        raise ValueError(f"observation of {len(value)} characters is longer than the space admits ({space.max_length})")
    data = value.encode("utf-8", "surrogatepass")
    buffer = memoryview(shared_memory.get_obj()).cast("B")
    start = index * _slot_size(space)
    _LENGTH.pack_into(buffer, start, len(data))
    buffer[start + _LENGTH.size : start + _LENGTH.size + len(data)] = data
