"""The calibration table of the learning page: per env, the configuration chosen for training (what the calibration
harness, ``python -m benchmarks.calibration``, measured and marked in ``results/calibration/chosen.json``), its
numbers against the ranges a task must reach for reflect-then-retry to matter, and a pass or fail per number."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .fmt import num, table

#: the calibration harness's folder under the results folder, and its file of chosen configurations
CALIBRATION_DIR = "calibration"
CHOSEN = "chosen.json"
#: the numbers of a chosen configuration (from its ``chosen.json`` entry)
FIELDS = ("base_success", "retry_success", "fixed_habit_success", "random_success", "episodes", "distinct_test_tasks")
#: the ranges (the calibration harness's ``TARGETS``; a test keeps the two equal)
BASE_RANGE = (0.05, 0.25)
RETRY_MIN, RETRY_OVER_BASE = 0.30, 2.0
FIXED_MAX = RANDOM_MAX = 0.10
MIN_EPISODES = MIN_TASKS = 200
#: the configuration's levers shown beside the numbers (its JSON's ``config``)
LEVERS = ("max_turns", "temperature", "oracle_plan", "model", "constrained")


class CalibrationError(ValueError):
    """A calibration file that is not what the harness writes (named, with what is wrong)."""


def _number(value: Any, name: str, env: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CalibrationError(f"calibration of {env!r}: {name} is {value!r}, not a number")
    return value


def calibration_entry(env: str, chosen: dict[str, Any], config: dict[str, Any] | None) -> dict[str, Any]:
    """One env's row of the aggregate: the chosen entry's numbers, the configuration's levers (``config``: the
    ``config`` of the JSON it names, ``None`` when that file is missing), which lever was moved (the entry's
    ``lever``, else its ``why``), and the checks against the ranges."""
    missing = [k for k in FIELDS if k not in chosen]
    if missing:
        raise CalibrationError(f"calibration of {env!r}: chosen entry lacks {missing}")
    entry: dict[str, Any] = {k: _number(chosen[k], k, env) for k in FIELDS}
    for k in ("base_success", "fixed_habit_success", "random_success", "episodes", "distinct_test_tasks"):
        if entry[k] is None:
            raise CalibrationError(f"calibration of {env!r}: {k} is missing (null)")
    entry["key"] = chosen.get("key")
    entry["file"] = chosen.get("file")
    entry["lever"] = chosen.get("lever") or chosen.get("why")
    entry["why"] = chosen.get("why") if chosen.get("lever") else None  # the longer account, where both are given
    entry["config"] = config
    entry["checks"] = checks(entry)
    return entry


def checks(entry: dict[str, Any]) -> dict[str, bool]:
    """Pass or fail of each number against its range (a missing retry success fails both of its checks)."""
    base, retry = entry["base_success"], entry["retry_success"]
    return {
        "base_success": BASE_RANGE[0] <= base <= BASE_RANGE[1],
        "retry_success": retry is not None and retry >= RETRY_MIN and retry >= RETRY_OVER_BASE * base,
        "fixed_habit_success": entry["fixed_habit_success"] <= FIXED_MAX,
        "random_success": entry["random_success"] <= RANDOM_MAX,
        "episodes": entry["episodes"] >= MIN_EPISODES,
        "distinct_test_tasks": entry["distinct_test_tasks"] >= MIN_TASKS,
    }


def read_calibration(results_dir: Path) -> dict[str, Any] | None:
    """The ``calibration`` object of the aggregate, keyed by env, from ``results_dir/calibration/chosen.json``
    and the configuration JSONs it names; ``None`` when no configuration has been chosen yet."""
    folder = Path(results_dir) / CALIBRATION_DIR
    path = folder / CHOSEN
    if not path.is_file():
        return None
    try:
        chosen = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CalibrationError(f"{path} is not JSON: {err}") from err
    if not isinstance(chosen, dict) or not all(isinstance(v, dict) for v in chosen.values()):
        raise CalibrationError(f"{path} is not an object of env → chosen entry")
    out = {}
    for env, entry in sorted(chosen.items()):
        config = None
        name = entry.get("file")
        if isinstance(name, str) and Path(name).name == name and (folder / name).is_file():
            config = json.loads((folder / name).read_text()).get("config")
        out[env] = calibration_entry(env, entry, config)
    return out


def _mark(ok: bool) -> str:
    return "pass" if ok else "**fail**"


def _levers(entry: dict[str, Any]) -> str:
    config = entry.get("config") or {}
    if not config:
        return f"`{entry.get('key') or '?'}`"
    env = f"`{config.get('env_id', '?')}` `{json.dumps(config.get('env_kwargs', {}))}`"
    return env + "; " + ", ".join(f"{k} {config[k]}" for k in LEVERS if k in config)


def render_calibration(calibration: dict[str, Any] | None) -> list[str]:
    """The page's calibration table (a line saying none is chosen yet when there is no calibration)."""
    md = ["", "### Calibration: tasks where reflect-then-retry can matter", ""]
    ranges = (
        f"Ranges: base success {BASE_RANGE[0]:.0%}–{BASE_RANGE[1]:.0%} at the study's sampling temperature; "
        f"oracle-guided retry success ≥ {RETRY_MIN:.0%} and ≥ {RETRY_OVER_BASE:g}× the base; best fixed action "
        f"sequence ≤ {FIXED_MAX:.0%}; random admissible policy ≤ {RANDOM_MAX:.0%}; ≥ {MIN_EPISODES} held-out "
        f"episodes and ≥ {MIN_TASKS} distinct test tasks. Measured by `python -m benchmarks.calibration` on the "
        "test split; each cell says whether it meets its range."
    )
    md += [ranges, ""]
    if not calibration:
        return [*md, "No configuration has been chosen yet (`results/calibration/chosen.json` is absent)."]
    rows = []
    for env, e in calibration.items():
        ok = e["checks"]
        rows.append(
            [
                env,
                _levers(e),
                e.get("lever") or "—",
                *(f"{num(e[k])} {_mark(ok[k])}" for k in FIELDS[:4]),
                *(f"{e[k]:.0f} {_mark(ok[k])}" for k in FIELDS[4:]),
            ]
        )
    header = ["env", "configuration", "lever", "base", "retry", "fixed habit", "random", "episodes"]
    md += table([*header, "distinct test tasks"], rows)
    short = [(env, e["why"]) for env, e in calibration.items() if e.get("why") and not all(e["checks"].values())]
    if short:
        md += ["", "Why the closest configurations fall short:", ""]
        md += [f"- **{env}**: {why}" for env, why in short]
    return md
