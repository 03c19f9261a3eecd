"""Per-token objectives, their aggregation, and the KL penalty: pure tensor functions in registries.

An objective maps the current log-probs of the target tokens to a per-token loss; it knows nothing about
masks or batch shape beyond broadcasting. Aggregation (token-mean, sequence-mean, or Dr. GRPO's token sum over a
constant) is a separate choice, so "PPO-clip, sequence-mean" and "REINFORCE, token-mean" are two picks, not two
losses.

Every objective has the signature ``fn(logprobs, *, advantages, behavior_logprobs, <hyperparameters>) -> loss``:

- ``logprobs``: ``(B, T)`` log π_θ(y_t | context), with gradient;
- ``advantages``: ``(B,)`` per sequence (broadcast over tokens) or ``(B, T)`` per token;
- ``behavior_logprobs``: ``(B, T)`` log-probs of the policy that sampled the tokens; the learner passes them only to
  an objective registered with ``uses_ratio=True`` (``None`` otherwise);
- ``ref_logprobs``: ``(B, T)`` log-probs of the reference (initial) policy, passed only to an objective
  registered with ``needs_reference=True``, which must take this keyword;
- each hyperparameter is a keyword-only argument with its default (its declaration, as for advantages);
- returns the per-token loss ``(B, T)`` (to be minimised).

What the learner must know about an objective is declared at registration (:class:`ObjectiveProperties`).
Aggregations (:data:`AGGREGATIONS`, :class:`AggregationProperties`) and KL estimators (:data:`KL_ESTIMATORS`) are
registries of their own, and how the auxiliary rows are weighed is a row of :data:`AUX_MEANS`: each validates its
names, and ``r3l train`` takes its flags' choices and help from them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from r3l_learn.algorithms.registry import Choices, Registry

__all__ = [
    "AGGREGATIONS",
    "AUX_MEANS",
    "K3_MAX",
    "KL_ESTIMATORS",
    "OBJECTIVES",
    "AggregationProperties",
    "AuxMeanProperties",
    "ObjectiveFn",
    "ObjectiveProperties",
    "aggregate",
    "get_objective",
    "kl_penalty",
    "register_aggregation",
    "register_kl_estimator",
    "register_objective",
]

ObjectiveFn = Callable[..., torch.Tensor]
F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class ObjectiveProperties:
    """What the learner must know about an objective (declared at registration).

    Attributes:
        uses_ratio: it reads ``behavior_logprobs`` (an importance ratio to the sampling policy), so it receives them.
        needs_reference: it reads ``ref_logprobs``, so the learner keeps a reference policy and passes them.
        skip_zero_advantage: a row whose advantage is 0 adds nothing to its loss or gradient, so it carries no
            signal: the learner leaves it out of every term, KL included, and counts it in the denominators only
            (:mod:`r3l_learn.algorithms.update`).
    """

    uses_ratio: bool = False
    needs_reference: bool = False
    skip_zero_advantage: bool = False


#: name -> per-token objective
OBJECTIVES = Registry(
    "objective", ObjectiveProperties, data_keywords=("advantages", "behavior_logprobs", "ref_logprobs")
)
get_objective = OBJECTIVES.get_fn


def register_objective(name: str, **properties: Any) -> Callable[[F], F]:
    """Decorator: register an objective under ``name`` with its :class:`ObjectiveProperties` flags, e.g.
    ``@register_objective("ppo_clip", uses_ratio=True, skip_zero_advantage=True)``."""
    add = OBJECTIVES.register(name, **properties)

    def checked(fn: F) -> F:
        params = inspect.signature(fn).parameters
        for flag, keyword in (("uses_ratio", "behavior_logprobs"), ("needs_reference", "ref_logprobs")):
            if properties.get(flag) and keyword not in params:
                raise ValueError(f"objective {name!r} declares {flag}=True but takes no {keyword!r} argument")
        return add(fn)

    return checked


@dataclass(frozen=True)
class AggregationProperties:
    """What the loss must know about an aggregation (declared at registration).

    Attributes:
        needs_max_tokens: it divides by a constant number of tokens per sequence, ``max_tokens`` (the reply cap),
            which the loss must then set.
    """

    needs_max_tokens: bool = False


#: name -> aggregation ``fn(per_token, mask, *, total_tokens, total_sequences, max_tokens) -> scalar`` (the mask
#: already in the loss's dtype; see :func:`aggregate`)
AGGREGATIONS = Registry(
    "aggregation", AggregationProperties, data_keywords=("total_tokens", "total_sequences", "max_tokens")
)
register_aggregation = AGGREGATIONS.register

#: name -> per-token KL estimator ``fn(d) -> tensor`` of ``d = log π_θ - log π_ref`` (see :func:`kl_penalty`)
KL_ESTIMATORS = Registry("KL estimator")
register_kl_estimator = KL_ESTIMATORS.register


@dataclass(frozen=True)
class AuxMeanProperties:
    """How the auxiliary SFT rows are weighed against the policy rows (:mod:`r3l_learn.algorithms.update`'s docstring).

    Attributes:
        shared: the aux rows join the policy rows' aggregation, so both count in the same denominators.
    """

    shared: bool = False


#: how the auxiliary SFT rows are weighed against the policy rows
AUX_MEANS = Choices("aux mean", AuxMeanProperties)
AUX_MEANS.add("shared", "the aux rows join the policy rows' mean, as in the reference code", shared=True)
AUX_MEANS.add("separate", "λ times the aux rows' own token mean, the paper's formula read literally")


def _per_token(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if advantages.dim() == 1:
        if advantages.shape[0] != like.shape[0]:
            raise ValueError(f"{advantages.shape[0]} advantages for a batch of {like.shape[0]} sequences")
        return advantages[:, None].to(like.dtype)
    if advantages.shape != like.shape:
        raise ValueError(f"per-token advantages of shape {tuple(advantages.shape)} for log-probs {tuple(like.shape)}")
    return advantages.to(like.dtype)


@register_objective("reinforce", skip_zero_advantage=True)
def reinforce(
    logprobs: torch.Tensor, *, advantages: torch.Tensor, behavior_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """``-Â · log π_θ``: the R³L objective (arXiv 2601.03715), with no importance ratio and no clipping.

    ``behavior_logprobs`` is ignored on purpose: a distilled retry was sampled *with* guidance in context but is
    trained without it, so a ratio to its generation log-probs would compare two different conditionals.
    """
    return -_per_token(advantages, logprobs) * logprobs


@register_objective("ppo_clip", uses_ratio=True, skip_zero_advantage=True)
def ppo_clip(
    logprobs: torch.Tensor,
    *,
    advantages: torch.Tensor,
    behavior_logprobs: torch.Tensor | None,
    clip: float = 0.2,
) -> torch.Tensor:
    """PPO's clipped surrogate ``-min(ρ·Â, clip(ρ, 1-ε, 1+ε)·Â)`` with ``ρ = exp(log π_θ - log π_old)``."""
    if behavior_logprobs is None:
        raise ValueError("ppo_clip needs behavior_logprobs (the log-probs of the policy that sampled the tokens)")
    if not clip >= 0:
        raise ValueError(f"ppo_clip's clip must be >= 0 (the ratio is kept in [1 - clip, 1 + clip]), got {clip}")
    adv = _per_token(advantages, logprobs)
    ratio = torch.exp(logprobs - behavior_logprobs.to(logprobs.dtype))
    return -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)


@register_objective("sft")
def sft(
    logprobs: torch.Tensor, *, advantages: torch.Tensor | None = None, behavior_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """Negative log-likelihood ``-log π_θ`` (advantages and behaviour log-probs are ignored)."""
    return -logprobs


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    how: str = "token_mean",
    *,
    total_tokens: float | None = None,
    total_sequences: float | None = None,
    max_tokens: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss over the tokens where ``mask`` is 1, by the aggregation ``how``
    (:data:`AGGREGATIONS`).

    Pass the totals of the *whole* batch when this is one micro-batch of it, so that accumulating micro-batches
    gives exactly the full-batch loss (the defaults are this tensor's own counts).

    Raises:
        UnknownChoiceError: an unknown ``how`` (a ``ValueError``; the message lists the known ones).
        ValueError: ``token_sum`` without a positive ``max_tokens``.
    """
    fn = AGGREGATIONS.get_fn(how)
    mask = mask.to(per_token.dtype)
    return fn(per_token, mask, total_tokens=total_tokens, total_sequences=total_sequences, max_tokens=max_tokens)


@register_aggregation("token_mean")
def token_mean(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None = None,
    total_sequences: float | None = None,
    max_tokens: float | None = None,
) -> torch.Tensor:
    """The masked sum over the number of masked tokens (the R³L paper's)."""
    denom = mask.sum() if total_tokens is None else total_tokens
    return (per_token * mask).sum() / max(float(denom), 1.0)


@register_aggregation("seq_mean")
def seq_mean(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None = None,
    total_sequences: float | None = None,
    max_tokens: float | None = None,
) -> torch.Tensor:
    """Each sequence averaged over its own masked tokens, then the sequences that have any averaged."""
    lengths = mask.sum(-1)
    per_seq = (per_token * mask).sum(-1) / lengths.clamp(min=1)
    return _sequence_mean(per_seq, lengths, total_sequences)


@register_aggregation("token_sum", needs_max_tokens=True)
def token_sum(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    *,
    total_tokens: float | None = None,
    total_sequences: float | None = None,
    max_tokens: float | None = None,
) -> torch.Tensor:
    """Dr. GRPO's: each sequence's masked sum over a constant, the reply cap, averaged over sequences.

    Dr. GRPO is arXiv 2503.20783 (TRL's ``loss_type="dr_grpo"``): dividing by the generation budget instead of the
    reply's own length makes a token weigh the same in a long reply as in a short one, and its weight does not
    depend on how many tokens the batch holds.
    """
    if max_tokens is None or not max_tokens > 0:
        raise ValueError(f"token_sum divides by a constant number of tokens: pass max_tokens > 0, got {max_tokens}")
    lengths = mask.sum(-1)
    per_seq = (per_token * mask).sum(-1) / float(max_tokens)
    return _sequence_mean(per_seq, lengths, total_sequences)


def _sequence_mean(per_seq: torch.Tensor, lengths: torch.Tensor, total_sequences: float | None) -> torch.Tensor:
    """The mean of per-sequence values over the sequences with a masked token (or over ``total_sequences``)."""
    denom = (lengths > 0).sum() if total_sequences is None else total_sequences
    return per_seq.sum() / max(float(denom), 1.0)


#: k3's per-token ceiling (verl's and OpenRLHF's, so the R³L reference code's GRPO has it too)
K3_MAX = 10.0


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π_θ ‖ π_ref) from samples of π_θ by the estimator ``kind``
    (:data:`KL_ESTIMATORS`, Schulman's ``k1``, ``k2`` and ``k3``).

    Raises:
        UnknownChoiceError: an unknown ``kind`` (a ``ValueError``; the message lists the known ones).
    """
    fn = KL_ESTIMATORS.get_fn(kind)
    return fn(logprobs - ref_logprobs.to(logprobs.dtype))


@register_kl_estimator("k1")
def k1(d: torch.Tensor) -> torch.Tensor:
    """d = log π_θ - log π_ref itself (unbiased, but negative where the policy made a token less likely)."""
    return d


@register_kl_estimator("k2")
def k2(d: torch.Tensor) -> torch.Tensor:
    """½ d² (non-negative, biased)."""
    return 0.5 * d**2


@register_kl_estimator("k3")
def k3(d: torch.Tensor) -> torch.Tensor:
    """e^-d + d - 1, capped per token (unbiased and non-negative; GRPO's).

    The cap is :data:`K3_MAX`.

    Why the cap: ``e^{-d}`` grows without bound where the policy has made a token far less likely than the
    reference did. Tokens the policy did not sample can be in the loss (a slot's fixed ``</action>`` after a reply
    cut at the token limit, an admissible action the rollout chose by likelihood) with probabilities of ~1e-8 under
    both models, which one update can move by orders of magnitude; uncapped, the KL term can then take the whole of
    a clipped step. Capped, such a token adds a constant and no gradient, as in verl, on which the reference code's
    GRPO runs.
    """
    d = d.clamp(min=-20.0)  # e^{20} is finite in bf16 and fp32; the cap below applies long before
    return (torch.exp(-d) + d - 1).clamp(max=K3_MAX)
