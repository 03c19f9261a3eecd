"""A training run on disk and across Ctrl-C: its trainable weights, resuming from its newest checkpoint, the
evals it recorded, its end-of-run report, and SIGINT handling that never leaves weights half-updated."""

from __future__ import annotations

import contextlib
import json
import logging
import signal
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from r3l_learn.checkpoints import ResumeError, latest_checkpoint, load_checkpoint, set_rng_state
from r3l_learn.config import RESUMABLE_CHANGES, TrainConfig
from r3l_learn.evaluate import EvalSummary
from r3l_learn.metrics import plot_metrics, read_metrics, summary_lines
from r3l_learn.train_setup import TaskStream

__all__ = ["EVALS", "Interrupts", "load_trainable_state", "recorded_evals", "report", "resume_state", "trainable_state"]

logger = logging.getLogger(__name__)


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


def load_trainable_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy a checkpoint's trainable weights into ``model``."""
    params = dict(model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in state]
    if missing:
        raise ResumeError(f"the checkpoint lacks {len(missing)} trainable weights (e.g. {missing[0]}): another model?")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


def resume_state(config: TrainConfig, model: Any, optimizer: Any, stream: TaskStream) -> tuple[int, EvalSummary | None]:
    """Load the newest checkpoint of ``config.out_dir`` into the model, optimiser, RNGs and task stream (the config
    must match the saved one); drop what was logged after it. Returns the step it holds and the eval before."""
    out = Path(config.out_dir)
    path = latest_checkpoint(out / "checkpoints")
    if path is None:
        raise ResumeError(f"--resume: no checkpoint in {out / 'checkpoints'}; start without --resume")
    state = load_checkpoint(path)
    changed = config.changed_from(state["config"])
    if changed:
        raise ResumeError(
            f"{path} was made with a different configuration ({', '.join(changed)}); resume with the same settings "
            f"(only {sorted(RESUMABLE_CHANGES)} may change) or start a new --out-dir"
        )
    load_trainable_state(model, state["model"])
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])
    stream.cursor = state["cursor"]
    step = state["step"]
    metrics_path = out / "metrics.jsonl"
    if metrics_path.is_file():  # drop what the interrupted run logged after its checkpoint
        kept = [r for r in read_metrics(metrics_path) if r["step"] <= step]
        metrics_path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    logger.info("resumed from %s at step %d", path, step)
    before = state.get("eval_before")
    return step, EvalSummary(**before) if before else None


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
    """The evals before and after training that a finished run recorded in ``out`` (``before`` where none was)."""
    recorded = out / EVALS
    if not recorded.is_file():
        return before, None
    data = json.loads(recorded.read_text(encoding="utf-8"))
    after = EvalSummary(**data["after"]) if data.get("after") else None
    return (EvalSummary(**data["before"]) if data.get("before") else before), after
