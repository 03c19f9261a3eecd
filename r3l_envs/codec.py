"""The byte encoding of checkpoint state: tagged plain data, so that decoding never runs what it reads.

A checkpoint's state is plain data (what :meth:`TextEnv._checkpoint_state` and the wrapper handlers return):
``None``, ``bool``, ``int`` (any size), ``float``, ``str`` (any code points, lone surrogates included),
``bytes``, ``list``, ``tuple``, ``dict`` (any of these as keys), ``set``/``frozenset``, numpy arrays and
scalars of numeric or bool dtype, and the dataclasses / NamedTuples registered here by name with
:func:`register_type` (an env's snapshot record).

The bytes are a length-prefixed JSON text followed by a blob of raw bytes. JSON carries the structure, so the
C parser of the standard library does the bulk of the work (a pure-Python parser was 30x slower than pickle on
an ALFWorld state). Dicts with ``str`` keys are JSON objects; every other container is a JSON array whose first
element is its tag: ``["t", ...]`` a tuple, ``["l", ...]`` a list, ``["d", k, v, ...]`` a dict with other
keys, ``["e"|"E", ...]`` a set / frozenset, ``["b", start, end]`` bytes in the blob, ``["a", dtype, shape,
start, end]`` an array, ``["g", dtype, start, end]`` a numpy scalar, ``["o", name, {field: value}]`` a
registered record. Decoding builds only these types: it never imports a module or calls a constructor other
than a registered type's, and any malformed input raises :class:`~r3l_envs.errors.CorruptCheckpointError`.
Encoding is deterministic (sets are written sorted), so equal states give equal bytes.

Decoding is bounded, so that small bytes cannot become a large state: the input must fit a ceiling
(:func:`default_max_bytes`), containers nest at most :data:`MAX_DEPTH` deep, and every byte of the blob is referenced
exactly once, as the encoder writes it. A body that points many references at the same bytes (which would copy
them once per reference: a "decompression bomb") is refused before anything is copied, so the bytes a decode
allocates for blobs never exceed its input.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
from typing import Any, TypeVar

import numpy as np

from r3l_envs.errors import CorruptCheckpointError, UnencodableStateError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_BYTES_VARIABLE",
    "MAX_DEPTH",
    "check_size",
    "decode",
    "default_max_bytes",
    "encode",
    "register_type",
]

#: Deepest container nesting either direction accepts (checkpoint states nest fewer than ten levels).
MAX_DEPTH = 64
#: Largest encoded state :func:`decode` reads by default: 256 MiB, about a hundred times the largest native
#: state our envs write. The structure's JSON decodes to at most a few dozen times its size in Python objects.
DEFAULT_MAX_BYTES = 256 * 2**20
#: The environment variable that overrides :data:`DEFAULT_MAX_BYTES` (a number of bytes).
MAX_BYTES_VARIABLE = "R3L_CHECKPOINT_MAX_BYTES"
_MAX_NDIM = 32
_LENGTH = struct.Struct(">I")  # bytes of JSON before the blob
_SCALARS = frozenset({str, int, float, bool, type(None)})  # what JSON carries as itself
_DTYPE = re.compile(r"[<>|=]?[biufc]\d{1,2}")  # numeric and bool dtypes only: never object or structured
_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":"))

T = TypeVar("T", bound=type)
_BY_NAME: dict[str, tuple[type, tuple[str, ...]]] = {}
_BY_TYPE: dict[type, tuple[str, tuple[str, ...]]] = {}


def register_type(cls: T, *, former_names: tuple[str, ...] = ()) -> T:
    """Let checkpoints carry instances of ``cls``, a dataclass or NamedTuple of plain data (use as a decorator).

    Instances travel as the class's ``module.qualname`` and their field values; decoding looks the name up
    among registered classes only and calls ``cls(**fields)``. ``former_names`` are names the class travelled
    under before a rename: checkpoints written then still decode.
    """
    if dataclasses.is_dataclass(cls):
        fields = tuple(f.name for f in dataclasses.fields(cls) if f.init)
    elif issubclass(cls, tuple) and hasattr(cls, "_fields"):
        fields = tuple(cls._fields)
    else:
        raise TypeError(f"register_type takes a dataclass or a NamedTuple, not {cls!r}")
    name = f"{cls.__module__}.{cls.__qualname__}"
    for known in (name, *former_names):
        _BY_NAME[known] = (cls, fields)
    _BY_TYPE[cls] = (name, fields)
    return cls


# ---------------------------------------------------------------------- encode
def encode(value: Any) -> bytes:
    """The bytes of ``value``; raises :class:`UnencodableStateError` for a type checkpoints cannot carry."""
    blobs: list[bytes] = []
    tree = _tree(value, blobs, [0], 0)
    try:
        text = _ENCODER.encode(tree).encode("utf-8", "surrogatepass")
    except ValueError as exc:  # an int too long for a decimal string
        raise UnencodableStateError(f"checkpoint state does not encode: {exc}") from exc
    return _LENGTH.pack(len(text)) + text + b"".join(blobs)


def _tree(value: Any, blobs: list[bytes], size: list[int], depth: int) -> Any:
    """``value`` as JSON-ready data; ``size`` holds the blob's length so far (one cell, shared)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth > MAX_DEPTH:
        raise UnencodableStateError(f"checkpoint state nests deeper than {MAX_DEPTH} levels")
    depth += 1
    if kind is tuple or kind is list:  # the most frequent container: a loop, not a comprehension's frame
        out = ["t" if kind is tuple else "l"]
        for v in value:
            out.append(v if type(v) in _SCALARS else _tree(v, blobs, size, depth))
        return out
    if kind is dict:
        if all(type(k) is str for k in value):
            return {k: v if type(v) in _SCALARS else _tree(v, blobs, size, depth) for k, v in value.items()}
        out = ["d"]
        for k, v in value.items():
            out.append(_tree(k, blobs, size, depth))
            out.append(_tree(v, blobs, size, depth))
        return out
    if kind is bytes:
        return ["b", *_blob(value, blobs, size)]
    if kind is set or kind is frozenset:
        items = [_tree(v, blobs, size, depth) for v in value]
        items.sort(key=_ENCODER.encode)
        return ["e" if kind is set else "E", *items]
    if kind in _BY_TYPE:
        name, fields = _BY_TYPE[kind]
        return ["o", name, {f: _tree(getattr(value, f), blobs, size, depth) for f in fields}]
    if kind is np.ndarray:
        _check_dtype(value.dtype)
        return ["a", value.dtype.str, list(value.shape), *_blob(np.ascontiguousarray(value).tobytes(), blobs, size)]
    if isinstance(value, np.generic):
        _check_dtype(value.dtype)
        return ["g", value.dtype.str, *_blob(value.tobytes(), blobs, size)]
    raise UnencodableStateError(
        f"checkpoint state holds a {kind.__module__}.{kind.__qualname__}, which checkpoints cannot carry: "
        "return plain data (None, bool, int, float, str, bytes, list, tuple, dict, set, numeric numpy arrays) "
        "from _save_state()/checkpoint_state(), or register a dataclass or NamedTuple of plain data with "
        "r3l_envs.codec.register_type"
    )


