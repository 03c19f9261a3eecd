"""The learner's update on real reflect-retry groups with the tiny model: every algorithm, the R³L loss by hand,
micro-batch invariance, chunked log-probs, and learning on a fixed group."""

import re

import pytest
import torch

from r3l_learn.algorithms.batch import collate, rows_from_groups
from r3l_learn.algorithms.catalog import ALGORITHMS, resolve_algorithm
from r3l_learn.algorithms.logprobs import sequence_logprobs
from r3l_learn.algorithms.update import LossConfig, accumulate_gradients
from r3l_learn.policies.models import tiny_model
from r3l_learn.policies.scripted import ScriptedPolicy
from wrappers import RolloutConfig, SamplingParams
from wrappers.data.trajectory import Sample, Trajectory, TrajectoryGroup
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig


def _countdown_player(prompt_text: str) -> str:
    """Answers wrongly unless the oracle's guidance in its context states the answer."""
    found = re.search(r"The correct answer is (.+?)\.\n", prompt_text)
    return f"<action>{found.group(1)}</action>" if found else "<action>1 + 2</action>"


@pytest.fixture(scope="module")
def groups():
    """Two Countdown groups: bases fail, retries from the pivot succeed, aux samples present."""
    _, tokenizer = tiny_model()
    player = ScriptedPolicy(_countdown_player, tokenizer)
    config = ReflectRetryConfig(group_size=4, rollout=RolloutConfig(sampling=SamplingParams(max_new_tokens=64)))
    collector = ReflectRetry("r3l/Countdown-v0", player, OracleReflector(reveal_answer=True), config)
    try:
        out = collector.collect(["countdown-train-000000", "countdown-train-000001"], seed=0)
    finally:
        collector.close()
    kinds = [t.kind for g in out for t in g.trajectories]
    assert "retry" in kinds and any(g.samples for g in out), "the fixture must contain retries and aux samples"
    return out


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    "name", [*sorted(ALGORITHMS), "r3l+no_pivot_credit", "r3l+no_amplification", "r3l+retry_from_scratch"]
)
def test_every_algorithm_trains_every_parameter_on_the_same_groups(groups, name):
    algo = resolve_algorithm(*name.split("+")[:1], name.split("+")[1:])
    model, tokenizer = tiny_model(seed=1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rows = rows_from_groups(groups, algo)
    assert any(r.advantage != 0 for r in rows)
    config = LossConfig(objective=algo.objective, aux_weight=3.0 if algo.aux_samples else 0.0)
    model.train()
    stats = accumulate_gradients(model, rows, config, micro_batch_size=4, pad_id=tokenizer.pad_token_id)
    assert stats.finite and stats.loss != 0.0
    torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0).step()  # no decay: only gradients move weights
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p.detach(), before[n])]
    assert unchanged == []


def _full_logprobs(model, ids):
    x = torch.tensor([ids])
    return torch.log_softmax(model(input_ids=x).logits[0].float(), -1)[:-1].gather(-1, x[0, 1:, None])[:, 0]


@pytest.mark.parametrize("aux_mean, aux_weight", [("shared", 2.0), ("separate", 2.0), ("shared", 0.0)])
def test_r3l_loss_equals_a_hand_computation_on_two_groups_with_masks_and_aux(aux_mean, aux_weight):
    """shared: the aux tokens join the policy rows' token mean (the reference code's weighting); separate: λ
    times their own token mean; λ = 0: the aux rows count nowhere (and are not run through the model)."""
    model, _ = tiny_model(seed=2)
    ids = [[1, 10, 11, 12, 13, 2], [1, 20, 21, 22, 2], [1, 30, 31, 32, 33, 34, 2], [1, 40, 41, 2]]
    masks = [[0, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1], [0, 1, 1, 0, 1, 1, 0], [0, 1, 1, 1]]  # pivot masks included
    trajs = [
        Trajectory("e", "t", "", kind=k, reward=r, token_ids=i, loss_mask=m, behavior_logprobs=[0.0] * len(i))
        for k, r, i, m in zip(["base", "retry", "base", "base"], [0.0, 1.0, 0.5, 0.0], ids, masks)
    ]
    aux = Sample("guided_retry", token_ids=[1, 50, 51, 52, 2], loss_mask=[0, 0, 1, 1, 1])
    groups = [TrajectoryGroup("e", "a", trajs[:2], samples=[aux]), TrajectoryGroup("e", "b", trajs[2:])]
    rows = rows_from_groups(groups, resolve_algorithm("r3l"), hyper={"alpha": 3.0})
    # group a: mean 0.5 -> A = -0.5 (base), 1.0 is a full success -> α = 3; group b: mean 0.25 -> 3·0.25, -0.25
    advantages = [-0.5, 3.0, 0.75, -0.25]
    assert [r.advantage for r in rows[:4]] == pytest.approx(advantages)
    model.train()
    config = LossConfig(aux_weight=aux_weight, aux_mean=aux_mean)
    stats = accumulate_gradients(model, rows, config, micro_batch_size=2, pad_id=0)
    assert stats.skipped_rows == (1 if aux_weight == 0 else 0)
    with torch.no_grad():
        terms = [-a * (_full_logprobs(model, i) * torch.tensor(m[1:])).sum() for a, i, m in zip(advantages, ids, masks)]
        aux_sum = -(_full_logprobs(model, aux.token_ids) * torch.tensor(aux.loss_mask[1:])).sum()
        policy_tokens, aux_tokens = sum(sum(m[1:]) for m in masks), 3
        if aux_weight == 0:
            policy, sft = sum(terms) / policy_tokens, 0.0
        elif aux_mean == "shared":
            policy, sft = sum(terms) / (policy_tokens + aux_tokens), aux_sum / (policy_tokens + aux_tokens)
        else:
            policy, sft = sum(terms) / policy_tokens, aux_sum / aux_tokens
    assert stats.policy_loss == pytest.approx(float(policy), rel=1e-5)
    assert stats.aux_loss == pytest.approx(float(sft), rel=1e-5)
    assert stats.loss == pytest.approx(float(policy + aux_weight * sft), rel=1e-5)


def test_gradient_accumulation_1x8_equals_8x1(groups):
    rows = rows_from_groups(groups, resolve_algorithm("r3l"))[:8]
    assert len(rows) == 8
    results = []
    for micro in (8, 1):
        model, tokenizer = tiny_model(seed=3)
        model.train()
        stats = accumulate_gradients(
            model,
            rows,
            LossConfig.for_algorithm(resolve_algorithm("r3l")),
            micro_batch_size=micro,
            pad_id=tokenizer.pad_token_id,
        )
        results.append((stats.loss, _grads(model)))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert loss_a == pytest.approx(loss_b, rel=1e-5)
    for name, grad in grads_a.items():
        torch.testing.assert_close(grad, grads_b[name], rtol=1e-4, atol=1e-6)


def test_chunked_logprobs_match_full_logits_values_and_gradients():
    model, _ = tiny_model(seed=4)
    ids = torch.tensor([[1, 5, 6, 7, 8, 9, 2], [1, 15, 16, 17, 2, 0, 0]])
    attn = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    chunked = sequence_logprobs(model, ids, attn, chunk_size=3)
    chunked[attn.bool()].sum().backward()
    grads = _grads(model)
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=attn).logits.float()
    full = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    full = torch.cat([torch.zeros(2, 1), full], 1) * attn
    full.sum().backward()
    torch.testing.assert_close(chunked, full, rtol=1e-5, atol=1e-5)
    for name, grad in _grads(model).items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6)


def test_tokens_after_the_last_wanted_one_change_nothing():
    model, _ = tiny_model(seed=4)
    ids = torch.tensor([[1, 5, 6, 7, 8, 9, 2], [1, 15, 16, 17, 2, 0, 0]])
    attn = torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    wanted = torch.tensor([[0, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 0, 0, 0]]).bool()  # the decoder runs 3 tokens
    lengths = []
    hook = model.get_decoder().register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    with torch.no_grad():
        part = sequence_logprobs(model, ids, attn, positions=wanted)
        whole = sequence_logprobs(model, ids, attn)
    hook.remove()
    assert lengths == [3, 6]  # up to the last wanted token (exclusive); the last token predicts nothing
    torch.testing.assert_close(part, whole * wanted, rtol=1e-5, atol=1e-6)
    assert (part[~wanted] == 0).all() and (part[wanted] < 0).all()


def test_rows_run_their_common_prefix_once_with_the_same_values_and_gradients():
    from r3l_learn.algorithms.logprobs import shared_prefix

    model, _ = tiny_model(seed=6)
    prefix = list(range(3, 43))  # 40 tokens every row begins with
    tails = [[50, 51, 52, 53, 2], [60, 61, 2], [50, 51, 70, 71, 72, 73, 2]]
    width = len(prefix) + max(map(len, tails))
    ids = torch.zeros(3, width, dtype=torch.long)
    attn = torch.zeros(3, width, dtype=torch.long)
    for row, tail in enumerate(tails):
        seq = prefix + tail
        ids[row, : len(seq)], attn[row, : len(seq)] = torch.tensor(seq), 1
    wanted = attn.bool().clone()
    wanted[:, :10] = False  # the loss need not read the prefix; some of it is read here all the same
    assert shared_prefix(ids, attn) == 40
    results = []
    for min_shared in (32, 0):
        model.zero_grad()
        logp = sequence_logprobs(model, ids, attn, positions=wanted, min_shared_prefix=min_shared)
        (logp * torch.arange(width) / width).sum().backward()  # weights by position: a misalignment shows
        results.append((logp, _grads(model)))
    (shared, grads_shared), (full, grads_full) = results
    torch.testing.assert_close(shared, full, rtol=1e-5, atol=1e-5)
    for name, grad in grads_full.items():
        torch.testing.assert_close(grads_shared[name], grad, rtol=1e-4, atol=1e-6)


