"""The mechanism metrics of a training step (r3l_learn.loop.mechanism): rescue counts on hand-built groups, the
share of the gradient weight on retry rows (against hand computations), and the split of the gradient into its
amplification part and the rest (against direct gradients), which leaves the step bit-identical."""

import math

import pytest
import torch

from r3l_learn.algorithms.batch import Row, rows_from_groups
from r3l_learn.algorithms.catalog import resolve_algorithm
from r3l_learn.algorithms.update import LossConfig, accumulate_gradients, apply_update
from r3l_learn.loop.mechanism import amplification_extras, mechanism_metrics, rescue_counts
from r3l_learn.policies.models import tiny_model
from wrappers.data.trajectory import Sample, Trajectory, TrajectoryGroup

R3L = resolve_algorithm("r3l")


def _traj(i: int, reward: float, kind: str = "base", salt: int = 0) -> Trajectory:
    """A trajectory of real token ids (4 agent tokens after a 2-token prompt) with the given reward."""
    ids = [1, 5 + salt, 10 + i, 20 + i + salt, 30 + 2 * i, 2]
    return Trajectory(
        "e",
        f"t{salt}",
        "",
        kind=kind,
        reward=reward,
        won=reward >= 1.0,
        token_ids=ids,
        loss_mask=[0, 0, 1, 1, 1, 1],
        behavior_logprobs=[-1.0] * 6,
    )


def _group(rewards: list[float], kinds: list[str] | None = None, salt: int = 0, samples=()) -> TrajectoryGroup:
    kinds = kinds or ["base"] * len(rewards)
    trajs = [_traj(i, r, k, salt) for i, (r, k) in enumerate(zip(rewards, kinds))]
    return TrajectoryGroup("e", f"t{salt}", trajs, list(samples))


def _row(n_tokens: int, advantage: float, kind: str = "base", aux: bool = False, salt: int = 0) -> Row:
    ids = [1, 7 + salt] + [40 + salt + i for i in range(n_tokens)]
    return Row(ids, [0, 0] + [1] * n_tokens, [0.0] * len(ids), advantage, aux=aux, kind=kind)


def _apply(rows, loss, extras=None, seed=1):
    """One apply_update on a fresh tiny model; the model, its optimiser and the result."""
    model, _ = tiny_model(seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    result = apply_update(
        model, optimizer, rows, loss, micro_batch_size=2, pad_id=0, grad_clip=1.0, extra_advantages=extras
    )
    return model, optimizer, result


def _grads(rows, loss, seed=1) -> list[torch.Tensor]:
    """The loss's gradient, accumulated directly (every parameter, zeros where none reached it)."""
    model, _ = tiny_model(seed=seed)
    model.train()
    stats = accumulate_gradients(model, rows, loss, micro_batch_size=2, pad_id=0)
    assert stats.finite
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def _norm(grads: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float(torch.linalg.vector_norm(g.double())) ** 2 for g in grads))


# ------------------------------------------------------------------------------------------------ rescue counts
def test_rescue_counts_on_hand_built_groups():
    groups = [
        _group([0.0, 0.0, 1.0, 0.0], ["base", "base", "retry", "retry"]),  # every base failed, a retry won
        _group([0.0, 0.0, 0.0, 0.0], ["base", "base", "retry", "retry"]),  # every base failed, no retry won
        _group([1.0, 0.0, 1.0, 0.0], ["base", "base", "retry", "retry"]),  # a base won
        _group([0.0, 0.0]),  # plain sampling, all failed: no retry to rescue it
        _group([1.0, 1.0], ["expert", "expert"]),  # no base at all: counted as a group only
    ]
    assert rescue_counts(groups) == {"mechanism/groups": 5, "mechanism/all_bases_failed": 3, "mechanism/rescued": 1}
    assert rescue_counts([]) == {"mechanism/groups": 0, "mechanism/all_bases_failed": 0, "mechanism/rescued": 0}


# ------------------------------------------------------------------------------------------------ retry share
def test_retry_share_is_0_without_retry_rows_and_1_with_only_retry_rows():
    loss = LossConfig()
    _, _, only_bases = _apply([_row(3, 1.0), _row(4, -0.5, salt=1)], loss)
    assert only_bases.stepped and only_bases.stats.grad_weight > 0
    assert only_bases.stats.retry_share == 0.0
    _, _, only_retries = _apply([_row(3, 1.0, "retry"), _row(4, -0.5, "retry", salt=1)], loss)
    assert only_retries.stepped and only_retries.stats.retry_share == 1.0


def test_retry_share_equals_the_hand_computation_on_a_two_row_reinforce_token_mean_batch():
    """L = Σ_rows Σ_t -A_row ℓ_t / N, so |∂L/∂ℓ_t| = |A_row| / N on every target token of a row: the retry's share
    is n_retry |A_retry| / (n_base |A_base| + n_retry |A_retry|), whatever the model."""
    rows = [_row(3, -0.5), _row(5, 1.5, "retry", salt=1)]
    _, _, result = _apply(rows, LossConfig())
    assert result.stats.grad_weight == pytest.approx((3 * 0.5 + 5 * 1.5) / 8, rel=1e-6)
    assert result.stats.retry_share == pytest.approx(5 * 1.5 / (3 * 0.5 + 5 * 1.5), rel=1e-6)


