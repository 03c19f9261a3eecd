"""One rule for every algorithm on batches without contrast (r3l_learn.algorithms.update): a batch whose rows carry no
signal
does not step the optimiser, whatever the KL coefficient, so the weights and AdamW's state stay exactly as they
were; a batch with contrast steps for every algorithm; within a stepping batch, rows without signal add no KL."""

import pytest
import torch

from r3l_learn.algorithms.batch import Row, rows_from_groups
from r3l_learn.algorithms.catalog import ALGORITHMS, resolve_algorithm
from r3l_learn.algorithms.logprobs import sequence_logprobs
from r3l_learn.algorithms.update import LossConfig, accumulate_gradients, apply_update, optimizer_steps, signal_rows
from r3l_learn.policies.models import tiny_model
from wrappers.data.trajectory import Trajectory, TrajectoryGroup

KL_COEFS = ("default", 0.05)  # the algorithm's own (0.001 for grpo, 0 for the others), and a KL term for all


def _group(task: str, rewards: list[float], salt: int = 0) -> TrajectoryGroup:
    """A group of real token sequences (agent tokens after a 2-token prompt) with the given rewards."""
    trajs = []
    for i, reward in enumerate(rewards):
        ids = [1, 5 + salt, 10 + i, 20 + i + salt, 30 + 2 * i, 2]
        trajs.append(
            Trajectory(
                "e", task, "", reward=reward, token_ids=ids, loss_mask=[0, 0, 1, 1, 1, 1], behavior_logprobs=[-1.0] * 6
            )
        )
    return TrajectoryGroup("e", task, trajs)


#: every member of a group rewarded alike, and below a full success (an all-win group still trains RAFT and R³L,
#: whose advantages give it 1 and α: that is signal, not a batch without contrast)
NO_CONTRAST = [_group("a", [0.0, 0.0, 0.0, 0.0]), _group("b", [0.5, 0.5, 0.5, 0.5])]
CONTRAST = [_group("a", [0.0, 1.0, 0.0, 0.0]), _group("b", [0.5, 0.5, 0.5, 0.5])]


def _loss(name: str, kl: object) -> LossConfig:
    algo = ALGORITHMS[name]
    extra = {} if kl == "default" else {"kl_coef": kl}
    return LossConfig.for_algorithm(algo, **extra)


def _reference():
    """A reference policy that differs from the trained one (as it does mid-run), so the KL has a gradient."""
    reference, _ = tiny_model(seed=7)

    def ref_fn(batch):
        with torch.no_grad():
            return sequence_logprobs(reference, batch.input_ids, batch.attention_mask, positions=batch.loss_mask > 0)

    return ref_fn


def _update(name: str, kl: object, groups: list[TrajectoryGroup]):
    model, _ = tiny_model(seed=1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    rows = rows_from_groups(groups, resolve_algorithm(name))
    result = apply_update(
        model, optimizer, rows, _loss(name, kl), micro_batch_size=3, pad_id=0, grad_clip=1.0, ref_fn=_reference()
    )
    moved = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    return result, optimizer, moved


@pytest.mark.parametrize("kl", KL_COEFS)
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_batch_without_contrast_leaves_weights_and_adamw_state_untouched(name, kl):
    loss = _loss(name, kl)
    if kl != "default":
        assert loss.kl_coef > 0
    result, optimizer, moved = _update(name, kl, NO_CONTRAST)
    assert moved == []  # bit-identical weights (AdamW's weight decay would move any parameter it stepped)
    assert optimizer.state_dict()["state"] == {} and optimizer_steps(optimizer) == 0  # no step count, no moments
    assert result.no_contrast and not result.stepped and result.grad_norm is None
    assert result.stats.skipped_rows == 8 and result.stats.loss == 0.0
    assert all(p.grad is None for p in optimizer.param_groups[0]["params"])  # no backward pass either


@pytest.mark.parametrize("kl", KL_COEFS)
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_batch_with_contrast_steps_every_algorithm(name, kl):
    result, optimizer, moved = _update(name, kl, CONTRAST)
    assert result.stepped and not result.no_contrast
    assert optimizer_steps(optimizer) == 1 and moved
    assert 4 <= result.stats.skipped_rows < 8  # group b's rows have advantage 0 everywhere (RAFT: a's losers too)


def test_rows_without_signal_add_no_kl_to_a_stepping_batch():
    """GRPO with a KL term: group b's rows (advantage 0) are left out of every term, so what tokens they hold
    does not change the gradient (before the rule, their KL did)."""
    grads = []
    for salt in (0, 50):
        groups = [_group("a", [0.0, 1.0, 0.0, 0.0]), _group("b", [0.0, 0.0, 0.0, 0.0], salt=salt)]
        rows = rows_from_groups(groups, resolve_algorithm("grpo"))
        model, _ = tiny_model(seed=1)
        model.train()
        loss = _loss("grpo", 0.05)
        stats = accumulate_gradients(model, rows, loss, micro_batch_size=4, pad_id=0, ref_fn=_reference())
        assert stats.finite and stats.skipped_rows == 4 and stats.kl > 0
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grad, grads[1][name], rtol=0, atol=0)


