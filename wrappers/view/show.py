"""Render experience for people: trajectory groups with base and retry side by side (the pivot marked, the
reflection and the guidance the retry saw shown), or plain trajectories (``r3l eval``'s output) one by one.

``render_text`` is for the terminal (``r3l show file.jsonl``); :func:`wrappers.view.show_html.render_html` writes the
same view as one static HTML page (``r3l show file.jsonl --html page.html``) from this module's helpers. Both open with
:func:`summarize`'s line (groups, retries, how many beat their base, mean pivot). Long turns are cut to
``max_lines`` lines in the terminal, and the cut says how many lines it hid; the HTML page shows everything.

A file may come from anyone. Reading it checks every record before it is shown (:func:`wrappers.load_jsonl`);
every text either view shows passes through :func:`wrappers.data.safe_text.printable` (control characters and
bidirectional overrides written as visible escapes, never sent raw to a terminal), and wrapping is linear in the
text's length. Neither view decodes the turns' env checkpoints.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from wrappers.data.jsonl import MAX_DEPTH, MAX_LINE_BYTES
from wrappers.data.safe_text import printable, wrap
from wrappers.data.trajectory import Trajectory, TrajectoryGroup, Turn, load_jsonl
from wrappers.retry.reflect_retry import beats

__all__ = [
    "Outcome",
    "Summary",
    "load_viewable",
    "outcome",
    "render_text",
    "retry_beat_base",
    "summarize",
]

_COLUMN = 58
Viewable = TrajectoryGroup | Trajectory


def load_viewable(
    path: str | os.PathLike[str],
    limit: int | None = None,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_depth: int = MAX_DEPTH,
) -> list[Viewable]:
    """The groups and trajectories in a JSONL file of :func:`wrappers.save_jsonl` (samples are skipped),
    at most ``limit`` of them, their checkpoints left undecoded. Raises OSError (FileNotFoundError where the file
    does not exist), or :class:`wrappers.data.trajectory.DataFormatError` (a ValueError) at the first line that cannot
    be
    read, longer than ``max_line_bytes`` or nested deeper than ``max_depth`` (see :func:`wrappers.load_jsonl`)."""
    out: list[Viewable] = []
    for item in load_jsonl(path, max_line_bytes=max_line_bytes, max_depth=max_depth, checkpoints=False):
        if limit is not None and len(out) >= limit:
            break
        if isinstance(item, (TrajectoryGroup, Trajectory)):
            out.append(item)
    return out


def _link(traj: Trajectory, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` that ``traj`` carries as a string, as a field or in its metadata (older files lack
    some; metadata is free-form, so a value of another type is no link)."""
    for name in names:
        value = getattr(traj, name, None)
        if value is None:
            value = traj.metadata.get(name)
        if isinstance(value, str):
            return value
    return None


def pairs(group: TrajectoryGroup) -> list[tuple[Trajectory, Trajectory | None]]:
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


def retry_beat_base(retry: Trajectory, base: Trajectory) -> bool:
    """The collector's verdict (``retry.metadata["beat_base"]``, taken at its own success threshold) where the
    file has one, else :func:`wrappers.retry.reflect_retry.beats` at the default threshold."""
    verdict = retry.metadata.get("beat_base")
    return bool(verdict) if isinstance(verdict, bool) else beats(retry, base)


@dataclass(frozen=True)
class Outcome:
    """How one shown item ended: ``won`` (some trajectory of a group won; a plain trajectory won), and how many of
    a group's retries beat their base (0 for a plain trajectory)."""

    won: bool
    retries: int
    beaten: int


def outcome(item: Viewable) -> Outcome:
    """The :class:`Outcome` of a group or a plain trajectory (what the page's filters select on)."""
    if isinstance(item, Trajectory):
        return Outcome(item.won, 0, 0)
    beaten = sum(retry_beat_base(retry, base) for base, retry in pairs(item) if retry is not None)
    return Outcome(any(t.won for t in item.trajectories), sum(t.kind == "retry" for t in item.trajectories), beaten)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


@dataclass(frozen=True)
class Summary:
    """What a file holds, counted from its trajectories (so it holds for any file, filtered or not).

    Attributes:
        groups, trajectories: how many groups and how many plain trajectories were shown.
        bases, bases_won: the non-retry trajectories (of groups and plain ones) and how many of them won.
        retries, retries_beat_base: the retries, and how many beat their base (:func:`retry_beat_base`).
        retries_won: the retries that won.
        mean_pivot: the mean turn a retry restarted from (``None`` without retries that name one).
        groups_won: the groups where some trajectory won.
    """

    groups: int
    trajectories: int
    bases: int
    bases_won: int
    retries: int
    retries_won: int
    retries_beat_base: int
    mean_pivot: float | None
    groups_won: int

    def line(self) -> str:
        """One line for a reader: what was shown, then the retries' record."""
        parts = []
        if self.groups:
            parts.append(f"{_count(self.groups, 'group')} ({self.groups_won} won)")
        if self.trajectories:
            parts.append(_count(self.trajectories, "plain trajectory", "plain trajectories"))
        parts.append(f"{_count(self.bases, 'base')} ({self.bases_won} won)")
        if self.groups:
            pivot = "n/a" if self.mean_pivot is None else f"{self.mean_pivot:.2f}"
            parts.append(
                f"{_count(self.retries, 'retry', 'retries')} ({self.retries_won} won, {self.retries_beat_base} beat "
                f"their base), mean pivot {pivot}"
            )
        return "summary: " + ", ".join(parts)


def summarize(items: Sequence[Viewable]) -> Summary:
    """Count groups, bases, retries and retries that beat their base, and the mean pivot, over ``items``."""
    groups = [i for i in items if isinstance(i, TrajectoryGroup)]
    plain = [i for i in items if isinstance(i, Trajectory)]
    bases = plain + [t for g in groups for t in g.trajectories if t.kind != "retry"]
    retries = [t for g in groups for t in g.trajectories if t.kind == "retry"]
    pivots = [r.pivot for r in retries if r.pivot is not None]
    return Summary(
        groups=len(groups),
        trajectories=len(plain),
        bases=len(bases),
        bases_won=sum(t.won for t in bases),
        retries=len(retries),
        retries_won=sum(r.won for r in retries),
        retries_beat_base=sum(outcome(g).beaten for g in groups),
        mean_pivot=sum(pivots) / len(pivots) if pivots else None,
        groups_won=sum(outcome(g).won for g in groups),
    )


def turn_text(turn: Turn) -> str:
    """A turn as a reader sees it: ``> action`` (or why the reply did not parse), then the env's answer."""
    action = turn.action if turn.action is not None else f"(unparsed: {turn.parse_error})"
    return f"> {action}\n{turn.outcome or turn.observation}"


def trajectory_line(traj: Trajectory) -> str:
    """One line on how a trajectory ended: kind, reward, won, turns, stop reason."""
    return f"{traj.kind}: reward {traj.reward:.2f}, won {traj.won}, {traj.num_turns} turns, ended by {traj.stop_reason}"


def reflection_lines(base: Trajectory) -> list[str]:
    """The reflection on a base (outcome, pivot, root cause, suggestion), or why it was unusable; none if absent."""
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


def guidance_seen(retry: Trajectory | None) -> str | None:
    """The text the retry saw in its context at the pivot (never in its training sequence)."""
    if retry is None:
        return None
    guidance = _link(retry, ("guidance",))
    return str(guidance) if guidance else None


def _cell(text: str, width: int = _COLUMN, max_lines: int = 6) -> list[str]:
    """``text`` made printable and wrapped to ``width``; past ``max_lines`` lines (0: no limit) the rest is
    counted, not kept."""
    lines = wrap(printable(text), width)
    if not max_lines:
        return list(lines)
    shown = list(islice(lines, max_lines))
    rest = sum(1 for _ in lines)
    if rest:
        shown = [*shown[: max_lines - 1], f"… ({rest + 1} more lines; --max-lines 0 shows all)"]
    return shown


def _block(label: str, text: str, max_lines: int) -> list[str]:
    wrapped = _cell(text, width=2 * _COLUMN, max_lines=max_lines)
    return [f"{label}{wrapped[0]}", *(" " * len(label) + line for line in wrapped[1:])]


def _side_by_side(base: Trajectory, retry: Trajectory | None, max_lines: int) -> list[str]:
    out = []
    for i in range(max(base.num_turns, retry.num_turns if retry else 0)):
        left = _cell(turn_text(base.turns[i]), max_lines=max_lines) if i < base.num_turns else []
        right: list[str] = []
        if retry is not None and i < retry.num_turns:
            same = i < (retry.pivot or 0)
            right = ["(same as base)"] if same else _cell(turn_text(retry.turns[i]), max_lines=max_lines)
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
    for base, retry in pairs(group):
        head = trajectory_line(base) + (f"   ║ {trajectory_line(retry)}, pivot {retry.pivot}" if retry else "")
        out += ["", head, *reflection_lines(base)]
        guidance = guidance_seen(retry)
        if guidance:
            out += _block("guidance the retry saw: ", guidance, max_lines)
        out += _side_by_side(base, retry, max_lines)
    if group.samples:
        out.append(f"auxiliary samples: {', '.join(s.kind for s in group.samples)}")
    return out


def _trajectory_text(traj: Trajectory, title: str, max_lines: int) -> list[str]:
    out = [
        f"═ {title}  {traj.env_id}  task {traj.task_id}",
        *_block("goal: ", traj.task, max_lines),
        trajectory_line(traj),
    ]
    guidance = guidance_seen(traj)
    if guidance:
        out += _block("guidance it saw: ", guidance, max_lines)
    for i, turn in enumerate(traj.turns):
        marker = "▶" if traj.pivot is not None and i == traj.pivot else " "
        for k, line in enumerate(_cell(turn_text(turn), width=2 * _COLUMN, max_lines=max_lines)):
            out.append(f"{f'{marker}{i:>3}' if k == 0 else '    '} │ {line}".rstrip())
    return out


def render_text(items: Sequence[Viewable], max_lines: int = 6) -> str:
    """A plain-text view of ``items``: a group shows per base its turns beside its retry's (pivot marked ``▶``),
    a trajectory its turns; each turn at most ``max_lines`` lines (0: all), with a note of what was cut.
    Every text from the items is made printable (:func:`wrappers.data.safe_text.printable`)."""
    out: list[str] = [summarize(items).line(), ""]
    for n, item in enumerate(items, start=1):
        if isinstance(item, TrajectoryGroup):
            out += _group_text(item, f"group {n}/{len(items)}", max_lines)
        else:
            out += _trajectory_text(item, f"trajectory {n}/{len(items)}", max_lines)
        out.append("")
    return printable("\n".join(out))  # fields shown whole (ids, kinds, a reflection) are escaped here
