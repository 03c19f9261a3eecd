"""Find and parse the official files of GSM8K, MATH-500 and OlympiadBench on this machine.

Nothing is downloaded. A dataset's file is looked up, in order, at the ``data_path=`` kwarg (a file, or a folder
holding the official file names), in ``$R3L_DATA_DIR/<folder>/``, and among the raw ``json``/``jsonl`` downloads
of the local Hugging Face datasets cache (``$HF_DATASETS_CACHE``, else ``$HF_HOME/datasets``, else
``~/.cache/huggingface/datasets``), which keeps each download's source URL in a ``<file>.json`` sidecar.
Parsed files are cached per process, keyed on path, size and modification time.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r3l_envs.errors import DataNotFoundError, MalformedDataError

__all__ = ["DatasetFiles", "Record", "find_file", "hf_datasets_cache", "load_records"]


@dataclass(frozen=True)
class Record:
    """One problem of a real dataset: stable id, statement, gold answer(s) as LaTeX or plain text."""

    task_id: str
    problem: str
    golds: tuple[str, ...]


@dataclass(frozen=True)
class DatasetFiles:
    """Where a dataset's split lives and how it is described to a user who must fetch it."""

    name: str  # "GSM8K"
    folder: str  # the folder under $R3L_DATA_DIR
    filenames: Sequence[str]  # official names for this split, first preferred
    hf_url_parts: Sequence[str]  # a matching HF cache download has one of these in its source URL
    how_to_get: str  # where to download it from


def hf_datasets_cache() -> Path:
    """The local Hugging Face datasets cache folder (it may not exist)."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.environ["HF_DATASETS_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "datasets"
    return Path.home() / ".cache" / "huggingface" / "datasets"


def find_file(spec: DatasetFiles, data_path: str | os.PathLike[str] | None) -> Path:
    """The file holding ``spec``'s split; raises one :class:`DataNotFoundError` listing where it looked."""
    looked: list[str] = []
    if data_path is not None:
        path = Path(data_path).expanduser()
        if path.is_file():
            return path
        found = _in_folder(path, spec.filenames)
        if found is not None:
            return found
        looked.append(f"data_path={str(path)!r}")
    else:
        root = os.environ.get("R3L_DATA_DIR")
        if root:
            folder = Path(root).expanduser() / spec.folder
            found = _in_folder(folder, spec.filenames)
            if found is not None:
                return found
            looked.append(f"$R3L_DATA_DIR/{spec.folder}/ ({folder})")
        else:
            looked.append("$R3L_DATA_DIR (not set)")
        found = _in_hf_cache(spec)
        if found is not None:
            return found
        looked.append(f"the HF datasets cache ({hf_datasets_cache()})")
    names = " or ".join(spec.filenames)
    raise DataNotFoundError(
        f"{spec.name} data not found: no {names} in {'; '.join(looked)}. No dataset hub is used: download "
        f"{spec.how_to_get}, then put {spec.filenames[0]} in $R3L_DATA_DIR/{spec.folder}/ or pass "
        f"data_path='/path/to/{spec.filenames[0]}' (a file or its folder) to gym.make()."
    )


def _in_folder(folder: Path, filenames: Sequence[str]) -> Path | None:
    for name in filenames:
        if (folder / name).is_file():
            return folder / name
    return None


def _in_hf_cache(spec: DatasetFiles) -> Path | None:
    """A raw download in the HF cache whose recorded URL names this dataset and one of its file names."""
    downloads = hf_datasets_cache() / "downloads"
    if not downloads.is_dir():
        return None
    for sidecar in sorted(downloads.glob("*.json")):
        try:
            url = str(json.loads(sidecar.read_text(encoding="utf-8")).get("url", ""))
        except (OSError, ValueError, AttributeError):
            continue  # not a download sidecar
        data = sidecar.with_suffix("")
        if (
            data.is_file()
            and any(part in url for part in spec.hf_url_parts)
            and any(url.split("?")[0].endswith("/" + name) for name in spec.filenames)
        ):
            return data
    return None


# ---------------------------------------------------------------------------------------------- parsing
_CACHE: dict[tuple[str, int, int, str], tuple[Record, ...]] = {}
_CACHE_LOCK = threading.Lock()

RowParser = Callable[[dict[str, Any], int], Record]


def load_records(path: Path, parse_row: RowParser, *, schema: str, key: str) -> tuple[Record, ...]:
    """Parse a ``.jsonl`` (one object per line) or ``.json`` (a list of objects) file with ``parse_row``.

    ``parse_row(row, index)`` raises ``KeyError``/``TypeError``/``ValueError`` on a row that lacks the schema;
    that becomes a :class:`MalformedDataError` naming the file, the line (or list index) and ``schema``.
    ``key`` separates different parsers of the same file in the per-process cache.
    """
    stat = path.stat()
    cache_key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, key)
    with _CACHE_LOCK:
        if cache_key in _CACHE:
            return _CACHE[cache_key]
    records = tuple(_parse(path, parse_row, schema))
    ids = [r.task_id for r in records]
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        raise MalformedDataError(f"{path}: task id {duplicate!r} occurs twice; expected {schema}")
    with _CACHE_LOCK:
        _CACHE[cache_key] = records
    return records


def _parse(path: Path, parse_row: RowParser, schema: str) -> list[Record]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise MalformedDataError(f"{path}: not UTF-8 text ({error}); expected {schema}") from None
    rows: list[tuple[str, Any]] = []
    if path.suffix == ".json" or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError as error:
            raise MalformedDataError(f"{path}: not valid JSON ({error}); expected {schema}") from None
        if not isinstance(data, list):
            raise MalformedDataError(f"{path}: the top level is {type(data).__name__}, not a list; expected {schema}")
        rows = [(f"item {i}", row) for i, row in enumerate(data)]
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append((f"line {number}", json.loads(line)))
            except ValueError as error:
                raise MalformedDataError(
                    f"{path}, line {number}: not valid JSON ({error}); expected {schema}"
                ) from None
    records = []
    for index, (where, row) in enumerate(rows):
        try:
            if not isinstance(row, dict):
                raise TypeError(f"a {type(row).__name__}, not an object")
            records.append(parse_row(row, index))
        except (KeyError, TypeError, ValueError) as error:
            detail = f"missing field {error}" if isinstance(error, KeyError) else str(error)
            raise MalformedDataError(f"{path}, {where}: {detail}; expected {schema}") from None
    if not records:
        raise MalformedDataError(f"{path}: no problems in the file; expected {schema}")
    return records
