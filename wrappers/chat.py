"""Token-exact chat sequences: generated ids plus the chat template's own tokens for every other role.

A :class:`ChatSequence` starts from the templated system + first user message and then grows by appending
(a) the ids the policy generated, verbatim, and (b) the template's tokens that close the assistant turn and
open the next user turn. Generated text is never re-tokenised, so the sequence a learner trains on is the
sequence the model produced, and log-probs recomputed over it match the generation log-probs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from wrappers.policy import Generation, Policy, SamplingParams

if TYPE_CHECKING:
    from wrappers.data.trajectory import Turn

__all__ = ["ChatSequence", "chat", "chosen_span", "end_of_turn_id", "replay", "turn_suffix_ids", "with_guidance"]

# Stands in for assistant content when we ask the template what comes after it. Chosen so that no
# template would transform it and no real reply contains it.
_MARK = "\u2063R3L-ASSISTANT-CONTENT\u2063"
_PROBE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def turn_suffix_ids(policy: Policy, user_content: str, last_generated: int | None) -> list[int]:
    """Template tokens after an assistant reply: the end of that turn, ``user_content`` as the next user
    turn, and the generation prompt. If the reply already ended with the template's end-of-turn token (the
    model sampled it), that token is not repeated."""
    text = policy.render(
        [*_PROBE, {"role": "assistant", "content": _MARK}, {"role": "user", "content": user_content}],
        add_generation_prompt=True,
    )
    start = text.find(_MARK)
    if start < 0:
        raise ValueError("the chat template does not render assistant content verbatim; cannot build exact sequences")
    ids = policy.tokenize(text[start + len(_MARK) :])
    if ids and last_generated is not None and ids[0] == last_generated and last_generated in policy.eos_token_ids:
        ids = ids[1:]
    return ids


def end_of_turn_id(policy: Policy) -> int | None:
    """The token the template puts right after assistant content, if it is one the policy stops on
    (``<|im_end|>`` for ChatML). Constrained mode appends it to each candidate so a chosen action ends its
    turn exactly as a sampled reply would."""
    text = policy.render([*_PROBE, {"role": "assistant", "content": _MARK}], add_generation_prompt=False)
    start = text.find(_MARK)
    ids = policy.tokenize(text[start + len(_MARK) :]) if start >= 0 else []
    return ids[0] if ids and ids[0] in policy.eos_token_ids else None


def chosen_span(reply: Sequence[int], head: Sequence[int], tail: Sequence[int]) -> tuple[int, int]:
    """``[start, end)`` of the policy's choice inside ``reply``, a reply the rollout wrote as ``head`` text, the
    choice, then ``tail`` text (each given as its tokens alone): ``reply`` less the tokens it shares with ``head``
    at its start and with ``tail`` at its end. ``reply`` is tokenised whole, so a token that merges written and
    chosen characters differs from both and counts as chosen."""
    start = 0
    while start < min(len(reply), len(head)) and reply[start] == head[start]:
        start += 1
    end = len(reply)
    while end > start and len(reply) - end < len(tail) and reply[end - 1] == tail[len(tail) - (len(reply) - end) - 1]:
        end -= 1
    return start, end


class ChatSequence:
    """One growing token sequence with its agent mask (1 on the ids the policy chose, see :meth:`add_generation`)
    and their log-probs."""

    def __init__(self, policy: Policy, messages: Sequence[dict[str, str]]):
        self.policy = policy
        self.messages: list[dict[str, str]] = [dict(m) for m in messages]
        self.token_ids: list[int] = policy.tokenize(policy.render(self.messages, add_generation_prompt=True))
        self.agent_mask: list[int] = [0] * len(self.token_ids)
        self.logprobs: list[float] = [0.0] * len(self.token_ids)
        self.spans: list[tuple[int, int]] = []  # [start, end) of each generation, in order

    def __len__(self) -> int:
        return len(self.token_ids)

    def add_generation(
        self,
        text: str,
        token_ids: Sequence[int],
        logprobs: Sequence[float],
        sampled: tuple[int, int] | None = None,
    ) -> tuple[int, int]:
        """Append a reply's ids; returns their ``[start, end)`` span (the whole reply). The agent mask is 1 on
        ``token_ids[sampled[0]:sampled[1]]``, the tokens the policy chose (all of them when ``sampled`` is
        ``None``), and 0 on the reply tokens the rollout wrote around them
        (``wrappers.data.trajectory.Turn.sampled``)."""
        if len(token_ids) != len(logprobs):
            raise ValueError(f"{len(token_ids)} token ids but {len(logprobs)} log-probs")
        first, last = (0, len(token_ids)) if sampled is None else sampled
        if not 0 <= first <= last <= len(token_ids):
            raise ValueError(f"sampled tokens {sampled} do not lie within the reply's {len(token_ids)} ids")
        start = len(self.token_ids)
        self.token_ids.extend(int(t) for t in token_ids)
        self.agent_mask.extend(int(first <= i < last) for i in range(len(token_ids)))
        self.logprobs.extend(float(x) for x in logprobs)
        self.messages.append({"role": "assistant", "content": text})
        self.spans.append((start, len(self.token_ids)))
        return self.spans[-1]

    def add_user(self, content: str) -> None:
        """Close the last assistant turn and append ``content`` as a user turn plus the generation prompt."""
        last = self.token_ids[-1] if self.messages and self.messages[-1]["role"] == "assistant" else None
        ids = turn_suffix_ids(self.policy, content, last)
        self.token_ids.extend(ids)
        self.agent_mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))
        self.messages.append({"role": "user", "content": content})


def with_guidance(guidance: str | None, user_text: str) -> str:
    """A user message with a reflection's guidance put before it: how every guided context shows guidance."""
    return f"{guidance}\n\n{user_text}" if guidance else user_text


def replay(
    policy: Policy,
    system: str,
    users: Sequence[str],
    turns: Sequence[Turn],
    *,
    guidance: str | None = None,
    guided_at: int | None = None,
) -> ChatSequence:
    """The chat sequence of recorded turns, from their generated ids (never re-tokenised): the system message,
    ``users[0]``, the reply of ``turns[0]``, ``users[1]``, ... With ``len(users) == len(turns) + 1`` it ends with
    a user turn open for the next reply; with ``len(users) == len(turns)`` it ends with the last reply.
    ``guidance`` goes before ``users[guided_at]`` (a retry's context at its pivot, see :func:`with_guidance`)."""
    if len(users) not in (len(turns), len(turns) + 1) or not users:
        raise ValueError(f"{len(users)} user messages for {len(turns)} replies: give one per reply (or one more)")

    def user(i: int) -> str:
        return with_guidance(guidance, users[i]) if i == guided_at else users[i]

    seq = ChatSequence(policy, [{"role": "system", "content": system}, {"role": "user", "content": user(0)}])
    for i, turn in enumerate(turns):
        seq.add_generation(turn.response, turn.token_ids, turn.behavior_logprobs, turn.sampled)
        if i + 1 < len(users):
            seq.add_user(user(i + 1))
    return seq


def chat(policy: Policy, conversations: Sequence[Sequence[dict[str, str]]], params: SamplingParams) -> list[Generation]:
    """Batched generation from chat messages: one reply per conversation (e.g. a reflector's diagnosis)."""
    prompts = [policy.tokenize(policy.render(list(c), add_generation_prompt=True)) for c in conversations]
    return policy.generate(prompts, params)