def _blob(data: bytes, blobs: list[bytes], size: list[int]) -> tuple[int, int]:
    start = size[0]
    blobs.append(data)
    size[0] = start + len(data)
    return start, size[0]


def _check_dtype(dtype: np.dtype) -> None:
    if not _DTYPE.fullmatch(dtype.str):
        raise UnencodableStateError(f"checkpoints carry numpy arrays of numeric or bool dtype only, not {dtype}")


# ---------------------------------------------------------------------- decode
def default_max_bytes() -> int:
    """The ceiling on encoded bytes that :func:`decode` reads when not given one: ``R3L_CHECKPOINT_MAX_BYTES``
    if set, else :data:`DEFAULT_MAX_BYTES`."""
    text = os.environ.get(MAX_BYTES_VARIABLE)
    if text is None:
        return DEFAULT_MAX_BYTES
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value <= 0:
        raise ValueError(f"{MAX_BYTES_VARIABLE}={text!r} is not a positive number of bytes")
    return value


def check_size(size: int, max_bytes: int | None, what: str = "checkpoint") -> None:
    """Refuse ``size`` bytes over ``max_bytes`` (default :func:`default_max_bytes`) before reading them."""
    limit = default_max_bytes() if max_bytes is None else max_bytes
    if size > limit:
        raise CorruptCheckpointError(
            f"{what} is {size:,} bytes, over the ceiling of {limit:,} bytes; if you trust its source, raise the "
            f"ceiling with max_bytes= or the {MAX_BYTES_VARIABLE} environment variable"
        )


def decode(data: bytes, *, max_bytes: int | None = None) -> Any:
    """Inverse of :func:`encode`; raises :class:`CorruptCheckpointError` for any bytes it did not write.

    Args:
        data: bytes from :func:`encode`.
        max_bytes: the most bytes to read (default :func:`default_max_bytes`); larger input is refused unread.
    """
    check_size(len(data), max_bytes, "checkpoint state")
    data = bytes(data)
    if len(data) < _LENGTH.size:
        raise CorruptCheckpointError("checkpoint state is truncated (no length)")
    (length,) = _LENGTH.unpack_from(data)
    end = _LENGTH.size + length
    if end > len(data):
        raise CorruptCheckpointError(f"checkpoint state is truncated: {length} bytes of structure announced")
    try:
        tree = json.loads(data[_LENGTH.size : end].decode("utf-8", "surrogatepass"))
        blob = _Blob(memoryview(data)[end:])
        value = _value(tree, blob, 0)
        blob.check_all_taken()
        return value
    except CorruptCheckpointError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, RecursionError) as exc:  # JSON, UTF-8, shapes
        raise CorruptCheckpointError(f"checkpoint state does not decode: {type(exc).__name__}: {exc}") from exc


