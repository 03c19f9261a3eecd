"""Exports of trajectory groups in the formats other tools read: HF ``datasets`` rows and a JSON schema.

Two exports, each with its inverse:

- :func:`to_hf_dataset` — one row per trajectory (or per auxiliary sample with ``rows="samples"``). ``messages``
  is a real list of ``{"role", "content"}`` dicts, TRL's conversational format, so ``trl.data_utils``
  (``is_conversational``, ``apply_chat_template``) and ``SFTTrainer`` read it without custom parsing. Token-level
  columns (``token_ids``, ``agent_mask``, ``loss_mask``, ``behavior_logprobs``, any other flat list field, and the
  derived ``guided_mask``) are kept as lists; an ``advantage`` column is added when advantages are given.
  :func:`from_hf_dataset` rebuilds the objects.
- The groups JSONL file (:func:`wrappers.data.trajectory.save_jsonl`) is described by a JSON schema of its format
  version, shipped with the package (``wrappers/data/groups.schema.json``, :func:`groups_schema`), for consumers
  outside Python.

Columns are derived from each object's ``to_dict()``, so fields added to the data model flow through without a
change here: scalars and flat lists of scalars become columns as they are; anything nested (``turns``,
``metadata``, ...) becomes a JSON text column named ``<field>_json``. Arrow stores only valid UTF-8, so lone
surrogates (an env echoing a bad action) become "?" in plain columns (as :func:`wrappers.policy.encodable` does for
tokenizers); the ``*_json`` columns and the JSONL file keep them exactly.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from wrappers.data.jsonl import MAX_DEPTH, DataFormatError, check_record, parse_record, schema
from wrappers.data.trajectory import FORMAT_VERSION, Sample, Trajectory, TrajectoryGroup
from wrappers.policy import encodable

__all__ = ["from_hf_dataset", "groups_schema", "to_dataset", "to_hf_dataset", "to_rows"]

# Columns the export adds to each object's own fields (dropped again by from_hf_dataset): the group's index and
# task, the advantage when given, and a trajectory's guided_mask (1 on tokens whose behaviour log-prob was taken
# with a reflection's guidance in context, derived from its turns).
_ADDED_COLUMNS = ("group", "group_task_id", "advantage", "guided_mask")
_JSON_SUFFIX = "_json"
_SCALARS = (str, int, float, bool, type(None))


def to_rows(
    groups: Iterable[TrajectoryGroup],
    *,
    rows: Literal["trajectories", "samples"] = "trajectories",
    advantages: Sequence[Sequence[float]] | None = None,
) -> list[dict[str, Any]]:
    """Flat rows (one per trajectory, or per auxiliary sample), ready for ``datasets.Dataset.from_list``.

    Args:
        groups: the groups; ``group`` (their index) and ``group_task_id`` are added to every row.
        rows: ``"trajectories"`` (what an RL learner reads) or ``"samples"`` (the SFT samples).
        advantages: one list per group, one value per trajectory (e.g. from ``r3l_learn.algorithms.advantages``); adds
            an ``advantage`` column. Only for ``rows="trajectories"``.
    """
    if rows not in ("trajectories", "samples"):
        raise ValueError(f"rows must be 'trajectories' or 'samples', got {rows!r}")
    if advantages is not None and rows != "trajectories":
        raise ValueError("advantages belong to trajectories: pass them with rows='trajectories'")
    groups = list(groups)
    if advantages is not None and len(advantages) != len(groups):
        raise ValueError(f"{len(advantages)} advantage lists for {len(groups)} groups; give one list per group")
    raw: list[dict[str, Any]] = []
    for g, group in enumerate(groups):
        members: Sequence[Trajectory | Sample] = group.trajectories if rows == "trajectories" else group.samples
        adv = None if advantages is None else list(advantages[g])
        if adv is not None and len(adv) != len(members):
            raise ValueError(f"group {g} has {len(members)} trajectories but {len(adv)} advantages")
        for i, item in enumerate(members):
            record = {k: v for k, v in item.to_dict().items() if k != "type"}  # the kind of row says it
            clash = set(record) & set(_ADDED_COLUMNS)
            if clash:
                raise ValueError(f"fields {sorted(clash)} collide with the columns the export adds")
            record["group"], record["group_task_id"] = g, group.task_id
            if isinstance(item, Trajectory):
                record["guided_mask"] = item.guided_mask()
            if adv is not None:
                record["advantage"] = float(adv[i])
            raw.append(record)
    nested = {key for record in raw for key, value in record.items() if not _flat(key, value)}
    return [_encode(record, nested) for record in raw]


def to_hf_dataset(
    groups: Iterable[TrajectoryGroup],
    *,
    rows: Literal["trajectories", "samples"] = "trajectories",
    advantages: Sequence[Sequence[float]] | None = None,
) -> Any:
    """A ``datasets.Dataset`` of :func:`to_rows` (needs the ``datasets`` package)."""
    try:
        import datasets
    except ImportError as exc:
        raise ImportError("to_hf_dataset needs the `datasets` package: pip install datasets") from exc
    return datasets.Dataset.from_list(to_rows(groups, rows=rows, advantages=advantages))


def from_hf_dataset(dataset: Iterable[dict[str, Any]], *, max_depth: int = MAX_DEPTH) -> list[Trajectory | Sample]:
    """The trajectories (or samples) of a dataset (or rows) made by :func:`to_hf_dataset`, in order.

    The kind of object is read from the columns: trajectory rows have ``turns_json``. Each row is checked as a
    JSONL record is (:func:`wrappers.data.jsonl.check_record`, its JSON columns nested at most ``max_depth`` levels);
    a row that fails raises :class:`wrappers.data.trajectory.DataFormatError` naming it (``row N: what``).
    """
    out: list[Trajectory | Sample] = []
    for n, row in enumerate(dataset):
        try:
            out.append(_from_row(row, max_depth))
        except DataFormatError as exc:
            raise DataFormatError(f"row {n}: {exc.reason}") from None
    return out


def _from_row(row: dict[str, Any], max_depth: int) -> Trajectory | Sample:
    data: dict[str, Any] = {}
    for key, value in row.items():
        if key in _ADDED_COLUMNS:
            continue
        if key.endswith(_JSON_SUFFIX):
            if not isinstance(value, str):
                raise DataFormatError(f"{key}: expected JSON text, got {type(value).__name__}")
            data[key[: -len(_JSON_SUFFIX)]] = parse_record(value, max_depth)
        elif key == "messages" and isinstance(value, list):
            data[key] = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m for m in value]
        else:
            data[key] = value
    kind = "trajectory" if "turns" in data else "sample"
    version = data.get("version", FORMAT_VERSION)
    if version == FORMAT_VERSION and type(version) is int:  # older rows are upgraded by from_dict, then built
        check_record({**data, "type": kind}, max_depth)
    try:
        return Trajectory.from_dict(data) if kind == "trajectory" else Sample.from_dict(data)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        if isinstance(exc, DataFormatError):
            raise
        raise DataFormatError(f"a {kind} row with missing or unknown columns ({repr(exc)[:200]})") from None


def groups_schema() -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of one record of a groups JSONL file of the current format version
    (:data:`wrappers.data.trajectory.FORMAT_VERSION`), as shipped in ``wrappers/data/groups.schema.json``."""
    loaded = copy.deepcopy(schema())  # a copy: readers check records against the shared one
    if loaded.get("x-r3l-format-version") != FORMAT_VERSION:
        raise RuntimeError(
            f"wrappers/data/groups.schema.json describes format version {loaded.get('x-r3l-format-version')}, but this "
            f"r3l writes version {FORMAT_VERSION}: update the schema with the data model"
        )
    return loaded


