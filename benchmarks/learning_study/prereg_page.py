"""The page of the pre-registered study (modes ``prereg-valid`` and ``prereg``): how the settings were chosen,
R³L against the strongest baseline and GRPO (Holm-corrected, per env), the ablations in the paper's shape, the
mechanism per step, and the verdict generated from the numbers. :func:`prereg_data` computes what it shows from
the report data; :func:`render_prereg` writes it, from the report data alone."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from .fmt import count, interval, num, table
from .grid import METHODS, Method, Mode, reference
from .mechanism import LINKS, SHARES, THRESHOLDS, pooled, verdict
from .prereg import ABLATIONS, LRS, TEST, TUNED, VALID, choose, rebuild_command_for, valid_table
from .stats import paired, paired_family


def _int_keys(values: dict[Any, float]) -> dict[int, float]:
    return {int(k): v for k, v in values.items()}  # a JSON round trip makes the seeds strings


def _family(cells: dict[str, Any], env: str, ref: str, others: list[str]) -> dict[str, Any]:
    """R³L minus each of ``others`` on ``env``, paired by seed, Holm-corrected as one family (keyed ``"a|b"``)."""
    ref_seeds = _int_keys(cells[f"{ref}|{env}"]["success_by_seed"])
    pairs = {f"{ref}|{m}": (ref_seeds, _int_keys(cells[f"{m}|{env}"]["success_by_seed"])) for m in others}
    return paired_family(pairs)


def _start(runs: list[dict[str, Any]], envs: tuple[str, ...]) -> dict[str, float | None]:
    """Per env, the start model's held-out success before training (every valid run of an env shares it)."""
    before = {r["env"]: (r.get("before") or {}).get("success") for r in runs if r.get("before")}
    return {env: before.get(env) for env in envs}


def prereg_data(data: dict[str, Any], mode: Mode, methods: dict[str, Method]) -> dict[str, Any]:
    """What the section shows beyond the grid's cells. The valid stage: the valid table and the choices it makes
    (``None`` per env until every run finished). The test stage, per env: R³L − the strongest baseline and − GRPO
    (one Holm family), R³L − each ablation (one family), R³L − each other baseline (one family), the pooled
    mechanism of R³L and its ablations, and the verdict against the strongest baseline."""
    cells = data["cells"]
    if mode.name == VALID:
        table_ = valid_table(cells, mode)
        choices = {}
        for env in mode.envs:
            try:
                choices[env] = choose(table_[env])
            except ValueError:
                choices[env] = None
        return {"valid": table_, "choices": choices, "start": _start(data["runs"], mode.envs)}
    registered = data.get("prereg") or {}
    thresholds = {**THRESHOLDS, **registered.get("settings", {}).get("verdict_thresholds", {})}
    ref, out = reference(methods), {}
    for env in mode.envs:
        strongest = registered["choices"][env]["strongest_baseline"]
        main = [strongest] + (["grpo"] if strongest != "grpo" else [])
        ablations = [m for m in ABLATIONS if m in mode.methods]
        others = [m for m in TUNED if m not in (ref, *main) and m in mode.methods]
        runs = [r for r in data["runs"] if r["env"] == env and r["finished"]]
        family = [m for m in (ref, *ablations) if methods[m].algo == "r3l"]  # the runs that reflect and retry
        mechanism = {m: pooled([r for r in runs if r["method"] == m]) for m in family}
        families = {k: _family(cells, env, ref, v) for k, v in (("main", main), ("ablations", ablations))}
        families["others"] = _family(cells, env, ref, others)
        label = methods[strongest].label
        planned = mode.planned(ref, env)
        pair = families["main"][f"{ref}|{strongest}"]
        judged = verdict(pair, mechanism[ref], baseline=label, thresholds=thresholds, planned=planned)
        by_kind = _by_kind(cells, runs, env, ref, main)
        per_seed = _per_seed(runs, [ref, *main])
        out[env] = {
            **families, "strongest": strongest, "mechanism": mechanism, "verdict": judged, "by_kind": by_kind,
            "per_seed": per_seed, "best_on_test": best_on_test(cells, env, strongest, [*main, *others]),
        }  # fmt: skip
    return {"envs": out, "thresholds": thresholds}


