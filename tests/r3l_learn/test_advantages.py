"""Advantage estimators against hand computations and against a plain per-group loop."""

import statistics

import pytest
import torch

from r3l_learn.algorithms.advantages import ADVANTAGES, get_advantage, register_advantage


def _t(values):
    return torch.tensor(values, dtype=torch.float64)


def test_r3l_amplifies_positive_advantages_and_gives_full_successes_alpha():
    # group 0: rewards 1, 0, 0.5, 0 -> mean 0.375; group 1: all successes -> mean 1, A = 0 but r >= r_max
    rewards = _t([1.0, 0.0, 0.5, 0.0, 1.0, 1.0])
    index = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = get_advantage("r3l")(rewards, index, alpha=3.0)
    expected = [3.0, -0.375, 3.0 * 0.125, -0.375, 3.0, 3.0]
    assert adv.tolist() == pytest.approx(expected)


def test_r3l_all_failure_group_gets_zero():
    adv = get_advantage("r3l")(_t([0.0, 0.0, 0.0]), torch.tensor([7, 7, 7]))
    assert adv.tolist() == [0.0, 0.0, 0.0]


def test_grpo_normalises_by_the_unbiased_std_within_each_group():
    rewards = _t([1.0, 0.0, 0.0, 0.0, 0.3])
    index = torch.tensor([0, 0, 0, 0, 1])
    adv = get_advantage("grpo")(rewards, index, eps=0.0)
    mean, std = 0.25, statistics.stdev([1.0, 0.0, 0.0, 0.0])  # sample std = 0.5
    expected = [(r - mean) / std for r in (1.0, 0.0, 0.0, 0.0)] + [0.0]  # a singleton group has no spread
    assert adv.tolist() == pytest.approx(expected)


def test_mean_baseline_and_raft():
    rewards = _t([1.0, 0.0, 0.5, 0.2])
    index = torch.tensor([3, 3, 9, 9])
    assert get_advantage("mean_baseline")(rewards, index).tolist() == pytest.approx([0.5, -0.5, 0.15, -0.15])
    assert get_advantage("raft")(rewards, index, threshold=0.5).tolist() == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
def test_vectorised_matches_a_loop_over_groups(name):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(40, generator=gen, dtype=torch.float64).round(decimals=1)
    index = torch.randint(0, 6, (40,), generator=gen) * 11  # labels need not be dense
    fn = get_advantage(name)
    together = fn(rewards, index)
    for g in index.unique():
        members = index == g
        alone = fn(rewards[members], torch.zeros(int(members.sum()), dtype=torch.long))
        assert together[members].tolist() == pytest.approx(alone.tolist())


def test_registry_errors_name_the_fix():
    with pytest.raises(KeyError, match="registered"):
        get_advantage("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_advantage("r3l")(lambda r, g: r)
    with pytest.raises(ValueError, match="same length"):
        get_advantage("grpo")(_t([1.0, 0.0]), torch.tensor([0]))


@pytest.mark.parametrize("rewards", [[1.0, 1.0, 1.0], [0.1, 0.1, 0.1], [0.7, 0.7]])
def test_grpo_with_eps_zero_gives_a_group_of_equal_rewards_zero_not_nan(rewards):
    """Equal rewards have no spread: 0 / (0 + eps) was NaN for eps = 0, and rounding noise over a tiny std
    (0.1 + 0.1 + 0.1 != 0.3) gave arbitrary values; such a group now gets exactly 0, and its neighbours their
    usual advantages."""
    index = torch.tensor([0] * len(rewards) + [1, 1])
    adv = get_advantage("grpo")(_t([*rewards, 1.0, 0.0]), index, eps=0.0)
    assert adv.tolist()[: len(rewards)] == [0.0] * len(rewards)
    assert adv.tolist()[len(rewards) :] == pytest.approx([2**-0.5, -(2**-0.5)])


def test_grpo_rejects_a_negative_eps():
    with pytest.raises(ValueError, match="eps must be >= 0"):
        get_advantage("grpo")(_t([1.0, 0.0]), torch.tensor([0, 0]), eps=-1e-3)


def test_hyperparameters_are_declared_by_the_signature():
    assert ADVANTAGES.spec("r3l").hyper == {"alpha": 3.0, "max_reward": 1.0}
    assert ADVANTAGES.spec("grpo").hyper == {"eps": 1e-6}
    assert ADVANTAGES.spec("mean_baseline").hyper == {}
    assert ADVANTAGES.spec("raft").hyper == {"threshold": 1.0}


def test_registration_refuses_undeclarable_hyperparameters():
    with pytest.raises(ValueError, match="needs a default"):
        register_advantage("test_no_default")(lambda rewards, group_index, *, scale: rewards)
    with pytest.raises(ValueError, match="keyword-only"):
        register_advantage("test_var_kw")(lambda rewards, group_index, **hyper: rewards)
    with pytest.raises(ValueError, match="unknown properties"):
        register_advantage("test_props", uses_ratio=True)
    assert not {"test_no_default", "test_var_kw", "test_props"} & set(ADVANTAGES)
