"""Render experience for people: trajectory groups with base and retry side by side (the pivot marked, the
reflection and the guidance the retry saw shown), or plain trajectories (``r3l eval``'s output) one by one.

``render_text`` is for the terminal (``r3l show file.jsonl``), ``render_html`` writes the same view as one
static HTML page (``r3l show file.jsonl --html page.html``). Long turns are cut to ``max_lines`` lines in the
terminal, and the cut says how many lines it hid; the HTML page shows everything.
"""

from __future__ import annotations

import html
import os
import textwrap
from collections.abc import Sequence

from wrappers.data import Trajectory, TrajectoryGroup, Turn, load_jsonl

__all__ = ["load_viewable", "render_html", "render_text"]

_COLUMN = 58
Viewable = TrajectoryGroup | Trajectory


def load_viewable(path: str | os.PathLike[str], limit: int | None = None) -> list[Viewable]:
    """The groups and trajectories in a JSONL file of :func:`wrappers.save_jsonl` (samples are skipped),
    at most ``limit`` of them. Raises FileNotFoundError, or ValueError for a line that is not a record."""
    out: list[Viewable] = []
    for item in load_jsonl(path):
        if limit is not None and len(out) >= limit:
            break
        if isinstance(item, (TrajectoryGroup, Trajectory)):
            out.append(item)
    return out


def _link(traj: Trajectory, names: tuple[str, ...]) -> object:
    """The first of ``names`` that ``traj`` carries, as a field or in its metadata (older files lack some)."""
    for name in names:
        value = getattr(traj, name, None)
        if value is None:
            value = traj.metadata.get(name)
        if value is not None:
            return value
    return None


def _pairs(group: TrajectoryGroup) -> list[tuple[Trajectory, Trajectory | None]]:
    """Each base with the retry made from it (``None`` if it got none); extra bases alone. A retry finds its base
    by a stable id where the file has one, else by the base's position in the group."""
    bases = [(i, t) for i, t in enumerate(group.trajectories) if t.kind != "retry"]
    ids = {_link(t, ("id", "uid", "traj_id")): t for _, t in bases}
    ids.pop(None, None)
    by_base: dict[int, Trajectory] = {}
    for retry in (t for t in group.trajectories if t.kind == "retry"):
        base = ids.get(_link(retry, ("base_id",)))
        if base is None:
            index = retry.metadata.get("base_index")
            base = (
                group.trajectories[index] if isinstance(index, int) and 0 <= index < len(group.trajectories) else None
            )
        if base is not None:
            by_base[id(base)] = retry
    return [(t, by_base.get(id(t))) for _, t in bases]


def _turn_text(turn: Turn) -> str:
    action = turn.action if turn.action is not None else f"(unparsed: {turn.parse_error})"
    return f"> {action}\n{turn.outcome or turn.observation}"


def _summary(traj: Trajectory) -> str:
    return f"{traj.kind}: reward {traj.reward:.2f}, won {traj.won}, {traj.num_turns} turns, ended by {traj.stop_reason}"


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


def _guidance(retry: Trajectory | None) -> str | None:
    """The text the retry saw in its context at the pivot (never in its training sequence)."""
    if retry is None:
        return None
    guidance = _link(retry, ("guidance",))
    return str(guidance) if guidance else None


def _cell(text: str, width: int = _COLUMN, max_lines: int = 6) -> list[str]:
    lines: list[str] = []
    for raw in text.splitlines() or [""]:
        lines += textwrap.wrap(raw, width) or [""]
    if max_lines and len(lines) > max_lines:
        hidden = len(lines) - (max_lines - 1)
        lines = [*lines[: max_lines - 1], f"… ({hidden} more lines; --max-lines 0 shows all)"]
    return lines


def _block(label: str, text: str, max_lines: int) -> list[str]:
    wrapped = _cell(text, width=2 * _COLUMN, max_lines=max_lines)
    return [f"{label}{wrapped[0]}", *(" " * len(label) + line for line in wrapped[1:])]


def _side_by_side(base: Trajectory, retry: Trajectory | None, max_lines: int) -> list[str]:
    out = []
    for i in range(max(base.num_turns, retry.num_turns if retry else 0)):
        left = _cell(_turn_text(base.turns[i]), max_lines=max_lines) if i < base.num_turns else []
        right: list[str] = []
        if retry is not None and i < retry.num_turns:
            same = i < (retry.pivot or 0)
            right = ["(same as base)"] if same else _cell(_turn_text(retry.turns[i]), max_lines=max_lines)
        marker = "▶" if retry is not None and i == retry.pivot else " "
        for k in range(max(len(left), len(right))):
            label = f"{marker}{i:>3}" if k == 0 else "    "
            a = left[k] if k < len(left) else ""
            b = right[k] if k < len(right) else ""
            out.append(f"{label} │ {a:<{_COLUMN}} │ {b}".rstrip())
    return out