def best_on_test(cells: dict[str, Any], env: str, strongest: str, baselines: list[str]) -> str | None:
    """The baseline with a higher held-out mean on test than the pre-registered strongest one, or ``None``.

    The strongest baseline is chosen on the valid split and the verdict stays against it, as registered; but when
    another baseline scores higher on test, a reader should be told that the choice did not carry over. Only cells
    with an interval (two finished seeds) take part, so one lucky seed does not rename the strongest baseline."""
    stats = {m: (cells.get(f"{m}|{env}") or {}).get("success") or {} for m in baselines}
    ranked = [m for m in baselines if stats[m].get("n", 0) >= 2]
    if strongest not in ranked:
        return None
    best = max(ranked, key=lambda m: stats[m]["mean"])
    return best if stats[best]["mean"] > stats[strongest]["mean"] else None


def _by_kind(
    cells: dict[str, Any], runs: list[dict[str, Any]], env: str, ref: str, others: list[str]
) -> dict[str, dict[str, Any]]:
    """R³L minus each of ``others`` on ``env`` per CPU kind (the kind of R³L's run of each seed; the sweep makes
    every run of a seed on one kind), unadjusted; empty while the finished R³L runs are of one kind."""
    kind_of = {r["seed"]: r.get("machine") for r in runs if r["method"] == ref}
    kinds = sorted({k for k in kind_of.values() if k}, key=str)
    if len(kinds) < 2:
        return {}
    ref_seeds = _int_keys(cells[f"{ref}|{env}"]["success_by_seed"])
    out: dict[str, dict[str, Any]] = {}
    for other in others:
        theirs = _int_keys(cells[f"{other}|{env}"]["success_by_seed"])
        for kind in kinds:
            mine = {s: v for s, v in ref_seeds.items() if kind_of.get(s) == kind}
            out.setdefault(other, {})[kind] = paired(mine, theirs)
    return out


def _per_seed(runs: list[dict[str, Any]], methods: list[str]) -> dict[str, dict[int, dict[str, Any]]]:
    """Per method and seed of ``runs``: the CPU kind, held-out success, how many of the held-out episodes ended at
    the turn limit, and (for runs that reflect and retry) the run's pooled mechanism: what a reader needs to see
    which seeds failed and how, beside the pooled tables."""
    out: dict[str, dict[int, dict[str, Any]]] = {m: {} for m in methods}
    for run in runs:
        if run["method"] not in methods:
            continue
        detail = run.get("eval_after_detail") or {}
        mechanism = pooled([run])  # its shares are None for a run that does not reflect and retry
        out[run["method"]][int(run["seed"])] = {
            "kind": run.get("machine"),
            "success": (run.get("after") or {}).get("success"),
            "turn_limit": (detail.get("stop_reasons") or {}).get("max_turns", 0) if detail else None,
            "episodes": detail.get("episodes"),
            "rescue_rate": mechanism.get("rescue_rate"),
            "retry_loss_share": mechanism.get("retry_loss_share"),
        }
    return out


def render_prereg(data: dict[str, Any], mode: Mode, methods: dict[str, Method], page_dir: Path) -> list[str]:
    """The section of either stage: the valid stage's table and choices, or the registered settings followed by
    one table of R³L against the strongest baseline and GRPO on every env (pooled, per CPU kind and per seed), the
    ablations in the paper's shape, the mechanism per env and the verdicts."""
    if mode.name == VALID:
        return _valid_stage(data, mode)
    md = _registered(data.get("prereg"), data.get("warmup"), mode)
    md += _amendments(data.get("amendments") or [])
    results = data.get("prereg_results") or {}
    found = {env: results["envs"][env] for env in mode.envs if env in (results.get("envs") or {})}
    if not found:
        return md
    cells, ref = data["cells"], reference(methods)
    md += ["", "### R³L against the strongest baseline and GRPO: held-out success after training", ""]
    md += _main_table(found, cells, ref, methods)
    md += _kind_table(found, methods)
    md += _per_seed_tables(found, ref, methods)
    md += ["", "### R³L's ablations, the privilege control and the other baselines (the paper's shape)", ""]
    md += _paper_table(found, cells, ref, methods)
    md += ["", "### The mechanism per training step", "", _mechanism_intro(results["thresholds"])]
    for env, f in found.items():
        md += ["", f"`{env}`:", "", *_mechanism(f["mechanism"], methods)]
        plot = (data.get("mechanism_plots") or {}).get(env)
        if plot:
            md += ["", f"![{env} mechanism]({os.path.relpath(plot, page_dir)})"]
    md += ["", "### Verdict (generated from the numbers above)", ""]
    md += [f"- `{env}`: {f['verdict']['text']}" for env, f in found.items()]
    md += _hindsight(found, cells, ref, methods, data.get("prereg") or {})
    return md


