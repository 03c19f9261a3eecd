"""A training run on disk and across Ctrl-C: its trainable weights, resuming from its newest checkpoint, the
evals it recorded, its end-of-run report, and SIGINT handling that never leaves weights half-updated.

What a resume reads (the checkpoint, ``metrics.jsonl``, ``evals.json``, ``config.json``) may have been written by
anyone: it is checked in full before anything is applied, and whatever does not fit raises
:class:`r3l_learn.errors.ResumeError` naming the file and the entry."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from r3l_learn.errors import ResumeError, brief
from r3l_learn.loop.checkpoints import check_checkpoint, latest_checkpoint, load_checkpoint, set_rng_state
from r3l_learn.loop.config import RESUMABLE_CHANGES, TrainConfig, config_from_dict
from r3l_learn.loop.evaluate import EvalSummary
from r3l_learn.loop.metrics import plot_metrics, read_metrics, summary_lines
from r3l_learn.loop.setup import TaskStream

__all__ = [
    "EVALS",
    "Interrupts",
    "eval_summary",
    "read_saved_config",
    "recorded_evals",
    "report",
    "resume_state",
    "trainable_state",
]

logger = logging.getLogger(__name__)

_MAX_DEPTH = 32  # plain data in a saved config nests a few levels (env_kwargs); deeper is not ours
_MAX_VALUES = 100_000  # and holds a few hundred values
_MAX_JSON_BYTES = 1 << 20  # config.json and evals.json are a few kilobytes


class Interrupts:
    """SIGINT handling: outside a critical section Ctrl-C raises at once (nothing is half-done); inside one
    (the optimiser update) it is deferred to the section's end, so weights are never left half-updated. A second
    Ctrl-C inside a section aborts at once."""

    def __init__(self) -> None:
        self._critical = False
        self._pending = False
        self._previous: Any = None

    def __enter__(self) -> Interrupts:
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: Any) -> None:
        if self._critical and not self._pending:
            self._pending = True
            logger.warning("Ctrl-C: finishing this update, then saving a checkpoint (press again to abort now)")
            return
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        self._critical = True
        try:
            yield
        finally:
            self._critical = False
        if self._pending:
            raise KeyboardInterrupt


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """Views of the trainable weights (no copy: a checkpoint serialises them at once)."""
    return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def _copy_weights(model: Any, weights: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in weights:
                param.copy_(weights[name])


def resume_state(config: TrainConfig, model: Any, optimizer: Any, stream: TaskStream) -> tuple[int, EvalSummary | None]:
    """Load the newest checkpoint of ``config.out_dir`` into the model, optimiser, RNGs and task stream (the config
    must match the saved one); drop what was logged after it. Returns the step it holds and the eval before.

    Everything it reads is checked before anything changes: the checkpoint against the model, optimiser and
    config (:func:`r3l_learn.loop.checkpoints.check_checkpoint`), the metrics log and the recorded evals. A refused
    resume raises :class:`ResumeError` and leaves the model, optimiser, RNGs, stream and files as they were.
    """
    out = Path(config.out_dir)
    path = latest_checkpoint(out / "checkpoints")
    if path is None:
        raise ResumeError(f"--resume: no checkpoint in {out / 'checkpoints'}; start without --resume")
    source = f"resume file {path}"
    checked = check_checkpoint(load_checkpoint(path), model, optimizer, source=source)
    _check_saved_config(checked.config, config, source)
    least, most = _cursor_range(config, checked.step)
    if not least <= checked.cursor <= most:
        took = f"{least}" if least == most else f"{least} to {most}"
        raise ResumeError(
            f"{source}: cursor is {checked.cursor}, but {checked.step} steps of {config.tasks_per_step} tasks take "
            f"{took}; the file is not this run's: delete it or start a new --out-dir"
        )
    before = eval_summary(checked.eval_before, f"{source}: eval_before")
    metrics_path = out / "metrics.jsonl"
    kept = _metrics_until(metrics_path, checked.step)
    recorded_evals(out, before)  # read again by train(): a malformed file is refused now, before any change
    # all checked: apply (the optimiser first, the likeliest to object; it builds its new state before taking it)
    optimizer.load_state_dict(checked.optimizer)
    _copy_weights(model, checked.weights)
    set_rng_state(checked.rng)
    stream.cursor = checked.cursor
    if kept is not None:  # drop what the interrupted run logged after its checkpoint
        metrics_path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    logger.info("resumed from %s at step %d", path, checked.step)
    return checked.step, before


def _cursor_range(config: TrainConfig, steps: int) -> tuple[int, int]:
    """How many tasks ``steps`` steps take from the stream, at least and at most: ``tasks_per_step`` each, and with
    dynamic sampling up to ``tasks_per_step`` more per extra round (r3l_learn.loop.groups.groups_with_contrast)."""
    least = steps * config.tasks_per_step
    return least, least * (config.dynamic_sampling_max_rounds if config.dynamic_sampling else 1)


def _check_saved_config(saved: dict[str, Any], config: TrainConfig, source: str) -> None:
    """The checkpoint's config must be plain data naming known fields, and make the same run as ``config``."""
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = [brief(k) for k in saved if k not in known]
    if unknown:
        raise ResumeError(
            f"{source}: config has fields this r3l does not know ({', '.join(unknown[:3])}): a file from another "
            "version or program; start a new --out-dir"
        )
    for name, value in saved.items():
        problem = _not_plain(value)
        if problem:
            raise ResumeError(f"{source}: config.{name} {problem}; delete the file or start a new --out-dir")
    changed = config.changed_from(saved)
    if changed:
        raise ResumeError(
            f"{source} was made with a different configuration ({', '.join(changed)}); resume with the same settings "
            f"(only {sorted(RESUMABLE_CHANGES)} may change) or start a new --out-dir"
        )


def _not_plain(value: Any) -> str | None:
    """Why ``value`` is not JSON-like plain data (None, bool, numbers, strings, lists, str-keyed dicts), or None.
    Bounded: a crafted file can nest deeply, or repeat one list inside another so that walking it never ends."""
    stack, pushed = [(value, 0)], 1
    while stack:
        item, depth = stack.pop()
        if item is None or isinstance(item, bool | int | float | str):
            continue
        if depth >= _MAX_DEPTH:
            return f"nests deeper than {_MAX_DEPTH} levels"
        if isinstance(item, dict) and not all(isinstance(k, str) for k in item):
            return "is a dict with keys that are not strings"
        if not isinstance(item, dict | list | tuple):
            return f"holds {brief(item)}, not plain data"
        children = item.values() if isinstance(item, dict) else item
        pushed += len(children)
        if pushed > _MAX_VALUES:
            return f"holds more than {_MAX_VALUES} values"
        stack.extend((child, depth + 1) for child in children)
    return None


def _metrics_until(path: Path, step: int) -> list[dict[str, Any]] | None:
    """The records of the metrics log up to ``step`` (``None`` without a log), each a dict with a step."""
    if not path.is_file():
        return None
    try:
        records = read_metrics(path)
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: a malformed line, or text not in UTF-8
        raise ResumeError(f"--resume: {path}: {_first_line(exc)}") from exc
    for number, record in enumerate(records, start=1):
        logged = record.get("step") if isinstance(record, dict) else None
        if isinstance(logged, bool) or not isinstance(logged, int) or logged < 0:
            raise ResumeError(
                f"--resume: {path}: record {number} is not a JSON object with a whole-number step >= 0; fix or "
                "delete that line"
            )
    return [r for r in records if r["step"] <= step]


#: the evals before and after training, as JSON, in the run directory (read back by a resume of a finished run)
EVALS = "evals.json"


def report(out: Path, before: EvalSummary | None, after: EvalSummary | None) -> None:
    """The end-of-run summary: a table of the main curves, PNG plots, and eval before → after."""
    evals = {"before": asdict(before) if before else None, "after": asdict(after) if after else None}
    (out / EVALS).write_text(json.dumps(evals, indent=2) + "\n", encoding="utf-8")
    records = read_metrics(out / "metrics.jsonl")
    keys = [
        "train/reward",
        "train/success",
        "retry/beat_base_rate",
        "retry/retry_success_rate",
        "loss/total",
        "speed/train_tokens_per_s",
        "eval/success_rate",
        "eval/first_attempt_success",
    ]
    lines = summary_lines(records, keys)
    steps = [r for r in records if "update/skipped_no_contrast" in r]
    if (
        steps
    ):  # a step without contrast does not step the optimiser (r3l_learn.algorithms.update): say how many there were
        idle = sum(bool(r["update/skipped_no_contrast"]) for r in steps)
        bad = sum(bool(r.get("skipped")) for r in steps)
        lines.append(
            f"optimiser steps: {len(steps) - idle - bad} of {len(steps)} ({idle} without contrast, {bad} non-finite: "
            "not stepped)"
        )
    plots = plot_metrics(records, out / "plots")
    text = "\n".join(lines)
    if before and after:
        text += (
            f"\neval on {after.env_id} [{after.split}], {after.episodes} episodes: success "
            f"{before.success_rate:.3f} -> {after.success_rate:.3f}, score {before.mean_score:.3f} -> "
            f"{after.mean_score:.3f}"
        )
    (out / "summary.txt").write_text(text + "\n", encoding="utf-8")
    logger.info("summary:\n%s\nplots: %s", text, ", ".join(str(p) for p in plots))


def recorded_evals(out: Path, before: EvalSummary | None) -> tuple[EvalSummary | None, EvalSummary | None]:
    """The evals before and after training that a finished run recorded in ``out`` (``before`` where none was);
    :class:`ResumeError` if the file is not what :func:`report` writes."""
    recorded = out / EVALS
    if not recorded.is_file():
        return before, None
    data = _read_json(recorded)
    if not isinstance(data, dict) or not set(data) <= {"before", "after"}:
        raise ResumeError(f"--resume: {recorded} is not an object with 'before' and 'after'; delete it")
    after = eval_summary(data.get("after"), f"--resume: {recorded}: after")
    return eval_summary(data.get("before"), f"--resume: {recorded}: before") or before, after


def eval_summary(data: Any, source: str) -> EvalSummary | None:
    """The :class:`EvalSummary` that plain ``data`` (``asdict`` of one, or None) describes; :class:`ResumeError`
    naming ``source`` and the field if it has other fields, or values of another type (numbers must be finite)."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ResumeError(f"{source} is a {type(data).__name__}, not an eval summary")
    fields = {f.name: f for f in dataclasses.fields(EvalSummary)}
    missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING and n not in data]
    unknown = [brief(k) for k in data if k not in fields]
    if missing or unknown:
        raise ResumeError(f"{source} is not an eval summary (lacks {missing}, unknown {unknown}); delete it")
    values = {name: _field_value(data[name], fields[name].type, f"{source}.{name}") for name in data}
    return EvalSummary(**values)


def _field_value(value: Any, kind: Any, what: str) -> Any:
    kind = str(kind)  # the annotation as written (EvalSummary's module postpones them)
    if kind not in _FIELD_CHECKS:
        raise TypeError(f"eval_summary cannot check {what} of type {kind}: teach it that type")
    if not _FIELD_CHECKS[kind](value):
        raise ResumeError(f"{what} is {brief(value)}, not a valid {kind}; delete the file")
    return float(value) if kind == "float" else value


def _count(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 0


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond any float
        return False


#: how each type an :class:`EvalSummary` field is annotated with is checked
_FIELD_CHECKS = {
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "int": _count,
    "float": _finite,
    "dict[str, int]": lambda v: isinstance(v, dict) and all(isinstance(k, str) and _count(c) for k, c in v.items()),
}


def read_saved_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A run's saved ``config.json`` (what ``r3l train --resume`` starts from), checked to be a valid config on
    its own; :class:`ResumeError` naming the file and the problem otherwise."""
    data = _read_json(Path(path))
    if not isinstance(data, dict):
        raise ResumeError(f"--resume: {path} holds a {type(data).__name__}, not a config object; delete it")
    try:
        config_from_dict(data)
    except Exception as exc:  # TrainConfig's own checks, or a value of a type they do not expect
        raise ResumeError(
            f"--resume: {path} is not a valid configuration ({_first_line(exc)}); fix or delete it"
        ) from exc
    return data


def _read_json(path: Path, limit: int = _MAX_JSON_BYTES) -> Any:
    """A small JSON file of the run directory (bounded: what r3l writes there is a few kilobytes)."""
    try:
        size = path.stat().st_size
        if size > limit:
            raise ResumeError(f"--resume: {path} is {size} bytes, more than any r3l writes ({limit}); delete it")
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not JSON, or not UTF-8
        raise ResumeError(f"--resume: {path} is not readable JSON ({_first_line(exc)}); delete it") from exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
