"""From trajectory groups to training rows: one token sequence each, with its loss mask and advantage.

This is the only place that reads :class:`wrappers.TrajectoryGroup`; the objective functions see tensors.
Any group source works — :class:`wrappers.ReflectRetry`, plain sampling, or groups a user brings from JSONL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from r3l_learn.algorithms.advantages import ADVANTAGES, get_advantage
from r3l_learn.algorithms.catalog import Algorithm
from wrappers.data.trajectory import TrajectoryGroup

__all__ = ["Batch", "Row", "collate", "cut_replies", "micro_batches", "rows_from_groups"]


@dataclass
class Row:
    """One training sequence.

    Attributes:
        token_ids: the whole sequence (prompt, observations and generated turns).
        loss_mask: 1 on the tokens this row trains: the trajectory's ``loss_mask`` (its agent tokens after
            pivotal credit, where the group builder applied it), or a sample's target tokens.
        behavior_logprobs: the trajectory's ``behavior_logprobs`` aligned with ``token_ids`` (0.0 off the agent tokens;
            under the guided context on a retry's guided turns, see ``wrappers.data.trajectory``); 0.0 for samples.
        advantage: the trajectory's advantage (1.0 for auxiliary samples, which are plain SFT targets).
        aux: an auxiliary sample (R³L's ``reflection`` / ``guided_retry``), trained by the SFT term.
        kind: ``base``, ``retry``, ``reflection``, ``guided_retry``, ...
        group: index of the group it came from.
    """

    token_ids: list[int]
    loss_mask: list[int]
    behavior_logprobs: list[float]
    advantage: float
    aux: bool = False
    kind: str = "base"
    group: int = 0

    @property
    def num_target_tokens(self) -> int:
        return int(sum(self.loss_mask))


def rows_from_groups(
    groups: Sequence[TrajectoryGroup],
    algorithm: Algorithm,
    *,
    hyper: Mapping[str, Any] | None = None,
    mask_truncated: bool = False,
    advantage: str | None = None,
) -> list[Row]:
    """Policy rows (every trajectory's sequences with its advantage) followed by the auxiliary rows.

    Advantages are computed over each group's trajectories with ``algorithm.advantage``, its hyperparameters at
    their declared defaults except where ``hyper`` sets them (e.g. ``{"alpha": 2.0}``). A trajectory with a
    windowed history contributes one row per turn, all with the trajectory's advantage; one stopped before its
    first reply has no training sequence and no row (it still counts in its group's advantages). ``advantage``
    names another estimator to use instead (its hyperparameters from the algorithm's where it shares them, else
    its defaults): the same rows, e.g. with R³L's plain advantage ``"mean_baseline"`` before amplification.

    With ``mask_truncated``, the tokens of replies cut at the token cap (``Turn.reply_cut``) get loss mask 0, so
    they carry no policy, KL or SFT loss (TRL's ``mask_truncated_completions``, DAPO's overlong filtering): a cut
    reply says nothing about whether its content was good, only that it ran long. The trajectory still counts in
    its group's advantages, with its reward. An auxiliary sample's cut replies are those its builder marked in
    ``metadata["cut_mask"]`` (per token, 1 on a cut reply's tokens; a guided retry's, see
    :class:`wrappers.ReflectRetry`).
    """
    rewards, index = [], []
    for g, group in enumerate(groups):
        for traj in group.trajectories:
            rewards.append(traj.reward)
            index.append(g)
    if not rewards:
        return []
    name = algorithm.advantage if advantage is None else advantage
    fn = get_advantage(name)
    kwargs = ADVANTAGES.spec(name).kwargs(algorithm.resolve_hyper(hyper))
    adv = fn(torch.tensor(rewards, dtype=torch.float64), torch.tensor(index), **kwargs)
    rows, k = [], 0
    for g, group in enumerate(groups):
        for traj in group.trajectories:
            sequences = traj.sequences()
            cut = traj.cut_reply_masks() if mask_truncated else [None] * len(sequences)
            if len(cut) != len(sequences):
                raise ValueError(
                    f"trajectory {traj.id}: {len(cut)} cut-reply masks for {len(sequences)} training sequences"
                )
            for seq, cut_mask in zip(sequences, cut):
                ids, mask, behavior = list(seq.token_ids), list(seq.loss_mask), list(seq.behavior_logprobs)
                if cut_mask is not None:
                    mask = _without(mask, cut_mask, f"trajectory {traj.id}")
                rows.append(Row(ids, mask, behavior, float(adv[k]), kind=traj.kind, group=g))
            k += 1
    if algorithm.aux_samples:
        for g, group in enumerate(groups):
            for s in group.samples:
                zeros, mask = [0.0] * len(s.token_ids), list(s.loss_mask)
                if mask_truncated and s.metadata.get("cut_mask") is not None:
                    mask = _without(mask, s.metadata["cut_mask"], f"{s.kind} sample of group {g}")
                rows.append(Row(list(s.token_ids), mask, zeros, 1.0, aux=True, kind=s.kind, group=g))
    return rows


def _without(mask: list[int], cut: Sequence[int], what: str) -> list[int]:
    """``mask`` with 0 wherever ``cut`` is 1 (both aligned with one sequence's tokens)."""
    if len(cut) != len(mask):
        raise ValueError(f"{what}: a cut-reply mask of {len(cut)} entries for a sequence of {len(mask)} tokens")
    return [0 if c else m for m, c in zip(mask, cut)]


def cut_replies(groups: Sequence[TrajectoryGroup]) -> int:
    """How many replies the policy generated in ``groups`` were cut at the token cap (``Turn.reply_cut``). A
    retry's turns before its pivot are its base's, reused, so they are counted once, in the base."""
    return sum(turn.reply_cut for g in groups for t in g.trajectories for turn in t.turns[t.pivot or 0 :])


@dataclass
class Batch:
    """Right-padded tensors of a list of rows."""

    input_ids: torch.Tensor  # (B, T) long
    attention_mask: torch.Tensor  # (B, T) long
    loss_mask: torch.Tensor  # (B, T) float
    behavior_logprobs: torch.Tensor  # (B, T) float
    advantages: torch.Tensor  # (B,) float
    aux: torch.Tensor  # (B,) bool

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device) for t in vars(self).values()))


def collate(rows: Sequence[Row], pad_id: int) -> Batch:
    """Pad ``rows`` on the right into one :class:`Batch`."""
    if not rows:
        raise ValueError("collate needs at least one row")
    width = max(len(r.token_ids) for r in rows)
    n = len(rows)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width))
    behavior = torch.zeros((n, width))
    for i, r in enumerate(rows):
        if not (len(r.token_ids) == len(r.loss_mask) == len(r.behavior_logprobs)):
            raise ValueError(
                f"row {i} ({r.kind}): {len(r.token_ids)} tokens, {len(r.loss_mask)} mask entries and "
                f"{len(r.behavior_logprobs)} log-probs; they must be aligned"
            )
        k = len(r.token_ids)
        ids[i, :k] = torch.tensor(r.token_ids)
        attn[i, :k] = 1
        mask[i, :k] = torch.tensor(r.loss_mask, dtype=torch.float32)
        behavior[i, :k] = torch.tensor(r.behavior_logprobs, dtype=torch.float32)
    adv = torch.tensor([r.advantage for r in rows], dtype=torch.float32)
    aux = torch.tensor([r.aux for r in rows])
    return Batch(ids, attn, mask, behavior, adv, aux)


def micro_batches(rows: Sequence[Row], size: int) -> list[list[Row]]:
    """Consecutive chunks of ``size`` rows, after sorting by their tokens, so that rows which begin alike (a task's
    group, a retry and its base) share a micro-batch and run the spans they share once (see
    :mod:`r3l_learn.algorithms.prefix_tree`; the loss is a sum over rows with batch-wide denominators, so the order
    does not
    change it)."""
    if size < 1:
        raise ValueError(f"micro-batch size must be >= 1, got {size}")
    ordered = sorted(rows, key=lambda r: tuple(r.token_ids))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]