def _hindsight(
    found: dict[str, Any], cells: dict[str, Any], ref: str, methods: dict[str, Method], registered: dict[str, Any]
) -> list[str]:
    """Per env where another baseline beat the pre-registered strongest one on test (:func:`best_on_test`): both
    cells, the valid scores that made the choice, and R³L against the better one from its Holm family."""
    md = []
    for env, f in found.items():
        best, strongest = f.get("best_on_test"), f["strongest"]
        if not best:
            continue
        valid = (registered.get("choices") or {}).get(env, {}).get("valid_success") or {}
        chosen_on = ", ".join(f"{methods[m].label} {num(valid.get(m))}" for m in (strongest, best))
        pair = f["main"].get(f"{ref}|{best}") or f["others"].get(f"{ref}|{best}")
        mean, adjusted, p = _diff(pair)
        md.append(
            f"- `{env}`, in hindsight: the pre-registered strongest baseline, {methods[strongest].label}, was not the "
            f"strongest on test by mean: {methods[best].label} scored {interval(cells[f'{best}|{env}']['success'])} "
            f"against {interval(cells[f'{strongest}|{env}']['success'])} (the valid split, which chose, had "
            f"{chosen_on}). The verdict above stays against {methods[strongest].label}, as registered; R³L − "
            f"{methods[best].label} is {mean}, Holm CI {adjusted}, p {p} (n={pair['n']})."
        )
    return md


def _lr(lr: float) -> str:
    """A learning rate as the page writes it (``1e-4``, ``3e-5``)."""
    mantissa, exponent = f"{lr:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _lr_row(valid: dict[str, float | None], chosen: float | None) -> list[str]:
    cells = []
    for lr in LRS:
        value = num(valid.get(f"{lr:g}"))
        cells.append(f"**{value}**" if chosen is not None and f"{lr:g}" == f"{chosen:g}" else value)
    return cells


def _valid_tables(valid: dict[str, Any], choices: dict[str, Any], envs: list[str]) -> list[str]:
    md = []
    for env in envs:
        choice = choices.get(env)
        rows = []
        for m in TUNED:
            chosen = choice["lr"][m] if choice else None
            rows.append([METHODS[m].label, *_lr_row(valid[env][m], chosen), "—" if chosen is None else _lr(chosen)])
        header = ["method", *(f"valid success, lr {_lr(lr)}" for lr in LRS), "chosen lr"]
        md += ["", f"Valid split of `{env}` (bold: the chosen rate):", "", *table(header, rows)]
        if choice:
            strongest = choice["strongest_baseline"]
            md += ["", f"Strongest baseline: {METHODS[strongest].label} (`{strongest}`)."]
    return md


def _valid_stage(data: dict[str, Any], mode: Mode) -> list[str]:
    found = data.get("prereg_valid") or {}
    md = ["", "### Pre-registration, valid stage: each method's learning rate and the strongest baseline", ""]
    md.append(
        "One run per method and learning rate (seed 1000, never a comparison seed), evaluated greedily on the "
        "valid split after training. The rule: per method, the rate with the best valid success (ties: the "
        "smaller rate); the strongest baseline is the method other than R³L with the best valid success at its "
        "chosen rate. Nothing here has seen the test split."
    )
    md += _valid_tables(found.get("valid") or {}, found.get("choices") or {}, list(mode.envs))
    start = {env: s for env, s in (found.get("start") or {}).items() if s is not None}
    if start:
        said = ", ".join(f"`{env}` {num(s)}" for env, s in start.items())
        md += ["", f"The start model, evaluated the same way before training (the same valid episodes): {said}."]
    registered = data.get("prereg")
    if registered:
        md += ["", f"Registered in `results/prereg.json` on {registered['date']} at commit `{registered['commit']}`."]
    else:
        md += ["", "Not registered yet (`--preregister` writes `results/prereg.json` once every run finished)."]
    return md


def _registered(registered: dict[str, Any] | None, warmup: dict[str, Any] | None, mode: Mode) -> list[str]:
    md = ["", "### Pre-registration: the settings, fixed on the valid split before any test-split run", ""]
    if not registered:
        return [*md, "No pre-registration recorded: this report is not the pre-registered comparison."]
    s = registered["settings"]
    dirty = " (with uncommitted changes to the study or the learner)" if registered.get("uncommitted_changes") else ""
    md.append(
        f"Registered on {registered['date']} at commit `{registered['commit']}`{dirty} by "
        f"`{registered['command']}`, in `results/prereg.json`. Budget per run: {s['budget']['steps']} steps × "
        f"{s['budget']['tasks_per_step']} tasks × {s['budget']['group_size']} trajectories = "
        f"{s['budget']['trajectories']} sampled trajectories, cut replies masked for every method. Chosen on "
        f"{s['valid']['episodes']} greedy episodes of the valid split (seed {s['valid']['seed']}); compared on "
        f"{s['test']['episodes']} greedy episodes of distinct test tasks. The rule: {s['rule']}."
    )
    md += _valid_tables(registered["valid"], registered["choices"], list(registered["choices"]))
    model = registered.get("model")
    md += ["", f"Start model: `{mode.model}` (registered: `{model}`)."]
    if warmup:
        w = warmup.get("settings", {})
        what = ", ".join(f"{k} {w[k]}" for k in ("episodes", "epochs", "lr", "seed", "plan") if k in w)
        md[-1] += (
            f" Its `warmup.json`: a guidance-following warm-up on `{warmup.get('env_id')}` "
            f"`{warmup.get('env_kwargs')}` ({warmup.get('split')} split; {what}; final loss "
            f"{num(warmup.get('final_loss'), 4)}); the whole record is in this report's JSON."
        )
        command = rebuild_command_for(warmup, mode.model)
        if command:
            md[-1] += f" Rebuilt by `{command}` (every setting given: not the defaults)."
    else:
        md[-1] += " It has no `warmup.json` (not a start model made by `r3l warmup`)."
    return md


def _amendments(amendments: list[dict[str, Any]]) -> list[str]:
    """The amendments in the order declared: when, by which command, what each admits (a CPU kind, with its
    autocast and start model; or seed quotas), and the rules each kind of amendment is under."""
    if not amendments:
        return []
    md = ["", "#### Amendments to the pre-registration", ""]
    for i, a in enumerate(amendments, 1):
        when = f"{i}. Declared on {a['date']} at commit `{a['commit']}` by `{_without_note(a['command'])}`"
        if "seeds" in a:
            m, o = a["seeds"]["main"], a["seeds"]["other"]
            what = (
                ", before any run it admits: **seed quotas** in place of the registered seeds (R³L, GRPO and the "
                f"strongest baseline: {m['quota']} seeds each finished, candidates {_span(m['candidates'])}; R³L with "
                f"each other method: {o['quota']} seeds both finished, candidates {_span(o['candidates'])})."
            )
        else:
            loss = num((a.get("warmup") or {}).get("loss_before"), 7)
            what = (
                f", before any run on that kind: CPU kind **{a['kind']}**, autocast `{a['autocast']}`, start model "
                "rebuilt there by the registered recipe (its `warmup.json` differs in its losses only: `loss_before` "
                f"{loss})."
            )
        md.append(when + what + (f" {a['note']}" if a.get("note") else ""))
    for label, of_kind in (("a CPU kind", True), ("seed quotas", False)):
        rules = next((a.get("rules") for a in reversed(amendments) if ("kind" in a) == of_kind), None)
        if rules:
            md += ["", f"Under every amendment admitting {label}: " + "; ".join(rules) + "."]
    return md


def _span(seeds: list[int]) -> str:
    """``0-14`` for consecutive seeds, else the list."""
    consecutive = seeds == list(range(seeds[0], seeds[-1] + 1)) if seeds else False
    return f"{seeds[0]}-{seeds[-1]}" if consecutive and len(seeds) > 1 else ", ".join(map(str, seeds))


def _without_note(command: str) -> str:
    """A declaration's command without its ``--note TEXT`` (the page prints the note on its own)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if "--note" not in words:
        return command
    i = words.index("--note")
    return shlex.join(words[:i] + words[i + 2 :])


def _diff(c: dict[str, Any]) -> tuple[str, str, str]:
    mean = "—" if c["mean"] is None else f"{c['mean']:+.3f}"
    adjusted = "—" if c["lo_adj"] is None else f"[{c['lo_adj']:+.3f}, {c['hi_adj']:+.3f}]"
    return mean, adjusted, num(c["p_holm"])


def _minus(c: dict[str, Any]) -> str:
    """The method minus R³L, from R³L minus the method (``c``): mean and Holm interval, negated."""
    if c["mean"] is None:
        return "—"
    mean, lo, hi = (0.0 - v if v is not None else None for v in (c["mean"], c["hi_adj"], c["lo_adj"]))  # no -0.0
    return f"{mean:+.3f}" if lo is None else f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def _main_table(found: dict[str, Any], cells: dict[str, Any], ref: str, methods: dict[str, Method]) -> list[str]:
    rows = []
    for env, f in found.items():
        for key, c in f["main"].items():
            other = key.split("|")[1]
            mean, adjusted, p = _diff(c)
            r3l, base = interval(cells[f"{ref}|{env}"]["success"]), interval(cells[f"{other}|{env}"]["success"])
            rows.append(
                [f"`{env}`", f"R³L − {methods[other].label}", str(c["n"]), r3l, base, mean, adjusted, p, c["verdict"]]
            )
    intro = (
        "Paired by seed (the same start model and held-out tasks). Per env, the comparisons with the strongest "
        "baseline and with GRPO form one family of m: intervals at level 1 − 0.05/m (simultaneous), verdicts by "
        "Holm's adjusted p-values at 0.05; an interval needs two paired seeds."
    )
    header = ["env", "comparison", "n", "R³L", "baseline", "mean Δ", "Holm CI", "p (Holm)", "verdict"]
    return [intro, "", *table(header, rows)]


def _kind_table(found: dict[str, Any], methods: dict[str, Method]) -> list[str]:
    """The main comparisons per CPU kind (only where the seeds of an env come from more than one kind)."""
    rows = []
    for env, f in found.items():
        for other, per_kind in (f.get("by_kind") or {}).items():
            for kind, c in per_kind.items():
                mean = "—" if c["mean"] is None else f"{c['mean']:+.3f}"
                ci = "—" if c["lo"] is None else f"[{c['lo']:+.3f}, {c['hi']:+.3f}]"
                rows.append([f"`{env}`", f"R³L − {methods[other].label}", kind, str(c["n"]), mean, ci])
    if not rows:
        return []
    intro = (
        "The same comparisons per CPU kind (the seeds made on each; see the amendments above): plain 95 % "
        "intervals, not corrected, to show whether the kinds agree. The table above, which pools them, is the one "
        "registered."
    )
    return ["", intro, "", *table(["env", "comparison", "CPU kind", "n", "mean Δ", "95 % CI"], rows)]


def _per_seed_tables(found: dict[str, Any], ref: str, methods: dict[str, Method]) -> list[str]:
    """Per env, one row per seed of the main comparison: each method's held-out success and episodes at the turn
    limit, and R³L's rescue rate and retry share of the loss in that run (descriptive, not a registered test)."""
    md = []
    for env, f in found.items():
        per_seed = {m: {int(s): r for s, r in by_seed.items()} for m, by_seed in (f.get("per_seed") or {}).items()}
        if not per_seed.get(ref):
            continue
        others = [m for m in per_seed if m != ref]
        seeds = sorted({s for by_seed in per_seed.values() for s in by_seed})
        rows = []
        for seed in seeds:
            mine, *theirs = (per_seed[m].get(seed) or {} for m in (ref, *others))
            kind = next((r["kind"] for r in (mine, *theirs) if r), None)  # every run of a seed is of one kind
            row = [str(seed), str(kind or "—").split(" (")[0], *_seed_cells(mine)]
            row += [num(mine.get("rescue_rate")), num(mine.get("retry_loss_share"))]
            rows.append(row + [cell for run in theirs for cell in _seed_cells(run)])
        header = ["seed", "CPU kind", "R³L success", "R³L at the turn limit", "R³L rescued ÷ all-failed"]
        header += ["R³L retry share of the loss"]
        header += [x for m in others for x in (f"{methods[m].label} success", f"{methods[m].label} at the turn limit")]
        md += ["", f"`{env}` per seed (held-out episodes that ended at the turn limit count as failures):", ""]
        md += table(header, rows)
    if md:
        intro = (
            "Per seed, what the pooled numbers above hide: which seeds failed, and whether their policy stopped "
            "finishing episodes. Descriptive; the registered test is the table above."
        )
        md = ["", intro, *md]
    return md


def _seed_cells(run: dict[str, Any]) -> list[str]:
    """Held-out success and ``k of n`` episodes at the turn limit of one run (dashes where it did not finish)."""
    limit = "—" if run.get("turn_limit") is None else f"{run['turn_limit']} of {run.get('episodes')}"
    return [num(run.get("success")), limit]


def _paper_table(found: dict[str, Any], cells: dict[str, Any], ref: str, methods: dict[str, Method]) -> list[str]:
    """One row per method, two columns per env (held-out success; the method minus R³L with its Holm interval)."""
    envs = list(found)
    rows = [[methods[ref].label, "", *(x for e in envs for x in (interval(cells[f"{ref}|{e}"]["success"]), "—"))]]
    for part, name in (("ablations", "ablations and control"), ("others", "other baselines")):
        keys = dict.fromkeys(k for e in envs for k in found[e][part])
        for key in keys:
            other = key.split("|")[1]
            row = [methods[other].label, name]
            for e in envs:
                c = found[e][part].get(key)
                delta = "—" if c is None else f"{_minus(c)}, p {num(c['p_holm'])}"
                row += [interval(cells[f"{other}|{e}"]["success"]), delta]
            rows.append(row)
    intro = (
        "Δ vs R³L is the method minus R³L in held-out success, paired by seed, with its Holm interval (level "
        "1 − 0.05/m; negative: the method is below R³L) and Holm's adjusted p-value. Per env, the ablations with "
        "the privilege control form one family, the other baselines another."
    )
    header = ["method", "row"] + [x for e in envs for x in (f"`{e}` success", f"`{e}` Δ vs R³L (Holm CI), p")]
    return [intro, "", *table(header, rows)]


def _mechanism_intro(thresholds: dict[str, float]) -> str:
    limits = "; ".join(f"({letter}) {SHARES[key]} ≥ {thresholds[key]:g}" for key, letter, _ in LINKS)
    return (
        "Pooled over the finished seeds and steps (all-failed share and rescue rate as ratios of sums, the loss "
        "and gradient shares as means over the steps that logged them); the plots draw them per step, mean over "
        f"seeds. A link holds when: {limits}; (e) is the held-out comparison itself."
    )


def _mechanism(mechanism: dict[str, Any], methods: dict[str, Method]) -> list[str]:
    rows = []
    for m, p in mechanism.items():
        shares = (num(p[k]) for k in SHARES)
        rows.append([methods[m].label, count(p["groups"]), count(p["all_bases_failed"]), count(p["rescued"]), *shares])
    header = ["method", "groups", "groups with every base failed", "of them rescued", "all-failed share"]
    header += ["rescued ÷ all-failed", "retry share of the loss", "amplification share of the gradient"]
    return table(header, rows)


#: the modes whose page opens with this section
PREREG_PAGE_MODES = frozenset({VALID, TEST})
