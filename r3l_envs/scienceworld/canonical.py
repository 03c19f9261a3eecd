"""A canonical form of ScienceWorld observations: identical states read identically.

ScienceWorld lists the objects of a room, a container or a surface in the iteration order of Java hash sets,
which changes between JVMs and between loads of the same task. The text therefore differs between two
visits of the same state only in the *order* of listed items. :func:`canonical_observation` sorts every
such listing and leaves everything else as it is:

* sibling lines indented by tabs (``\\ta chair``, ``\\tA door to the kitchen``), each with its deeper-indented
  children;
* inline lists after ``containing`` inside parentheses (``a jug (containing red paint, water)``);
* inline lists after a colon (``On the table is: a battery, a switch, which is off.``,
  ``You also see: A door to the hallway, A door to the outside.``), up to the period that closes them.

A fragment starting with ``which``, ``currently`` or ``that`` continues the item before it
(``a light bulb, which is off``), so an item's description never moves away from the item. Numbered
lines (the engine's ambiguity prompts) are never indented by a tab at the start, so their order is kept.
The function is idempotent, which verified replay relies on.
"""

from __future__ import annotations

__all__ = ["canonical_observation"]

# First words of a comma-separated fragment that describes the previous item instead of starting a new one.
_CONTINUATIONS = ("which ", "currently ", "that ")
_CONTAINING = "containing "


def canonical_observation(text: str) -> str:
    """Return ``text`` with every object listing in a stable (sorted) order."""
    lines = text.split("\n")
    nodes = _parse_lines(lines)
    return "\n".join(_render(nodes, sort=False))


# ---------------------------------------------------------------------- tab-indented listings
def _depth(line: str) -> int:
    return len(line) - len(line.lstrip("\t"))


def _parse_lines(lines: list[str]) -> list[tuple[str, list]]:
    """Group lines into a tree: each line owns the following lines indented deeper than it."""
    root: list[tuple[str, list]] = []
    stack: list[tuple[int, list]] = [(-1, root)]
    for line in lines:
        depth = _depth(line)
        while stack[-1][0] >= depth:
            stack.pop()
        node: tuple[str, list] = (line, [])
        stack[-1][1].append(node)
        stack.append((depth, node[1]))
    return root


def _render(nodes: list[tuple[str, list]], *, sort: bool) -> list[str]:
    blocks = [[_canonical_line(line), *_render(children, sort=True)] for line, children in nodes]
    if sort:  # only runs of tab-indented siblings are listings; top-level lines keep their order
        blocks.sort(key=lambda block: "\n".join(block))
    return [line for block in blocks for line in block]


def _canonical_line(line: str) -> str:
    depth = _depth(line)
    return line[:depth] + _canonical_inline(line[depth:])


# ---------------------------------------------------------------------- inline listings
def _match_paren(s: str, start: int) -> int:
    """Index of the ``)`` closing the ``(`` at ``start``, or -1 if it is never closed."""
    depth = 0
    for i in range(start, len(s)):
        if s[i] == "(":
            depth += 1
        elif s[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _list_end(s: str, start: int) -> int:
    """Where the colon list starting at ``start`` ends: its closing period, or the end of ``s``."""
    i = start
    while i < len(s):
        c = s[i]
        if c == "(":
            j = _match_paren(s, i)
            if j < 0:
                return len(s)
            i = j + 1
            continue
        if c == "." and (i + 1 == len(s) or s[i + 1] in " ),"):
            return i
        i += 1
    return len(s)


def _canonical_inline(s: str) -> str:
    """Sort the parenthesised ``containing`` lists and the colon lists inside one line."""
    out: list[str] = []
    i = 0
    while i < len(s):
        if s[i] == "(":
            j = _match_paren(s, i)
            if j < 0:  # unbalanced: leave the rest untouched rather than guess
                out.append(s[i:])
                break
            inner = s[i + 1 : j]
            if inner.startswith(_CONTAINING):
                inner = _CONTAINING + _canonical_list(inner[len(_CONTAINING) :])
            else:
                inner = _canonical_inline(inner)
            out.append(f"({inner})")
            i = j + 1
        elif s.startswith(": ", i):
            end = _list_end(s, i + 2)
            out.append(": " + _canonical_list(s[i + 2 : end]))
            i = end
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _split_items(body: str) -> list[str] | None:
    """Split a list body at its top-level ``", "``; ``None`` if its parentheses do not balance."""
    items: list[str] = []
    start = i = 0
    while i < len(body):
        if body[i] == "(":
            j = _match_paren(body, i)
            if j < 0:
                return None
            i = j + 1
        elif body.startswith(": ", i):  # a nested colon list: its commas are its own
            i = _list_end(body, i + 2)
        elif body.startswith(", ", i):
            items.append(body[start:i])
            start = i = i + 2
        else:
            i += 1
    items.append(body[start:])
    merged: list[str] = []
    for item in items:
        if merged and item.lstrip().startswith(_CONTINUATIONS):
            merged[-1] += ", " + item
        else:
            merged.append(item)
    return merged


def _canonical_list(body: str) -> str:
    items = _split_items(body)
    if items is None:
        return body
    items = [_canonical_inline(item) for item in items]
    if len(items) > 1 and all(item.strip() for item in items):
        items.sort()
    return ", ".join(items)
