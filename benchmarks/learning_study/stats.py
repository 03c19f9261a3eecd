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
    norm = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t: float, n: int = 2000) -> float:
        h = t / n
        ys = [norm * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
        return 0.5 + h / 3 * (ys[0] + ys[-1] + 4 * sum(ys[1:-1:2]) + 2 * sum(ys[2:-1:2]))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


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