def test_aux_rows_count_as_retry_rows_with_their_weight():
    """An aux row of weight λ in the shared token mean: |∂L/∂ℓ_t| = λ / N on its tokens."""
    rows = [_row(4, 1.0), _row(2, 1.0, "guided_retry", aux=True, salt=1)]
    _, _, result = _apply(rows, LossConfig(aux_weight=3.0))
    assert result.stats.retry_share == pytest.approx(2 * 3.0 / (4 * 1.0 + 2 * 3.0), rel=1e-6)


def test_the_shares_are_none_on_a_step_that_did_not_step():
    groups = [_group([0.0, 0.0, 0.0, 0.0], ["base", "base", "retry", "retry"])]
    rows = rows_from_groups(groups, R3L)
    _, _, result = _apply(rows, LossConfig.for_algorithm(R3L), extras=amplification_extras(groups, rows, R3L))
    assert result.no_contrast
    metrics = mechanism_metrics(groups, result)
    assert metrics["mechanism/all_bases_failed"] == 1 and metrics["mechanism/rescued"] == 0
    none = ("retry_loss_share", "amplification_grad_share", "grad_norm_without_amplification")
    assert all(metrics[f"mechanism/{k}"] is None for k in none)


# ------------------------------------------------------------------------------------------------ amplification
def _r3l_groups() -> list[TrajectoryGroup]:
    """A rescued group (with a guided-retry aux sample), a mixed group and an all-win group: every kind of
    amplification (α·A where A > 0, α for a full success) and rows R³L leaves unamplified."""
    aux = Sample("guided_retry", [1, 9, 60, 61, 62], [0, 0, 1, 1, 1])
    return [
        _group([0.0, 0.0, 1.0, 0.0], ["base", "base", "retry", "retry"], salt=0, samples=[aux]),
        _group([0.5, 0.0, 0.25, 0.0], ["base", "base", "retry", "retry"], salt=1),
        _group([1.0, 1.0], salt=2),
    ]


def test_the_amplification_split_matches_direct_gradients():
    """g - g_extra is the gradient of the loss with the plain mean-baseline advantage, and g_extra the
    difference of the two, computed directly (the split is linear for reinforce)."""
    groups = _r3l_groups()
    rows = rows_from_groups(groups, R3L)
    plain = rows_from_groups(groups, R3L, advantage="mean_baseline")
    # A = r - mean_group(r), by hand; R³L's Â = 3·A where A > 0 and α = 3 for a full success
    assert [r.advantage for r in plain if not r.aux] == pytest.approx(
        [-0.25, -0.25, 0.75, -0.25, 0.3125, -0.1875, 0.0625, -0.1875, 0.0, 0.0]
    )
    assert [r.advantage for r in rows if not r.aux] == pytest.approx(
        [-0.25, -0.25, 3.0, -0.25, 0.9375, -0.1875, 0.1875, -0.1875, 3.0, 3.0]
    )
    extras = amplification_extras(groups, rows, R3L)
    assert any(extras) and not all(extras)
    loss = LossConfig.for_algorithm(R3L)
    assert loss.aux_weight > 0 and any(r.aux for r in rows)
    _, _, result = _apply(rows, loss, extras)
    g_hat, g_plain = _grads(rows, loss), _grads(plain, loss)
    assert result.stepped
    assert result.grad_norm == pytest.approx(_norm(g_hat), rel=1e-5)
    assert result.grad_norm_without_extra == pytest.approx(_norm(g_plain), rel=1e-5)
    assert result.extra_grad_norm == pytest.approx(_norm([a - b for a, b in zip(g_hat, g_plain)]), rel=1e-4)
    share = mechanism_metrics(groups, result)["mechanism/amplification_grad_share"]
    assert 0 < share == pytest.approx(result.extra_grad_norm / result.grad_norm)


