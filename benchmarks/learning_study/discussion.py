"""The page's discussion: statements that follow from the numbers (95 % paired t-intervals over seeds), for every
env, the retry economics, the reflector study, restart at the pivot vs from scratch, and the harness check."""

from __future__ import annotations

from typing import Any

from .fmt import count, num
from .grid import METHODS, Method, Mode, reference
from .stats import ratio, verdict


def _comparison(agg: dict[str, Any], env: str, other: str, metric: str) -> dict[str, Any] | None:
    return next(
        (c for c in agg["comparisons"] if c["env"] == env and c["other"] == other and c["metric"] == metric), None
    )


def _beside_r3l(cells: dict[str, Any], env: str, variant: str, ref: str) -> tuple[dict, dict] | None:
    """The retry economics of an R³L variant and of R³L (``ref``) on ``env``, when both have finished runs."""
    mine, r3l = cells.get(f"{variant}|{env}"), cells.get(f"{ref}|{env}")
    if mine and mine["seeds"] and r3l and r3l["seeds"]:
        return mine["economics"], r3l["economics"]
    return None


def _versus(agg: dict[str, Any], env: str, other: str, name: str) -> str:
    """`` Held-out success, R³L (oracle) minus <name>: ...`` from the paired comparison, or nothing without one."""
    comp = _comparison(agg, env, other, "success")
    if comp is None or comp["n"] == 0:
        return ""
    interval = "" if comp["ci"] is None else f", 95 % CI [{comp['lo']:+.3f}, {comp['hi']:+.3f}]"
    return (
        f" Held-out success, R³L (oracle) minus {name}: {comp['mean']:+.3f}{interval} (n={comp['n']}, "
        f"{comp['verdict']})."
    )


