"""Reading a groups JSONL file of unknown origin: each line bounded in length, each record in nesting depth, and
every field checked against the file format's JSON schema (``wrappers/data/groups.schema.json``) before a reader
builds an object from it. Whatever a file holds, reading it ends in objects or in one :class:`DataFormatError`
that names the file, the line and what is wrong there.

The bounds, and why they are needed: a line is read whole before it is parsed, so its length bounds the memory a
record takes (a parsed record holds up to ~20 times its text); Python's ``json`` has no depth limit of its own and
ends a deep one in ``RecursionError``, and code that walks a parsed record recursively fails on one that is
nested deep enough. :data:`MAX_LINE_BYTES` and :data:`MAX_DEPTH` are the defaults of both bounds, which every
reader takes as arguments (``wrappers.load_jsonl(path, max_line_bytes=..., max_depth=...)``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from itertools import accumulate
from typing import Any

from wrappers.data.safe_text import one_line, printable, quote

__all__ = [
    "MAX_DEPTH",
    "MAX_LINE_BYTES",
    "DataFormatError",
    "check_record",
    "nesting",
    "parse_record",
    "read_lines",
    "schema",
]

#: The longest line read by default, in bytes (64 MiB). A group written with its per-turn env checkpoints is a
#: few MB; one without them a few hundred KB.
MAX_LINE_BYTES = 64 * 2**20
#: The deepest nesting of a record read by default: a group's own structure is 5 levels deep (group, its
#: trajectories, a trajectory, its turns, a turn), which leaves the rest to the free-form ``info`` and
#: ``metadata`` values.
MAX_DEPTH = 64

_FLOAT_MAX = 1.7976931348623157e308
_KEYWORDS = {  # the JSON-schema keywords check_record understands; the schema may use no other
    "$schema", "$id", "$defs", "$ref", "x-r3l-format-version", "title", "description", "oneOf", "type", "required",
    "properties", "items", "enum", "const", "minimum", "maximum", "minItems", "maxItems",
}  # fmt: skip
_SCALAR_KEYWORDS = {"type", "enum", "minimum", "maximum", "description"}
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes included
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_TYPE_NAMES = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


class DataFormatError(ValueError):
    """A record that this version cannot read: not JSON, too long or too deep, an unknown type or version, a
    field of the wrong type or size, or missing fields. ``str(error)`` is one printable line:
    ``cannot read FILE line N: what`` when the file and line are known.

    Attributes:
        reason: what is wrong, without the place.
        path, line: the file and the 1-based line number, where known.
    """

    def __init__(self, reason: str, *, path: str | os.PathLike[str] | None = None, line: int | None = None) -> None:
        self.reason, self.path, self.line = reason, path, line
        where = "" if path is None else f"cannot read {os.fsdecode(path)}{f' line {line}' if line else ''}: "
        super().__init__(one_line(where + reason))

    def __reduce__(self) -> tuple[Any, ...]:  # keeps the keyword arguments through pickling (worker processes)
        return _rebuild_error, (self.reason, self.path, self.line)


def _rebuild_error(reason: str, path: str | None, line: int | None) -> DataFormatError:
    return DataFormatError(reason, path=path, line=line)


def read_lines(path: str | os.PathLike[str], max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str]]:
    """The non-blank lines of a UTF-8 file with their 1-based numbers, never reading more than
    ``max_line_bytes`` (plus the newline) of one line. Raises OSError for a file that cannot be opened, or
    :class:`DataFormatError` at the first line that is longer or not UTF-8."""
    if max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be positive, got {max_line_bytes}")
    with open(path, "rb") as f:
        lineno = 0
        while raw := f.readline(max_line_bytes + 1):
            lineno += 1
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                raise DataFormatError(
                    f"the line is longer than {max_line_bytes:,} bytes (max_line_bytes): not a record this reader "
                    "takes; pass a larger max_line_bytes to read it",
                    path=path,
                    line=lineno,
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                reason = f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
                raise DataFormatError(reason, path=path, line=lineno) from None
            if text.strip():
                yield lineno, text


def parse_record(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of one line, or :class:`DataFormatError`: not JSON, or nested deeper than ``max_depth``.

    The depth is measured on the text before it is parsed (``json`` recurses once per level, in C, as deep as
    the interpreter's recursion limit lets it), in time linear in the text's length.
    """
    if nesting(text) > max_depth:
        raise DataFormatError(f"not a record: JSON nested deeper than {max_depth} levels (max_depth)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"not a JSON record ({exc})") from None
    except RecursionError:  # a recursion limit set lower than max_depth: the same verdict
        raise DataFormatError("not a record: JSON nested deeper than the parser follows") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise DataFormatError(f"not a JSON record ({printable(str(exc))[:200]})") from None


def nesting(text: str) -> int:
    """How deep the arrays and objects of JSON ``text`` nest (brackets inside strings do not count; on text that
    is not JSON, at least as deep as a parser gets before it fails). Linear in the text's length."""
    if text.count("[") + text.count("{") <= 1:
        return int("[" in text or "{" in text)
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, skeleton)), default=0)


