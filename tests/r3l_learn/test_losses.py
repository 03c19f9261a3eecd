"""Per-token objectives, aggregation and KL estimators against hand computations."""

import math

import pytest
import torch

from r3l_learn.algorithms.losses import aggregate, get_objective, kl_penalty

LOGP = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, -1.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])


def _close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected), rtol=1e-6, atol=1e-6)


def test_reinforce_is_minus_advantage_times_logprob_and_ignores_behavior_logprobs():
    adv = torch.tensor([2.0, -1.0])
    loss = get_objective("reinforce")(LOGP, advantages=adv, behavior_logprobs=LOGP - 5)
    _close(loss, [[2.0, 4.0, 1.0], [-0.1, -3.0, -1.0]])


def test_ppo_clip_clips_the_ratio_on_the_side_of_the_advantage():
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))  # ratios 1.5, 0.5, 1.1
    up = get_objective("ppo_clip")(logp, advantages=torch.tensor([1.0]), behavior_logprobs=old, clip=0.2)
    _close(up, [[-1.2, -0.5, -1.1]])  # min(ρA, clip(ρ)A) with A > 0
    down = get_objective("ppo_clip")(logp, advantages=torch.tensor([-1.0]), behavior_logprobs=old, clip=0.2)
    _close(down, [[1.5, 0.8, 1.1]])  # with A < 0 the larger ratio wins
    with pytest.raises(ValueError, match="behavior_logprobs"):
        get_objective("ppo_clip")(logp, advantages=torch.tensor([1.0]), behavior_logprobs=None)


def test_sft_is_the_negative_log_likelihood():
    _close(get_objective("sft")(LOGP), (-LOGP).tolist())


def test_token_mean_and_sequence_mean():
    per_token = torch.tensor([[1.0, 3.0, 100.0], [100.0, 2.0, 6.0]])
    assert aggregate(per_token, MASK, "token_mean").item() == pytest.approx((1 + 3 + 2 + 6) / 4)
    assert aggregate(per_token, MASK, "seq_mean").item() == pytest.approx(((1 + 3) / 2 + (2 + 6) / 2) / 2)
    # a micro-batch normalised by the whole batch's totals
    assert aggregate(per_token, MASK, "token_mean", total_tokens=8).item() == pytest.approx(12 / 8)
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(per_token, MASK, "sum")


def test_kl_estimators():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    d = [0.5, -1.0]
    assert kl_penalty(logp, ref, "k1").tolist() == pytest.approx(d)
    assert kl_penalty(logp, ref, "k2").tolist() == pytest.approx([0.5 * x * x for x in d])
    assert kl_penalty(logp, ref, "k3").tolist() == pytest.approx([math.exp(-x) + x - 1 for x in d])
    assert kl_penalty(ref, ref, "k3").tolist() == [0.0, 0.0]


def test_k3_is_capped_where_the_policy_made_a_token_far_less_likely():
    from r3l_learn.algorithms.losses import K3_MAX

    ref = torch.tensor([-18.0, -18.0, -1.0])
    logp = torch.tensor([-40.0, -18.5, -1.0], requires_grad=True)  # d = -22 (e^22 ≈ 3.6e9 uncapped), -0.5, 0
    kl = kl_penalty(logp, ref, "k3")
    assert kl.tolist() == pytest.approx([K3_MAX, math.exp(0.5) - 0.5 - 1, 0.0])
    kl.sum().backward()
    assert logp.grad.tolist() == pytest.approx([0.0, 1 - math.exp(0.5), 0.0])  # the capped token pulls nothing


def test_objectives_declare_their_properties_and_hyperparameters():
    from r3l_learn.algorithms.losses import OBJECTIVES

    ppo, reinforce, sft = (OBJECTIVES.spec(n) for n in ("ppo_clip", "reinforce", "sft"))
    assert ppo.hyper == {"clip": 0.2} and reinforce.hyper == {} and sft.hyper == {}
    assert ppo.properties.uses_ratio and not reinforce.properties.uses_ratio
    assert ppo.properties.skip_zero_advantage and reinforce.properties.skip_zero_advantage
    assert not sft.properties.skip_zero_advantage  # its loss ignores the advantage: a zero row still trains
    assert not any(s.properties.needs_reference for s in (ppo, reinforce, sft))


def test_a_declared_property_must_match_the_signature():
    from r3l_learn.algorithms.losses import OBJECTIVES, register_objective

    with pytest.raises(ValueError, match="no 'ref_logprobs' argument"):
        register_objective("test_ref", needs_reference=True)(
            lambda logprobs, *, advantages, behavior_logprobs: logprobs
        )
    with pytest.raises(ValueError, match="no 'behavior_logprobs' argument"):
        register_objective("test_ratio", uses_ratio=True)(lambda logprobs, *, advantages: logprobs)
    assert "test_ref" not in OBJECTIVES and "test_ratio" not in OBJECTIVES


def test_ppo_clip_rejects_a_negative_clip():
    with pytest.raises(ValueError, match="clip must be >= 0"):
        get_objective("ppo_clip")(LOGP, advantages=torch.ones(2), behavior_logprobs=LOGP, clip=-0.1)


def test_a_function_set_over_an_entry_for_a_while_leaves_its_declarations_intact(monkeypatch):
    from r3l_learn.algorithms.losses import OBJECTIVES

    with monkeypatch.context() as patch:
        patch.setitem(OBJECTIVES, "ppo_clip", lambda logprobs, *, advantages, behavior_logprobs: logprobs)
        assert not OBJECTIVES.spec("ppo_clip").properties.uses_ratio  # a plain item: default properties
    assert OBJECTIVES.spec("ppo_clip").properties.uses_ratio and OBJECTIVES.spec("ppo_clip").hyper == {"clip": 0.2}
