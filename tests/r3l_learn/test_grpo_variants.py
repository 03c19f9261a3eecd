"""GRPO's variants: without KL (TRL's default) and Dr. GRPO (no std normalisation), each one part away from GRPO;
Dr. GRPO's token-sum aggregation over a constant."""

import dataclasses

import pytest
import torch

from r3l_learn.algorithms.batch import rows_from_groups
from r3l_learn.algorithms.catalog import ALGORITHMS, resolve_algorithm
from r3l_learn.algorithms.losses import AGGREGATIONS, aggregate
from r3l_learn.algorithms.update import LossConfig, accumulate_gradients
from r3l_learn.policies.models import tiny_model
from wrappers.data.trajectory import Trajectory, TrajectoryGroup


def _groups():
    """Two groups of three plain samples with spread rewards (token ids within the tiny model's vocabulary)."""
    out = []
    for g, rewards in enumerate(([1.0, 0.0, 0.0], [1.0, 1.0, 0.5])):
        trajs = []
        for i, r in enumerate(rewards):
            ids = [1, 10 + g, 20 + i, 30 + i, 40 + g * i, 2]
            mask = [0, 0, 1, 1, 1, 1]
            trajs.append(Trajectory("e", f"t{g}", "", reward=r, token_ids=ids, loss_mask=mask, agent_mask=mask))
            trajs[-1].behavior_logprobs = [0.0] * len(ids)
        out.append(TrajectoryGroup("e", f"t{g}", trajs))
    return out


def _differences(name: str) -> dict:
    grpo, other = dataclasses.asdict(ALGORITHMS["grpo"]), dataclasses.asdict(resolve_algorithm(name))
    return {k: other[k] for k in grpo if grpo[k] != other[k]}


def test_each_variant_is_one_part_away_from_grpo():
    assert _differences("grpo_no_kl") == {"name": "grpo_no_kl", "kl_coef": 0.0}
    assert _differences("dr_grpo") == {"name": "dr_grpo", "kl_coef": 0.0, "advantage": "mean_baseline"}
    assert LossConfig.for_algorithm(ALGORITHMS["grpo"]).kl_coef == 0.001
    for name in ("grpo_no_kl", "dr_grpo"):
        loss = LossConfig.for_algorithm(resolve_algorithm(name))
        assert loss.kl_coef == 0.0 and loss.objective == "ppo_clip" and loss.objective_kwargs == {"clip": 0.2}


def test_dr_grpo_keeps_the_mean_baseline_and_drops_the_std():
    groups = _groups()
    centred = [2 / 3, -1 / 3, -1 / 3, 1 / 6, 1 / 6, -1 / 3]  # r - the group's mean
    std = [torch.tensor(g.rewards).std().item() for g in groups]  # unbiased, as GRPO's
    grpo = [r.advantage for r in rows_from_groups(groups, ALGORITHMS["grpo"])]
    no_kl = [r.advantage for r in rows_from_groups(groups, resolve_algorithm("grpo_no_kl"))]
    dr = [r.advantage for r in rows_from_groups(groups, resolve_algorithm("dr_grpo"))]
    assert dr == pytest.approx(centred)
    assert no_kl == grpo == pytest.approx([a / std[i // 3] for i, a in enumerate(centred)], rel=1e-5)


@pytest.mark.parametrize("name", ["grpo_no_kl", "dr_grpo"])
def test_a_variant_trains_one_step_on_the_tiny_model(name):
    algo = resolve_algorithm(name)
    model, tokenizer = tiny_model(seed=1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rows = rows_from_groups(_groups(), algo)
    model.train()
    # KL 0: no reference model is needed, and none is passed
    stats = accumulate_gradients(
        model, rows, LossConfig.for_algorithm(algo), micro_batch_size=2, pad_id=tokenizer.pad_token_id
    )
    assert stats.finite and stats.kl == 0.0 and stats.policy_loss != 0.0
    torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0).step()
    assert any(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())


def test_token_sum_divides_each_sequence_by_the_constant_not_its_length():
    per_token = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]])
    assert "token_sum" in AGGREGATIONS
    # (1 + 2 + 3) / 8 and 6 / 8, over the two sequences with a masked token
    assert float(aggregate(per_token, mask, "token_sum", max_tokens=8)) == pytest.approx((6 / 8 + 6 / 8) / 2)
    # seq_mean divides by each length: the short reply's token weighs 3 times the long one's
    assert float(aggregate(per_token, mask, "seq_mean")) == pytest.approx((6 / 3 + 6 / 1) / 2)
    # micro-batches with the whole batch's sequence count add up to the full-batch value
    parts = [
        aggregate(per_token[i : i + 1], mask[i : i + 1], "token_sum", total_sequences=2, max_tokens=8) for i in range(3)
    ]
    assert float(sum(parts)) == pytest.approx(float(aggregate(per_token, mask, "token_sum", max_tokens=8)))


@pytest.mark.parametrize("max_tokens", [None, 0, -4])
def test_token_sum_without_a_positive_constant_is_refused(max_tokens):
    with pytest.raises(ValueError, match="max_tokens"):
        aggregate(torch.ones(1, 2), torch.ones(1, 2), "token_sum", max_tokens=max_tokens)