@cache
def schema() -> dict[str, Any]:
    """The JSON schema of one record of a groups JSONL file (``wrappers/data/groups.schema.json``, draft 2020-12)."""
    loaded = json.loads(resources.files("wrappers.data").joinpath("groups.schema.json").read_text(encoding="utf-8"))
    unknown = _keywords(loaded) - _KEYWORDS
    if unknown:
        raise RuntimeError(f"groups.schema.json uses keywords the reader does not check: {sorted(unknown)}")
    return loaded


def check_record(data: dict[str, Any], max_depth: int = MAX_DEPTH) -> None:
    """Check a record of the current format version (a ``dict`` whose ``type`` is ``group``, ``trajectory`` or
    ``sample``) against :func:`schema` and the rules the schema cannot state; raise :class:`DataFormatError`
    naming the first field that breaks one (``trajectories[1].turns[0].reward: expected a number, got ...``).

    What is checked: the type and the constraints of every field the schema describes (so the per-token masks
    hold only 0 and 1, a pivot is an integer, ...); that every per-token array of a trajectory (and a sample's
    ``loss_mask``) has as many values as its ``token_ids``; that a turn's ``span`` lies inside them, and its
    ``sampled`` inside its own ``token_ids``; that a pivot names one of its trajectory's turns or the end; and
    that no value is nested deeper than ``max_depth`` levels.
    Fields the schema requires but a record leaves out are not this check's concern: the data model fills those
    that have defaults and reports the others.
    """
    root = schema()
    _check(data, root["$defs"][data["type"]], "", 1, max_depth)
    if data["type"] == "group":
        for i, traj in enumerate(data.get("trajectories", [])):
            _check_trajectory(traj, f"trajectories[{i}].")
        for i, sample in enumerate(data.get("samples", [])):
            _check_aligned(sample, ("loss_mask",), f"samples[{i}].")
    elif data["type"] == "trajectory":
        _check_trajectory(data, "")
    else:
        _check_aligned(data, ("loss_mask",), "")


# ---------------------------------------------------------------------------------------------- helpers
def _keywords(node: Any, inside: str | None = None) -> set[str]:
    """Every keyword the schema uses (the names under ``properties`` and ``$defs`` are names, not keywords)."""
    if isinstance(node, list):
        return set().union(*(_keywords(n) for n in node))
    if not isinstance(node, dict):
        return set()
    found = set() if inside in ("properties", "$defs") else set(node)
    return found.union(*(_keywords(value, key) for key, value in node.items()))


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema()["$defs"][node["$ref"].removeprefix("#/$defs/")]
    return node


def _is(value: Any, name: str) -> bool:
    if name == "number":
        return type(value) in (int, float)
    return (
        type(value)
        is {
            "object": dict,
            "array": list,
            "string": str,
            "integer": int,
            "boolean": bool,
            "null": type(None),
        }[name]
    )


def _check(value: Any, node: dict[str, Any], where: str, depth: int, max_depth: int) -> None:
    node = _resolve(node)
    name = where.rstrip(".") or "the record"
    types = node.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(_is(value, t) for t in types):
            expected = " or ".join(_TYPE_NAMES[t] for t in types)
            raise DataFormatError(f"{name}: expected {expected}, got {quote(value)}")
    if type(value) is int and "number" in (types or ()) and not -_FLOAT_MAX <= value <= _FLOAT_MAX:
        raise DataFormatError(f"{name}: {quote(value)} is too large for a float")
    if "const" in node and not _same(value, node["const"]):
        raise DataFormatError(f"{name}: expected {node['const']!r}, got {quote(value)}")
    if "enum" in node and not any(_same(value, option) for option in node["enum"]):
        raise DataFormatError(f"{name}: expected one of {node['enum']}, got {quote(value)}")
    if type(value) in (int, float):
        if "minimum" in node and value < node["minimum"]:
            raise DataFormatError(f"{name}: {quote(value)} is below the minimum {node['minimum']}")
        if "maximum" in node and value > node["maximum"]:
            raise DataFormatError(f"{name}: {quote(value)} is above the maximum {node['maximum']}")
    if type(value) is list:
        _check_list(value, node, name, depth, max_depth)
    elif type(value) is dict:
        known = node.get("properties", {})
        for key, item in value.items():
            if key in known:
                _check(item, known[key], f"{where}{key}.", depth + 1, max_depth)
            else:
                _check_depth(item, f"{where}{printable(key[:60])}", depth + 1, max_depth)


