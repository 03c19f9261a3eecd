"""The update's prefix tree: every span several rows share runs once, with the unshared pass's values and gradients."""

from __future__ import annotations

import functools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from r3l_learn.algorithms.logprobs import sequence_logprobs  # noqa: E402
from r3l_learn.algorithms.prefix_tree import build_prefix_tree, tree_tokens  # noqa: E402
from r3l_learn.policies.models import tiny_model  # noqa: E402


def _batch(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (pad 0) and attention mask."""
    width = max(map(len, seqs))
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    attn = torch.zeros(len(seqs), width, dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)], attn[row, : len(seq)] = torch.tensor(seq), 1
    return ids, attn


def _span(seed: int, n: int) -> list[int]:
    return torch.randint(3, 250, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _group() -> list[list[int]]:
    """A task's group: two bases after a common prompt; retries of base A branching at two pivots, a retry of that
    retry, a base that is a strict prefix of another, a duplicate row, and a row of another task."""
    prompt, a, b = _span(0, 24), _span(1, 30), _span(2, 26)
    return [
        prompt + a,  # base A
        prompt + a[:10] + _span(3, 14),  # retry of A at its 10th token
        prompt + a[:18] + _span(4, 9),  # retry of A at its 18th token (a 3rd level under A's first 10)
        prompt + a[:18] + _span(4, 5) + _span(5, 8),  # a retry of that retry
        prompt + b,  # base B
        prompt + b[:12],  # B cut short: it ends inside B
        prompt + b,  # B again (a duplicate)
        _span(6, 40),  # another task: shares nothing
    ]


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _run(model, ids, attn, wanted, **kwargs) -> tuple[torch.Tensor, dict[str, torch.Tensor], list[int]]:
    """Log-probs, the gradients of a position-weighted loss on them, and the tokens each decoder call ran."""
    calls = []
    hook = model.get_decoder().register_forward_pre_hook(
        lambda module, args, kw: calls.append(kw["input_ids"].numel()), with_kwargs=True
    )
    model.zero_grad()
    try:
        logp = sequence_logprobs(model, ids, attn, positions=wanted, **kwargs)
    finally:
        hook.remove()
    weights = torch.arange(1, ids.shape[1] + 1, dtype=logp.dtype) / ids.shape[1]  # a misalignment shows
    (logp * weights * torch.arange(1, ids.shape[0] + 1)[:, None]).sum().backward()
    return logp, _grads(model), calls


def _shape(forest) -> list[tuple]:
    return [(n.start, n.stop, n.rows, _shape(n.children)) for n in forest]


def test_the_tree_nests_retries_at_their_pivots_and_keeps_short_spans_whole():
    ids, attn = _batch(_group())
    ends = attn.sum(1).tolist()
    leaf0, leaf1, leaf2, leaf3 = (34, 54, [0], []), (34, 48, [1], []), (47, 51, [2], []), (47, 55, [3], [])
    b = (24, 36, [4, 5, 6], [(36, 50, [4, 6], [])])  # row 5 ends at 36; rows 4 and 6 are the same to their end
    other = (0, 40, [7], [])
    a = (24, 34, [0, 1, 2, 3], [(34, 42, [0, 2, 3], [(42, 54, [0], []), (42, 47, [2, 3], [leaf2, leaf3])]), leaf1])
    assert _shape(build_prefix_tree(ids, ends, min_shared=4)) == [(0, 24, list(range(7)), [a, b]), other]
    # a split shorter than min_shared is not made: its rows run those 8 tokens themselves
    a = (24, 34, [0, 1, 2, 3], [leaf0, (34, 47, [2, 3], [leaf2, leaf3]), leaf1])
    assert _shape(build_prefix_tree(ids, ends, min_shared=9)) == [(0, 24, list(range(7)), [a, b]), other]
    # one level: the rows' common beginning only
    below = [(24, ends[r], [r], []) for r in range(7)]
    assert _shape(build_prefix_tree(ids, ends, 4, levels=1)) == [(0, 24, list(range(7)), below), other]
    assert tree_tokens(build_prefix_tree(ids, ends, 4)) < tree_tokens(build_prefix_tree(ids, ends, 4, levels=1))
    assert build_prefix_tree(ids, [0] * 8, 4) == []


def test_a_retry_that_branches_late_is_not_split_from_its_base_for_a_few_tokens():
    ids, attn = _batch([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7], [9, 9]])
    forest = build_prefix_tree(ids, attn.sum(1).tolist(), min_shared=5)
    assert [(n.start, n.stop, n.rows, len(n.children)) for n in forest] == [(0, 5, [0, 1], 2), (0, 2, [2], 0)]
    forest = build_prefix_tree(ids, attn.sum(1).tolist(), min_shared=6)
    assert [(n.start, n.stop, n.rows) for n in forest] == [(0, 6, [0]), (0, 6, [1]), (0, 2, [2])]
    with pytest.raises(ValueError, match="min_shared"):
        build_prefix_tree(ids, [6, 6, 2], min_shared=0)


@pytest.mark.parametrize("wanted_from", [0, 30])
def test_the_tree_gives_the_unshared_values_and_gradients(wanted_from):
    """float64 on a 2-layer model (float32 in its norms): the tree (4 levels, padding, a row sharing nothing, rows
    ending early) against the plain batched pass, on every parameter's gradient; the loss reading late tokens too."""
    model, _ = tiny_model(seed=7)
    model.double()
    ids, attn = _batch(_group())
    wanted = attn.bool().clone()
    wanted[:, : max(1, wanted_from)] = False  # the first token has no log-prob
    wanted[5, 30:] = False  # a row whose last wanted token comes early: it runs only up to it
    tree, tree_grads, tree_calls = _run(model, ids, attn, wanted, min_shared_prefix=4)
    plain, plain_grads, plain_calls = _run(model, ids, attn, wanted, min_shared_prefix=0)
    assert len(plain_calls) == 1 and len(tree_calls) > 3  # the tree ran (root, A's nodes, B's and the leaves)
    assert sum(tree_calls) < sum(plain_calls)
    torch.testing.assert_close(tree, plain, rtol=1e-10, atol=1e-10)
    assert (tree[wanted] < 0).all() and (tree[~wanted] == 0).all()
    assert tree_grads.keys() == plain_grads.keys() and len(plain_grads) == len(list(model.parameters()))
    for name, grad in plain_grads.items():
        # float64, but Llama's RMSNorm computes in float32: a gradient summed into a shared span before the norm's
        # backward rounds differently from the rows' gradients summed after it (1e-7 of the largest entry)
        scale = float(grad.abs().max())
        torch.testing.assert_close(tree_grads[name], grad, rtol=1e-6, atol=1e-6 * scale, msg=name)


def test_the_tree_runs_fewer_tokens_than_the_common_prefix_alone():
    """The decoder's tokens, padding included, on a group with retries: the tree under the one-level prefix, which
    is under the plain pass; the three agree on the values."""
    model, _ = tiny_model(seed=8)
    ids, attn = _batch(_group()[:7])  # one task's group
    runs = {
        name: _run(model, ids, attn, None, min_shared_prefix=4, prefix_levels=levels)
        for name, levels in (("tree", None), ("one level", 1))
    }
    runs["plain"] = _run(model, ids, attn, None, min_shared_prefix=0)
    tokens = {name: sum(calls) for name, (_, _, calls) in runs.items()}
    assert tokens["one level"] == 24 + 7 * (ids.shape[1] - 1 - 24)  # the prompt once, the rests padded together
    assert tokens["tree"] < 0.75 * tokens["one level"] and tokens["one level"] < tokens["plain"]
    for name in ("tree", "one level"):
        torch.testing.assert_close(runs[name][0], runs["plain"][0], rtol=1e-5, atol=1e-5)


def test_left_padding_and_checkpointing_fall_back_to_the_plain_pass():
    model, _ = tiny_model(seed=9)
    ids, attn = _batch(_group()[:3])
    _, _, calls = _run(model, ids, attn.flip(1), attn.flip(1).bool(), min_shared_prefix=4)  # not right-padded
    assert len(calls) == 1
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    _, _, calls = _run(model, ids, attn, None, min_shared_prefix=4)
    assert len(calls) == 1


@functools.cache
def _float64_model():
    model, _ = tiny_model(seed=10)
    return model.double()


@st.composite
def _rows(draw) -> list[list[int]]:
    """Rows that branch off earlier rows at any point (retries of retries), or share nothing; a small alphabet so
    that rows also agree by chance."""
    tokens = st.lists(st.integers(3, 12), min_size=0, max_size=12)
    rows = [[*draw(tokens), 3, 4]]
    for _ in range(draw(st.integers(0, 5))):
        parent = draw(st.sampled_from(rows))
        pivot = draw(st.integers(0, len(parent)))
        rows.append([*parent[:pivot], *draw(tokens), 5, 6])
    return rows


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows(), min_shared=st.integers(1, 6), levels=st.sampled_from([None, 1, 2]), seed=st.integers(0, 99))
# every row reads one token: its attention weight is 1 whatever the queries and keys, whose gradients are then 0 up
# to rounding (~1e-17 here)
@example(rows=[[3, 4], [5, 6], [5, 6]], min_shared=1, levels=None, seed=0)
def test_any_tree_gives_the_unshared_values_and_gradients(rows, min_shared, levels, seed):
    model = _float64_model()
    ids, attn = _batch(rows)
    wanted = attn.bool() & (torch.rand(ids.shape, generator=torch.Generator().manual_seed(seed)) < 0.7)
    wanted[0, 1] = True  # something to differentiate
    tree, tree_grads, _ = _run(model, ids, attn, wanted, min_shared_prefix=min_shared, prefix_levels=levels)
    plain, plain_grads, _ = _run(model, ids, attn, wanted, min_shared_prefix=0)
    torch.testing.assert_close(tree, plain, rtol=1e-6, atol=1e-6)
    assert tree_grads.keys() == plain_grads.keys()
    top = max(float(g.abs().max()) for g in plain_grads.values())
    for name, grad in plain_grads.items():
        # relative to the parameter's own gradient, but not below rounding of the largest: a gradient that is 0 in
        # exact arithmetic is noise in both passes, and noise relative to itself differs by its own size
        scale = max(float(grad.abs().max()), 1e-9 * top)
        torch.testing.assert_close(tree_grads[name], grad, rtol=1e-6, atol=1e-6 * scale, msg=name)
