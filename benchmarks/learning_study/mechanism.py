"""Reflect-then-retry's mechanism, read from the runs' per-step ``mechanism/*`` records (see
:data:`benchmarks.learning_study.aggregate.MECHANISM`), and the verdict that follows it link by link.

R³L can only beat a baseline if every link holds: (a) enough groups in which every base failed (where a plain
group has no contrast), (b) retries that rescue them, (c) retries that carry a real part of the loss, (d) an
amplification that adds gradient, and (e) a rescued signal that transfers to held-out success. :func:`verdict`
checks them in that order against :data:`THRESHOLDS`. Pure functions of the report data.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from .stats import ratio

#: the shares the plots draw per step and the verdict reads pooled over R³L's runs, with their page names
SHARES = {
    "all_fail_share": "groups where every base failed",
    "rescue_rate": "rescued ÷ all-failed groups",
    "retry_loss_share": "retry share of the loss",
    "amplification_grad_share": "amplification share of the gradient",
}
#: below these, a link is broken (stated on the page, and recorded in the pre-registration)
THRESHOLDS = {
    "all_fail_share": 0.2,
    "rescue_rate": 0.2,
    "retry_loss_share": 0.1,
    "amplification_grad_share": 0.05,
}
#: the links, in the order the verdict checks them: (share, letter, what a broken link means)
LINKS = (
    ("all_fail_share", "a", "few groups in which every base failed: plain groups rarely lack contrast"),
    ("rescue_rate", "b", "the retries rarely rescue the groups in which every base failed"),
    ("retry_loss_share", "c", "the retries carry little of the loss"),
    ("amplification_grad_share", "d", "the amplification adds little gradient"),
)


def _step_shares(record: dict[str, Any]) -> dict[str, float | None]:
    groups, failed = record.get("groups"), record.get("all_bases_failed")
    return {
        "all_fail_share": ratio(failed, groups),
        "rescue_rate": ratio(record.get("rescued"), failed),
        "retry_loss_share": record.get("retry_loss_share"),
        "amplification_grad_share": record.get("amplification_grad_share"),
    }


def series(runs: Sequence[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Per share of :data:`SHARES`: ``(step, mean over the runs that logged it)`` for every step, from the runs'
    ``mechanism`` records (runs without them add nothing)."""
    by_step: dict[int, dict[str, list[float]]] = {}
    for run in runs:
        for record in run.get("mechanism") or ():
            for key, value in _step_shares(record).items():
                if value is not None:
                    by_step.setdefault(record["step"], {}).setdefault(key, []).append(value)
    return {
        key: [(step, statistics.fmean(v[key])) for step, v in sorted(by_step.items()) if v.get(key)] for key in SHARES
    }


def pooled(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The shares over every step of ``runs``: the all-failed share and the rescue rate as ratios of sums, the
    loss and gradient shares as means over the steps that logged them (``None`` where nothing was logged)."""
    records = [r for run in runs for r in run.get("mechanism") or ()]

    def total(key: str) -> float | None:
        values = [r[key] for r in records if r.get(key) is not None]
        return sum(values) if values else None

    def mean(key: str) -> float | None:
        values = [r[key] for r in records if r.get(key) is not None]
        return statistics.fmean(values) if values else None

    groups, failed, rescued = total("groups"), total("all_bases_failed"), total("rescued")
    return {
        "steps": len(records),
        "groups": groups,
        "all_bases_failed": failed,
        "rescued": rescued,
        "all_fail_share": ratio(failed, groups),
        "rescue_rate": ratio(rescued, failed),
        "retry_loss_share": mean("retry_loss_share"),
        "amplification_grad_share": mean("amplification_grad_share"),
    }


def verdict(
    comparison: dict[str, Any] | None,
    shares: dict[str, float | None],
    *,
    baseline: str = "the strongest baseline",
    thresholds: dict[str, float] | None = None,
    planned: int | None = None,
) -> dict[str, Any]:
    """Whether R³L beats ``baseline`` and, if not, which link broke.

    Args:
        comparison: R³L − baseline, paired by seed, from :func:`benchmarks.learning_study.stats.paired_family`
            (``n``, ``mean``, ``lo_adj``, ``hi_adj``, ``p_holm``); ``None`` before any pair finished.
        shares: R³L's pooled mechanism shares (:func:`pooled`).
        baseline: the baseline's name, for the text.
        thresholds: the shares below which a link is broken (default :data:`THRESHOLDS`).
        planned: the pre-registered number of paired seeds; a judgement made on fewer is labelled interim, since
            an early interval can still move either way.

    Returns:
        ``beats`` (``None`` without two paired seeds), ``broken`` (``"a"``-``"e"``, or ``None`` when R³L beats
        the baseline or there is no verdict), ``unmeasured`` (the links without numbers, skipped) and ``text``.
    """
    limits = {**THRESHOLDS, **(thresholds or {})}
    if comparison is None or comparison.get("n", 0) < 2 or comparison.get("lo_adj") is None:
        n = 0 if comparison is None else comparison.get("n", 0)
        text = f"No verdict yet: R³L and {baseline} have {n} paired seed(s); an interval needs at least 2."
        return {"beats": None, "broken": None, "unmeasured": [], "text": text}
    interval = f"{comparison['mean']:+.3f}, Holm-adjusted interval [{comparison['lo_adj']:+.3f}, "
    interval += f"{comparison['hi_adj']:+.3f}] over n = {comparison['n']} seeds"
    interim = ""
    if planned is not None and comparison["n"] < planned:
        interim = f"Interim, on {comparison['n']} of the {planned} pre-registered seeds (not the study's verdict): "
    if comparison["lo_adj"] > 0:
        text = f"{interim}R³L beats {baseline} on held-out success: R³L − {baseline} = {interval}, which excludes 0."
        return {"beats": True, "broken": None, "unmeasured": [], "text": text}
    if comparison["hi_adj"] < 0:
        head = f"{interim}R³L does worse than {baseline}: R³L − {baseline} = {interval}, which lies below 0."
    else:
        head = f"{interim}R³L does not beat {baseline}: R³L − {baseline} = {interval}, which includes 0."
    unmeasured = []
    for key, letter, meaning in LINKS:
        value = shares.get(key)
        if value is None:
            unmeasured.append(letter)
            continue
        if value < limits[key]:
            said = f"{SHARES[key]} {value:.3f} < {limits[key]:g}"
            text = f"{head} The first broken link is ({letter}): {meaning} ({said})."
            return {"beats": False, "broken": letter, "unmeasured": unmeasured, "text": _note(text, unmeasured)}
    text = (
        f"{head} Links (a)-(d) hold where measured, so the broken link is (e): the rescued signal does not "
        "transfer to held-out success."
    )
    return {"beats": False, "broken": "e", "unmeasured": unmeasured, "text": _note(text, unmeasured)}


def _note(text: str, unmeasured: list[str]) -> str:
    if not unmeasured:
        return text
    links = ", ".join(f"({u})" for u in unmeasured)
    return f"{text} Not measured, so not checked: {links}; an earlier link may be the one that broke."
