"""Training metrics: JSONL (always), TensorBoard (when installed), PNG plots and a summary table at the end."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MetricsLogger", "plot_metrics", "read_metrics", "summary_lines"]

logger = logging.getLogger(__name__)

#: the curves plotted at the end, one PNG each: title -> metric keys drawn on it
PLOTS: dict[str, tuple[str, ...]] = {
    "reward": ("train/reward", "eval/mean_reward"),
    "success": ("train/success", "eval/success_rate", "eval/first_attempt_success"),
    "retries": ("retry/beat_base_rate", "retry/retry_success_rate", "retry/parse_rate"),
    "loss": ("loss/total", "loss/policy", "loss/aux"),
    # reflect-then-retry's mechanism (r3l_learn.loop.mechanism): where the gradient comes from, and the rescues
    "mechanism": ("mechanism/retry_loss_share", "mechanism/amplification_grad_share"),
    "rescues": ("mechanism/groups", "mechanism/all_bases_failed", "mechanism/rescued"),
    "throughput": ("speed/train_tokens_per_s", "speed/generated_tokens_per_s"),
}


class MetricsLogger:
    """Appends one JSON object per record to ``out_dir/metrics.jsonl`` and mirrors scalars to TensorBoard
    (``out_dir/tensorboard``) when the ``tensorboard`` package is installed."""

    def __init__(self, out_dir: str | os.PathLike[str], *, tensorboard: bool = True):
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                logger.info("tensorboard is not installed: metrics go to %s only", self.path)
            else:
                self._tb = SummaryWriter(str(Path(out_dir) / "tensorboard"))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"step": step, **metrics}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=float) + "\n")
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` file, in order. A torn last line (a run killed mid-write) is
    skipped with a warning; any other malformed line is an error naming the file and line."""
    records = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if lineno == len(lines):
                logger.warning("%s:%d: skipping a torn last line", path, lineno)
                continue
            raise ValueError(f"{path}:{lineno}: not a JSON object ({exc}); fix or delete that line") from exc
    return records


def _series(records: Iterable[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in records:
        value = r.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            xs.append(r["step"])
            ys.append(float(value))
    return xs, ys


def plot_metrics(records: Sequence[dict[str, Any]], out_dir: str | os.PathLike[str]) -> list[Path]:
    """One PNG per curve family in :data:`PLOTS` that has data; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for title, keys in PLOTS.items():
        drawn = [(key, *_series(records, key)) for key in keys]
        drawn = [d for d in drawn if d[1]]
        if not drawn:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for key, xs, ys in drawn:
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, label=key)
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{title}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def summary_lines(records: Sequence[dict[str, Any]], keys: Sequence[str]) -> list[str]:
    """A small table: for each key, its first and last value and the mean over the run."""
    rows = []
    for key in keys:
        _, ys = _series(records, key)
        if ys:
            rows.append((key, ys[0], ys[-1], sum(ys) / len(ys), len(ys)))
    if not rows:
        return []
    width = max(len(r[0]) for r in rows)
    out = [f"{'metric':<{width}}  {'first':>8}  {'last':>8}  {'mean':>8}  {'n':>4}"]
    out += [f"{k:<{width}}  {a:>8.4f}  {b:>8.4f}  {m:>8.4f}  {n:>4}" for k, a, b, m, n in rows]
    return out
