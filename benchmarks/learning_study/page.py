"""The section ``learning`` of RESULTS.md, rendered from the report data alone (:func:`render`): the same dict that
is saved as ``results/learning.json``, so a saved file renders the same page again."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import results_page

from .aggregate import mean_curve
from .calibration_table import render_calibration
from .discussion import discussion
from .fair import FAIR_MODES, render_fair
from .fmt import count, interval, num, table
from .grid import BASELINES, EnvSetting, Method, Mode, reference
from .prereg_page import PREREG_PAGE_MODES, render_prereg
from .reflection_table import render_self_reflection

_BUDGET_HEADER = (
    "env|method|trajectories|generated tokens|speed/generated_tokens|env steps|train success|tokens / success|"
    "env steps / success|steps with a gradient|held-out turns|held-out parse errors / turn"
)
_RETRY_HEADER = (
    "env|method|reflector|reflections parsed|retries|mean pivot|beat base|retry success|tokens pivot ÷ scratch|"
    "env steps pivot ÷ scratch|agent tokens masked"
)
_ENV_HEADER = "env|id|kwargs|actions|max turns|max new tokens|training temperature|kind|data"


def render(data: dict[str, Any], *, page_dir: Path) -> str:
    """The RESULTS.md section for the report ``data`` (as :func:`benchmarks.learning_study.report.report_data` builds
    it, or as read back from ``learning.json``): tables, plots (linked relative to ``page_dir``), discussion, missing
    cells, settings."""
    mode = Mode.from_dict(data["mode"])
    envs = {k: EnvSetting.from_dict(v) for k, v in data["envs"].items()}
    methods = {k: Method.from_dict(v) for k, v in data["methods"].items()}
    history = data["invocations"]
    title, *how = _heading(data, mode, history)
    md = [title]
    if mode.name in PREREG_PAGE_MODES:  # the pre-registration and its comparison first, how the runs were made after
        md += [*render_prereg(data, mode, methods, page_dir), "", "### How the runs were made"]
    md += how
    if mode.name in FAIR_MODES:
        md += render_fair(data, mode, methods)
    if "calibration" in data:
        md += render_calibration(data["calibration"])
    if "self_reflection" in data:
        md += render_self_reflection(data["self_reflection"])
    md += _results(data["cells"], mode, methods)
    md += _along_training(data["runs"], mode, methods)
    md += _budget(data["cells"], mode, methods)
    md += _cost(data["cells"], mode, methods, here=data["machine"].get("cpu_kind"))
    md += _retries(data["cells"], mode, methods)
    if data["plots"]:
        md += ["", "### Held-out success and score vs sampled trajectories (95 % CI bands over seeds)", ""]
        md += [f"![{env}]({os.path.relpath(path, page_dir)})" for env, path in data["plots"].items()]
    md += ["", "### Discussion (generated from the numbers above)", ""]
    if mode.name in FAIR_MODES:
        md += [
            "Its verdicts use plain 95 % intervals, uncorrected for the number of comparisons; where they differ "
            "from the Holm-corrected verdicts of the fair-rules table, that table's verdicts hold.",
            "",
        ]
    md += discussion(mode, data, methods)
    if data["missing"]:
        md += ["", "### Missing cells", ""]
        md += [_missing(m, methods) for m in data["missing"]]
        if history and history[-1].get("stopped"):
            md += ["", history[-1]["stopped"]]
    md += _settings(mode, envs, methods, data.get("train_config"))
    return "\n".join(md)


def _missing(m: dict[str, Any], methods: dict[str, Method]) -> str:
    """One line of the missing cells: a cell's unfinished seeds, or a seed-quota group's shortfall."""
    if "more" in m:
        counted = ", ".join(map(str, m["counted"])) or "none yet"
        labels = ", ".join(methods[k].label for k in m["methods"])
        return f"- {m['env']} × {labels}: {m['more']} more seed(s) where each finished (counted so far: {counted})"
    stale = f" (seed(s) {', '.join(map(str, m['stale']))}: a run of an older configuration)" if m["stale"] else ""
    return f"- {m['env']} × {methods[m['method']].label}: seed(s) {', '.join(map(str, m['seeds']))} not finished{stale}"


def _heading(data: dict[str, Any], mode: Mode, history: Sequence[dict[str, Any]]) -> list[str]:
    cells = data["cells"]
    total = sum(mode.runs_on(m, e) * mode.planned(m, e) for m in mode.methods for e in mode.envs)
    more = "".join(f"; {e}: seeds {', '.join(map(str, s))}" for e, s in mode.env_seeds.items() if e in mode.envs)
    done = sum(len(c["seeds"]) for c in cells.values())
    seeds = f"Seeds {', '.join(map(str, mode.seeds))}{more}. "
    if mode.seed_quotas:
        seeds = "Seeds: candidates in order, as many as the seed quotas need (see the amendments). "
    per_seed = mode.steps * mode.tasks_per_step * mode.group_size
    lrs = {c["lr"] for c in mode.cell_config.values() if "lr" in c}
    lr = f"lr {mode.lr:g}" if not lrs else "lr: set per cell (see the pre-registration above)"
    split, temperature = mode.extra.get("eval_split", "test"), mode.extra.get("eval_temperature", 0.4)
    at = "greedy (temperature 0)" if temperature == 0 else f"at temperature {temperature:g}"
    shared = (
        "the same episodes for every method of a seed (so the eval before training, when a run did not make it "
        "itself, is that of the first method of the same env and seed)"
    )
    if mode.before_once_per_env:
        shared = (
            "the same episodes for every method and seed (so the eval before training is made once per env, by "
            "its first run, and shared)"
        )
    return [
        f"## Learning at an equal sampling budget (`benchmarks/learning.py`, mode `{mode.name}`)",
        "",
        f"{results_page.machine_line(data['machine'])} {data['versions']}.",
        *_machines(data["runs"], data["machine"].get("cpu_kind")),
        f"Model `{mode.model}` ({mode.dtype}) on `{mode.device}`. The runs were made by "
        + (f"{len(history)} invocation(s) (each resumes what the previous left):" if history else "(no record):"),
        "",
        *(f"- {_invocation(h)}" for h in history),
        f"- this page: `{data['command']}`",
        "",
        f"Mode `{mode.name}`: {mode.description}. Every cell samples {mode.steps} steps × "
        f"{mode.tasks_per_step} task(s) × {mode.group_size} trajectories = {per_seed} trajectories per seed "
        f"(R³L: N/2 = {mode.group_size // 2} base(s) per task, their retries, topped up with bases); {lr}; "
        f"held out: {mode.eval_episodes} episodes of the {split} split {at}, {shared}. "
        f"{seeds}**{done} of {total} runs finished.**",
        "",
        "Cells: mean over seeds ± half-width of the 95 % t-interval (n = finished seeds; one seed has no interval; "
        "intervals are not clipped to [0, 1], and with n = 2 the t quantile is 12.7, so they are wide). "
        "The paper's numbers (arXiv 2601.03715) are for Qwen2.5-1.5B with 96 tasks × 8 samples per step on 8 GPUs; "
        "nothing "
        "here is comparable to them in size.",
    ]


def _machines(runs: Sequence[dict[str, Any]], here: str | None) -> list[str]:
    """Which CPU kind and autocast made the finished runs, when not all were made on this page's machine (a study
    continued on a fresh machine carries the committed summaries of the runs made before)."""
    groups: dict[tuple[Any, Any, bool], list[dict[str, Any]]] = {}
    for r in runs:
        if r["finished"]:
            groups.setdefault((r.get("machine") or here, r.get("autocast"), bool(r.get("carried"))), []).append(r)
    if not any(carried for _, _, carried in groups) and len(groups) <= 1:
        return []
    parts = []
    for (machine, autocast, carried), members in groups.items():
        envs = ", ".join(dict.fromkeys(r["env"] for r in members))
        where = "an earlier machine, carried over from the committed report" if carried else "this machine"
        parts.append(f"{len(members)} on {where} ({machine}; autocast {autocast}; {envs})")
    return [f"Finished runs by machine: {'; '.join(parts)}."]


def grid_table(
    cells: dict[str, Any], mode: Mode, methods: dict[str, Method], rows: Sequence[str], fmt: Callable
) -> list[str]:
    """A methods × envs table whose cells are ``fmt(cell)`` ("not run" where the mode has no such cell)."""
    body = [
        [methods[m].label, *(fmt(cells[f"{m}|{e}"]) if mode.runs_on(m, e) else "not run" for e in mode.envs)]
        for m in rows
    ]
    return table(["method", *mode.envs], body)


def _role_table(
    cells: dict[str, Any],
    mode: Mode,
    methods: dict[str, Method],
    roles: tuple[str, ...],
    title: str,
    cell: Callable[[dict[str, Any]], str],
    intro: str = "",
) -> list[str]:
    """A table of the methods with these roles (R³L first), on the envs where any but the first ran; nothing when
    only one of them is in the mode."""
    rows = [m for m in mode.methods if methods[m].role in roles]
    if len(rows) < 2:
        return []
    md = ["", f"### {title}", ""] + ([intro, ""] if intro else [])
    return md + grid_table(cells, dataclasses.replace(mode, envs=mode.envs_of(rows[1:])), methods, rows, cell)


def _results(cells: dict[str, Any], mode: Mode, methods: dict[str, Method]) -> list[str]:
    main_rows = [m for m in (*BASELINES, reference(methods)) if m in mode.methods]  # the paper's table order
    md = ["", "### Held-out success after training (the paper's table shape)", ""]
    md += grid_table(cells, mode, methods, main_rows, lambda c: interval(c["success"]))
    md += ["", "### Held-out score after training", ""]
    md += grid_table(cells, mode, methods, main_rows, lambda c: interval(c["score"]))
    md += ["", "### Change from the eval before training (paired by seed): success / score", ""]
    md += grid_table(
        cells,
        mode,
        methods,
        mode.methods,
        lambda c: f"{interval(c['success_delta'], signed=True)} / {interval(c['score_delta'], signed=True)}",
    )
    md += _role_table(
        cells,
        mode,
        methods,
        ("r3l", "ablation"),
        "Ablations: held-out success / score",
        lambda c: f"{interval(c['success'])} / {num(c['score']['mean'])}",
    )
    md += _role_table(
        cells,
        mode,
        methods,
        ("r3l", "reflector", "control"),
        "Who sees the expert plan: held-out success / change from before training",
        lambda c: f"{interval(c['success'])} / {interval(c['success_delta'], signed=True)}",
        intro="The oracle reflector reads the env's expert plan; self-reflection does not; the control gives a "
        "baseline the same plan as demonstrations in its groups (same budget of trajectories).",
    )
    math_envs = tuple(e for e in mode.envs if any(cells[f"{m}|{e}"]["first_attempt"]["n"] for m in mode.methods))
    if math_envs:
        md += ["", "### Math: first-attempt success (pass@1) / solved within the attempts", ""]
        md += grid_table(
            cells,
            dataclasses.replace(mode, envs=math_envs),
            methods,
            mode.methods,
            lambda c: f"{interval(c['first_attempt'])} / {num(c['success']['mean'])}",
        )
    return md


def _along_training(runs: Sequence[dict[str, Any]], mode: Mode, methods: dict[str, Method]) -> list[str]:
    """The curves as numbers: held-out success at every eval the finished seeds of a cell all made."""
    md = ["", "### Held-out success along training (mean ± 95 % CI over seeds; the plots below draw it)", ""]
    rows = []
    for e in mode.envs:
        for m in mode.methods:
            done = [r for r in runs if r["env"] == e and r["method"] == m and r["finished"]]
            points = mean_curve(done, "success") if done else []
            if points:
                cells = [f"step {p['step']} ({p['trajectories']:.0f} traj.): {interval(p)}" for p in points]
                rows.append([e, methods[m].label, "; ".join(cells)])
    return md + table(["env", "method", "held-out success at each eval"], rows or [["—"] * 3])


def _cost(cells: dict[str, Any], mode: Mode, methods: dict[str, Method], here: str | None = None) -> list[str]:
    """CPU seconds per trajectory and wall minutes per run, per CPU kind where the runs were made on several
    (``by_kind`` of each cell; a report saved before it existed has its pooled numbers, made on ``here``)."""
    parts = {
        key: c.get("by_kind") or {here or "": {"cost": c.get("cost"), "wall_min": c["wall_min"]}}
        for key, c in cells.items()
    }
    several = len({kind for by_kind in parts.values() for kind in by_kind}) > 1
    md = [
        "",
        "### Cost per trajectory (CPU seconds, pooled over finished seeds)" + (", per CPU kind" if several else ""),
        "",
        "CPU seconds (user + system of the run's process) rather than wall time: on a shared machine the load "
        "inflates wall time several-fold and CPU time much less. Trajectories per CPU-hour count collection and "
        "update, not the held-out evals (their cost per episode is its own column). Wall minutes: a run's, over all "
        "its attempts (an eval before training it made and work lost to an interruption included). A dash: runs "
        "logged before these counters existed.",
        "",
    ]
    rows = []
    for e in mode.envs:
        for m in mode.methods:
            if not cells[f"{m}|{e}"]["seeds"]:
                continue
            for kind, part in parts[f"{m}|{e}"].items():
                cost = part.get("cost") or {}
                seconds = (num(cost.get(k), 1) for k in ("collect_cpu_s", "update_cpu_s"))
                hourly, per_episode = count(cost.get("per_cpu_hour")), num(cost.get("eval_cpu_s"), 1)
                wall = num(part["wall_min"]["mean"], 1)
                rows.append([e, methods[m].label, *([kind] if several else []), *seconds, hourly, per_episode, wall])
    header = ["env", "method", *(["CPU kind"] if several else []), "collect CPU-s / traj.", "update CPU-s / traj."]
    header += ["traj. / CPU-hour", "eval CPU-s / episode", "wall min / run"]
    return md + table(header, rows or [["—"] * len(header)])


def _budget(cells: dict[str, Any], mode: Mode, methods: dict[str, Method]) -> list[str]:
    md = [
        "",
        "### Budget per run (mean over finished seeds)",
        "",
        "Sampled trajectories are the budget every method gets. Generated tokens: what the policy generated in "
        "rollouts (a retry's reused prefix excluded) plus self-reflections (the oracle generates none); the learner's "
        "own `speed/generated_tokens`, summed, leaves out reflections. Env steps: actions played. Train success: the "
        "fraction of sampled trajectories that won; per success: pooled over seeds. Steps with a gradient: steps whose "
        "gradient norm was not 0 (in a step where every group's rewards were equal and there was no auxiliary sample, "
        "only weight decay and Adam's momentum move the weights; runs made before the shared zero-contrast rule: "
        "GRPO's KL term had a gradient once weight decay had moved the weights off the reference, rewards or not; "
        "under the rule such a step does not step the optimiser at all). Held-out turns and parse errors "
        "(replies with no usable action, which do not step the env): the eval after training.",
        "",
    ]
    rows = []
    for e in mode.envs:
        for m in mode.methods:
            c, econ = cells[f"{m}|{e}"], cells[f"{m}|{e}"]["economics"]
            if c["seeds"]:
                totals = (c["trajectories"], c["generated_tokens"], c["logged_generated_tokens"], c["env_steps"])
                per_success = (count(econ["tokens_per_success"]), num(econ["env_steps_per_success"], 1))
                success = num(econ["train_success_rate"])
                row = [e, methods[m].label, *(count(s["mean"]) for s in totals), success, *per_success]
                row.append(f"{num(c['updates']['mean'], 1)} of {mode.steps}")
                held_out = (num(c["eval_turns"]["mean"], 1), num(c["eval_parse_errors"]["mean"], 2))
                rows.append([*row, *held_out])
    return md + table(_BUDGET_HEADER.split("|"), rows or [["—"] * 12])


def _retries(cells: dict[str, Any], mode: Mode, methods: dict[str, Method]) -> list[str]:
    md = [
        "",
        "### Retry economics (reflect-retry methods, pooled over seeds and steps)",
        "",
        "Ratios of sums over every collected retry. *Pivot ÷ scratch*: what the retries generated and played from "
        "their pivot, relative to what the same retries would have cost replayed from turn 0 (the prefix again + the "
        "same suffix). The learning result of retrying from scratch is the row *R³L, retry from scratch* of the "
        "ablation table (same reflections, retries replayed from turn 0). *Agent tokens masked*: the share of the "
        "generated agent tokens that pivotal credit took out of the loss (the turns before the pivot of a retried "
        "base and of its retry); where it is 0 the masks did not change the gradient.",
        "",
    ]
    rows = []
    for e in mode.envs:
        for m in mode.methods:
            c, econ = cells[f"{m}|{e}"], cells[f"{m}|{e}"]["economics"]
            if c["seeds"] and econ["parse_rate"] is not None:
                rates = ("parse_rate", "retries", "mean_pivot", "beat_base_rate", "retry_success_rate")
                costs = ("token_cost_vs_scratch", "step_cost_vs_scratch", "masked_share")
                rows.append(
                    [e, methods[m].label, methods[m].reflector]
                    + [count(econ[k]) if k == "retries" else num(econ[k], 2) for k in rates + costs]
                )
    return md + table(_RETRY_HEADER.split("|"), rows or [["—"] * 11])


def _settings(
    mode: Mode, envs: dict[str, EnvSetting], methods: dict[str, Method], train_config: dict[str, Any] | None
) -> list[str]:
    md = ["", "### Settings", "", "Per env (the `ENVS` table; the same for every method):", ""]
    rows = []
    for key in mode.envs:
        s = envs[key]
        rows.append([key, f"`{s.env}`", f"`{json.dumps(s.kwargs)}`", s.actions, str(s.max_turns)])
        rows[-1] += [str(s.max_new_tokens), "1.0 (default)" if s.temperature is None else f"{s.temperature:g}"]
        rows[-1] += [s.kind, s.data]
    md += table(_ENV_HEADER.split("|"), rows)
    flags = "; ".join(f"{methods[m].label} = `{method_flags(methods[m])}`" for m in mode.methods)
    md += ["", f"Methods: {flags}."]
    if train_config is None:  # no run directory held a config.json when the data was gathered
        return md
    md += [
        "",
        "Every other TrainConfig field (one run's `config.json`):",
        "",
        f"`{json.dumps(train_config['shared'])}`",
    ]
    differ = [f"{o['run']} ({json.dumps(o['changes'])[1:-1]})" for o in train_config["memory_overrides"]]
    if differ:
        md += [
            "",
            "Runs made with another micro-batch size, for memory (the loss does not depend on it): "
            + ", ".join(differ)
            + ".",
        ]
    return md


def _invocation(h: dict[str, Any]) -> str:
    outcomes = ", ".join(f"{v} {k}" for k, v in sorted(h.get("counts", {}).items()))
    return (
        f"`{h.get('command', '?')}` on {h.get('started', '?')}: {h.get('wall_min', '?')} min, {h.get('jobs', '?')} "
        f"run(s) at a time with {h.get('threads', '?')} torch thread(s) each, load average {h.get('load_start', '?')} "
        f"at the start and {h.get('load_end', '?')} at the end (2-core machine shared with other jobs); "
        f"runs: {outcomes}"
    )


def method_flags(method: Method) -> str:
    """The ``r3l train`` flags that select ``method``."""
    flags = f"--algo {method.algo}"
    if method.ablations:
        flags += " --ablations " + " ".join(method.ablations)
    if method.algo == "r3l" and "no_reflect_retry" not in method.ablations:
        flags += f" --reflector {method.reflector}"
    return flags + "".join(f" --{key.replace('_', '-')} {value}" for key, value in method.config.items())
