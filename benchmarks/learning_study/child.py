"""One cell of the grid, in its own process: ``python -m benchmarks.learning_study.child RUN_DIR`` reads
``RUN_DIR/spec.json`` (written by the scheduler), trains or resumes, and writes ``result.json``. Every step's
metrics gain ``bench/*`` counters computed from the step's groups (:func:`budget_counts`, through ``train``'s
``on_step`` hook)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import ROOT


def register_setup(setup: str | None) -> None:
    """Register an env that lives outside r3l_envs: ``DIR:module:function`` (DIR relative to the repository)."""
    if not setup:
        return
    import wrappers  # noqa: F401  (first: a tests/ folder on sys.path would shadow the package)

    folder, module, function = setup.split(":")
    path = str((ROOT / folder).resolve())
    if path not in sys.path:
        sys.path.append(path)
    getattr(importlib.import_module(module), function)()


def budget_counts(groups: Sequence[Any]) -> dict[str, int]:
    """What one step's groups cost and yielded, as sums (``bench/*`` metrics): trajectories, successes, tokens
    generated in rollouts (a retry's reused prefix excluded) and in reflections, env steps, retry counters."""
    trajs = [t for g in groups for t in g.trajectories]
    stats = [g.metadata.get("stats", {}) for g in groups]

    def total(key: str) -> int:
        return int(sum(s.get(key, 0) for s in stats))

    reused_tokens = total("scratch_tokens") - total("retry_tokens")
    reused_steps = total("scratch_env_steps") - total("retry_env_steps")
    reflection_tokens = 0
    for t in trajs:
        reflection = t.metadata.get("reflection") or {}
        reflection_tokens += len(reflection.get("token_ids") or [])
    counts = {
        "trajectories": len(trajs),
        "successes": sum(bool(t.won) for t in trajs),
        "rollout_tokens": sum(t.num_tokens for t in trajs) - reused_tokens,
        "reflection_tokens": reflection_tokens,
        "env_steps": sum(sum(turn.action is not None for turn in t.turns) for t in trajs) - reused_steps,
        "bases_reflected": total("bases"),
        "reflections_parsed": total("reflections_parsed"),
        "retries": total("retries"),
        "retries_beat_base": total("retries_beat_base"),
        "retries_succeeded": total("retries_succeeded"),
        "retry_tokens": total("retry_tokens"),
        "scratch_tokens": total("scratch_tokens"),
        "retry_env_steps": total("retry_env_steps"),
        "scratch_env_steps": total("scratch_env_steps"),
        # where pivotal credit changed the gradient: agent tokens vs those left in the loss (the difference is
        # the prefix turns of retried bases and their retries, masked out)
        "agent_tokens": sum(len(turn.token_ids) for t in trajs for turn in t.turns),
        "target_tokens": sum(sum(t.loss_mask) for t in trajs),
    }
    return {f"bench/{k}": v for k, v in counts.items()}


def run_cell(run_dir: Path) -> int:
    """Run one cell in this process: set up, train (or resume), write ``result.json``; 130 if interrupted."""
    import torch

    from r3l_learn.loop.train import TrainConfig, train

    spec = json.loads((run_dir / "spec.json").read_text())
    torch.set_num_threads(int(spec.get("threads") or 1))
    register_setup(spec.get("setup"))
    config = TrainConfig(**spec["config"])
    result = train(config, resume=spec["resume"], on_step=[lambda info: budget_counts(info.groups)])
    summary = {
        "steps_done": result.steps_done,
        "interrupted": result.interrupted,
        "eval_before": dataclasses.asdict(result.eval_before) if result.eval_before else None,
        "eval_after": dataclasses.asdict(result.eval_after) if result.eval_after else None,
    }
    if not result.interrupted:
        (run_dir / "result.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 130 if result.interrupted else 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    if len(sys.argv) != 2:
        sys.exit("usage: python -m benchmarks.learning_study.child RUN_DIR (the scheduler writes RUN_DIR/spec.json)")
    sys.exit(run_cell(Path(sys.argv[1])))
