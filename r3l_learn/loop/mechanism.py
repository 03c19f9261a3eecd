"""What reflect-then-retry did in a training step, beyond its endpoint: the ``mechanism/*`` metrics.

- ``mechanism/groups``: the groups the step built;
- ``mechanism/all_bases_failed``: those with at least one base trajectory, every one of which failed;
- ``mechanism/rescued``: of those, the groups in which a retry won (0 for an algorithm without retries);
- ``mechanism/retry_loss_share``: the share of the step's gradient weight ``Σ |∂L/∂ℓ_t|`` on the rows from
  retries, aux samples included (:mod:`r3l_learn.algorithms.update`); None where the optimiser did not step;
- ``mechanism/amplification_grad_share`` and ``mechanism/grad_norm_without_amplification``: with
  ``TrainConfig.measure_amplification``, for an algorithm whose advantage is R³L's and whose objective is linear in
  it, ``‖g_extra‖ / ‖g‖`` and ``‖g - g_extra‖``, ``g_extra`` being the gradient of the policy term with advantage
  ``Â - A`` (R³L's less the plain mean baseline), before clipping; None otherwise or where the optimiser did not
  step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from r3l_learn.algorithms.batch import Row, rows_from_groups
from r3l_learn.algorithms.catalog import Algorithm
from r3l_learn.algorithms.update import LINEAR_IN_ADVANTAGE, LossConfig, UpdateResult
from wrappers.data.trajectory import TrajectoryGroup

__all__ = ["PLAIN_ADVANTAGE", "amplification_extras", "measures_amplification", "mechanism_metrics", "rescue_counts"]

#: the advantage R³L's amplifies (``r3l_learn.algorithms.advantages.r3l_advantage``)
PLAIN_ADVANTAGE = "mean_baseline"


def rescue_counts(groups: Sequence[TrajectoryGroup]) -> dict[str, int]:
    """``mechanism/groups``, ``mechanism/all_bases_failed`` and ``mechanism/rescued`` of ``groups`` (the module
    docstring). A group without a base trajectory counts in the first alone."""
    failed = rescued = 0
    for group in groups:
        bases = [t for t in group.trajectories if t.kind == "base"]
        if bases and not any(t.won for t in bases):
            failed += 1
            rescued += any(t.won for t in group.trajectories if t.kind == "retry")
    return {"mechanism/groups": len(groups), "mechanism/all_bases_failed": failed, "mechanism/rescued": rescued}


def measures_amplification(algorithm: Algorithm, loss: LossConfig) -> bool:
    """Whether ``algorithm`` amplifies (its advantage is R³L's) under an objective where the gradient splits."""
    return algorithm.advantage == "r3l" and loss.objective in LINEAR_IN_ADVANTAGE


def amplification_extras(
    groups: Sequence[TrajectoryGroup],
    rows: Sequence[Row],
    algorithm: Algorithm,
    *,
    hyper: dict[str, Any] | None = None,
    mask_truncated: bool = False,
) -> list[float]:
    """Per row of ``rows`` (:func:`r3l_learn.algorithms.batch.rows_from_groups` of ``groups`` with the same
    arguments), its advantage less the plain one, ``Â - A`` (0 where not amplified, and for aux rows): what
    :func:`r3l_learn.algorithms.update.apply_update`'s ``extra_advantages`` takes."""
    plain = rows_from_groups(groups, algorithm, hyper=hyper, mask_truncated=mask_truncated, advantage=PLAIN_ADVANTAGE)
    if len(plain) != len(rows) or any(p.token_ids != r.token_ids for p, r in zip(plain, rows)):
        raise ValueError("rows must be rows_from_groups(groups, algorithm, ...) with the same arguments")
    return [0.0 if r.aux else r.advantage - p.advantage for r, p in zip(rows, plain)]


def mechanism_metrics(groups: Sequence[TrajectoryGroup], result: UpdateResult) -> dict[str, Any]:
    """The step's ``mechanism/*`` metrics (the module docstring) from the groups it built and its update."""
    out: dict[str, Any] = dict(rescue_counts(groups))
    stepped = result.stepped
    out["mechanism/retry_loss_share"] = result.stats.retry_share if stepped else None
    share = without = None
    if stepped and result.extra_grad_norm is not None and result.grad_norm:
        share, without = result.extra_grad_norm / result.grad_norm, result.grad_norm_without_extra
    out["mechanism/amplification_grad_share"] = share
    out["mechanism/grad_norm_without_amplification"] = without
    return out
