"""Seed quotas: which seeds a cell is made with when some registered seeds cannot be made here.

Each (env, seed) is made on one CPU kind (:mod:`~benchmarks.learning_study.kinds`), so a seed another kind began
waits for a machine of that kind. Where such machines stop coming, the registered seeds cannot all be finished. A
seed quota (declared by the amendment :func:`declare_seeds` writes, before any run it admits) replaces a cell's
fixed seeds by candidate seeds and a number of finished pairs to reach:

- a *group* is the cells whose runs of one seed are compared with each other: R³L, GRPO and the strongest
  baseline of an env (quota :data:`SEED_PLAN` ``main``), or R³L and one other method (``other``);
- a seed counts for a group where every cell of the group finished it;
- a machine walks the group's candidates in order: a seed that counts is counted, a seed another CPU kind began
  and has not finished is skipped, and any other seed is made (and counted) until the count reaches the quota.

The registered seeds are the first candidates, so where every seed can be made the plan is the registered one; and
since the walk is in order, a machine of the kind that began a skipped seed still makes it later, even where
substitutes have met the quota meanwhile (a pair more, never one fewer).
The rule reads which runs finished, never what they measured; the analysis pairs every seed where both runs of a
pair finished, so a later machine adds pairs and never removes any.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .amendments import refuse_runs_made, seed_amendment
from .grid import run_name

__all__ = [
    "SEED_PLAN",
    "SEED_RULES",
    "allowed_runs",
    "counted_seeds",
    "declare_seeds",
    "groups",
    "runs_admitted",
    "seeds_to_make",
    "shortfall",
]

#: candidate seeds and quota per kind of group: R³L with GRPO and the strongest baseline ("main"), R³L with one
#: other method ("other"); the candidates start with the registered seeds (0-9 and 0-4)
SEED_PLAN = {"main": {"candidates": list(range(15)), "quota": 10}, "other": {"candidates": list(range(10)), "quota": 5}}

#: what the seed amendment states (the page prints it)
SEED_RULES = (
    "each group of cells compared seed by seed (R³L, GRPO and the strongest baseline of an env; R³L and each other "
    "method) has candidate seeds, the registered ones first (main: 0-14; others: 0-9), and a quota of seeds where "
    "every cell of the group finished (main: 10; others: 5)",
    "a machine walks a group's candidates in order: a seed the group finished counts, a seed another CPU kind began "
    "and has not finished is skipped, and any other seed is made until the count reaches the quota",
    "the rule reads which runs finished, never what they measured",
    "the analysis pairs every seed where both runs of a pair finished, so a later machine adds pairs and never removes "
    "any",
)


def groups(
    main: Mapping[str, Sequence[str]],
    others: Mapping[str, Sequence[str]],
    reference: str,
    plan: Mapping[str, Mapping[str, Any]] = SEED_PLAN,
) -> tuple[dict[str, Any], ...]:
    """The quota groups of a grid, per env (the keys of ``main``): the main cells ``main[env]`` (R³L first), and
    ``reference`` with each of ``others[env]``. Each group: ``{"env", "methods", "seeds" (candidates), "quota"}``."""
    out = []
    for env, methods in main.items():
        out.append({"env": env, "methods": list(methods), **_plan(plan["main"])})
        out += [{"env": env, "methods": [reference, m], **_plan(plan["other"])} for m in others[env]]
    return tuple(out)


def _plan(part: Mapping[str, Any]) -> dict[str, Any]:
    return {"seeds": list(part["candidates"]), "quota": int(part["quota"])}


def counted_seeds(group: Mapping[str, Any], finished: Collection[str]) -> list[int]:
    """The group's candidate seeds where every cell of the group finished (``finished``: run names)."""
    env, methods = group["env"], group["methods"]
    return [s for s in group["seeds"] if all(run_name(env, m, s) in finished for m in methods)]


def seeds_to_make(
    group: Mapping[str, Any], finished: Collection[str], began: Mapping[tuple[str, int], set[str]], kind: str
) -> list[int]:
    """The seeds a machine of CPU kind ``kind`` makes for ``group`` (see the module's rule). ``began``: per (env,
    seed), the CPU kinds its runs were made on."""
    counted, make = set(counted_seeds(group, finished)), []
    count = 0
    for seed in group["seeds"]:
        if count >= group["quota"]:
            break
        if seed in counted:
            count += 1
            continue
        kinds = began.get((group["env"], seed), set())
        if kinds and kind not in kinds:
            continue  # another kind began it: left for a machine of that kind
        make.append(seed)
        count += 1
    return make


def allowed_runs(
    quota_groups: Sequence[Mapping[str, Any]],
    finished: Collection[str],
    began: Mapping[tuple[str, int], set[str]],
    kind: str,
) -> set[str]:
    """The names of the runs a machine of kind ``kind`` makes under the quotas: every run of each group's seeds to
    make (:func:`seeds_to_make`)."""
    out = set()
    for g in quota_groups:
        out |= {run_name(g["env"], m, s) for s in seeds_to_make(g, finished, began, kind) for m in g["methods"]}
    return out


def shortfall(group: Mapping[str, Any], finished: Collection[str]) -> int:
    """How many more seeds the group needs to reach its quota."""
    return max(0, group["quota"] - len(counted_seeds(group, finished)))


def runs_admitted(
    made: Sequence[tuple[str, str, int]], main: Mapping[str, Sequence[str]], registered: Mapping[str, Sequence[int]]
) -> list[str]:
    """The runs among ``made`` (env, method, seed) of a seed the registration did not plan for their cell (main
    cells: ``registered["main_seeds"]``; the others: ``registered["other_seeds"]``): the runs only a seed quota
    admits, which must not precede its declaration."""
    out = []
    for env, method, seed in made:
        planned = registered["main_seeds"] if method in main.get(env, ()) else registered["other_seeds"]
        if seed not in planned:
            out.append(run_name(env, method, seed))
    return out


def declare_seeds(
    amendments: Sequence[Mapping[str, Any]], *, admitted_made: Sequence[str], declared: Mapping[str, Any]
) -> dict[str, Any]:
    """The amendment replacing the registered seeds by seed quotas (:data:`SEED_PLAN` under :data:`SEED_RULES`).

    Args:
        admitted_made: the runs already made that only the quotas admit (:func:`runs_admitted`; any refuses).
        declared: its :func:`~benchmarks.learning_study.amendments.declaration`.

    Raises:
        ValueError: seed quotas are already declared, or runs they admit were made before.
    """
    if seed_amendment(amendments) is not None:
        raise ValueError("seed quotas are already declared by an amendment")
    refuse_runs_made(admitted_made, "runs the seed quotas would admit")
    return {"seeds": {k: dict(v) for k, v in SEED_PLAN.items()}, **dict(declared), "rules": list(SEED_RULES)}
