"""Which CPU kind makes which run: one kind per (env, seed), and one eval before training per env and kind.

A CPU kind decides a run's arithmetic (bf16 autocast only where bf16 is native) and, through the start model
rebuilt there, the weights it starts from. A paired difference is meant to measure the methods alone, so every run
of an (env, seed) is made on the kind of that seed's first run: a seed another kind began is left for a machine of
that kind. The eval before training depends on the start model and the arithmetic too, so each kind makes its own
(once per env where every seed shares the held-out episodes). Machines are told apart by
:func:`r3l_learn.policies.device.cpu_kind`, which the run summaries record as ``machine``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .grid import Run
from .rundir import metrics

__all__ = ["kinds_agree", "kinds_of_seeds", "split_by_kind", "with_before_evals"]


def kinds_of_seeds(runs: Sequence[Run], carried: Mapping[str, dict[str, Any]], kind: str) -> dict[tuple, set[str]]:
    """Per (env, seed), the CPU kinds its runs were made on: the committed ones' and, for a run directory here,
    this machine's."""
    kinds: dict[tuple, set[str]] = {}
    for run in runs:
        made_on = carried[run.name].get("machine") if run.name in carried else kind if run.run_dir.exists() else None
        if made_on:
            kinds.setdefault((run.env_key, run.seed), set()).add(made_on)
    return kinds


def split_by_kind(
    todo: Sequence[Run], runs: Sequence[Run], carried: Mapping[str, dict[str, Any]], kind: str
) -> tuple[list[Run], list[Run]]:
    """``todo`` split into the runs this CPU kind may make and those of an (env, seed) that another kind began
    (``runs``: the whole grid; ``carried``: the committed summaries standing for its cells)."""
    kinds = kinds_of_seeds(runs, carried, kind)
    mine, elsewhere = [], []
    for run in todo:
        began = kinds.get((run.env_key, run.seed), set())
        (mine if not began or kind in began else elsewhere).append(run)
    return mine, elsewhere


def _has_before(run: Run, carried: Mapping[str, dict[str, Any]], kind: str) -> bool:
    if run.name in carried:
        summary = carried[run.name]
        return summary.get("machine") == kind and bool(summary.get("before"))
    return any(r.get("step") == 0 and "eval/success_rate" in r for r in metrics(run.run_dir))


def with_before_evals(
    todo: Sequence[Run], runs: Sequence[Run], carried: Mapping[str, dict[str, Any]], kind: str
) -> list[Run]:
    """``todo`` with ``eval_before`` set where the held-out episodes are the same for every seed: on the first run
    of each env in ``todo`` when no run of the env has evaluated the start model on this kind, off on the others."""
    done = {r.env_key for r in runs if _has_before(r, carried, kind)}
    out = []
    for run in todo:
        first = run.env_key not in done
        done.add(run.env_key)
        out.append(dataclasses.replace(run, config={**run.config, "eval_before": first}))
    return out


def kinds_agree(summaries: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
    """Per ``env|seed`` with finished runs: whether they were all made on one CPU kind (a check of the harness:
    a seed whose runs are of two kinds pairs across start models and arithmetic)."""
    kinds: dict[str, set[Any]] = {}
    for s in summaries:
        if s.get("finished"):
            kinds.setdefault(f"{s['env']}|{s['seed']}", set()).add(s.get("machine"))
    return {key: len(found) == 1 for key, found in kinds.items()}