def _check_list(value: list[Any], node: dict[str, Any], name: str, depth: int, max_depth: int) -> None:
    low, high = node.get("minItems", 0), node.get("maxItems")
    if len(value) < low or (high is not None and len(value) > high):
        wanted = f"{low}" if low == high else f"at least {low}" if high is None else f"{low} to {high}"
        raise DataFormatError(f"{name}: expected {wanted} values, got {len(value)}")
    if "items" not in node:
        _check_depth(value, name, depth, max_depth)
        return
    items = _resolve(node["items"])
    if set(items) <= _SCALAR_KEYWORDS and isinstance(items.get("type"), str) and _scalars_ok(value, items):
        return  # the common case (token ids, masks, log-probs) in one tight pass
    for i, item in enumerate(value):
        _check(item, items, f"{name}[{i}].", depth + 1, max_depth)


def _scalars_ok(values: list[Any], node: dict[str, Any]) -> bool:
    """Whether every value passes a scalar ``node``, in one pass; the caller names the first that does not."""
    kind, types = node["type"], set(map(type, values))  # the types, in C: no Python call per value
    if kind == "integer":
        ok = types <= {int}
    elif kind == "number":
        ok = types <= {int, float}
        ok = ok and (int not in types or all(-_FLOAT_MAX <= v <= _FLOAT_MAX for v in values if type(v) is int))
    elif kind == "string":
        ok = types <= {str}
    else:
        return False
    if ok and values and "enum" in node and kind != "number":
        ok = set(values) <= set(node["enum"])
    if ok and values and "minimum" in node:
        ok = min(values) >= node["minimum"]
    if ok and values and "maximum" in node:
        ok = max(values) <= node["maximum"]
    return ok


def _same(value: Any, expected: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    return type(value) is type(expected) and value == expected


def _check_depth(value: Any, name: str, depth: int, max_depth: int) -> None:
    """A free-form value (``info``, ``metadata``, a field the schema does not describe) nested no deeper than
    ``max_depth`` levels counted from the record; walked without recursion."""
    stack = [(value, depth)]
    while stack:
        node, level = stack.pop()
        if level > max_depth:
            raise DataFormatError(f"{name}: nested deeper than {max_depth} levels (max_depth)")
        children = node.values() if type(node) is dict else node if type(node) is list else ()
        stack.extend((child, level + 1) for child in children if type(child) in (dict, list))


def _check_aligned(record: dict[str, Any], names: tuple[str, ...], where: str) -> None:
    n = len(record.get("token_ids", []))
    for key in names:  # a field left out is empty (the data model's default): it too must match
        k = len(record.get(key, []))
        if k != n:
            raise DataFormatError(f"{where}{key}: {k} value{'s' * (k != 1)} for {n} token_ids")


def _check_trajectory(traj: dict[str, Any], where: str) -> None:
    _check_aligned(traj, ("agent_mask", "loss_mask", "behavior_logprobs"), where)
    n, turns = len(traj.get("token_ids", [])), traj.get("turns", [])
    for i, turn in enumerate(turns):
        span = turn.get("span")
        if span is not None and not span[0] <= span[1] <= n:
            raise DataFormatError(f"{where}turns[{i}].span: {span} does not lie within the {n} token_ids")
        sampled, k = turn.get("sampled"), len(turn.get("token_ids", []))
        if sampled is not None and not sampled[0] <= sampled[1] <= k:
            raise DataFormatError(f"{where}turns[{i}].sampled: {sampled} does not lie within the turn's {k} token_ids")
    pivot = traj.get("pivot")
    if pivot is not None and pivot > len(turns):
        raise DataFormatError(f"{where}pivot: turn {pivot} of a trajectory of {len(turns)} turns")
