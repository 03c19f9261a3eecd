"""The statistics of the learning page: means with 95 % t-intervals over seeds, paired differences, verdicts.
Pure functions of numbers; Student's t quantile is computed here, so no SciPy is needed."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from typing import Any


@functools.cache
def t_quantile(df: int, p: float = 0.975) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (Simpson's rule on the density, then
    bisection; accurate to ~1e-6, so no SciPy is needed)."""
    if df < 1 or not 0.5 <= p < 1:
        raise ValueError(f"need df >= 1 and 0.5 <= p < 1, got df={df}, p={p}")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def t_cdf(t: float, df: int, n: int = 2000) -> float:
    """Student's t distribution function at ``t`` with ``df`` degrees of freedom (Simpson's rule on the density
    from 0 to ``|t|``)."""
    norm = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    h = abs(t) / n
    ys = [norm * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
    half = h / 3 * (ys[0] + ys[-1] + 4 * sum(ys[1:-1:2]) + 2 * sum(ys[2:-1:2]))
    return 0.5 + math.copysign(min(half, 0.5), t)


def paired_p(diffs: Sequence[float]) -> float | None:
    """The two-sided p-value of the paired t-test that the mean of ``diffs`` is 0 (``None`` for fewer than 2;
    with no spread, 1 when every difference is 0, else 0)."""
    values = [float(v) for v in diffs]
    n = len(values)
    if n < 2:
        return None
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    t = mean / (sd / math.sqrt(n))
    return max(0.0, min(1.0, 2 * (1 - t_cdf(abs(t), n - 1))))


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of ``pvalues`` (family-wise error across them; ``None`` stays ``None`` and does
    not count in the family). Reject at level α where the adjusted p-value is below α."""
    ranked = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m, out, running = len(ranked), [None] * len(pvalues), 0.0
    for k, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (m - k) * p))  # monotone: never below an earlier (smaller) p's
        out[i] = running
    return out


def paired_family(pairs: dict[str, tuple[dict[int, float], dict[int, float]]], alpha: float = 0.05) -> dict:
    """Paired comparisons ``a − b`` (by seed) made together: per name the mean difference, its plain 95 %
    t-interval, the interval at level 1 − α/m (Bonferroni: simultaneous over the m comparisons with at least 2
    seeds), the paired t-test's p-value, Holm's adjusted p-value, and a verdict at family-wise level α."""
    out = {}
    for name, (a, b) in pairs.items():
        seeds = sorted(set(a) & set(b))
        diffs = [a[s] - b[s] for s in seeds]
        out[name] = {**mean_ci(diffs), "seeds": seeds, "p": paired_p(diffs)}
    names = list(out)
    m = sum(out[k]["p"] is not None for k in names)
    for name, adjusted in zip(names, holm([out[k]["p"] for k in names]), strict=True):
        c = out[name]
        c["p_holm"], c["family"] = adjusted, m
        lo = hi = None
        if c["n"] >= 2 and m:
            sd = statistics.stdev([a - b for a, b in ((pairs[name][0][s], pairs[name][1][s]) for s in c["seeds"])])
            half = t_quantile(c["n"] - 1, 1 - alpha / (2 * m)) * sd / math.sqrt(c["n"])
            lo, hi = c["mean"] - half, c["mean"] + half
        c["lo_adj"], c["hi_adj"] = lo, hi
        if adjusted is None:
            c["verdict"] = "too few seeds"
        elif adjusted < alpha:
            c["verdict"] = "higher" if c["mean"] > 0 else "lower"
        else:
            c["verdict"] = f"no difference detectable at n = {c['n']}"
    return out


def mean_ci(values: Sequence[float]) -> dict[str, Any]:
    """Mean and the half-width of its 95 % t-interval (``None`` for fewer than 2 values)."""
    values = [float(v) for v in values if v is not None]
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "ci": None, "lo": None, "hi": None}
    mean = statistics.fmean(values)
    half = t_quantile(n - 1) * statistics.stdev(values) / math.sqrt(n) if n > 1 else None
    lo, hi = (mean - half, mean + half) if half is not None else (None, None)
    return {"n": n, "mean": mean, "ci": half, "lo": lo, "hi": hi}


def paired(a: dict[int, float], b: dict[int, float]) -> dict[str, Any]:
    """The mean difference ``a − b`` over the seeds both have, with its 95 % t-interval (paired by seed)."""
    seeds = sorted(set(a) & set(b))
    out = mean_ci([a[s] - b[s] for s in seeds])
    out["seeds"] = seeds
    return out


def verdict(diff: dict[str, Any]) -> str:
    """``higher``, ``lower``, ``no significant difference``, ``identical`` or ``too few seeds``."""
    if diff["n"] < 2:
        return "too few seeds"
    if diff["ci"] == 0:
        return "identical" if diff["mean"] == 0 else ("higher" if diff["mean"] > 0 else "lower")
    if diff["lo"] > 0:
        return "higher"
    if diff["hi"] < 0:
        return "lower"
    return "no significant difference"


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or ``None`` when either is missing or ``b`` is 0 (a ratio of sums with nothing summed)."""
    return a / b if a is not None and b else None
