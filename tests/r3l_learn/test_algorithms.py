"""Algorithms read what their registered parts declare: hyperparameters with defaults (one place each) and
objective properties. A new algorithm with a new hyperparameter is one function and one row, trained through
the update and the loop with no other edit."""

import json

import pytest
import torch

from r3l_learn.algorithms.advantages import ADVANTAGES, mean_baseline_advantage, r3l_advantage, register_advantage
from r3l_learn.algorithms.batch import rows_from_groups
from r3l_learn.algorithms.catalog import ALGORITHMS, Algorithm, resolve_algorithm
from r3l_learn.algorithms.logprobs import sequence_logprobs
from r3l_learn.algorithms.losses import OBJECTIVES, register_objective, reinforce
from r3l_learn.algorithms.update import LossConfig, accumulate_gradients
from r3l_learn.loop.train import TrainConfig
from r3l_learn.policies.models import tiny_model
from wrappers.data.trajectory import Trajectory, TrajectoryGroup


def _group(rewards, task="t", length=8, seed=0):
    """One group of hand-made trajectories: random token ids, the last half trained."""
    gen = torch.Generator().manual_seed(seed)
    trajs = []
    for reward in rewards:
        ids = [1, *torch.randint(3, 250, (length - 2,), generator=gen).tolist(), 2]
        mask = [0] * (length // 2) + [1] * (length - length // 2)
        trajs.append(
            Trajectory("e", task, "", reward=reward, token_ids=ids, loss_mask=mask, behavior_logprobs=[0.0] * length)
        )
    return TrajectoryGroup("e", task, trajs)


def test_every_algorithm_reads_what_its_parts_declare():
    assert {name: algo.hyperparameters for name, algo in ALGORITHMS.items()} == {
        "r3l": {"alpha": 3.0, "max_reward": 1.0},
        "grpo": {"eps": 1e-6, "clip": 0.2},
        "opmd": {},
        "raft": {"threshold": 1.0},
        "grpo_no_kl": {"eps": 1e-6, "clip": 0.2},
        "dr_grpo": {"clip": 0.2},
    }
    grpo = ALGORITHMS["grpo"]
    assert grpo.advantage_kwargs(grpo.resolve_hyper({"eps": 0})) == {"eps": 0.0}
    assert grpo.objective_kwargs(grpo.resolve_hyper({"clip": 0.3})) == {"clip": 0.3}


def test_resolving_hyperparameters_names_the_problem():
    grpo = ALGORITHMS["grpo"]
    with pytest.raises(ValueError, match=r"no hyperparameter 'alpha'.*'eps': 1e-06"):
        grpo.resolve_hyper({"alpha": 2.0})
    with pytest.raises(ValueError, match="takes a float"):
        grpo.resolve_hyper({"clip": "wide"})
    with pytest.raises(ValueError, match="eps must be >= 0"):  # the estimator's own check, before any rollout
        grpo.resolve_hyper({"eps": -1.0})
    with pytest.raises(ValueError, match="clip must be >= 0"):
        grpo.resolve_hyper({"clip": -0.5})


def test_r3l_lambda_follows_alpha_with_and_without_amplification():
    for ablations in ([], ["no_amplification"]):
        algo = resolve_algorithm("r3l", ablations)
        assert algo.aux_weight_value(algo.resolve_hyper()) == 3.0
        assert algo.aux_weight_value(algo.resolve_hyper({"alpha": 2.0})) == 2.0
    plain = resolve_algorithm("r3l", ["no_amplification"])
    assert plain.advantage_kwargs(plain.resolve_hyper({"alpha": 2.0})) == {}  # mean baseline: α is λ's only
    assert resolve_algorithm("r3l", ["no_reflect_retry"]).aux_weight_value({"alpha": 2.0}) == 0.0  # no aux rows


def test_alphas_default_is_read_from_the_advantage_signature(monkeypatch):
    """Change α's default where it is declared and every consumer follows: the loss's λ, the run config, and
    the advantages of the rows (no second copy of 3.0 anywhere)."""

    def r3l_alpha_5(rewards, group_index, *, alpha: float = 5.0, max_reward: float = 1.0):
        return r3l_advantage(rewards, group_index, alpha=alpha, max_reward=max_reward)

    monkeypatch.setitem(ADVANTAGES, "r3l", r3l_alpha_5)
    assert LossConfig().aux_weight == 0.0  # a bare loss has no aux term: λ comes with the algorithm
    assert LossConfig.for_algorithm(ALGORITHMS["r3l"]).aux_weight == 5.0
    assert TrainConfig().hyper_values() == {"alpha": 5.0, "max_reward": 1.0}
    rows = rows_from_groups([_group([1.0, 0.0])], ALGORITHMS["r3l"])
    assert [r.advantage for r in rows] == [5.0, -0.5]


def test_one_name_in_two_parts_must_agree_on_its_default():
    @register_objective("test_eps_objective", skip_zero_advantage=True)
    def eps_objective(logprobs, *, advantages, behavior_logprobs=None, eps: float = 0.5):
        return reinforce(logprobs, advantages=advantages)

    try:
        with pytest.raises(ValueError, match="'eps' defaults to"):
            Algorithm("clash", "grpo", "test_eps_objective")
    finally:
        del OBJECTIVES["test_eps_objective"]


@pytest.fixture
def plugin(monkeypatch):
    """A new algorithm: an advantage with a new hyperparameter (``scale``), an objective with another one
    (``beta``) that needs reference log-probs, and one row. Nothing else is edited. The parts record what the
    learner passed them (and on what size of input: configuring a run also calls them once, on 2 rewards and
    one token)."""
    calls = {"scale": [], "beta": []}

    @register_advantage("test_scaled_baseline")
    def scaled_baseline(rewards, group_index, *, scale: float = 2.0):
        calls["scale"].append((scale, len(rewards)))
        return scale * mean_baseline_advantage(rewards, group_index)

    @register_objective("test_anchored", needs_reference=True)
    def anchored(logprobs, *, advantages, behavior_logprobs, ref_logprobs, beta: float = 0.5):
        calls["beta"].append((beta, logprobs.shape[-1]))
        return reinforce(logprobs, advantages=advantages) + beta * (logprobs - ref_logprobs) ** 2

    monkeypatch.setitem(ALGORITHMS, "test_plugin", Algorithm("test_plugin", "test_scaled_baseline", "test_anchored"))
    try:
        yield ALGORITHMS["test_plugin"], calls
    finally:
        del ADVANTAGES["test_scaled_baseline"]
        del OBJECTIVES["test_anchored"]


def _full_logprobs(model, ids):
    x = torch.tensor([ids])
    return torch.log_softmax(model(input_ids=x).logits[0].float(), -1)[:-1].gather(-1, x[0, 1:, None])[:, 0]


def test_a_new_algorithm_updates_through_its_declarations(plugin):
    algo, calls = plugin
    assert algo.hyperparameters == {"scale": 2.0, "beta": 0.5}
    hyper = algo.resolve_hyper({"scale": 0.5, "beta": 2.0})
    groups = [_group([1.0, 0.0, 0.0], "a", seed=1), _group([0.0, 0.0], "b", seed=2)]  # group b: advantages 0
    rows = rows_from_groups(groups, algo, hyper=hyper)
    assert [r.advantage for r in rows] == pytest.approx([0.5 * a for a in (2 / 3, -1 / 3, -1 / 3, 0.0, 0.0)])
    config = LossConfig.for_algorithm(algo, hyper)
    assert config.objective_kwargs == {"beta": 2.0} and config.needs_reference and config.aux_weight == 0.0
    model, _ = tiny_model(seed=1)
    reference, _ = tiny_model(seed=2)
    with pytest.raises(ValueError, match="needs reference log-probs"):
        accumulate_gradients(model, rows, config, micro_batch_size=2, pad_id=0)

    def ref_fn(batch):
        with torch.no_grad():
            return sequence_logprobs(reference, batch.input_ids, batch.attention_mask, positions=batch.loss_mask > 0)

    model.train()
    stats = accumulate_gradients(model, rows, config, micro_batch_size=2, pad_id=0, ref_fn=ref_fn)
    assert (0.5, 5) in calls["scale"] and {b for b, _ in calls["beta"]} == {2.0}
    assert max(t for _, t in calls["beta"]) > 1  # called on the rows, not only when the config was checked
    assert stats.skipped_rows == 0  # the objective did not declare skip_zero_advantage: group b trains
    with torch.no_grad():
        num = 0.0
        for row in rows:
            lp, ref, m = _full_logprobs(model, row.token_ids), _full_logprobs(reference, row.token_ids), row.loss_mask
            num += ((-row.advantage * lp + 2.0 * (lp - ref) ** 2) * torch.tensor(m[1:])).sum()
        expected = num / sum(r.num_target_tokens for r in rows)
    assert stats.policy_loss == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.slow
def test_a_new_algorithm_trains_through_the_loop_with_no_other_edit(tmp_path, plugin):
    from r3l_learn.loop.train import train

    _, calls = plugin
    with pytest.raises(ValueError, match=r"no hyperparameter 'scael'.*'scale': 2.0"):
        TrainConfig(algo="test_plugin", hyper={"scael": 1.0})
    config = TrainConfig(
        env="r3ltest/Corridor-v0",
        model="tiny-random",
        algo="test_plugin",
        hyper={"scale": 0.25, "beta": 1.5},
        steps=1,
        tasks_per_step=1,
        group_size=4,
        max_turns=3,
        max_new_tokens=8,
        actions="constrained",
        eval_episodes=0,
        out_dir=str(tmp_path / "run"),
        save_final=False,
        tensorboard=False,
        progress=False,
    )
    result = train(config)
    assert result.steps_done == 1 and not result.last_metrics["skipped"]
    assert {s for s, _ in calls["scale"]} == {0.25} and (0.25, 4) in calls["scale"]  # the group of 4 rollouts
    # the objective ran on the rows (more than one token), with β, and with reference log-probs: the loop built
    # a reference policy because the objective declared it needs one (no KL term asked for)
    assert {b for b, _ in calls["beta"]} == {1.5} and max(t for _, t in calls["beta"]) > 1
    assert json.loads((tmp_path / "run" / "config.json").read_text())["hyper"] == {"scale": 0.25, "beta": 1.5}


def test_grpo_eps_is_a_flag_and_eps_zero_trains_on_an_equal_rewards_group():
    from r3l_learn.cli.main import build_parser
    from r3l_learn.cli.train_args import config_from_args

    args = build_parser().parse_args(["train", "--algo", "grpo", "--eps", "0", "--hyper", "clip=0.3"])
    config = config_from_args(args)
    assert config.hyper_values() == {"eps": 0.0, "clip": 0.3}
    algo = config.algorithm
    rows = rows_from_groups([_group([0.1, 0.1, 0.1])], algo, hyper=config.hyper_values())
    assert [r.advantage for r in rows] == [0.0, 0.0, 0.0]  # was NaN
    model, _ = tiny_model(seed=3)
    loss = LossConfig.for_algorithm(algo, config.hyper_values(), kl_coef=0.0)
    stats = accumulate_gradients(model, rows, loss, micro_batch_size=4, pad_id=0)
    assert stats.finite and stats.skipped_rows == 3  # ppo_clip declares zero-advantage rows skippable


def test_reflect_retry_rules_follow_the_row_not_the_name(monkeypatch):
    """Even group sizes and ablations belong to any reflect-retry algorithm, read from its row."""
    from dataclasses import replace

    monkeypatch.setitem(ALGORITHMS, "r3l-twin", replace(ALGORITHMS["r3l"], name="r3l-twin"))
    with pytest.raises(ValueError, match="even for reflect-retry"):
        TrainConfig(algo="r3l-twin", group_size=3)
    assert TrainConfig(algo="r3l-twin", group_size=4, ablations=("no_pivot_credit",)).ablations
    assert not resolve_algorithm("r3l-twin", ["no_pivot_credit"]).pivotal_credit
    assert TrainConfig(algo="grpo", group_size=3).group_size == 3
    with pytest.raises(ValueError, match="does not use"):
        TrainConfig(algo="grpo", ablations=("no_pivot_credit",))


def test_a_saved_r3l_config_without_aux_mean_ran_with_the_aux_term_in_its_own_mean():
    from r3l_learn.loop.config import TrainConfig

    saved = TrainConfig(algo="r3l", aux_mean="separate").to_dict()
    del saved["aux_mean"]  # written before the field existed
    assert TrainConfig(algo="r3l").changed_from(saved) == ["aux_mean"]  # the new default is another run
    assert TrainConfig(algo="r3l", aux_mean="separate").changed_from(saved) == []
    assert TrainConfig(algo="r3l", lr=1.0).changed_from(saved) == ["aux_mean", "lr"]
    assert TrainConfig(algo="grpo").changed_from({**saved, "algo": "grpo"}) == []  # no aux rows: unused
    assert TrainConfig(algo="r3l", aux_weight=0.0).changed_from({**saved, "aux_weight": 0.0}) == []  # weighed 0


def test_which_reflection_samples_train_depends_on_who_reflects():
    from r3l_learn.loop.config import TrainConfig

    def trains(aux_reflection, reflector):
        return TrainConfig(algo="r3l", aux_reflection=aux_reflection, reflector=reflector).trains_reflection

    assert [trains("always", r) for r in ("self", "oracle")] == [True, True]
    assert [trains("when_self", r) for r in ("self", "self-structured", "oracle", "HuggingFaceTB/x")] == [
        True,
        True,
        False,
        False,
    ]
    assert [trains("never", r) for r in ("self", "oracle")] == [False, False]
    with pytest.raises(ValueError, match="aux_reflection: unknown aux reflection 'sometimes'; registered: always"):
        TrainConfig(aux_reflection="sometimes")
    saved = TrainConfig(algo="r3l", reflector="oracle").to_dict()
    oracle = dict(algo="r3l", reflector="oracle")
    assert TrainConfig(**oracle, aux_reflection="always").changed_from(saved) == ["aux_reflection"]
    assert TrainConfig(**oracle, aux_reflection="never").changed_from(saved) == []  # the same rows train
    zero = {**saved, "aux_weight": 0.0}
    assert TrainConfig(**oracle, aux_reflection="always", aux_weight=0.0).changed_from(zero) == []
    # written before the field: every reflection sample trained, which for self-reflection is the default still
    del saved["aux_reflection"]
    assert TrainConfig(**oracle).changed_from(saved) == ["aux_reflection"]
    assert TrainConfig(**oracle, aux_reflection="always").changed_from(saved) == []
    assert TrainConfig(algo="r3l").changed_from({**saved, "reflector": "self"}) == []
