"""Amendments to the pre-registration: CPU kinds on which the test stage may run besides the registered one, and
seed quotas in place of the registered seeds (:mod:`~benchmarks.learning_study.quota`).

The study was registered on one CPU kind: its autocast (``prereg.json``, ``settings.shared.autocast``) and its
start model's bits are that kind's. A CPU of another kind resolves autocast otherwise (bf16 emulated would be many
times slower, so it resolves to fp32), and its rebuild of the start model from the registered recipe rounds
otherwise (the same examples and target tokens; the losses differ from the fifth digit). Its runs therefore start
from another model in other arithmetic, and a difference paired across kinds would measure that too.

An amendment admits one such kind under :data:`RULES`. It is declared (``--declare-kind``) on a machine of that
kind, from the start model rebuilt there, before any test-stage run is made there, and committed beside
``prereg.json`` (which is never changed). It changes no setting a method is compared under: the methods, rates,
budget, seeds, tasks and analysis stay those registered.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "AMENDMENTS_JSON",
    "RULES",
    "amended",
    "amendment_for",
    "declaration",
    "declare",
    "kind_amendments",
    "seed_amendment",
    "read_amendments",
    "refuse_runs_made",
    "beyond_rounding",
]

AMENDMENTS_JSON = "prereg-amendments.json"

#: what every amendment admits a kind under (the page states them)
RULES = (
    "every run of an (env, seed) is made on one CPU kind, the kind of that seed's first run, so each paired "
    "difference compares runs from one start model in one arithmetic",
    "the kind's start model is the registered recipe rebuilt there: its warmup.json differs from the registered "
    "one in its losses only (the same examples, target tokens and settings)",
    "the eval before training is made once per env and kind",
    "the registered analysis pools the paired differences of every kind (Holm, as registered); the page adds "
    "R³L − baseline per kind, unadjusted, to show whether the kinds agree",
)

#: the ``warmup.json`` fields a rebuild on another CPU kind may change: float results, not what was trained on
ROUNDING_FIELDS = frozenset({"loss_before", "final_loss", "epoch_losses"})


def read_amendments(path: Path) -> list[dict[str, Any]]:
    """The amendments at ``path`` (none where there is no file): each admits a CPU kind (``kind``) or declares
    seed quotas (``seeds``).

    Raises:
        ValueError: the file is not a list of amendments.
    """
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    kind, seeds = {"kind", "autocast", "warmup", "date", "commit"}, {"seeds", "date", "commit"}
    if not isinstance(data, list) or not all(isinstance(a, dict) and (kind <= set(a) or seeds <= set(a)) for a in data):
        raise ValueError(
            f"{path} is not a list of pre-registration amendments (each with {sorted(kind)} or {sorted(seeds)})"
        )
    return data


def kind_amendments(amendments: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The amendments that admit a CPU kind."""
    return [a for a in amendments if "kind" in a]


def seed_amendment(amendments: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The amendment that declares seed quotas, or ``None``."""
    return next((a for a in amendments if "seeds" in a), None)


def amendment_for(amendments: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    """The amendment that admits CPU kind ``kind``, or ``None``."""
    return next((a for a in kind_amendments(amendments) if a["kind"] == kind), None)


def amended(prereg: Mapping[str, Any], amendment: Mapping[str, Any] | None) -> dict[str, Any]:
    """The pre-registration as it holds on the amendment's kind: its autocast and its start model's
    ``warmup.json``; everything else as registered (a copy; ``prereg`` itself is left alone)."""
    out = copy.deepcopy(dict(prereg))
    if amendment is not None:
        out["settings"]["shared"]["autocast"] = amendment["autocast"]
        out["warmup"] = copy.deepcopy(amendment["warmup"])
    return out


def beyond_rounding(registered: Mapping[str, Any] | None, rebuilt: Mapping[str, Any] | None) -> list[str]:
    """The fields of the rebuilt start model's ``warmup.json`` that differ from the registered one other than in
    rounding (:data:`ROUNDING_FIELDS`): empty when the rebuild followed the registered recipe."""
    if not registered or not rebuilt:
        return ["warmup.json (missing)"]
    keys = set(registered) | set(rebuilt)
    return sorted(k for k in keys - ROUNDING_FIELDS if registered.get(k) != rebuilt.get(k))


def declaration(command: str, commit: Mapping[str, Any], date: str, note: str | None = None) -> dict[str, Any]:
    """What every amendment records of its declaration: the date, the git commit (:func:`prereg.git_commit`), the
    command, and the note, where given: what else a reader should know (e.g. a pilot made outside the study)."""
    return {"date": date, **dict(commit), "command": command, **({"note": note} if note else {})}


def refuse_runs_made(made: Sequence[str], what: str) -> None:
    """Refuse an amendment where runs it admits (``made``, named ``what``) were already made.

    Raises:
        ValueError: ``made`` is not empty.
    """
    if made:
        names = ", ".join(made[:3]) + (", ..." if len(made) > 3 else "")
        raise ValueError(
            f"{len(made)} {what} were already made ({names}): an amendment must precede every run it admits"
        )


def declare(
    prereg: Mapping[str, Any],
    amendments: Sequence[Mapping[str, Any]],
    *,
    kind: str,
    autocast: str,
    warmup: Mapping[str, Any] | None,
    runs_made_here: Sequence[str],
    declared: Mapping[str, Any],
) -> dict[str, Any]:
    """The amendment admitting ``kind`` (append it to ``amendments`` and commit it before any run here).

    Args:
        kind: this CPU's kind (:func:`r3l_learn.policies.device.cpu_kind`).
        autocast: the autocast the study's cells resolve to here.
        warmup: this machine's start model's ``warmup.json``.
        runs_made_here: the test-stage runs already made on this kind (any refuses: an amendment precedes them).
        declared: its :func:`declaration`.

    Raises:
        ValueError: the kind is the registered one or already admitted, runs were made here, or the start model is
            not the registered recipe.
    """
    if autocast == prereg["settings"]["shared"]["autocast"] and prereg.get("warmup") == warmup:
        raise ValueError(f"this CPU ({kind}) runs the registered settings and start model: nothing to amend")
    if amendment_for(amendments, kind) is not None:
        raise ValueError(f"CPU kind {kind!r} is already admitted by an amendment")
    refuse_runs_made(runs_made_here, "test-stage runs on this kind")
    differ = beyond_rounding(prereg.get("warmup"), warmup)
    if differ:
        raise ValueError(
            "the start model here is not the registered recipe rebuilt: its warmup.json differs from the registered "
            f"one in {', '.join(differ)} (only {', '.join(sorted(ROUNDING_FIELDS))} may differ); rebuild it with the "
            "guide's command"
        )
    return {
        "kind": kind,
        "autocast": autocast,
        "warmup": dict(warmup or {}),
        **dict(declared),
        "rules": list(RULES),
    }
