"""What a run directory holds (``config.json``, ``metrics.jsonl``, ``summary.txt``, checkpoints, ``run.json``) and
what that makes its run: done, resumable, fresh, or a run of another configuration."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from .grid import Run

#: TrainConfig fields an invocation may override for memory or speed: the loss does not depend on them (1×8 = 8×1
#: and the shared prefix are tested)
MEMORY_ONLY = frozenset({"micro_batch_size", "shared_prefix_min", "shared_prefix_tree"})
#: TrainConfig fields a mode resolves per machine (autocast bf16 only where the CPU computes bf16 natively; the
#: rollout engine where vLLM is installed and measured faster): a finished run made on another machine is the same
#: cell of the grid, made there (the page names its machine and its engine)
MACHINE_RESOLVED = frozenset({"autocast", "rollout_backend"})
#: what may differ between a cell and a committed run summary that stands for it: where and how the run was made,
#: never what it trained or measured (steps and evals must match: a summary is not resumed, it is the result)
CARRY_FREE = MEMORY_ONLY | MACHINE_RESOLVED | {"out_dir", "progress", "checkpoint_every", "save_final", "eval_before"}


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of the run's ``metrics.jsonl`` (none before it exists)."""
    from r3l_learn.loop.metrics import read_metrics

    path = run_dir / "metrics.jsonl"
    return read_metrics(path) if path.is_file() else []


def finished(run: Run) -> bool:
    """The run wrote its summary and its final record (the final eval, or the last step without evals)."""
    if not (run.run_dir / "summary.txt").is_file():
        return False
    key = "eval/success_rate" if run.config["eval_episodes"] else "train/reward"
    return any(r.get("step") == run.config["steps"] and key in r for r in metrics(run.run_dir))


def state(run: Run) -> str:
    """``done``, ``resume`` (checkpoints, no final eval), ``fresh`` (nothing usable) or ``stale`` (the run
    directory holds a run of another configuration)."""
    from r3l_learn.loop.train import RESUMABLE_CHANGES  # what a run may change and still resume

    saved = run.run_dir / "config.json"
    free = RESUMABLE_CHANGES | MEMORY_ONLY | {"out_dir"}  # a run moved to its cell's directory is still that run
    if saved.is_file() and not same_run(run.config, json.loads(saved.read_text()), free):
        return "stale"
    if finished(run):
        return "done"
    from r3l_learn.loop.checkpoints import latest_checkpoint

    return "resume" if latest_checkpoint(run.run_dir / "checkpoints") else "fresh"


def start_over(run_dir: Path) -> None:
    """Empty a run directory that has nothing to resume (it stopped before its first checkpoint), but for the
    batches its eval before training finished (``evals/``): those are exactly what the eval would play again
    (:mod:`r3l_learn.loop.eval_resume`, which drops them under other weights or settings), and that eval is the
    longest piece of a run before its first checkpoint."""
    for path in run_dir.iterdir():
        if path.name == "evals":
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def same_run(config: dict[str, Any], saved: dict[str, Any], free: frozenset[str]) -> bool:
    """Whether the TrainConfig fields ``config`` make the run whose saved config is ``saved``, but for ``free``."""
    from r3l_learn.loop.train import config_from_dict

    return not config_from_dict(config).changed_from(saved, free)


def attempts(run_dir: Path) -> list[dict[str, Any]]:
    """Every subprocess that ran this cell (``run.json``): return code, wall time, load, resumed or not."""
    path = run_dir / "run.json"
    return json.loads(path.read_text())["attempts"] if path.is_file() else []


def append_attempt(run_dir: Path, attempt: dict[str, Any]) -> None:
    """Record one more attempt in ``run.json``."""
    data = {"attempts": [*attempts(run_dir), attempt]}
    (run_dir / "run.json").write_text(json.dumps(data, indent=2) + "\n")
