"""Advantage estimators: pure functions of per-trajectory rewards and group membership, in a registry.

Every estimator has the same signature, ``fn(rewards, group_index, *, <hyperparameters>) -> advantages``:

- ``rewards``: float tensor ``(n,)``, one episode reward per trajectory;
- ``group_index``: long tensor ``(n,)``, which group (task) each trajectory belongs to (any integer labels);
- each hyperparameter is a keyword-only argument with its default: that is its declaration (the learner reads
  names and defaults from the signature, ``ADVANTAGES.spec(name).hyper``, and ``r3l train --hyper NAME=VALUE``
  sets any of them);
- returns a float tensor ``(n,)``, one advantage per trajectory (broadcast over its tokens by the loss).

Register your own with ``@register_advantage("name")`` and name it in an :class:`r3l_learn.algorithms.catalog.Algorithm`
row; nothing else needs to know about it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from r3l_learn.algorithms.registry import Registry

__all__ = ["ADVANTAGES", "AdvantageFn", "get_advantage", "group_mean", "register_advantage"]

AdvantageFn = Callable[..., torch.Tensor]

#: name -> estimator
ADVANTAGES = Registry("advantage")
register_advantage = ADVANTAGES.register
get_advantage = ADVANTAGES.get_fn


def _check(rewards: torch.Tensor, group_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if rewards.dim() != 1 or group_index.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_index must be 1-D tensors of the same length, got {tuple(rewards.shape)} and "
            f"{tuple(group_index.shape)}"
        )
    _, dense = torch.unique(group_index, return_inverse=True)
    return rewards.double(), dense


def group_mean(values: torch.Tensor, dense_index: torch.Tensor) -> torch.Tensor:
    """Each entry replaced by the mean of its group (``dense_index`` in ``0..G-1``)."""
    groups = int(dense_index.max()) + 1 if dense_index.numel() else 0
    sums = torch.zeros(groups, dtype=values.dtype).index_add_(0, dense_index, values)
    counts = torch.zeros(groups, dtype=values.dtype).index_add_(0, dense_index, torch.ones_like(values))
    return (sums / counts)[dense_index]


@register_advantage("r3l")
def r3l_advantage(
    rewards: torch.Tensor, group_index: torch.Tensor, *, alpha: float = 3.0, max_reward: float = 1.0
) -> torch.Tensor:
    """R³L's positive amplification (arXiv 2601.03715): with ``A = r - mean_group(r)`` (no std normalisation),
    ``α`` for a full success (``r >= max_reward``), ``α·A`` where ``A > 0``, and ``A`` otherwise.

    A group where every member succeeds still pushes them up (α each); an all-failure group of equal rewards
    gets zero. The released code gives a full success 1 instead of α; we follow the paper. The default α = 3 is
    the paper's, and this signature is the only place it is written (the learner reads it from here).
    """
    r, dense = _check(rewards, group_index)
    a = r - group_mean(r, dense)
    out = torch.where(a > 0, alpha * a, a)
    out = torch.where(r >= max_reward, torch.full_like(r, alpha), out)
    return out.to(rewards.dtype)


@register_advantage("grpo")
def grpo_advantage(rewards: torch.Tensor, group_index: torch.Tensor, *, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: ``(r - mean) / (std + eps)`` within each group, with the unbiased (n-1) std as in TRL and verl.

    A group without spread (a single member, or all rewards equal) gets 0 for any ``eps >= 0``: its centred
    rewards are 0 up to rounding, and dividing that rounding by ``std + eps`` would give NaN (``eps = 0``) or
    arbitrary values instead.
    """
    if not eps >= 0:
        raise ValueError(f"grpo's eps must be >= 0 (it keeps the std away from 0), got {eps}")
    r, dense = _check(rewards, group_index)
    centred = r - group_mean(r, dense)
    counts = _group_sizes(dense)
    var = group_mean(centred**2, dense) * counts / (counts - 1).clamp(min=1)
    spread = _group_reduce(r, dense, "amax") - _group_reduce(r, dense, "amin")
    out = torch.where(spread > 0, centred / (var.sqrt() + eps), torch.zeros_like(r))
    return out.to(rewards.dtype)


@register_advantage("mean_baseline")
def mean_baseline_advantage(rewards: torch.Tensor, group_index: torch.Tensor) -> torch.Tensor:
    """REINFORCE with the group mean as baseline, ``r - mean_group(r)`` (OPMD; also R³L without
    amplification)."""
    r, dense = _check(rewards, group_index)
    return (r - group_mean(r, dense)).to(rewards.dtype)


@register_advantage("raft")
def raft_advantage(rewards: torch.Tensor, group_index: torch.Tensor, *, threshold: float = 1.0) -> torch.Tensor:
    """RAFT's success filter: 1 for trajectories with ``r >= threshold``, 0 for the rest, so a REINFORCE
    objective becomes supervised fine-tuning on the successes."""
    _check(rewards, group_index)
    return (rewards >= threshold).to(rewards.dtype)


def _group_sizes(dense: torch.Tensor) -> torch.Tensor:
    return torch.bincount(dense).double()[dense]


def _group_reduce(values: torch.Tensor, dense: torch.Tensor, how: str) -> torch.Tensor:
    """Each entry replaced by its group's ``how`` (``"amax"`` or ``"amin"``)."""
    groups = int(dense.max()) + 1 if dense.numel() else 0
    out = torch.zeros(groups, dtype=values.dtype).scatter_reduce(0, dense, values, how, include_self=False)
    return out[dense]