def discussion(mode: Mode, agg: dict[str, Any], methods: dict[str, Method] = METHODS) -> list[str]:
    """Statements that follow from the numbers (95 % paired t-intervals over seeds); nothing hard-coded."""
    cells, lines, ref = agg["cells"], [], reference(methods)
    for env in mode.envs:
        env_cells = {m: cells[f"{m}|{env}"] for m in mode.methods}
        finished_runs = sum(len(c["seeds"]) for c in env_cells.values())
        if not finished_runs:
            lines.append(f"- **{env}**: no finished run; nothing to compare.")
            continue
        all_success = [v for c in env_cells.values() for v in c["success_by_seed"].values()]
        all_before = [c["success_before"]["mean"] for c in env_cells.values() if c["success_before"]["n"]]
        parts = []
        if all_success and max(all_success) == 0 and (not all_before or max(all_before) == 0):
            parts.append(
                f"no run solved a held-out episode before or after training ({finished_runs} finished run(s)), so "
                "the success comparison is empty"
            )
        for other in (m for m in mode.methods if m != ref):
            for metric in ("success", "score"):
                comp = _comparison(agg, env, other, metric)
                if comp is None or comp["n"] == 0:
                    continue
                what = f"{methods[ref].label} vs {methods[other].label} ({metric})"
                v = comp["verdict"]
                if v == "too few seeds":
                    parts.append(f"{what}: {comp['mean']:+.3f} on {comp['n']} paired seed (no interval)")
                elif v == "identical":
                    parts.append(f"{what}: identical in every seed (n={comp['n']})")
                elif v == "no significant difference":
                    parts.append(
                        f"{what}: no significant difference ({comp['mean']:+.3f}, 95 % CI "
                        f"[{comp['lo']:+.3f}, {comp['hi']:+.3f}], n={comp['n']})"
                    )
                else:
                    bounds = "" if comp["ci"] == 0 else f", 95 % CI [{comp['lo']:+.3f}, {comp['hi']:+.3f}]"
                    parts.append(f"{what}: R³L **{v}** by {abs(comp['mean']):.3f}{bounds} (n={comp['n']})")
        updates = [f"{methods[m].label} {c['updates']['mean']:.1f}" for m, c in env_cells.items() if c["updates"]["n"]]
        if updates:
            parts.append(f"steps with a non-zero gradient (mean over seeds, of {mode.steps}): " + ", ".join(updates))
        parse = [c["eval_parse_errors"]["mean"] for c in env_cells.values() if c["eval_parse_errors"]["n"]]
        if parse and min(parse) >= 0.5:
            share = f"{min(parse):.0%}" if min(parse) == max(parse) else f"{min(parse):.0%}-{max(parse):.0%}"
            parts.append(
                f"{share} of the held-out turns (every finished method) were unusable replies with no parseable "
                "action: on this env the model fails at the answer format before the task"
            )
        moved = []
        for key in mode.methods:
            delta = env_cells[key]["success_delta"]
            v = verdict(delta) if delta["n"] else None
            if v in ("higher", "lower"):
                moved.append(f"{methods[key].label} {'up' if v == 'higher' else 'down'} {abs(delta['mean']):.3f}")
        with_delta = sum(1 for key in mode.methods if env_cells[key]["success_delta"]["n"] >= 2)
        if moved:
            parts.append("held-out success changed significantly with training for " + ", ".join(moved))
        elif with_delta:
            parts.append(
                f"no method's held-out success changed significantly with training ({with_delta} with ≥ 2 seeds)"
            )
        pairs = [
            (r["before"]["success"], r["after"]["success"])
            for r in agg["runs"]
            if r["env"] == env and r["finished"] and r["before"] and r["after"]
        ]
        if pairs:
            same = sum(1 for b, a in pairs if a == b)
            parts.append(
                f"{same} of {len(pairs)} finished runs ended with exactly the held-out success they started with "
                f"(one episode is {1 / mode.eval_episodes:.3f} of it)"
            )
        lines.append(f"- **{env}**: " + "; ".join(parts) + ".")
    for env in mode.envs:
        econ = cells.get(f"{ref}|{env}", {}).get("economics", {})
        if econ.get("retries"):
            lines.append(
                f"- Retries on **{env}** (R³L, oracle reflector): {count(econ['retries'])} retries, "
                f"{num(econ['beat_base_rate'], 2)} beat their base (paper: ALFWorld 0.65, math 0.06), "
                f"{num(econ['retry_success_rate'], 2)} succeeded; from the pivot they generated "
                f"{num(econ['token_cost_vs_scratch'], 2)}× the tokens and played "
                f"{num(econ['step_cost_vs_scratch'], 2)}× "
                "the env steps that retries from scratch would have"
                + (
                    " (every pivot was turn 0: the reflector found the first turn already wrong, so restarting at "
                    "the pivot saved nothing)."
                    if econ.get("mean_pivot") == 0
                    else f" (mean pivot: turn {num(econ.get('mean_pivot'), 1)})."
                )
                + (
                    f" Pivotal credit took {econ['masked_share']:.1%} of the generated agent tokens out of the loss."
                    if econ.get("masked_share") is not None
                    else ""
                )
            )
    for env in mode.envs:
        if pair := _beside_r3l(cells, env, "r3l-self", ref):
            se, oe = pair
            lines.append(
                f"- Reflector on **{env}**: self-reflection parsed {num(se['parse_rate'], 2)} of its reflections and "
                f"produced {count(se['retries'])} retries ({num(se['beat_base_rate'], 2)} beat their base); the oracle "
                f"produced {count(oe['retries'])} ({num(oe['beat_base_rate'], 2)})."
                + _versus(agg, env, "r3l-self", "self-reflection")
            )
    for env in mode.envs:
        if pair := _beside_r3l(cells, env, "r3l-retry-from-scratch", ref):
            se, pe = pair
            lines.append(
                f"- Restart at the pivot vs from scratch on **{env}** (same reflections, same budget of trajectories): "
                f"{num(pe['beat_base_rate'], 2)} vs {num(se['beat_base_rate'], 2)} of the retries beat their base; "
                f"generated tokens per training success {count(pe['tokens_per_success'])} vs "
                f"{count(se['tokens_per_success'])}, env steps per success {num(pe['env_steps_per_success'], 1)} vs "
                f"{num(se['env_steps_per_success'], 1)}." + _versus(agg, env, "r3l-retry-from-scratch", "from scratch")
            )
    tokens = []
    for env in mode.envs:
        r, g = cells.get(f"{ref}|{env}"), cells.get(f"grpo|{env}")
        if r and g and r["generated_tokens"]["n"] and g["generated_tokens"]["n"]:
            r_over_g = ratio(r["generated_tokens"]["mean"], g["generated_tokens"]["mean"])
            if r_over_g is not None:
                tokens.append(f"{env} {r_over_g:.2f}×")
    if tokens:
        lines.append(
            "- Same number of sampled trajectories, different generated tokens (rollouts + reflections), R³L ÷ GRPO: "
            + ", ".join(tokens)
            + "."
        )
    disagree = [k for k, ok in agg["before_agree"].items() if not ok]
    if agg["before_agree"]:
        lines.append(
            "- Check: the eval before training (same seed, same episodes, same initial model) "
            + ("agrees across all methods." if not disagree else f"differs across methods for {', '.join(disagree)}.")
        )
    mixed = [k for k, ok in agg.get("kinds_agree", {}).items() if not ok]
    if mixed:  # the sweep makes every run of a seed on one CPU kind; a report that mixes them says so
        lines.append(
            f"- Check: the runs of {', '.join(mixed)} were made on more than one CPU kind (other start models or "
            "arithmetic): their paired differences mix the kinds."
        )
    return lines
