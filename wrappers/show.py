"""Render trajectory groups for people: base and retry side by side, the pivot marked, the reflection shown.

``render_text`` is for the terminal (``r3l show groups.jsonl``), ``render_html`` writes the same view as one
static HTML page (``r3l show groups.jsonl --html groups.html``).
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence

from wrappers.data import Trajectory, TrajectoryGroup, Turn

__all__ = ["render_html", "render_text"]

_COLUMN = 58


def _pairs(group: TrajectoryGroup) -> list[tuple[Trajectory, Trajectory | None]]:
    """Each base with the retry made from it (``None`` if it got none); extra bases alone."""
    retries = {t.metadata.get("base_index"): t for t in group.trajectories if t.kind == "retry"}
    return [(t, retries.get(i)) for i, t in enumerate(group.trajectories) if t.kind != "retry"]


def _turn_text(turn: Turn) -> str:
    action = turn.action if turn.action is not None else f"(unparsed: {turn.parse_error})"
    return f"> {action}\n{turn.outcome or turn.observation}"


def _summary(traj: Trajectory) -> str:
    return f"{traj.kind}: reward {traj.reward:.2f}, won {traj.won}, {traj.num_turns} turns"


def _reflection_lines(base: Trajectory) -> list[str]:
    refl = base.metadata.get("reflection")
    if not refl:
        return []
    if refl.get("error"):
        return [f"reflection unusable ({refl.get('source') or 'reflector'}): {refl['error']}"]
    parts = [f"outcome={refl.get('outcome')}", f"pivot={refl.get('pivot')}"]
    for key in ("root_cause", "suggestion"):
        if refl.get(key):
            parts.append(f"{key}: {refl[key]}")
    return ["reflection: " + " | ".join(parts)]


def _cell(text: str, width: int = _COLUMN) -> list[str]:
    lines = []
    for raw in text.splitlines() or [""]:
        lines += textwrap.wrap(raw, width) or [""]
    return lines[:6]


def render_text(groups: Sequence[TrajectoryGroup]) -> str:
    """A plain-text view of ``groups``: per base, its turns beside its retry's, the pivot marked with ``▶``."""
    out: list[str] = []
    for g, group in enumerate(groups, start=1):
        out.append(f"═ group {g}/{len(groups)}  {group.env_id}  task {group.task_id}  rewards {group.rewards}")
        for base, retry in _pairs(group):
            head = _summary(base) + (f"   ║ {_summary(retry)}, pivot {retry.pivot}" if retry else "")
            out += ["", head, *_reflection_lines(base)]
            for i in range(max(base.num_turns, retry.num_turns if retry else 0)):
                left = _cell(_turn_text(base.turns[i])) if i < base.num_turns else []
                right: list[str] = []
                if retry is not None and i < retry.num_turns:
                    right = ["(same as base)"] if i < (retry.pivot or 0) else _cell(_turn_text(retry.turns[i]))
                marker = "▶" if retry is not None and i == retry.pivot else " "
                for k in range(max(len(left), len(right))):
                    label = f"{marker}{i:>3}" if k == 0 else "    "
                    a = left[k] if k < len(left) else ""
                    b = right[k] if k < len(right) else ""
                    out.append(f"{label} │ {a:<{_COLUMN}} │ {b}".rstrip())
        if group.samples:
            out.append(f"auxiliary samples: {', '.join(s.kind for s in group.samples)}")
        out.append("")
    return "\n".join(out)


def render_html(groups: Sequence[TrajectoryGroup], title: str = "r3l trajectory groups") -> str:
    """The same view as :func:`render_text`, as one self-contained HTML page."""
    esc = html.escape
    body = [f"<h1>{esc(title)}</h1>"]
    for g, group in enumerate(groups, start=1):
        body.append(f"<h2>group {g}: {esc(group.env_id)} — task {esc(group.task_id)}</h2>")
        body.append(f"<p>rewards {esc(str(group.rewards))}</p>")
        for base, retry in _pairs(group):
            body.append("<table><tr><th>turn</th>")
            body.append(f"<th>{esc(_summary(base))}</th>")
            body.append(f"<th>{esc(_summary(retry)) + f', pivot {retry.pivot}' if retry else 'no retry'}</th></tr>")
            for line in _reflection_lines(base):
                body.append(f"<tr><td></td><td colspan='2' class='refl'>{esc(line)}</td></tr>")
            for i in range(max(base.num_turns, retry.num_turns if retry else 0)):
                pivot = retry is not None and i == retry.pivot
                left = esc(_turn_text(base.turns[i])) if i < base.num_turns else ""
                right = ""
                if retry is not None and i < retry.num_turns:
                    right = "(same as base)" if i < (retry.pivot or 0) else esc(_turn_text(retry.turns[i]))
                cls = " class='pivot'" if pivot else ""
                body.append(f"<tr{cls}><td>{'▶ ' if pivot else ''}{i}</td><td>{left}</td><td>{right}</td></tr>")
            body.append("</table>")
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0;width:100%}"
        "td,th{border:1px solid #ccc;padding:4px;vertical-align:top;white-space:pre-wrap;font-size:13px}"
        "tr.pivot td{background:#fff3c4}td.refl{background:#eef5ff}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )
