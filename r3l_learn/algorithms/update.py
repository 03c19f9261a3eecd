"""The loss of a batch of rows, accumulated over micro-batches (the R³L objective of arXiv 2601.03715 as one case).

    L = agg( objective(log π_θ; Â, log π_old) )  +  kl_coef · agg( KL(π_θ ‖ π_ref) )
        + aux_weight · agg_aux( -log π_θ )

How the auxiliary SFT rows are weighed is ``aux_mean``:

- ``"shared"`` (default): the aux rows join the policy rows' aggregation, as rows with advantage λ, so every
  denominator counts both (for the token mean: ``Σ_policy … + λ Σ_aux -log π`` over ``N_policy + N_aux`` tokens).
  This is the reference code's weighting, in which aux samples are reward-1 rows with advantage α in the same
  token mean, so their pull grows with their share of the batch's tokens.
- ``"separate"``: λ times the aux rows' own token mean, the paper's formula read literally. It weighs the aux
  term ``(N_policy + N_aux) / N_aux`` times heavier than the reference, enough for it to dominate the gradient:
  kept as an option because the first learning study ran with it.

``agg`` is the chosen aggregation over the loss-masked tokens of the policy rows (token-mean by default),
with denominators taken over the *whole* batch, so any split into micro-batches gives the same
loss and gradient (the accumulated sum equals the full-batch value). What else the loss needs of an objective
(behaviour log-probs for a ratio, reference log-probs) is read from its registration,
:class:`r3l_learn.algorithms.losses.ObjectiveProperties`.

**Batches without contrast: one rule for every algorithm** (:func:`signal_rows`, :func:`apply_update`). A row
carries signal when it has target tokens and either is an aux SFT row with ``aux_weight > 0``, or is a policy row
whose advantage is not 0, or is a policy row of an objective that does not declare ``skip_zero_advantage`` (its
loss does not vanish at advantage 0, e.g. ``sft``). Rows without signal are left out of every term, the KL term
included: a KL penalty only regularises the updates the policy-gradient term makes, so it rides along with them
and never makes an update of its own. They still count in the denominators, so a batch's loss does not depend
on which of its rows had signal. A batch with no row of signal (every group without contrast: all members
equally rewarded, and no aux sample) does not step the optimiser at all: no forward or backward pass, no
``optimizer.step()``, so the weights, AdamW's step counts and moments (and any LR schedule driven by them) stay as
they were. Before this rule, GRPO's KL kept zero-advantage rows in the loss and stepped AdamW, with the momentum
of its last real update, on batches without a win, while the other algorithms did not. The step still counts as
a step of the run (the task stream moves on, the metrics record ``update/skipped_no_contrast``).

**Where the gradient comes from** (:class:`UpdateStats`, :class:`UpdateResult`). Every term of the loss reads the
policy through the per-token log-probs ``ℓ_t``, so ``|∂L/∂ℓ_t|`` is token ``t``'s weight in the gradient, whatever
the objective, the KL term, the aux term and the aggregation. The backward pass keeps that gradient of each
micro-batch's log-prob tensor and sums its magnitude over all rows and over the rows that come from retries (a
retry, or an aux sample, which reflect-retry builds from retries): :attr:`UpdateStats.retry_share`. No extra pass.

Asked with ``extra_advantages`` (per row, a part of its advantage), :func:`apply_update` also splits the gradient
``g = g_without + g_extra``, ``g_extra`` being the gradient of the policy term with advantage ``extra`` on the rows
where it is not 0, under the whole batch's denominators. R³L reads its amplification this way: ``extra = Â - A``
(its advantage less the plain mean baseline). The split is exact where the objective is linear in the advantage
(:data:`LINEAR_IN_ADVANTAGE`: ``reinforce``, R³L's, under every aggregation, all of which are linear in the
per-token loss); PPO-clip is not (its clip depends on the advantage's sign), and :func:`apply_update` refuses it.
``g_without`` is then the gradient of the same loss with ``A`` in place of ``Â``, except for a KL term on rows that
``A`` would leave without signal (R³L has none: its KL coefficient is 0). The cost: one more forward and backward
pass over the rows with a non-zero ``extra`` alone (R³L: the winners; none where no row is amplified).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from r3l_learn.algorithms.batch import Batch, Row, collate, micro_batches
from r3l_learn.algorithms.catalog import Algorithm
from r3l_learn.algorithms.logprobs import MIN_SHARED_PREFIX, sequence_logprobs
from r3l_learn.algorithms.losses import (
    AGGREGATIONS,
    AUX_MEANS,
    KL_ESTIMATORS,
    OBJECTIVES,
    ObjectiveProperties,
    aggregate,
    kl_penalty,
)

__all__ = [
    "LINEAR_IN_ADVANTAGE",
    "LossConfig",
    "UpdateResult",
    "UpdateStats",
    "accumulate_gradients",
    "apply_update",
    "batch_loss",
    "carries_signal",
    "from_retry",
    "optimizer_steps",
    "signal_rows",
]

#: computes reference log-probs of a batch (no grad), for the KL term
RefFn = Callable[[Batch], torch.Tensor]

#: objectives whose per-token loss is linear in the advantage, so that the loss of a sum of advantages is the sum
#: of their losses (what :func:`apply_update`'s ``extra_advantages`` needs)
LINEAR_IN_ADVANTAGE = frozenset({"reinforce"})


@dataclass(frozen=True)
class LossConfig:
    """What the loss is made of (everything else about the algorithm lives in the rows).

    :meth:`for_algorithm` builds one from an :class:`~r3l_learn.algorithms.catalog.Algorithm` and its hyperparameters
    (R³L's λ = α among them); a bare ``LossConfig()`` is REINFORCE with no auxiliary term and no KL. Each choice
    (objective, aggregation, aux mean, KL estimator) is checked by its registry, whose error lists the known names.
    """

    objective: str = "reinforce"
    objective_kwargs: dict[str, Any] = field(default_factory=dict)  # hyperparameters, e.g. {"clip": 0.2}
    aggregation: str = "token_mean"
    aux_weight: float = 0.0  # λ of the aux SFT term (R³L's is α: for_algorithm sets it)
    aux_mean: str = "shared"  # the aux rows in the policy rows' mean ("shared") or in their own ("separate")
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    chunk_size: int = 1024  # LM-head positions per chunk (see r3l_learn.algorithms.logprobs)
    min_shared_prefix: int = MIN_SHARED_PREFIX  # a span rows share runs once from this length (0: never)
    prefix_levels: int | None = None  # how deep shared spans nest (None: fully; 1: a micro-batch's common prefix)
    max_tokens: int | None = None  # token_sum's constant denominator per sequence (Dr. GRPO): the reply cap

    def __post_init__(self) -> None:
        declared = OBJECTIVES.spec(self.objective).hyper  # an unknown objective fails here, naming the known
        unknown = sorted(set(self.objective_kwargs) - set(declared))
        if unknown:
            raise ValueError(f"objective {self.objective!r} has no hyperparameter {unknown}; it declares {declared}")
        if AGGREGATIONS.spec(self.aggregation).properties.needs_max_tokens and not (self.max_tokens or 0) > 0:
            raise ValueError(
                f"aggregation {self.aggregation} divides by a constant: set max_tokens > 0, got {self.max_tokens}"
            )
        AUX_MEANS.check(self.aux_mean)
        KL_ESTIMATORS.check(self.kl_estimator)

    @classmethod
    def for_algorithm(
        cls, algorithm: Algorithm, hyper: dict[str, Any] | None = None, *, aux_weight: float | None = None, **rest: Any
    ) -> LossConfig:
        """The loss of ``algorithm`` with hyperparameters ``hyper`` (resolved with
        :meth:`Algorithm.resolve_hyper`; None: the defaults): its objective with its keyword arguments, λ from
        the algorithm unless ``aux_weight`` is given (0 where it trains no auxiliary samples) and its KL
        coefficient unless ``kl_coef`` is given. ``rest`` sets the other fields."""
        hyper = algorithm.resolve_hyper() if hyper is None else hyper
        weight = algorithm.aux_weight_value(hyper) if aux_weight is None else aux_weight
        rest.setdefault("kl_coef", algorithm.kl_coef)
        return cls(
            objective=algorithm.objective,
            objective_kwargs=algorithm.objective_kwargs(hyper),
            aux_weight=weight if algorithm.aux_samples else 0.0,
            **rest,
        )

    @property
    def properties(self) -> ObjectiveProperties:
        """What the objective declared at registration."""
        return OBJECTIVES.spec(self.objective).properties

    @property
    def needs_reference(self) -> bool:
        """Whether the loss reads reference log-probs (a KL term, or an objective that needs them)."""
        return self.kl_coef > 0 or self.properties.needs_reference


@dataclass
class _Totals:
    """The whole batch's denominators: (tokens, sequences) with a loss mask, of the policy and the aux rows."""

    policy: tuple[float, float]
    aux: tuple[float, float]

    @classmethod
    def of(cls, rows: Sequence[Row]) -> _Totals:
        def count(part: list[Row]) -> tuple[float, float]:
            return sum(r.num_target_tokens for r in part), sum(r.num_target_tokens > 0 for r in part)

        return cls(policy=count([r for r in rows if not r.aux]), aux=count([r for r in rows if r.aux]))

    def denominators(self, config: LossConfig) -> tuple[dict[str, float], dict[str, float]]:
        """``aggregate``'s totals for the policy part and for the aux part (aux rows weighed 0 count nowhere)."""
        policy, aux = self.policy, self.aux
        if AUX_MEANS[config.aux_mean].shared and config.aux_weight:
            policy = aux = (policy[0] + aux[0], policy[1] + aux[1])

        def totals(pair: tuple[float, float]) -> dict[str, float]:
            return {"total_tokens": pair[0], "total_sequences": pair[1], "max_tokens": config.max_tokens}

        return totals(policy), totals(aux)


@dataclass
class UpdateStats:
    """What one accumulation pass measured."""

    loss: float = 0.0
    policy_loss: float = 0.0
    aux_loss: float = 0.0
    kl: float = 0.0
    target_tokens: int = 0
    tokens: int = 0  # every token that went through the model (context included)
    skipped_rows: int = 0
    finite: bool = True
    grad_weight: float = 0.0  # Σ |∂L/∂ℓ_t| over the target tokens of every row (the module docstring)
    retry_grad_weight: float = 0.0  # the same over the rows from retries (:func:`from_retry`)

    @property
    def retry_share(self) -> float | None:
        """The share of the loss's gradient weight ``Σ |∂L/∂ℓ_t|`` on the rows from retries (retries and aux
        samples); None where no token had any weight."""
        if not self.grad_weight > 0:
            return None
        return self.retry_grad_weight / self.grad_weight


def from_retry(row: Row) -> bool:
    """Whether ``row`` comes from a retry: a retry trajectory's, or an aux sample (reflect-retry builds them from
    its retries)."""
    return row.aux or row.kind == "retry"


def carries_signal(row: Row, config: LossConfig) -> bool:
    """Whether ``row`` gives the loss anything to learn from (the module docstring's rule): it has target tokens,
    and it is an aux row weighed ``aux_weight > 0``, or a policy row with a non-zero advantage, or a policy row of
    an objective that does not declare ``skip_zero_advantage``."""
    if row.num_target_tokens == 0:
        return False
    if row.aux:
        return bool(config.aux_weight)
    return row.advantage != 0 or not config.properties.skip_zero_advantage


def signal_rows(rows: Sequence[Row], config: LossConfig) -> list[Row]:
    """The rows of ``rows`` that carry signal (:func:`carries_signal`); an empty list means the batch has no
    contrast and :func:`apply_update` does not step the optimiser on it."""
    return [r for r in rows if carries_signal(r, config)]


def batch_loss(
    model: Any, batch: Batch, config: LossConfig, totals: _Totals, ref_fn: RefFn | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss contribution of one micro-batch (already normalised by the whole batch's totals)."""
    loss, parts, _ = _batch_loss(model, batch, config, totals, ref_fn)
    return loss, parts


def _batch_loss(
    model: Any, batch: Batch, config: LossConfig, totals: _Totals, ref_fn: RefFn | None
) -> tuple[torch.Tensor, dict[str, float], torch.Tensor]:
    """:func:`batch_loss`, and the per-token log-probs ``(B, T)`` it was computed from."""
    logp = sequence_logprobs(
        model,
        batch.input_ids,
        batch.attention_mask,
        positions=batch.loss_mask > 0,
        chunk_size=config.chunk_size,
        min_shared_prefix=config.min_shared_prefix,
        prefix_levels=config.prefix_levels,
    )
    policy, aux = ~batch.aux, batch.aux
    props = config.properties
    policy_totals, aux_totals = totals.denominators(config)
    parts: dict[str, torch.Tensor] = {}
    if policy.any():
        mask = batch.loss_mask * policy[:, None]
        ref = ref_fn(batch) if ref_fn is not None and config.needs_reference else None
        extra = {"ref_logprobs": ref} if props.needs_reference else {}
        per_token = OBJECTIVES.get_fn(config.objective)(
            logp,
            advantages=batch.advantages,
            behavior_logprobs=batch.behavior_logprobs if props.uses_ratio else None,
            **extra,
            **config.objective_kwargs,
        )
        parts["policy"] = aggregate(per_token, mask, config.aggregation, **policy_totals)
        if config.kl_coef and ref is not None:
            kl = kl_penalty(logp, ref, config.kl_estimator)
            parts["kl"] = aggregate(kl, mask, config.aggregation, **policy_totals)
    if aux.any() and config.aux_weight:
        how = config.aggregation if AUX_MEANS[config.aux_mean].shared else "token_mean"
        parts["aux"] = aggregate(-logp, batch.loss_mask * aux[:, None], how, **aux_totals)
    zero = logp.sum() * 0.0  # keeps the graph (and the dtype) when a part is absent
    loss = zero + parts.get("policy", 0.0) + config.kl_coef * parts.get("kl", 0.0)
    loss = loss + config.aux_weight * parts.get("aux", 0.0)
    return loss, {k: float(v.detach()) for k, v in parts.items()}, logp


def accumulate_gradients(
    model: Any,
    rows: Sequence[Row],
    config: LossConfig,
    *,
    micro_batch_size: int,
    pad_id: int,
    ref_fn: RefFn | None = None,
    autocast: torch.dtype | None = None,
) -> UpdateStats:
    """Backpropagate the loss of ``rows`` in micro-batches of ``micro_batch_size`` rows (gradients add up in
    ``.grad``; the caller zeroes them before and steps the optimiser after). Only the rows that carry signal
    (:func:`signal_rows`) go through the model; the others count in the denominators alone. Stops at the first
    non-finite micro-batch loss and reports it (``finite=False``); the caller must then discard the gradients."""
    if config.properties.needs_reference and ref_fn is None:
        raise ValueError(f"objective {config.objective!r} needs reference log-probs: pass ref_fn")
    return _accumulate(model, rows, config, _Totals.of(rows), micro_batch_size, pad_id, ref_fn, autocast)


def _accumulate(
    model: Any,
    rows: Sequence[Row],
    config: LossConfig,
    totals: _Totals,
    micro_batch_size: int,
    pad_id: int,
    ref_fn: RefFn | None,
    autocast: torch.dtype | None,
) -> UpdateStats:
    """:func:`accumulate_gradients` under given denominators ``totals`` (the whole batch's, of which ``rows`` may
    be a part)."""
    trainable = signal_rows(rows, config)
    stats = UpdateStats(skipped_rows=len(rows) - len(trainable))
    stats.target_tokens = int(totals.policy[0] + totals.aux[0])
    device = next(model.parameters()).device
    for chunk in micro_batches(trainable, micro_batch_size):
        batch = collate(chunk, pad_id).to(device)
        ctx = torch.autocast(device.type, dtype=autocast) if autocast is not None else contextlib.nullcontext()
        with ctx:
            loss, parts, logp = _batch_loss(model, batch, config, totals, ref_fn)
        if not math.isfinite(float(loss.detach())):
            stats.finite = False
            return stats
        if logp.requires_grad:
            logp.retain_grad()  # ∂L/∂ℓ_t: each token's weight in the gradient (kept, not changed)
        loss.backward()
        if logp.grad is not None:
            weight = torch.where(batch.loss_mask > 0, logp.grad.abs(), 0.0).sum(1)
            retry = torch.tensor([from_retry(r) for r in chunk], device=weight.device)
            stats.grad_weight += float(weight.sum())
            stats.retry_grad_weight += float(weight[retry].sum())
        stats.loss += float(loss.detach())
        stats.policy_loss += parts.get("policy", 0.0)
        stats.aux_loss += parts.get("aux", 0.0)
        stats.kl += parts.get("kl", 0.0)
        stats.tokens += int(batch.attention_mask.sum())
    return stats


@dataclass
class UpdateResult:
    """What :func:`apply_update` did: the accumulation's statistics, the gradient norm before clipping (None where
    no gradient was computed), and whether the optimiser stepped; ``no_contrast``: it did not, because no row
    carried signal (otherwise a non-finite loss or gradient stopped it). With ``extra_advantages``, the norms of
    the gradient's two parts (the module docstring)."""

    stats: UpdateStats
    grad_norm: float | None
    stepped: bool
    no_contrast: bool = False
    extra_grad_norm: float | None = None  # ‖g_extra‖ of ``extra_advantages`` (None: not asked, or not finite)
    grad_norm_without_extra: float | None = None  # ‖g - g_extra‖, before clipping as ``grad_norm``


def apply_update(
    model: Any,
    optimizer: torch.optim.Optimizer,
    rows: Sequence[Row],
    config: LossConfig,
    *,
    micro_batch_size: int,
    pad_id: int,
    grad_clip: float,
    ref_fn: RefFn | None = None,
    autocast: torch.dtype | None = None,
    extra_advantages: Sequence[float] | None = None,
) -> UpdateResult:
    """One optimiser step on ``rows``, under the zero-contrast rule of the module docstring: a batch without a row
    of signal leaves the model and ``optimizer`` exactly as they were (no backward, no step, AdamW's state
    untouched); otherwise the gradients are accumulated, clipped to ``grad_clip`` and applied, unless the loss or
    gradient is not finite (then discarded). The gradients are zeroed before and after; the model is left in eval
    mode.

    ``extra_advantages`` (one per row, 0 for a row not concerned; aux rows are never concerned) asks for the split
    ``g = g_without + g_extra`` of the module docstring: ``g_extra`` is accumulated first, over the concerned rows
    alone, under the whole batch's denominators and a fork of the RNGs, and set aside, so the step itself, its
    gradient and the weights after it are exactly those of a call without it. Exact where the forward pass is
    deterministic (no active dropout: the causal LMs trained here have none).

    Raises:
        ValueError: ``extra_advantages`` is not one per row, or the objective is not linear in the advantage
            (:data:`LINEAR_IN_ADVANTAGE`), where the split does not hold.
    """
    if extra_advantages is not None:
        if len(extra_advantages) != len(rows):
            raise ValueError(f"{len(extra_advantages)} extra advantages for {len(rows)} rows: give one per row")
        if config.objective not in LINEAR_IN_ADVANTAGE:
            raise ValueError(
                f"objective {config.objective!r} is not linear in the advantage, so its gradient does not split "
                f"over a split advantage; the split holds for {sorted(LINEAR_IN_ADVANTAGE)}"
            )
    if not signal_rows(rows, config):
        stats = UpdateStats(skipped_rows=len(rows), target_tokens=int(sum(r.num_target_tokens for r in rows)))
        return UpdateResult(stats, grad_norm=None, stepped=False, no_contrast=True)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        extra = None
        if extra_advantages is not None:
            extra = _extra_gradients(model, rows, extra_advantages, config, params, micro_batch_size, pad_id, autocast)
        stats = accumulate_gradients(
            model, rows, config, micro_batch_size=micro_batch_size, pad_id=pad_id, ref_fn=ref_fn, autocast=autocast
        )
        norms = _split_norms(params, extra) if extra is not None and stats.finite else (None, None)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip))
        stepped = stats.finite and math.isfinite(grad_norm)
        if stepped:
            optimizer.step()
    finally:
        optimizer.zero_grad(set_to_none=True)
        model.eval()
    return UpdateResult(stats, grad_norm, stepped, extra_grad_norm=norms[0], grad_norm_without_extra=norms[1])


def _extra_gradients(
    model: Any,
    rows: Sequence[Row],
    extra_advantages: Sequence[float],
    config: LossConfig,
    params: list[torch.Tensor],
    micro_batch_size: int,
    pad_id: int,
    autocast: torch.dtype | None,
) -> list[torch.Tensor | None] | None:
    """``g_extra`` per parameter of ``params`` (None: no gradient reached it), each parameter's ``.grad`` left
    None; None where its loss is not finite. Only the concerned rows run, with advantage ``extra``; the policy
    term alone (no KL, no aux), under the whole batch's denominators."""
    concerned = [
        dataclasses.replace(r, advantage=float(a))
        for r, a in zip(rows, extra_advantages)
        if a and not r.aux and r.num_target_tokens
    ]
    if not concerned:
        return [None] * len(params)
    device = next(model.parameters()).device
    policy_only = dataclasses.replace(config, kl_coef=0.0)  # the aux rows still count in the denominators
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        stats = _accumulate(model, concerned, policy_only, _Totals.of(rows), micro_batch_size, pad_id, None, autocast)
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    return grads if stats.finite else None


def _split_norms(params: list[torch.Tensor], extra: list[torch.Tensor | None]) -> tuple[float, float]:
    """``(‖g_extra‖, ‖g - g_extra‖)`` with ``g`` in ``params``' ``.grad`` (not changed), each taken as
    ``clip_grad_norm_`` takes ``‖g‖``: so ``‖g - 0‖`` is ``grad_norm`` to the bit."""
    parts = [(p.grad, e) for p, e in zip(params, extra) if p.grad is not None or e is not None]
    rest = [g - e if g is not None and e is not None else g if e is None else -e for g, e in parts]
    return _total_norm([e for _, e in parts if e is not None]), _total_norm(rest)


def _total_norm(tensors: list[torch.Tensor]) -> float:
    """The 2-norm of ``tensors`` together, computed as ``torch.nn.utils.clip_grad_norm_`` computes it."""
    if not tensors:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t) for t in tensors])))


def optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """How many steps ``optimizer`` has applied (AdamW's per-parameter ``step``, the largest; 0 before the first):
    read from its state, so a resumed run counts the steps made before the checkpoint too."""
    counts = [int(s["step"]) for s in optimizer.state.values() if "step" in s]
    return max(counts, default=0)
