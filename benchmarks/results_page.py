"""Shared plumbing for benchmarks: machine/version facts and writing a section of RESULTS.md.

Each benchmark owns one section of ``benchmarks/RESULTS.md`` (between ``<!-- begin:NAME -->`` and
``<!-- end:NAME -->`` markers) and one JSON file ``benchmarks/results/NAME.json``; rerunning it replaces both.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "RESULTS.md"
RESULTS_DIR = HERE / "results"


def machine() -> dict[str, str]:
    """The facts a reader needs to compare numbers: CPU, cores, memory, Python, key package versions."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = {}
    for dist in ("r3l", "gymnasium", "numpy", "textworld", "alfworld", "scienceworld", "bm25s", "math-verify"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
        versions["git"] = commit.stdout.strip() or "unknown"
    except OSError:
        versions["git"] = "unknown"
    try:  # whether bf16 is native here decides what "auto" precisions mean (r3l_learn.policies.device)
        from r3l_learn.policies.device import cpu_kind

        kind = cpu_kind()
    except ImportError:
        kind = "unknown"
    return {
        "cpu": cpu,
        "cpu_kind": kind,
        "cores": str(os.cpu_count()),
        "memory": f"{mem_gib:.0f} GiB",
        "python": platform.python_version(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "versions": ", ".join(f"{k} {v}" for k, v in versions.items()),
    }


def machine_line(facts: dict[str, str] | None = None) -> str:
    facts = facts or machine()
    return (
        f"Machine: {facts['cpu']} ({facts.get('cpu_kind', 'CPU kind not recorded')}), {facts['cores']} cores, "
        f"{facts['memory']}; Python {facts['python']}; "
        f"{facts['versions']}; {facts['date']}."
    )


def write_section(
    name: str, markdown: str, data: dict, *, results_md: Path | None = None, results_dir: Path | None = None
) -> None:
    """Replace (or append) section ``name`` of RESULTS.md and write ``results/NAME.json`` (by default
    :data:`RESULTS_MD` and :data:`RESULTS_DIR`; a test or a dry run passes other files)."""
    results_md = RESULTS_MD if results_md is None else Path(results_md)
    results_dir = RESULTS_DIR if results_dir is None else Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"{name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    block = f"<!-- begin:{name} -->\n{markdown.strip()}\n<!-- end:{name} -->"
    text = results_md.read_text() if results_md.exists() else "# Benchmark results\n"
    pattern = re.compile(rf"<!-- begin:{re.escape(name)} -->.*?<!-- end:{re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    results_md.write_text(text)


def write_section_under(name: str, markdown: str, data: dict, folder: str | Path | None) -> None:
    """:func:`write_section` into ``folder``'s RESULTS.md and JSON (a dry run's ``--out``), or, for ``None``, the
    project's."""
    where = Path(folder) if folder else None
    write_section(name, markdown, data, results_md=where / "RESULTS.md" if where else None, results_dir=where)
