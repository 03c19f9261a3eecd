"""Pull the final answer out of a model's free-form reply.

Pure string functions, linear in the length of the text, that never raise on any ``str`` (100 KB of noise,
lone surrogates and control characters included). Accepted formats, strongest first:

1. ``\\boxed{...}`` or ``\\fbox{...}`` with nested braces — the last one wins;
2. ``<answer>...</answer>`` — the last one wins;
3. ``#### x`` (GSM8K style) — the rest of the line after the last ``####``;
4. ``The answer is x`` / ``final answer is x`` / ``Final answer: x`` — the last such line;
5. the bare answer: a reply that is one printable line and none of the above is itself the answer.

Format 5 is what an agent's action is (``wrappers`` parses ``<action>56</action>`` and steps the env with ``56``),
and what a user who calls ``env.step("56")`` means, so the answer the prompt asks for is the answer the env
grades. A multi-line reply without a marked answer has none: reasoning is not an answer.
"""

from __future__ import annotations

import re

__all__ = [
    "ANSWER_FORMATS",
    "equation_value",
    "extract_answer",
    "extract_boxed",
    "extract_expression",
    "strip_math_delimiters",
]

#: One line telling an agent which answer formats are understood (used in observations).
ANSWER_FORMATS = (
    "\\boxed{...}, <answer>...</answer>, a final line '#### ...', a sentence 'The final answer is ...', "
    "or the answer alone on one line"
)

_BOX = re.compile(r"\\(?:boxed|fbox)[ \t]*\{")
_BRACE = re.compile(r"[{}]")
_OPEN_TAG = re.compile(r"<answer>", re.IGNORECASE)
_CLOSE_TAG = re.compile(r"</answer>", re.IGNORECASE)
_HASHES = re.compile(r"####[ \t]*([^\n]*)")
_SENTENCE = re.compile(r"(?:final answer|the answer)(?:[ \t]+is)?[ \t]*[:=]?[ \t]*([^\n]+)", re.IGNORECASE)
_MARKER = re.compile(r"\\(?:boxed|fbox)|</?answer>|####", re.IGNORECASE)


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` whose braces balance, else ``None``."""
    if "\\boxed" not in text and "\\fbox" not in text:
        return None
    closing = _matching_braces(text)
    for match in reversed(list(_BOX.finditer(text))):
        close = closing.get(match.end() - 1)
        if close is not None:
            return text[match.end() : close].strip()
    return None


def _matching_braces(text: str) -> dict[int, int]:
    """``{open index: close index}`` for every balanced brace pair, in one linear pass."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for match in _BRACE.finditer(text):
        if match.group() == "{":
            stack.append(match.start())
        elif stack:
            pairs[stack.pop()] = match.start()
    return pairs


def extract_answer(text: str) -> str | None:
    """The final answer in ``text`` (see the module docstring for the formats), or ``None`` if there is none.

    The result is stripped of surrounding whitespace, ``$`` delimiters and a trailing full stop; an empty
    answer counts as none.
    """
    if not isinstance(text, str):
        return None
    marked = _marked(text)
    return marked if marked is not None else _bare(text)


def extract_expression(text: str) -> str | None:
    """An arithmetic expression answer (Countdown): a marked answer (formats 1-4), else the last non-empty line
    if it holds a digit (a bare expression is such a line)."""
    if not isinstance(text, str):
        return None
    answer = _marked(text)
    if answer is not None:
        return answer
    for line in reversed(text.splitlines()):
        if line.strip():
            # prose is not an expression: a last line without a digit means no answer was given
            return _clean(line) if any(char.isdigit() for char in line) else None
    return None


def _marked(text: str) -> str | None:
    """The answer in formats 1-4 (a box, an answer tag, ``####``, an answer sentence), else ``None``."""
    for candidate in (extract_boxed(text), _answer_tag(text)):
        if candidate is not None:
            # an <answer> tag may itself hold a box: the box is the answer
            boxed = extract_boxed(candidate) if "\\" in candidate else None
            return _clean(boxed if boxed is not None else candidate)
    for pattern in (_HASHES, _SENTENCE):
        candidate = _last_group(pattern, text)
        if candidate is not None:
            return _clean(candidate)
    return None


def _bare(text: str) -> str | None:
    """Format 5: the whole reply when it is one printable line (tabs allowed) that does not try one of formats
    1-3 and fail at it (an unclosed box or tag, an empty box), else ``None``."""
    lines = text.strip().splitlines()
    if len(lines) != 1 or not lines[0].replace("\t", " ").isprintable() or _MARKER.search(lines[0]):
        return None
    return _clean(lines[0])


def equation_value(text: str) -> str:
    """A bare equation line reduced to its value: ``"6 + 6 = 12"`` -> ``"12"`` (the text after the last ``=``);
    any other text as it is (a marked answer, several lines, a line without ``=``). For envs whose answer is a
    value, opted into with ``equation_answers=True``: a small model restates the problem before the value, and
    format 5 reads the whole line as the answer. Linear, and never raises on a ``str``."""
    if not isinstance(text, str) or _marked(text) is not None:
        return text
    line = _bare(text)
    return line.rsplit("=", 1)[1].strip() if line is not None and "=" in line else text


def strip_math_delimiters(text: str) -> str:
    """``$x$``, ``$$x$$``, ``\\(x\\)`` and ``\\[x\\]`` -> ``x`` (outer delimiters only)."""
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : len(text) - len(right)].strip()
    return text


def _answer_tag(text: str) -> str | None:
    """Content of the last ``<answer>...</answer>`` pair (linear: no lazy regex across the whole text)."""
    closes = [m.start() for m in _CLOSE_TAG.finditer(text)]
    if not closes:
        return None
    last_open = None
    for match in _OPEN_TAG.finditer(text, 0, closes[-1]):
        last_open = match
    return text[last_open.end() : closes[-1]] if last_open is not None else None


def _last_group(pattern: re.Pattern[str], text: str) -> str | None:
    last = None
    for match in pattern.finditer(text):
        last = match
    return last.group(1) if last is not None else None


def _clean(answer: str) -> str | None:
    answer = strip_math_delimiters(answer.strip())
    if answer.endswith(".") and not answer[:-1].rstrip().endswith("."):
        answer = answer[:-1].rstrip()
    answer = strip_math_delimiters(answer)
    return answer or None
