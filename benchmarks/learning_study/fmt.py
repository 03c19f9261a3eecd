"""Numbers and tables in the page's Markdown: one format for every table and sentence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def num(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` decimals; an em dash when there is none."""
    return "—" if value is None else f"{value:.{digits}f}"


def interval(stat: dict[str, Any], digits: int = 3, *, signed: bool = False) -> str:
    """``mean ± half-width (n=…)`` of a :func:`benchmarks.learning_study.stats.mean_ci` result."""
    if not stat or stat["n"] == 0:
        return "—"
    mean = f"{stat['mean']:+.{digits}f}" if signed else f"{stat['mean']:.{digits}f}"
    if stat["ci"] is None:
        return f"{mean} (n={stat['n']})"
    return f"{mean} ± {stat['ci']:.{digits}f} (n={stat['n']})"


def count(value: float | None) -> str:
    """A whole number with thousands separators; an em dash when there is none."""
    return "—" if value is None else f"{value:,.0f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines
