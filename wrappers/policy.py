"""The ``Policy`` protocol: what rollouts need from a language model, and nothing about how it runs.

Policies work on token ids, not on text: the rollout builds each prompt from the ids the policy generated
earlier plus the chat template's own tokens for the other roles (see :mod:`wrappers.chat`), so a training
sequence is exactly what the model produced. ``r3l_learn`` implements the protocol (HF transformers, vLLM,
scripted); this module imports no model stack.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["FinishReason", "Generation", "Policy", "SamplingParams", "encodable"]

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion per prompt."""

    temperature: float = 1.0  # R³L samples at 1.0 during training (arXiv 2601.03715); 0 means greedy
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()  # extra stop strings besides the end-of-turn token; kept in the output
    seed: int | None = None  # same seed, prompts and policy -> same completions

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass
class Generation:
    """One completion: its text, the exact token ids sampled, their log-probs, and why it ended.

    ``logprobs[i]`` is log π(token_ids[i] | prompt, token_ids[:i]) under the model's raw distribution
    (temperature 1, no top-p), which is what a forward pass over the training sequence recomputes.
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


@runtime_checkable
class Policy(Protocol):
    """A batched, token-exact chat policy.

    Attributes:
        max_context: longest prompt + completion, in tokens, the model accepts.
        eos_token_ids: ids that end an assistant turn (kept as the last generated token when sampled).
    """

    max_context: int
    eos_token_ids: tuple[int, ...]

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool) -> str:
        """The chat template applied to ``messages``, as text (special tokens written out)."""
        ...

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` with special-token markup parsed and no BOS/EOS added."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids`` with special tokens dropped."""
        ...

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One completion per prompt (token ids), sampled as ``params`` says."""
        ...

    def score(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per-token log-probs of each ``continuations[i]`` after ``prompts[i]`` (raw distribution)."""
        ...


def describe(policy: Any) -> str:
    """A short name of a policy for logs and trajectory metadata."""
    return getattr(policy, "name", type(policy).__name__)


def encodable(text: str) -> str:
    """``text`` with lone surrogates replaced, so tokenizers (which need valid UTF-8) accept any str."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