# ---------------------------------------------------------------------------------------------- helpers
def _flat(key: str, value: Any) -> bool:
    """A value that is a column as it is: a scalar, a flat list of scalars, or chat messages."""
    if key == "messages":
        return isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value)
    if isinstance(value, _SCALARS):
        return True
    return isinstance(value, list) and all(isinstance(v, _SCALARS) and not isinstance(v, type(None)) for v in value)


def _encode(record: dict[str, Any], nested: set[str]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key, value in record.items():
        if key in nested:
            # ensure_ascii keeps lone surrogates exact (escaped) inside the JSON text
            row[key + _JSON_SUFFIX] = json.dumps(value, ensure_ascii=True)
        elif key == "messages":
            row[key] = [{k: _text(v) for k, v in m.items()} for m in value]
        else:
            row[key] = [_text(v) for v in value] if isinstance(value, list) else _text(value)
    return row


def _text(value: Any) -> Any:
    return encodable(value) if isinstance(value, str) else value


def to_dataset(trajectories: Iterable[Trajectory | TrajectoryGroup]) -> Any:
    """A HF ``datasets.Dataset`` with one row per trajectory (groups are flattened, ``group`` indexes them; a bare
    trajectory is a group of its own): :func:`to_hf_dataset`, whose ``messages`` are chat messages as lists (TRL's
    conversational format) beside the token columns and ``guided_mask``."""
    groups = [
        item if isinstance(item, TrajectoryGroup) else TrajectoryGroup(item.env_id, item.task_id, [item])
        for item in trajectories
    ]
    return to_hf_dataset(groups)