def _group_text(group: TrajectoryGroup, title: str, max_lines: int) -> list[str]:
    out = [f"═ {title}  {group.env_id}  task {group.task_id}  rewards {group.rewards}"]
    if group.trajectories:
        out += _block("goal: ", group.trajectories[0].task, max_lines)
    for base, retry in _pairs(group):
        head = _summary(base) + (f"   ║ {_summary(retry)}, pivot {retry.pivot}" if retry else "")
        out += ["", head, *_reflection_lines(base)]
        guidance = _guidance(retry)
        if guidance:
            out += _block("guidance the retry saw: ", guidance, max_lines)
        out += _side_by_side(base, retry, max_lines)
    if group.samples:
        out.append(f"auxiliary samples: {', '.join(s.kind for s in group.samples)}")
    return out


def _trajectory_text(traj: Trajectory, title: str, max_lines: int) -> list[str]:
    out = [f"═ {title}  {traj.env_id}  task {traj.task_id}", *_block("goal: ", traj.task, max_lines), _summary(traj)]
    guidance = _guidance(traj)
    if guidance:
        out += _block("guidance it saw: ", guidance, max_lines)
    for i, turn in enumerate(traj.turns):
        marker = "▶" if traj.pivot is not None and i == traj.pivot else " "
        for k, line in enumerate(_cell(_turn_text(turn), width=2 * _COLUMN, max_lines=max_lines)):
            out.append(f"{f'{marker}{i:>3}' if k == 0 else '    '} │ {line}".rstrip())
    return out


def render_text(items: Sequence[Viewable], max_lines: int = 6) -> str:
    """A plain-text view of ``items``: a group shows per base its turns beside its retry's (pivot marked ``▶``),
    a trajectory its turns; each turn at most ``max_lines`` lines (0: all), with a note of what was cut."""
    out: list[str] = []
    for n, item in enumerate(items, start=1):
        if isinstance(item, TrajectoryGroup):
            out += _group_text(item, f"group {n}/{len(items)}", max_lines)
        else:
            out += _trajectory_text(item, f"trajectory {n}/{len(items)}", max_lines)
        out.append("")
    return "\n".join(out)


def _html_rows(base: Trajectory, retry: Trajectory | None) -> list[str]:
    esc, rows = html.escape, []
    for i in range(max(base.num_turns, retry.num_turns if retry else 0)):
        pivot = retry is not None and i == retry.pivot
        left = esc(_turn_text(base.turns[i])) if i < base.num_turns else ""
        right = ""
        if retry is not None and i < retry.num_turns:
            right = "(same as base)" if i < (retry.pivot or 0) else esc(_turn_text(retry.turns[i]))
        cls = " class='pivot'" if pivot else ""
        rows.append(f"<tr{cls}><td>{'▶ ' if pivot else ''}{i}</td><td>{left}</td><td>{right}</td></tr>")
    return rows


def render_html(items: Sequence[Viewable], title: str = "r3l trajectories") -> str:
    """The same view as :func:`render_text`, as one self-contained HTML page (nothing cut)."""
    esc = html.escape
    body = [f"<h1>{esc(title)}</h1>"]
    for n, item in enumerate(items, start=1):
        if isinstance(item, Trajectory):
            body.append(f"<h2>trajectory {n}: {esc(item.env_id)} — task {esc(item.task_id)}</h2>")
            body.append(f"<p class='goal'>goal: {esc(item.task)}</p><table><tr><th>turn</th>")
            body.append(f"<th>{esc(_summary(item))}</th><th></th></tr>")
            body += _html_rows(item, None)
            body.append("</table>")
            continue
        body.append(f"<h2>group {n}: {esc(item.env_id)} — task {esc(item.task_id)}</h2>")
        goal = esc(item.trajectories[0].task) if item.trajectories else ""
        body.append(f"<p>rewards {esc(str(item.rewards))}</p><p class='goal'>goal: {goal}</p>")
        for base, retry in _pairs(item):
            body.append("<table><tr><th>turn</th>")
            body.append(f"<th>{esc(_summary(base))}</th>")
            body.append(f"<th>{esc(_summary(retry)) + f', pivot {retry.pivot}' if retry else 'no retry'}</th></tr>")
            notes = _reflection_lines(base)
            guidance = _guidance(retry)
            if guidance:
                notes.append(f"guidance the retry saw: {guidance}")
            for line in notes:
                body.append(f"<tr><td></td><td colspan='2' class='refl'>{esc(line)}</td></tr>")
            body += _html_rows(base, retry)
            body.append("</table>")
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0;width:100%}"
        "td,th{border:1px solid #ccc;padding:4px;vertical-align:top;white-space:pre-wrap;font-size:13px}"
        "tr.pivot td{background:#fff3c4}td.refl{background:#eef5ff}p.goal{white-space:pre-wrap}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )
