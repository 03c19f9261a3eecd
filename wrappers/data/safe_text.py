"""Text from files we did not write, made safe to show on a terminal or a page, in time linear in its length.

A trajectory file holds what an env and a model wrote, and anyone may hand one over: a terminal that is sent it raw
obeys the control sequences inside (ESC and C1 sequences move the cursor, recolour, retitle the window, write the
clipboard through OSC 52), and bidirectional overrides make text read differently from what it is.
:func:`printable` writes every such character as a visible escape instead (``\\x1b``, ``\\u202e``), and
:func:`wrap` cuts text into lines with one pass over it (``textwrap`` re-copies the rest of an unbroken word for
every line it cuts from it: quadratic in the word's length).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["UNSAFE", "one_line", "printable", "quote", "wrap"]

#: The characters :func:`printable` escapes: every control character but tab and newline (C0, DEL, C1 with the
#: 8-bit CSI ``\x9b``), lone surrogates (a terminal cannot encode them), the line and paragraph separators, and the
#: invisible format characters (bidi marks, embeddings, overrides and isolates, zero-width spaces, the byte-order
#: mark, the Unicode tag characters that hide text); the zero-width (non-)joiners stay, as scripts need them.
#: A test checks that it covers these categories of the running Python's Unicode database.
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b\u200e-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
_SPACES_OR_WORD = re.compile(r" +|[^ ]+")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every :data:`UNSAFE` character written as its Python escape (``\\x1b``, ``\\u202e``,
    ``\\U000e0041``), so that nothing in it acts on a terminal and what it hides shows; newlines and tabs stay."""
    return UNSAFE.sub(_escape, text)


def one_line(text: str) -> str:
    """:func:`printable`, and newlines and tabs escaped too: text for one line (an error message)."""
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")


def quote(value: object, limit: int = 60) -> str:
    """A short, printable account of ``value`` for an error message: a string's or number's first ``limit``
    characters (quoted, escaped), a list's or an object's size; never the whole of a large value."""
    if isinstance(value, str):
        shown = one_line(value[:limit])
        return f"a string '{shown}{'…' if len(value) > limit else ''}'"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (int, float)):
        text = repr(value)
        return f"the number {text[:limit]}{'…' if len(text) > limit else ''}"
    if isinstance(value, list):
        return f"a list of {len(value)} value{'s' * (len(value) != 1)}"
    if isinstance(value, dict):
        return f"an object of {len(value)} field{'s' * (len(value) != 1)}"
    return f"a {type(value).__name__}"


def wrap(text: str, width: int) -> Iterator[str]:
    """The lines of ``text`` (split at newlines, tabs expanded), each cut greedily at spaces into lines of at most
    ``width`` characters; a word longer than ``width`` is cut into pieces of ``width``. Spaces at the ends of a
    cut line are dropped, as ``textwrap`` does; a blank line stays one empty line. One pass over the text."""
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    lines = text.split("\n")
    if len(lines) > 1 and not lines[-1]:
        lines.pop()  # a final newline ends the last line, it does not start another
    for line in lines:
        yield from _wrap_line(line.expandtabs(), width)


def _wrap_line(line: str, width: int) -> Iterator[str]:
    parts: list[str] = []
    used = 0
    for chunk in _SPACES_OR_WORD.findall(line):
        if chunk[0] == " ":
            if parts:  # spaces inside a line; dropped below if the line is cut here
                parts.append(chunk)
                used += len(chunk)
            continue
        if used + len(chunk) <= width:
            parts.append(chunk)
            used += len(chunk)
            continue
        start = 0
        if parts:
            if len(chunk) > width and used < width:  # a word no line holds starts in this one's room, as in textwrap
                start = width - used
                parts.append(chunk[:start])
            yield "".join(parts).rstrip(" ")
        while len(chunk) - start > width:  # an index walks the word: each character is copied once
            yield chunk[start : start + width]
            start += width
        parts, used = [chunk[start:]], len(chunk) - start
    yield "".join(parts).rstrip(" ")  # the last line; a blank line when there were only spaces