def test_shared_prefix_keeps_a_token_per_row_and_ignores_padding():
    from r3l_learn.algorithms.logprobs import shared_prefix

    ids = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 0], [1, 2, 3, 0]])
    assert shared_prefix(ids, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]])) == 2  # 3 is a row's last
    assert shared_prefix(ids, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]])) == 3  # the pad id differs
    assert shared_prefix(ids[:1], torch.ones(1, 4, dtype=torch.long)) == 0
    assert shared_prefix(torch.tensor([[1, 2], [5, 2]]), torch.ones(2, 2, dtype=torch.long)) == 0


def test_activation_checkpointing_keeps_the_gradients_and_warns_nothing(groups, recwarn):
    from r3l_learn.loop.setup import enable_checkpointing

    rows = rows_from_groups(groups, resolve_algorithm("r3l"))[:4]
    results = []
    for checkpointing in (False, True):
        model, tokenizer = tiny_model(seed=5)
        if checkpointing:
            enable_checkpointing(model)
            assert model.is_activation_checkpointing
        model.train()
        accumulate_gradients(
            model,
            rows,
            LossConfig.for_algorithm(resolve_algorithm("r3l")),
            micro_batch_size=4,
            pad_id=tokenizer.pad_token_id,
        )
        results.append(_grads(model))
    for name, grad in results[0].items():
        torch.testing.assert_close(results[1][name], grad, rtol=1e-4, atol=1e-6)
    assert not [str(w.message) for w in recwarn if "checkpointing" in str(w.message)]


def test_tiny_model_overfits_a_fixed_group():
    """A group of two successes and two failures: R³L pushes the successes up until the loss has fallen by
    more than 80% (a learner that cannot overfit one group cannot learn anything)."""
    model, tokenizer = tiny_model(seed=5)
    gen = torch.Generator().manual_seed(0)
    trajs = []
    for reward in [1.0, 1.0, 0.0, 0.0]:
        ids = [1, *torch.randint(3, 250, (40,), generator=gen).tolist(), 2]
        mask = [0] * 10 + [1] * 32
        trajs.append(
            Trajectory("e", "t", "", reward=reward, token_ids=ids, loss_mask=mask, behavior_logprobs=[0.0] * 42)
        )
    rows = rows_from_groups([TrajectoryGroup("e", "t", trajs)], resolve_algorithm("r3l"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    model.train()
    for _ in range(30):
        optimizer.zero_grad()
        # the failures have advantage -0.5: measure the successes' NLL, which R³L drives to 0
        stats = accumulate_gradients(
            model,
            rows[:2],
            LossConfig.for_algorithm(resolve_algorithm("r3l")),
            micro_batch_size=4,
            pad_id=tokenizer.pad_token_id,
        )
        optimizer.step()
        losses.append(stats.loss)
    assert losses[-1] < 0.2 * losses[0], losses


def test_collate_rejects_misaligned_rows(groups):
    rows = rows_from_groups(groups, resolve_algorithm("r3l"))
    rows[0].loss_mask = rows[0].loss_mask[:-1]
    with pytest.raises(ValueError, match="aligned"):
        collate(rows[:1], pad_id=0)


def test_rows_train_the_loss_mask_with_the_behaviour_logprobs(groups):
    """Policy rows are the trajectories' training sequences: ``loss_mask`` (pivotal credit applied, not the agent
    mask) and ``behavior_logprobs`` as the old log-probs."""
    rows = rows_from_groups(groups, resolve_algorithm("r3l"))
    trajs = [t for g in groups for t in g.trajectories]
    assert [(r.token_ids, r.loss_mask, r.behavior_logprobs, r.kind) for r in rows[: len(trajs)]] == [
        (t.token_ids, t.loss_mask, t.behavior_logprobs, t.kind) for t in trajs
    ]


def test_an_old_format_file_trains_exactly_as_its_fields_say(tmp_path):
    """A format-1 group (tests/fixtures/data_v1) gives the rows its stored token ids, loss mask and log-probs
    give: upgrading the file changes no training input."""
    import json
    from pathlib import Path

    from wrappers import load_jsonl

    path = Path(__file__).parents[1] / "fixtures" / "data_v1" / "groups_v1.jsonl"
    raw = json.loads(path.read_text().splitlines()[0])
    (group,) = [item for item in load_jsonl(path) if isinstance(item, TrajectoryGroup)]
    rows = rows_from_groups([group], resolve_algorithm("r3l"))
    policy_rows = [r for r in rows if not r.aux]
    assert [(r.token_ids, r.loss_mask, r.behavior_logprobs) for r in policy_rows] == [
        (t["token_ids"], t["loss_mask"], t["logprobs"]) for t in raw["trajectories"]
    ]
    assert [r.token_ids for r in rows if r.aux] == [s["token_ids"] for s in raw["samples"]]
