"""A scripted (rule-based) policy for deterministic tests and demos of the machinery.

It implements the full :class:`wrappers.Policy` protocol with a real tokenizer (the byte-level tiny one by
default), so token ids, loss masks and chat templates behave exactly as with a model. Its replies come from
a rule; as a deterministic policy, every generated token has log-prob 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from r3l_learn.policies.chat_io import HFTokenizerIO
from r3l_learn.policies.models import tiny_tokenizer
from wrappers.policy import Generation, SamplingParams

__all__ = ["ScriptedPolicy"]

#: Log-prob per token that ``score`` gives to continuations the rule does not pick.
UNPREFERRED_LOGPROB = -5.0


class ScriptedPolicy(HFTokenizerIO):
    """Replies with ``reply(conversation_text)``; scores continuations by whether they equal that reply.

    Args:
        reply: a function of the prompt (decoded with its chat markup, so rules can read the last observation),
            or a list of replies used in turn (cycling).
        tokenizer: a HF tokenizer with a chat template (defaults to :func:`r3l_learn.policies.models.tiny_tokenizer`).
    """

    def __init__(
        self,
        reply: Callable[[str], str] | Sequence[str],
        tokenizer: Any = None,
        *,
        max_context: int = 1 << 16,
        name: str = "scripted",
    ):
        self.tokenizer = tokenizer if tokenizer is not None else tiny_tokenizer()
        self._rule = reply if callable(reply) else None
        self._replies = None if callable(reply) else list(reply)
        if self._replies is not None and not self._replies:
            raise ValueError("ScriptedPolicy needs at least one reply")
        self._calls = 0
        self.max_context = max_context
        self.eos_token_ids: tuple[int, ...] = (self.tokenizer.eos_token_id,)
        self.name = name

    def reply(self, prompt_text: str) -> str:
        """The scripted reply for a prompt."""
        if self._rule is not None:
            return self._rule(prompt_text)
        text = self._replies[self._calls % len(self._replies)]
        self._calls += 1
        return text

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for prompt in prompts:
            text = self.reply(self.tokenizer.decode(list(prompt), skip_special_tokens=False))
            ends = [text.find(s) + len(s) for s in params.stop if s in text]
            if ends:
                ids, reason = self.tokenize(text[: min(ends)]), "stop"
            else:
                ids, reason = [*self.tokenize(text), self.eos_token_ids[0]], "stop"
            if len(ids) > params.max_new_tokens:
                ids, reason = ids[: params.max_new_tokens], "length"
            out.append(Generation(self.decode(ids), ids, [0.0] * len(ids), reason))
        return out

    def score(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[list[float]]:
        wanted: dict[tuple[int, ...], str] = {}  # one reply per distinct prompt, as generate() would give
        out = []
        for prompt, cont in zip(prompts, continuations, strict=True):
            key = tuple(prompt)
            if key not in wanted:
                wanted[key] = self.reply(self.tokenizer.decode(list(prompt), skip_special_tokens=False)).strip()
            lp = 0.0 if self.decode(cont).strip() == wanted[key] else UNPREFERRED_LOGPROB
            out.append([lp] * len(cont))
        return out