def test_the_amplification_share_is_0_when_no_row_is_amplified():
    """α = 1 and no full success: Â = A everywhere, so nothing is measured apart and no extra pass runs."""
    groups = [_group([0.5, 0.0, 0.25, 0.0], ["base", "base", "retry", "retry"])]
    hyper = R3L.resolve_hyper({"alpha": 1.0})
    rows = rows_from_groups(groups, R3L, hyper=hyper)
    extras = amplification_extras(groups, rows, R3L, hyper=hyper)
    assert extras == [0.0] * len(rows)
    loss = LossConfig.for_algorithm(R3L, hyper)
    backwards = []
    model, _ = tiny_model(seed=1)
    first = next(model.parameters())
    first.register_hook(lambda grad: backwards.append(1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    result = apply_update(
        model, optimizer, rows, loss, micro_batch_size=2, pad_id=0, grad_clip=1.0, extra_advantages=extras
    )
    assert result.stepped and len(backwards) == 2  # the step's two micro-batches, and no more
    metrics = mechanism_metrics(groups, result)
    assert metrics["mechanism/amplification_grad_share"] == 0.0
    assert metrics["mechanism/grad_norm_without_amplification"] == result.grad_norm  # taken alike: to the bit


def test_measuring_the_amplification_leaves_the_step_bit_identical():
    groups = _r3l_groups()
    rows = rows_from_groups(groups, R3L)
    loss = LossConfig.for_algorithm(R3L)
    off_model, off_opt, off = _apply(rows, loss)
    on_model, on_opt, on = _apply(rows, loss, amplification_extras(groups, rows, R3L))
    assert off.extra_grad_norm is None and on.extra_grad_norm > 0
    assert on.grad_norm == off.grad_norm and on.stats.loss == off.stats.loss
    for (name, a), b in zip(off_model.named_parameters(), on_model.parameters()):
        assert torch.equal(a, b), name
    off_state, on_state = off_opt.state_dict()["state"], on_opt.state_dict()["state"]
    assert off_state.keys() == on_state.keys()
    for k in off_state:
        for m in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(off_state[k][m], on_state[k][m])


def test_an_objective_not_linear_in_the_advantage_is_refused():
    rows = [_row(3, 1.0), _row(3, -1.0, salt=1)]
    with pytest.raises(ValueError, match="not linear in the advantage"):
        _apply(rows, LossConfig(objective="ppo_clip"), extras=[0.5, 0.0])
    with pytest.raises(ValueError, match="one per row"):
        _apply(rows, LossConfig(), extras=[0.5])


# ------------------------------------------------------------------------------------------------ the loop
def test_measure_amplification_is_a_boolean_flag_of_r3l_train():
    from r3l_learn.cli.train_args import ConfigArgumentParser, add_train_arguments, config_from_args

    parser = ConfigArgumentParser()
    add_train_arguments(parser)
    given = config_from_args(parser.parse_args(["--measure-amplification"]))
    assert given.measure_amplification is True
    assert config_from_args(parser.parse_args([])).measure_amplification is False
    assert config_from_args(parser.parse_args(["--no-measure-amplification"])).measure_amplification is False


def _run(tmp_path, name: str, **overrides):
    """One seeded R³L step on a short corridor with an expert plan (the oracle reflector reads it), as the
    golden run's: the step's logged metrics and the weights it left."""
    import gymnasium as gym
    from corridor import Corridor

    from r3l_learn.loop.checkpoints import latest_checkpoint, load_checkpoint
    from r3l_learn.loop.metrics import read_metrics
    from r3l_learn.loop.train import TrainConfig, train

    class PlannedCorridor(Corridor):
        def expert_actions(self, task_id: str) -> list[str] | None:
            return ["right"] * self.length

    env_id = "r3ltest/MechanismCorridor-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=PlannedCorridor, max_episode_steps=12)
    values = dict(
        env=env_id,
        env_kwargs={"length": 4},
        model="tiny-random",
        algo="r3l",
        reflector="oracle",
        steps=1,
        tasks_per_step=2,
        group_size=4,
        max_turns=5,
        max_new_tokens=16,
        actions="constrained",
        lr=1e-2,
        micro_batch_size=3,
        eval_episodes=0,
        out_dir=str(tmp_path / name),
        checkpoint_every=0,
        save_final=False,
        tensorboard=False,
        progress=False,
        seed=7,
    )
    train(TrainConfig(**{**values, **overrides}))
    (record,) = read_metrics(tmp_path / name / "metrics.jsonl")
    return record, load_checkpoint(latest_checkpoint(tmp_path / name / "checkpoints"))["model"]


@pytest.mark.slow
def test_a_training_step_logs_the_mechanism_and_measuring_leaves_its_weights_bit_identical(tmp_path):
    off, off_weights = _run(tmp_path, "off")
    on, on_weights = _run(tmp_path, "on", measure_amplification=True)
    assert off["update/optimizer_steps"] == 1 and off["retry/retries"] > 0
    assert off["mechanism/groups"] == 2 and 0 <= off["mechanism/rescued"] <= off["mechanism/all_bases_failed"] <= 2
    assert 0 < off["mechanism/retry_loss_share"] <= 1
    assert (
        off["mechanism/amplification_grad_share"] is None and off["mechanism/grad_norm_without_amplification"] is None
    )
    assert on["mechanism/amplification_grad_share"] > 0 and on["mechanism/grad_norm_without_amplification"] > 0
    other = ("speed/", "memory/", "mechanism/amp", "mechanism/grad")  # the machine's, and what measuring adds
    assert {k: v for k, v in on.items() if not k.startswith(other)} == {
        k: v for k, v in off.items() if not k.startswith(other)
    }
    assert on_weights.keys() == off_weights.keys()
    assert all(torch.equal(on_weights[k], off_weights[k]) for k in off_weights)
