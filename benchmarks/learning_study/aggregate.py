"""From run directories to the numbers on the page: per run (evals, budget, retry counters), per (method, env) cell
(means with 95 % intervals over seeds, pooled retry economics), R³L vs every other method paired by seed, missing
cells, and a harness check (every method's eval before training agrees for a seed)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import quota
from .grid import METHODS, Method, Mode, Run, reference, run_name
from .kinds import kinds_agree
from .rundir import CARRY_FREE, MEMORY_ONLY, attempts, finished, metrics, same_run, state
from .stats import mean_ci, paired, ratio, verdict

#: the per-step speed metrics summed over a run (CPU seconds: what a shared machine's load inflates least)
SPEED_SUMS = (
    "speed/generated_tokens",
    "speed/collect_s",
    "speed/update_s",
    "speed/collect_cpu_s",
    "speed/update_cpu_s",
)

#: the TrainConfig fields the grid varies per cell (the page lists them per env and method, and the rest once)
VARYING = (
    *("env", "env_kwargs", "algo", "ablations", "reflector", "max_turns", "max_new_tokens", "actions"),
    "temperature",  # the training temperature, where an env sets its own
    "lr",  # a mode may set it per method or per cell (a learning rate chosen beforehand)
    "measure_amplification",  # measured in the reflect-retry cells only (one more backward pass per step)
)

#: the per-step counts and shares of reflect-then-retry's mechanism the learner logs (``mechanism/*``)
MECHANISM = ("groups", "all_bases_failed", "rescued", "retry_loss_share", "amplification_grad_share")


def summary_name(summary: dict[str, Any]) -> str:
    """The run name (:func:`grid.run_name`) of a run summary."""
    return run_name(summary["env"], summary["method"], summary["seed"])


def carried_names(summaries: Sequence[dict[str, Any]]) -> set[str]:
    """The names of the run summaries carried over from a committed report (:func:`carried_over`)."""
    return {summary_name(s) for s in summaries if s["carried"]}


def _num(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def run_summary(run: Run, machine: str | None = None) -> dict[str, Any]:
    """What one run measured: evals (with the budget spent before each), totals, and the retry counters. A run
    directory that holds a run of another configuration (``stale``) counts as not finished. ``machine``: the CPU
    kind the run directories were made on (this one's, unless they were copied here); none for a run not begun."""
    stale = state(run) == "stale"
    records = metrics(run.run_dir)
    steps = [r for r in records if "train/reward" in r]
    sums: dict[str, float] = {}
    for r in steps:  # the mean pivot is logged per step: weight it by the step's retries
        if _num(r.get("retry/mean_pivot")) is not None and r.get("retry/retries"):
            sums["bench/pivot_sum"] = sums.get("bench/pivot_sum", 0.0) + r["retry/mean_pivot"] * r["retry/retries"]
    for r in steps:
        for key, value in r.items():
            if (key.startswith("bench/") or key in SPEED_SUMS) and (_num(value) is not None):
                sums[key] = sums.get(key, 0.0) + float(value)
    curve = []
    for r in records:
        if "eval/success_rate" not in r:
            continue
        before = [s for s in steps if s["step"] <= r["step"]]
        curve.append(
            {
                "step": r["step"],
                "trajectories": sum(s.get("train/trajectories", 0) for s in before),
                "tokens": sum(s.get("bench/rollout_tokens", s.get("speed/generated_tokens", 0)) for s in before),
                "success": _num(r.get("eval/success_rate")),
                "score": _num(r.get("eval/mean_score")),
                "first_attempt": _num(r.get("eval/first_attempt_success")),
            }
        )
    timed_evals = [r for r in records if _num(r.get("eval/cpu_s")) is not None]
    mechanism = [
        {"step": r["step"], **{k: _num(r.get(f"mechanism/{k}")) for k in MECHANISM}}
        for r in steps
        if any(f"mechanism/{k}" in r for k in MECHANISM)
    ]
    first = next((c for c in curve if c["step"] == 0), None)
    last = next((c for c in curve if c["step"] == run.config["steps"]), None)
    tries = attempts(run.run_dir)
    result_path = run.run_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    return {
        "env": run.env_key,
        "method": run.method_key,
        "seed": run.seed,
        "run_dir": str(run.run_dir),
        "finished": not stale and finished(run),
        "stale": stale,
        "steps_logged": len(steps),
        "curve": curve,
        "before": first,
        "after": last,
        "trajectories": sum(s.get("train/trajectories", 0) for s in steps),
        # the budget every method gets, under the name the pre-registered study's records use
        "sampled_trajectories": sum(s.get("train/trajectories", 0) for s in steps),
        # steps whose gradient was not zero: with equal rewards in every group (and no aux sample, no KL drift) a
        # step has nothing to learn from (only weight decay and Adam's momentum move the weights)
        "updates": sum(1 for s in steps if (_num(s.get("grad_norm")) or 0.0) > 0),
        "optimizer": optimizer_counts(steps),
        "logged_generated_tokens": sums.get("speed/generated_tokens"),
        "sums": {k.removeprefix("bench/"): v for k, v in sums.items() if k.startswith("bench/")},
        "collect_s": sums.get("speed/collect_s"),
        "update_s": sums.get("speed/update_s"),
        "collect_cpu_s": sums.get("speed/collect_cpu_s"),
        "update_cpu_s": sums.get("speed/update_cpu_s"),
        # held-out evals: their CPU seconds and episodes (runs logged before eval/cpu_s existed have none)
        "eval_cpu_s": sum(r["eval/cpu_s"] for r in timed_evals) or None,
        "eval_episodes": len(timed_evals) * run.config["eval_episodes"],
        "wall_s": sum(a.get("wall_s", 0.0) for a in tries) or None,
        "load": [a.get("load_start") for a in tries] + [a.get("load_end") for a in tries[-1:]],
        "eval_after_detail": result.get("eval_after"),
        "machine": machine if run.run_dir.exists() else None,
        "autocast": run.config.get("autocast"),
        # the path the run took (the study runs on the fastest measured one) and its learning rate
        "rollout_backend": run.config.get("rollout_backend", "hf"),
        "shared_prefix_min": run.config.get("shared_prefix_min"),
        "lr": run.config.get("lr"),
        "carried": False,
        **({"mechanism": mechanism} if mechanism else {}),
    }


def optimizer_counts(steps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per run, from its step records: steps that stepped AdamW, steps skipped for want of contrast (the shared
    zero-contrast rule), steps whose non-finite loss was discarded, AdamW's own step count at the end, and the
    sampled replies cut at the token cap. ``None`` where the run was logged before the learner recorded them."""
    logged = [s for s in steps if "update/skipped_no_contrast" in s]
    cut = [s["rollout/cut_replies"] for s in steps if _num(s.get("rollout/cut_replies")) is not None]
    if not logged:
        return {"stepped": None, "no_contrast": None, "non_finite": None, "adamw_steps": None, "cut_replies": None}
    no_contrast = sum(bool(s["update/skipped_no_contrast"]) for s in logged)
    non_finite = sum(bool(s.get("skipped")) for s in logged)
    adamw = [s["update/optimizer_steps"] for s in logged if _num(s.get("update/optimizer_steps")) is not None]
    return {
        "stepped": len(logged) - no_contrast - non_finite,
        "no_contrast": no_contrast,
        "non_finite": non_finite,
        "adamw_steps": adamw[-1] if adamw else None,
        "cut_replies": sum(cut) if cut else None,
    }


def carried_over(runs: Sequence[Run], saved: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The committed summaries (a saved ``learning.json``) that stand for cells with no run directory here: so a
    study continued on a fresh machine keeps what earlier machines finished. A summary counts only if its run
    finished and its config makes the same cell (:data:`rundir.CARRY_FREE` aside: the machine, the micro-batch).
    Keyed by run name; each is marked ``carried`` with the machine and autocast it ran with."""
    if not saved:
        return {}
    configs, machine = saved.get("configs", {}), saved.get("machine", {}).get("cpu_kind")
    summaries = {summary_name(s): s for s in saved.get("runs", [])}
    from r3l_learn.loop.train import TrainConfig

    defaults, out = TrainConfig().to_dict(), {}
    for run in runs:
        summary, config = summaries.get(run.name), configs.get(run.name)
        if run.run_dir.exists() or not (summary and summary["finished"] and config):
            continue
        # a report's configs are the grid's (TrainConfig defaults left out), not a run's whole config.json: the
        # fields they lack are today's defaults, as in the cell's own config (never FORMER_BEHAVIOUR's values)
        if same_run(run.config, {**defaults, **config}, CARRY_FREE):
            autocast = summary.get("autocast", config.get("autocast"))
            out[run.name] = {**summary, "machine": summary.get("machine") or machine, "autocast": autocast}
            out[run.name]["carried"] = True
    return out


def cell_summary(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Across the finished seeds of one (method, env): means with 95 % CIs, budgets, retry economics."""
    done = [s for s in summaries if s["finished"] and s["after"]]
    out: dict[str, Any] = {"seeds": [s["seed"] for s in done]}
    for key in ("success", "score", "first_attempt"):
        after = {s["seed"]: s["after"][key] for s in done if s["after"][key] is not None}
        before = {s["seed"]: s["before"][key] for s in done if s["before"] and s["before"][key] is not None}
        out[key] = mean_ci(list(after.values()))
        out[f"{key}_before"] = mean_ci(list(before.values()))
        out[f"{key}_delta"] = paired(after, before)
        out[f"{key}_by_seed"] = after
    out["trajectories"] = mean_ci([s["trajectories"] for s in done])
    out["updates"] = mean_ci([s["updates"] for s in done])
    counted_steps = [s["optimizer"] for s in done if (s.get("optimizer") or {}).get("stepped") is not None]
    out["optimizer"] = {
        key: sum(c[key] or 0 for c in counted_steps) if counted_steps else None
        for key in ("stepped", "no_contrast", "non_finite", "cut_replies")
    }
    out["optimizer"]["runs"] = len(counted_steps)
    out["logged_generated_tokens"] = mean_ci([s["logged_generated_tokens"] for s in done])
    out["wall_min"] = mean_ci([s["wall_s"] / 60 for s in done if s["wall_s"]])
    out["cost"] = _cost(done)
    # what a run costs depends on the machine (an AVX2 CPU computes without bf16 at about 2.5x the CPU time): per
    # CPU kind, so that a cell made on two kinds is never compared with one made on one
    kinds: dict[str, list[dict[str, Any]]] = {}
    for s in done:
        kinds.setdefault(s.get("machine") or "unknown", []).append(s)
    out["by_kind"] = {
        kind: {"cost": _cost(runs), "wall_min": mean_ci([s["wall_s"] / 60 for s in runs if s["wall_s"]])}
        for kind, runs in sorted(kinds.items())
    }
    details = [s["eval_after_detail"] for s in done if s["eval_after_detail"]]
    out["eval_turns"] = mean_ci([d["mean_turns"] for d in details])
    out["eval_parse_errors"] = mean_ci([d["parse_error_rate"] for d in details])
    pooled: dict[str, float] = {}
    for s in done:
        for key, value in s["sums"].items():
            pooled[key] = pooled.get(key, 0.0) + value
    out["pooled"] = pooled
    # a run logged before the bench/* counters existed has none: it is left out, never counted as 0 tokens
    counted = [s["sums"] for s in done if "rollout_tokens" in s["sums"]]
    out["generated_tokens"] = mean_ci([c["rollout_tokens"] + c.get("reflection_tokens", 0) for c in counted])
    out["env_steps"] = mean_ci([c["env_steps"] for c in counted if "env_steps" in c])
    spent = pooled.get("rollout_tokens", 0) + pooled.get("reflection_tokens", 0)
    out["economics"] = {
        "retries": pooled.get("retries"),
        "mean_pivot": ratio(pooled.get("pivot_sum", 0.0), pooled.get("retries")),
        "parse_rate": ratio(pooled.get("reflections_parsed"), pooled.get("bases_reflected")),
        "beat_base_rate": ratio(pooled.get("retries_beat_base"), pooled.get("retries")),
        "retry_success_rate": ratio(pooled.get("retries_succeeded"), pooled.get("retries")),
        "token_cost_vs_scratch": ratio(pooled.get("retry_tokens"), pooled.get("scratch_tokens")),
        "step_cost_vs_scratch": ratio(pooled.get("retry_env_steps"), pooled.get("scratch_env_steps")),
        "train_success_rate": ratio(pooled.get("successes"), pooled.get("trajectories")),
        "tokens_per_success": ratio(spent, pooled.get("successes")) if counted else None,
        "env_steps_per_success": ratio(pooled.get("env_steps"), pooled.get("successes")),
        "masked_share": (1 - pooled["target_tokens"] / pooled["agent_tokens"] if pooled.get("agent_tokens") else None),
        "successes": pooled.get("successes"),
    }
    return out


def _cost(done: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """CPU seconds per sampled trajectory (collection, update) and per held-out episode, pooled over the seeds
    that logged them, and the trajectories trained per CPU-hour they imply."""
    timed = [s for s in done if s.get("collect_cpu_s") is not None and s.get("update_cpu_s") is not None]
    trajectories = sum(s["trajectories"] for s in timed)
    collect = ratio(sum(s["collect_cpu_s"] for s in timed), trajectories)
    update = ratio(sum(s["update_cpu_s"] for s in timed), trajectories)
    evals = [s for s in done if s.get("eval_cpu_s")]
    return {
        "collect_cpu_s": collect,
        "update_cpu_s": update,
        "per_cpu_hour": 3600 / (collect + update) if collect is not None and update is not None else None,
        "eval_cpu_s": ratio(sum(s["eval_cpu_s"] for s in evals), sum(s["eval_episodes"] for s in evals)),
    }


def mean_curve(runs: Sequence[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """Held-out ``metric`` along training over the finished ``runs`` of one cell: per eval step that every run
    made, the mean trajectories sampled before it and the mean with its 95 % CI over the runs (seeds)."""
    steps = sorted({c["step"] for r in runs for c in r["curve"]})
    points = []
    for step in steps:
        at = [c for r in runs for c in r["curve"] if c["step"] == step and c[metric] is not None]
        if at and len(at) == len(runs):
            trajectories = sum(c["trajectories"] for c in at) / len(at)
            points.append({"step": step, "trajectories": trajectories, **mean_ci([c[metric] for c in at])})
    return points


def aggregate(
    mode: Mode,
    runs: Sequence[Run],
    methods: dict[str, Method] = METHODS,
    *,
    saved: dict[str, Any] | None = None,
    machine: str | None = None,
) -> dict[str, Any]:
    """Per-run and per-cell summaries, paired comparisons, missing cells and sanity checks. ``saved``: a committed
    report whose finished runs stand for the cells without a run directory here (:func:`carried_over`)."""
    carried = carried_over(runs, saved)
    per_run = [carried.get(r.name) or run_summary(r, machine) for r in runs]

    # Runs that did not evaluate the initial model themselves (``eval_before`` off) take the eval of the run of
    # the same (env, seed) that did: same model, same episodes, same seeds, same arithmetic (the CPU kind, which
    # also made the start model, and the autocast). Where the held-out episodes are the same for every seed
    # (``before_once_per_env``), of the run of the same env.
    def key(s: dict[str, Any]) -> tuple[Any, ...]:
        return s["env"], None if mode.before_once_per_env else s["seed"], s.get("machine"), s.get("autocast")

    initial = {key(s): s["before"] for s in per_run if s["finished"] and s["before"] and not s.get("before_shared")}
    for s in per_run:
        if s["carried"]:
            continue  # shared (or not) where it ran
        s["before_shared"] = not s["before"] and key(s) in initial
        if s["before_shared"]:
            s["before"] = initial[key(s)]
            s["curve"].insert(0, s["before"])
    cells: dict[str, dict[str, Any]] = {}
    for env in mode.envs:
        for method in mode.methods:
            mine = [s for s in per_run if s["env"] == env and s["method"] == method]
            cells[f"{method}|{env}"] = cell_summary(mine)
    comparisons = []
    for env in mode.envs:
        ref = reference(methods)
        if ref not in mode.methods:
            continue
        for other in mode.methods:
            if other == ref:
                continue
            a, b = cells[f"{ref}|{env}"], cells[f"{other}|{env}"]
            for key in ("success", "score"):
                diff = paired(a[f"{key}_by_seed"], b[f"{key}_by_seed"])
                comparisons.append({"env": env, "other": other, "metric": key, **diff, "verdict": verdict(diff)})
    missing = missing_cells(mode, per_run, cells)
    # The same seed evaluates the same held-out episodes with the same initial model: every method's eval before
    # training should agree (a check of the harness, not a result).
    before_agree = {}
    for env in mode.envs:
        for seed in sorted({s["seed"] for s in per_run if s["env"] == env}):
            vals: dict[Any, set[tuple[float, float]]] = {}  # per CPU kind and autocast: their evals may differ
            for s in per_run:
                if s["env"] == env and s["seed"] == seed and s["finished"] and s["before"] and not s["before_shared"]:
                    arithmetic = (s.get("machine"), s.get("autocast"))
                    vals.setdefault(arithmetic, set()).add((s["before"]["success"], s["before"]["score"]))
            if vals:
                before_agree[f"{env}|{seed}"] = all(len(v) == 1 for v in vals.values())
    return {
        "runs": per_run,
        "cells": cells,
        "comparisons": comparisons,
        "missing": missing,
        "before_agree": before_agree,
        "kinds_agree": kinds_agree(per_run),
    }


def missing_cells(mode: Mode, per_run: Sequence[dict[str, Any]], cells: dict[str, Any]) -> list[dict[str, Any]]:
    """What is left to finish: per cell, its seeds not finished (``seeds``; ``stale``: those whose run directory
    holds a run of another configuration); under seed quotas, per group, how many more seeds it needs (``more``)
    and the seeds where every cell of the group finished (``counted``)."""
    out = []
    if mode.seed_quotas:
        finished = {summary_name(r) for r in per_run if r["finished"]}
        for g in mode.seed_quotas:
            more = quota.shortfall(g, finished)
            if more:
                counted = quota.counted_seeds(g, finished)
                out.append({"env": g["env"], "methods": g["methods"], "more": more, "counted": counted})
        return out
    for env in mode.envs:
        for method in (m for m in mode.methods if mode.runs_on(m, env)):
            have = set(cells[f"{method}|{env}"]["seeds"])
            lacking = [s for s in mode.seeds_for(method, env) if s not in have]
            stale = [r["seed"] for r in per_run if r["env"] == env and r["method"] == method and r["stale"]]
            if lacking:
                out.append({"env": env, "method": method, "seeds": lacking, "stale": stale})
    return out


def train_config(agg: dict[str, Any], saved: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The TrainConfig fields every cell shares (the first finished run's ``config.json`` here, less
    :data:`VARYING`; else those ``saved``, the report the carried runs come from, recorded), and the finished runs
    made with another memory-only setting; ``None`` when neither is there."""
    here = []
    for r in agg["runs"]:
        path = Path(r["run_dir"]) / "config.json"
        if not r["carried"] and r["finished"] and path.is_file():
            here.append((summary_name(r), json.loads(path.read_text())))
    earlier = (saved or {}).get("train_config")
    if here:
        shared = {k: v for k, v in here[0][1].items() if k not in VARYING}
        shared.update(out_dir="<run dir>", seed="<seed>")
    elif earlier:
        shared = dict(earlier["shared"])
    else:
        return None
    if len({r.get("autocast") for r in agg["runs"] if r["finished"]}) > 1:
        shared["autocast"] = "<per machine>"  # the page lists the machines and their autocast
    carried = carried_names(agg["runs"])
    overrides = [o for o in (earlier or {}).get("memory_overrides", []) if o["run"] in carried]
    for name, config in here:
        diff = {k: config[k] for k in sorted(MEMORY_ONLY) if k in config and config[k] != shared.get(k)}
        if diff:
            overrides.append({"run": name, "changes": diff})
    return {"shared": shared, "memory_overrides": overrides}