def test_aux_rows_are_signal_and_an_objective_without_skip_keeps_zero_advantage_rows():
    rows = rows_from_groups(NO_CONTRAST, resolve_algorithm("grpo"))
    assert signal_rows(rows, _loss("grpo", 0.05)) == []
    assert len(signal_rows(rows, LossConfig(objective="sft"))) == 8  # sft's loss does not vanish at advantage 0
    with_aux = rows_from_groups(NO_CONTRAST, resolve_algorithm("r3l"))
    aux = Row([1, 2, 3], [0, 1, 1], [0.0] * 3, 1.0, aux=True)
    assert signal_rows([*with_aux, aux], LossConfig(aux_weight=3.0)) == [aux]
    assert signal_rows([*with_aux, aux], LossConfig(aux_weight=0.0)) == []


def _train_config(tmp_path, **overrides):
    from r3l_learn.loop.train import TrainConfig

    values = dict(
        env="r3ltest/Corridor-v0",
        env_kwargs={"length": 10},  # out of reach in one turn: every reward is 0, no group has contrast
        model="tiny-random",
        algo="grpo",
        kl_coef=0.05,
        steps=2,
        tasks_per_step=2,
        group_size=2,
        max_turns=1,
        max_new_tokens=8,
        actions="constrained",
        lr=1e-2,
        eval_episodes=0,
        out_dir=str(tmp_path / "run"),
        checkpoint_every=1,
        save_final=False,
        tensorboard=False,
        progress=False,
    )
    values.update(overrides)
    return TrainConfig(**values)


@pytest.mark.slow
def test_a_run_without_contrast_never_steps_and_logs_each_skipped_step(tmp_path):
    """GRPO with a KL term on batches without a win: every step counts as done and is logged as skipped for lack
    of contrast; the checkpoint holds the initial weights and an empty AdamW state; resuming goes on alike."""
    from r3l_learn.loop.checkpoints import latest_checkpoint, load_checkpoint
    from r3l_learn.loop.metrics import read_metrics
    from r3l_learn.loop.train import train

    config = _train_config(tmp_path, steps=1)
    train(config)
    result = train(_train_config(tmp_path, steps=2), resume=True)
    assert result.steps_done == 2
    records = [r for r in read_metrics(f"{config.out_dir}/metrics.jsonl") if "train/reward" in r]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["train/reward"] == 0.0 and r["update/skipped_no_contrast"] for r in records)
    assert all(not r["skipped"] and r["loss/total"] is None and r["update/optimizer_steps"] == 0 for r in records)
    state = load_checkpoint(latest_checkpoint(f"{config.out_dir}/checkpoints"))
    assert state["step"] == 2 and state["cursor"] == 4 and state["optimizer"]["state"] == {}
    summary = (tmp_path / "run" / "summary.txt").read_text()
    assert "optimiser steps: 0 of 2 (2 without contrast, 0 non-finite: not stepped)" in summary
    initial, _ = tiny_model(seed=config.seed)  # what load_policy("tiny-random") builds
    for name, value in state["model"].items():
        torch.testing.assert_close(value, dict(initial.named_parameters())[name].detach(), rtol=0, atol=0)
