"""Answer format and action parsing: ``<think>...</think> <action>...</action>`` by default.

Parsing never raises on model output. A reply it cannot use yields a :class:`ParsedReply` with ``action=None``
and an ``error`` that the rollout records in the trajectory and shows the agent as feedback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

__all__ = ["AnswerFormat", "ParsedReply", "parse_reply"]

_FENCE = re.compile(r"^\s*```[\w-]*\s*$", re.M)


@dataclass(frozen=True)
class AnswerFormat:
    """The tags the agent answers with. ``think_tag=None`` drops the reasoning part from the instructions."""

    action_tag: str = "action"
    think_tag: str | None = "think"

    def __post_init__(self) -> None:
        for tag in (self.action_tag, self.think_tag):
            if tag is not None and not re.fullmatch(r"[A-Za-z][\w-]*", tag):
                raise ValueError(f"tags must be simple names like 'action', got {tag!r}")

    def instructions(self) -> str:
        """How to answer, for the system prompt."""
        a = self.action_tag
        if self.think_tag is None:
            return f"Answer with exactly one action inside <{a}></{a}> tags, e.g. <{a}>...</{a}>, and nothing else."
        t = self.think_tag
        return (
            f"First think briefly inside <{t}></{t}> tags, then give exactly one action inside <{a}></{a}> "
            f"tags: <{t}>...</{t}> <{a}>...</{a}>"
        )

    def wrap(self, action: str) -> str:
        """The reply text for ``action`` alone (what constrained mode makes the agent say)."""
        return f"{self.opening}{action}{self.stop}"

    @property
    def opening(self) -> str:
        """The tag that opens the action."""
        return f"<{self.action_tag}>"

    @property
    def stop(self) -> str:
        """A stop string that ends generation right after the action."""
        return f"</{self.action_tag}>"

    @cached_property
    def _action_re(self) -> re.Pattern[str]:
        a = re.escape(self.action_tag)
        return re.compile(rf"<{a}>(.*?)</{a}\s*>", re.S | re.I)

    @cached_property
    def _open_re(self) -> re.Pattern[str]:
        return re.compile(rf"<{re.escape(self.action_tag)}>", re.I)

    @cached_property
    def _think_end_re(self) -> re.Pattern[str] | None:
        return None if self.think_tag is None else re.compile(rf"</{re.escape(self.think_tag)}\s*>", re.I)


@dataclass(frozen=True)
class ParsedReply:
    """The action found in a reply (``None`` if none was usable) and why not, if so."""

    action: str | None
    error: str | None = None


def parse_reply(text: str, fmt: AnswerFormat | None = None) -> ParsedReply:
    """Extract the action from a model reply.

    Tolerated: code fences, text around the tags, a missing closing tag at the very end (generation cut
    off), the same action repeated, anything inside the think block (actions there are drafts and ignored).
    Rejected with an error: no action tag, an empty action, two different actions.
    """
    fmt = fmt or AnswerFormat()
    body = _FENCE.sub("", text)
    if fmt._think_end_re is not None:
        ends = list(fmt._think_end_re.finditer(body))
        if ends:  # drafts inside <think> are not the answer
            body = body[ends[-1].end() :]
    found = [_clean(m) for m in fmt._action_re.findall(body)]
    tag = f"<{fmt.action_tag}>...</{fmt.action_tag}>"
    if not found:
        opens = list(fmt._open_re.finditer(body))
        if not opens:
            return ParsedReply(None, f"the reply has no {tag}")
        found = [_clean(body[opens[-1].end() :])]  # unclosed at the end: the reply was cut off
    distinct = list(dict.fromkeys(found))
    if len(distinct) > 1:
        shown = ", ".join(repr(a[:60]) for a in distinct[:3])
        return ParsedReply(None, f"the reply has {len(distinct)} different actions ({shown}); give exactly one")
    action = distinct[0]
    if not action:
        return ParsedReply(None, f"the action inside {tag} is empty")
    return ParsedReply(action)


def _clean(action: str) -> str:
    action = action.strip()
    if len(action) >= 2 and action[0] == action[-1] and action[0] in "`'\"":
        action = action[1:-1].strip()
    return action
