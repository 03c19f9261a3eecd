"""Writes the learning report: a section of RESULTS.md (``learning`` for the pre-registered comparison,
``learning_MODE`` for the other modes), ``results/SECTION.json`` and one plot per env, from the run directories
(:func:`write_report`) or again from a saved JSON (:func:`rewrite_report`, for a change of wording or layout without
the runs)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import results_page

from .aggregate import aggregate, carried_names, train_config
from .amendments import AMENDMENTS_JSON, read_amendments
from .calibration_table import read_calibration
from .discussion import discussion
from .fair import FAIR_MODES, fair_comparisons
from .grid import ENVS, METHODS, EnvSetting, Method, Mode, Run
from .page import render
from .plots import plot_curves, plot_mechanism
from .prereg import PREREG_JSON, PREREG_MODES, TEST, read_warmup
from .prereg_page import prereg_data
from .reflection_table import read_self_reflection

SECTION = "learning"
#: the pre-registered comparison is the study of record (section ``learning``); every other mode's report has a
#: section (and JSON file) of its own beside it, e.g. ``learning_fair``
SECTIONS = {"prereg": SECTION, "prereg-valid": "learning_prereg_valid"}


def section_of(mode: str) -> str:
    """The RESULTS.md section (and ``results/NAME.json``) a mode's report goes to."""
    return SECTIONS.get(mode, f"{SECTION}_{mode.replace('-', '_')}")


def library_versions() -> str:
    """The versions of the learner's heavy libraries (torch, transformers), for the page's machine line."""
    out = []
    for dist in ("torch", "transformers"):
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(out)


def write_report(
    mode: Mode,
    runs: Sequence[Run],
    *,
    command: str,
    results_md: Path,
    results_dir: Path,
    plots_dir: Path,
    history: Sequence[dict[str, Any]] = (),
    envs: dict[str, EnvSetting] = ENVS,
    methods: dict[str, Method] = METHODS,
    saved: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Aggregate the run directories of ``runs`` and write the section, the JSON and the plots; returns the data.

    ``saved``: the report committed before (a ``learning.json`` of the same mode); its finished runs stand for the
    cells that have no run directory here, and its invocations open the list (see :func:`aggregate`)."""
    machine = results_page.machine()
    agg = aggregate(mode, runs, methods, saved=saved, machine=machine.get("cpu_kind"))
    plots = plot_curves(mode, agg, plots_dir, methods)
    carried = carried_names(agg["runs"])
    earlier = list((saved or {}).get("invocations", []))
    data = {
        "mode": dataclasses.asdict(mode),
        "command": command,
        "machine": machine,
        "versions": library_versions(),
        "invocations": earlier + [h for h in history if h not in earlier],
        "envs": {k: dataclasses.asdict(envs[k]) for k in mode.envs},
        "methods": {k: dataclasses.asdict(methods[k]) for k in mode.methods},
        "configs": {r.name: saved["configs"][r.name] if r.name in carried else r.config for r in runs},
        **agg,
        "discussion": discussion(mode, agg, methods),
        "plots": {k: str(v) for k, v in plots.items()},
        "train_config": train_config(agg, saved),
    }
    if mode.name in PREREG_MODES:
        data["warmup"] = read_warmup(mode.model)
    _side_tables(data, mode, methods, Path(results_dir), plots_dir)
    _write(data, results_md, results_dir)
    return data


def _side_tables(
    data: dict[str, Any], mode: Mode, methods: dict[str, Method], results_dir: Path, plots_dir: Path
) -> None:
    """Add what the page shows beside the grid: the fair-rules comparisons (fair modes); the pre-registration,
    the comparisons, mechanism plots and verdicts of the pre-registered study (its pre-registration the one
    ``data`` holds, else ``results_dir/prereg.json``); and the calibration and
    self-reflection measurements other benchmarks write into ``results_dir`` (kept likewise)."""
    if mode.name in FAIR_MODES:
        data["fair"] = fair_comparisons(data["cells"], mode, methods)
    if mode.name in PREREG_MODES:
        path = Path(results_dir) / PREREG_JSON
        # a report keeps the pre-registration it ran under (a rewrite from JSON does not read a newer one)
        data["prereg"] = data.get("prereg") or (json.loads(path.read_text()) if path.is_file() else None)
        # amendments are only ever appended: the newest list is the one to show
        data["amendments"] = read_amendments(Path(results_dir) / AMENDMENTS_JSON) or data.get("amendments") or []
        key = "prereg_results" if mode.name == TEST else "prereg_valid"
        data[key] = prereg_data(data, mode, methods)
        plots = plot_mechanism(mode, data["runs"], plots_dir, methods) if mode.name == TEST else {}
        data["mechanism_plots"] = {k: str(v) for k, v in plots.items()}
    data["calibration"] = read_calibration(results_dir) or data.get("calibration")
    data["self_reflection"] = read_self_reflection(results_dir) or data.get("self_reflection")


def rewrite_report(saved: Path, *, results_md: Path, results_dir: Path, plots_dir: Path) -> dict[str, Any]:
    """Render the section and the plots again from a saved ``learning.json``, runs or no runs.

    The data is written back as it was read, except for the plot paths (where the plots went this time); the
    discussion is regenerated from the numbers. A file written before ``train_config`` was recorded renders without
    the paragraph listing the shared TrainConfig fields."""
    data = json.loads(Path(saved).read_text())
    missing = {"mode", "command", "machine", "versions", "invocations", "envs", "methods", "cells", "runs"} - set(data)
    if missing:
        raise ValueError(f"{saved} is not a learning report (no {sorted(missing)}): pass a results/learning.json")
    mode = Mode.from_dict(data["mode"])
    methods = {k: Method.from_dict(v) for k, v in data["methods"].items()}
    plots = plot_curves(mode, data, plots_dir, methods)
    data["plots"] = {k: str(v) for k, v in plots.items()}
    data["discussion"] = discussion(mode, data, methods)
    _side_tables(data, mode, methods, Path(results_dir), plots_dir)
    _write(data, results_md, results_dir)
    return data


def _write(data: dict[str, Any], results_md: Path, results_dir: Path) -> None:
    markdown = render(data, page_dir=Path(results_md).parent)
    section = section_of(data["mode"]["name"])
    results_page.write_section(section, markdown, data, results_md=Path(results_md), results_dir=Path(results_dir))
