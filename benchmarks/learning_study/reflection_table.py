"""The self-reflection table of the learning page: how often the embedded model's own reflections on failed bases
parse, lead to a retry, and win (``python -m benchmarks.self_reflection`` writes ``results/self_reflection.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .fmt import count, num, table

SELF_REFLECTION_JSON = "self_reflection.json"
#: per configuration and reflector: the counts and rates the page shows
RATES = ("failed_bases", "parsed", "parse_rate", "retries", "retry_rate", "retry_wins", "retry_success")


def read_self_reflection(results_dir: Path) -> dict[str, Any] | None:
    """Per configuration: its env, base success and each reflector's rates; and whether the measurement
    finished. ``None`` when the file is absent."""
    path = Path(results_dir) / SELF_REFLECTION_JSON
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("configs"), dict):
        raise ValueError(f"{path} has no object 'configs': not a self-reflection measurement")
    runs = [r for r in data.get("runs") or [] if isinstance(r, dict)]
    # one measurement's settings ("config"), or those of its first run where several runs made it ("runs")
    settings = data.get("config") or (runs[0].get("config") if runs else None) or {}
    configs = {}
    for name, c in data["configs"].items():
        reflectors = {r: {k: v.get(k) for k in RATES} for r, v in (c.get("reflectors") or {}).items()}
        configs[name] = {
            "env_id": c.get("env_id"),
            "env_kwargs": c.get("env_kwargs"),
            "max_turns": c.get("max_turns"),
            "bases": c.get("bases"),
            "base_success": c.get("base_success"),
            "reflectors": reflectors,
        }
    keep = ("model", "temperature", "samples", "tasks")
    out = {"complete": bool(data.get("complete")), **{k: settings.get(k) for k in keep}, "configs": configs}
    out["commands"] = [r.get("command") for r in runs if r.get("command")]
    out["not_measured"] = dict(data.get("not_measured") or {})
    return out


def render_self_reflection(reflection: dict[str, Any] | None) -> list[str]:
    """The page's table of self-reflection parse and retry rates (a line saying none was measured when absent)."""
    md = ["", "### Self-reflection: parse and retry rates of the embedded model", ""]
    if not reflection:
        return [*md, "Not measured yet (`results/self_reflection.json` is absent)."]
    rows = []
    for name, c in reflection["configs"].items():
        for reflector, r in c["reflectors"].items():
            rows.append(
                [
                    name,
                    reflector,
                    count(r["failed_bases"]),
                    f"{count(r['parsed'])} ({num(r['parse_rate'], 2)})",
                    f"{count(r['retries'])} ({num(r['retry_rate'], 2)})",
                    f"{count(r['retry_wins'])} ({num(r['retry_success'], 2)})",
                ]
            )
    # "complete" is False both while the measurement runs and after it was stopped early; the list of what was not
    # measured tells the two apart (a stopped run names what it left out)
    if reflection["complete"]:
        state = "finished"
    elif reflection.get("not_measured"):
        state = "**stopped early: partial**, see what was not measured below"
    else:
        state = "**still running: partial**"
    md += [
        f"`python -m benchmarks.self_reflection` ({state}): model `{reflection.get('model')}` at temperature "
        f"{reflection.get('temperature')}, {reflection.get('tasks')} test tasks × {reflection.get('samples')} "
        "samples per configuration (the first run's settings). Rates are of the failed bases (parsed, retries) "
        "and of the retries (wins).",
        "",
    ]
    if reflection.get("commands"):
        md += ["Made by: " + "; ".join(f"`{c}`" for c in reflection["commands"]) + ".", ""]
    if reflection.get("not_measured"):
        md += ["Not measured: " + "; ".join(f"{k} ({v})" for k, v in reflection["not_measured"].items()) + ".", ""]
    if not rows:
        return [*md, "No reflector has finished a configuration yet."]
    header = ["configuration", "reflector", "failed bases", "parsed (rate)", "retries (rate)", "retry wins (rate)"]
    return md + table(header, rows)
