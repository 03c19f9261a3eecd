"""The fair-rules comparison (mode ``fair``): every method against R³L and against GRPO, and the two GRPO variants
against each other, paired by seed and Holm-corrected as one family per env; optimiser steps taken and skipped,
cut replies, and the retries' rescue rate. Pure functions of the report data."""

from __future__ import annotations

from typing import Any

from .fmt import count, interval, num, table
from .grid import Method, Mode, reference
from .stats import paired_family, ratio

#: the modes whose page opens with this comparison
FAIR_MODES = frozenset({"fair"})
GRPO = "grpo"
#: the pairs that isolate one change to GRPO each: its KL term, then the division by the group's reward std
ISOLATIONS = (("grpo", "grpo-no-kl", "the KL term"), ("grpo-no-kl", "dr-grpo", "the std division (and token sum)"))
#: the earlier aggregate, kept beside this one (the page links it)
OLD_RULES_JSON = "results/learning_old_rules.json"


def comparison_pairs(mode: Mode, methods: dict[str, Method]) -> list[tuple[str, str]]:
    """The comparisons the fair table shows, ``(a, b)`` for ``a − b``: R³L minus every other method, GRPO's
    variants and the other baselines minus GRPO, and Dr. GRPO minus GRPO − KL (each pair once)."""
    ref = reference(methods)
    pairs = [(ref, m) for m in mode.methods if m != ref]
    if GRPO in mode.methods:
        pairs += [(m, GRPO) for m in mode.methods if m not in (ref, GRPO)]
    for a, b, _ in ISOLATIONS[1:]:
        if a in mode.methods and b in mode.methods:
            pairs.append((b, a))
    return pairs


def fair_comparisons(cells: dict[str, Any], mode: Mode, methods: dict[str, Method]) -> dict[str, Any]:
    """Per env: the paired held-out-success differences of :func:`comparison_pairs`, Holm-corrected together
    (keyed ``"a|b"``)."""
    out = {}
    for env in mode.envs:
        by_seed = {m: cells[f"{m}|{env}"]["success_by_seed"] for m in mode.methods}
        pairs = {f"{a}|{b}": (_int_keys(by_seed[a]), _int_keys(by_seed[b])) for a, b in comparison_pairs(mode, methods)}
        out[env] = paired_family(pairs)
    return out


def _int_keys(values: dict[Any, float]) -> dict[int, float]:
    return {int(k): v for k, v in values.items()}  # a JSON round trip makes the seeds strings


def withdrawn() -> list[str]:
    """The paragraph that says why the earlier comparison was withdrawn."""
    return [
        "",
        f"**The earlier comparison was withdrawn.** Its aggregate is kept as [`{OLD_RULES_JSON}`]({OLD_RULES_JSON})."
        " It ran under rules that confounded R³L vs GRPO:",
        "",
        "- GRPO's KL kept rows without advantage in the loss, so GRPO stepped AdamW on batches without a win; "
        "the other methods skipped them.",
        "- Tokens the policy did not choose carried loss: the forced `<action>` tag, the appended closer and the end "
        "of turn. In direct mode they were about half of the loss tokens.",
        "- Replies cut at the token cap were graded as plain failures, indistinguishable from normal stops.",
        "",
        "The runs below are new and share every rule. Tokens the policy did not choose have agent mask 0. A batch "
        "without contrast never steps AdamW, KL included. Cut replies are marked, and masked out of the loss for "
        "every method (`mask_truncated=True`).",
    ]


def render_fair(data: dict[str, Any], mode: Mode, methods: dict[str, Method]) -> list[str]:
    """The fair-rules section: the table of methods, the paired comparisons, the GRPO variants, optimiser steps
    and cut replies, the retries' rescue rate."""
    cells, fair = data["cells"], data.get("fair") or {}
    md = withdrawn()
    for env in mode.envs:
        comps = fair.get(env, {})
        md += ["", f"### Fair rules on `{env}`: held-out success before and after training", ""]
        md += _methods_table(cells, env, mode, methods)
        md += ["", f"### Fair rules on `{env}`: paired differences in held-out success (Holm-corrected)", ""]
        md += _comparisons_table(comps, methods)
        md += ["", *_variants(comps, methods)]
        md += ["", *_plainly(comps, cells, env, mode, methods)]
        md += ["", f"### Fair rules on `{env}`: optimiser steps, cut replies, retries", ""]
        md += _steps_table(cells, env, mode, methods, data.get("runs", []))
    return md


def _methods_table(cells: dict[str, Any], env: str, mode: Mode, methods: dict[str, Method]) -> list[str]:
    rows = []
    for m in mode.methods:
        c = cells[f"{m}|{env}"]
        rows.append(
            [
                methods[m].label,
                str(len(c["seeds"])),
                interval(c["success_before"]),
                interval(c["success"]),
                interval(c["success_delta"], signed=True),
            ]
        )
    header = ["method", "seeds", "before training", "after training", "change (paired by seed)"]
    return table(header, rows)


def _term(label: str) -> str:
    """A method's label as a term of a difference: in parentheses when it holds a minus itself."""
    return f"({label})" if " − " in label else label


def _comparisons_table(comps: dict[str, Any], methods: dict[str, Method]) -> list[str]:
    if not comps:
        return ["No finished pair of runs yet."]
    m = next(iter(comps.values()))["family"]
    rows = []
    for key, c in comps.items():
        a, b = key.split("|")
        plain = "—" if c["lo"] is None else f"[{c['lo']:+.3f}, {c['hi']:+.3f}]"
        adjusted = "—" if c["lo_adj"] is None else f"[{c['lo_adj']:+.3f}, {c['hi_adj']:+.3f}]"
        mean = "—" if c["mean"] is None else f"{c['mean']:+.3f}"
        rows.append(
            [
                f"{_term(methods[a].label)} − {_term(methods[b].label)}",
                str(c["n"]),
                mean,
                plain,
                adjusted,
                num(c["p"]),
                num(c["p_holm"]),
                c["verdict"],
            ]
        )
    family = (
        f"The {m} comparisons with at least two seeds form one family. The verdicts use Holm's adjusted p-values "
        f"(paired t-test) at family-wise level 0.05. The adjusted interval is at level 1 − 0.05/{m}, simultaneous "
        "over the family (Bonferroni, which is never narrower than Holm)."
        if m
        else "No comparison has two seeds yet: no interval, no test."
    )
    intro = [f"Paired by seed (same initial model, same held-out episodes). {family}", ""]
    header = ["difference", "n", "mean", "95 % CI", "family-wise CI", "p", "p (Holm)", "verdict"]
    return intro + table(header, rows)


def _variants(comps: dict[str, Any], methods: dict[str, Method]) -> list[str]:
    """Which of GRPO's two changes moved it: the KL term (GRPO vs GRPO − KL) and the std division (GRPO − KL vs
    Dr. GRPO), stated from the Holm-corrected comparisons."""
    lines = ["Which change to GRPO mattered:", ""]
    for a, b, what in ISOLATIONS:
        c = comps.get(f"{b}|{a}")
        if c is None or c["n"] == 0:
            lines.append(f"- {what}: not measured yet.")
            continue
        if c["verdict"] in ("higher", "lower"):
            said = f"{methods[b].label} is {c['verdict']} than {methods[a].label} (Holm p = {num(c['p_holm'])})"
        else:
            said = f"{c['verdict']} ({methods[b].label} vs {methods[a].label})"
        diff = f"{_term(methods[b].label)} − {_term(methods[a].label)}"
        lines.append(f"- {what}: {diff} = {c['mean']:+.3f} (n = {c['n']}); {said}.")
    return lines


def _held_out_tokens(runs: list[dict[str, Any]], env: str, method: str) -> str:
    """Mean generated tokens per held-out episode after training, over the finished seeds."""
    details = [r["eval_after_detail"] for r in runs if r["env"] == env and r["method"] == method and r["finished"]]
    tokens = [d["mean_tokens"] for d in details if d and d.get("mean_tokens") is not None]
    return num(sum(tokens) / len(tokens), 1) if tokens else "—"


def _plainly(
    comps: dict[str, Any], cells: dict[str, Any], env: str, mode: Mode, methods: dict[str, Method]
) -> list[str]:
    """What the numbers say, one line per comparison with R³L, then the steps skipped and the retries' rescues."""
    lines = ["What the numbers say:", ""]
    ref = reference(methods)
    for key, c in comps.items():
        a, b = key.split("|")
        if a != ref or c["n"] == 0:
            continue
        ci = "" if c["lo_adj"] is None else f", family-wise CI [{c['lo_adj']:+.3f}, {c['hi_adj']:+.3f}]"
        p = "" if c["p_holm"] is None else f", Holm p = {num(c['p_holm'])}"
        lines.append(f"- {methods[a].label} − {_term(methods[b].label)}: {c['mean']:+.3f}{ci}{p}: {c['verdict']}.")
    skipped = []
    for m in mode.methods:
        opt = cells[f"{m}|{env}"].get("optimizer") or {}
        if opt.get("stepped") is not None:
            total = opt["stepped"] + opt["no_contrast"] + opt["non_finite"]
            skipped.append(f"{methods[m].label} {opt['no_contrast']} of {total}")
    if skipped:
        lines.append(f"- Steps without contrast, which stepped no optimiser: {'; '.join(skipped)}.")
    econ, pooled = cells[f"{ref}|{env}"]["economics"], cells[f"{ref}|{env}"]["pooled"]
    if econ.get("retries"):
        won = pooled.get("retries_succeeded", 0)
        lines.append(
            f"- {methods[ref].label}'s oracle-guided retries won {count(won)} of {count(econ['retries'])} "
            f"({num(ratio(won, econ['retries']))})."
        )
    return lines


def _steps_table(
    cells: dict[str, Any], env: str, mode: Mode, methods: dict[str, Method], runs: list[dict[str, Any]]
) -> list[str]:
    intro = [
        "Summed over the finished seeds. A step without contrast collects its trajectories but does not step the "
        "optimiser (the shared rule). Cut replies are sampled replies that hit the token cap; they carry no loss "
        "here. Held-out tokens: generated per held-out episode after training (mean over seeds; up to 2 attempts). "
        "Retry rescue: retries that won ÷ retries, pooled over seeds and steps (R³L alone retries).",
        "",
    ]
    rows = []
    for m in mode.methods:
        c = cells[f"{m}|{env}"]
        opt, econ = c.get("optimizer") or {}, c["economics"]
        trajectories = (c["economics"].get("successes") is not None) and c["pooled"].get("trajectories")
        rescue = "—"
        if econ.get("retries"):
            won = c["pooled"].get("retries_succeeded", 0)
            rescue = f"{count(won)} / {count(econ['retries'])} = {num(ratio(won, econ['retries']))}"
        rows.append(
            [
                methods[m].label,
                str(opt.get("runs", 0)),
                count(opt.get("stepped")),
                count(opt.get("no_contrast")),
                count(opt.get("non_finite")),
                count(opt.get("cut_replies")),
                count(trajectories or None),
                _held_out_tokens(runs, env, m),
                rescue,
            ]
        )
    header = ["method", "runs", "steps that stepped AdamW", "skipped: no contrast", "skipped: non-finite"]
    header += ["cut replies (training)", "sampled trajectories", "held-out tokens / episode", "retry rescue"]
    return intro + table(header, rows)