class _Blob:
    """The raw bytes after the structure, handed out range by range: each byte at most once.

    The encoder writes every bytes object and array once, so the ranges of a body it wrote tile the blob. Counting
    what has been handed out refuses overlapping or repeated ranges before they are copied, which bounds what
    decoding allocates by the input's size.
    """

    __slots__ = ("taken", "view")

    def __init__(self, view: memoryview):
        self.view = view
        self.taken = 0

    def take(self, start: Any, end: Any) -> memoryview:
        if not (type(start) is int and type(end) is int and 0 <= start <= end <= len(self.view)):
            raise CorruptCheckpointError(
                f"checkpoint blob range {start!r:.20}:{end!r:.20} is outside {len(self.view)} bytes"
            )
        self.taken += end - start
        if self.taken > len(self.view):
            raise CorruptCheckpointError(
                "checkpoint state refers to the same blob bytes more than once (the encoder writes each once): "
                "refused, since decoding would copy them once per reference"
            )
        return self.view[start:end]

    def check_all_taken(self) -> None:
        if self.taken != len(self.view):
            raise CorruptCheckpointError(
                f"checkpoint state refers to {self.taken} of its {len(self.view)} blob bytes (the encoder refers to "
                "each once)"
            )


def _value(tree: Any, blob: _Blob, depth: int) -> Any:
    kind = type(tree)
    if kind is dict:
        if depth > MAX_DEPTH:
            raise CorruptCheckpointError(f"checkpoint state nests deeper than {MAX_DEPTH} levels")
        depth += 1
        return {k: v if type(v) in _SCALARS else _value(v, blob, depth) for k, v in tree.items()}
    if kind is not list:
        return tree  # str, int, float, bool, None
    if depth > MAX_DEPTH:
        raise CorruptCheckpointError(f"checkpoint state nests deeper than {MAX_DEPTH} levels")
    depth += 1
    tag = tree[0]
    if tag == "t" or tag == "l":
        items = [v if type(v) in _SCALARS else _value(v, blob, depth) for v in tree[1:]]
        return tuple(items) if tag == "t" else items
    if tag == "d":
        if len(tree) % 2 == 0:
            raise CorruptCheckpointError("checkpoint dict has a key without a value")
        items = [_value(v, blob, depth) for v in tree[1:]]
        return dict(zip(items[::2], items[1::2]))  # an unhashable key raises TypeError: corrupt
    if tag == "b":
        _, start, end = tree
        return bytes(blob.take(start, end))
    if tag == "e" or tag == "E":
        items = [_value(v, blob, depth) for v in tree[1:]]
        return set(items) if tag == "e" else frozenset(items)
    if tag == "o":
        return _record(tree, blob, depth)
    if tag == "a":
        _, dtype, shape, start, end = tree
        dtype = _dtype(dtype)
        if not (type(shape) is list and len(shape) <= _MAX_NDIM and all(type(n) is int and n >= 0 for n in shape)):
            raise CorruptCheckpointError(f"checkpoint array has a bad shape {shape!r:.80}")
        data = blob.take(start, end)
        if len(data) != int(np.prod(shape, dtype=object)) * dtype.itemsize:
            raise CorruptCheckpointError(f"checkpoint array of shape {shape} has {len(data)} bytes")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if tag == "g":
        _, dtype, start, end = tree
        dtype = _dtype(dtype)
        data = blob.take(start, end)
        if len(data) != dtype.itemsize:
            raise CorruptCheckpointError(f"checkpoint numpy scalar has {len(data)} bytes for {dtype}")
        return np.frombuffer(data, dtype=dtype)[0]
    raise CorruptCheckpointError(f"checkpoint state has an unknown tag {tag!r:.40}")


def _dtype(text: Any) -> np.dtype:
    if not (type(text) is str and _DTYPE.fullmatch(text)):
        raise CorruptCheckpointError(f"checkpoint state has a numpy dtype it may not carry: {text!r:.40}")
    return np.dtype(text)


def _record(tree: list, blob: _Blob, depth: int) -> Any:
    _, name, values = tree
    if type(name) is not str or name not in _BY_NAME:
        raise CorruptCheckpointError(
            f"checkpoint state holds a {name!r:.80}, which is not a registered checkpoint type in this process "
            "(is the env's module imported?)"
        )
    cls, fields = _BY_NAME[name]
    if type(values) is not dict or tuple(values) != fields:
        found = list(values) if type(values) is dict else type(values).__name__
        raise CorruptCheckpointError(f"checkpoint {name} has fields {found}, expected {list(fields)}")
    return cls(**{k: _value(v, blob, depth) for k, v in values.items()})
