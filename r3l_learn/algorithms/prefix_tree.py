"""Run every prefix the rows of a batch share once: a trie of token spans over the rows.

A group's rows agree on more than the batch's common prefix: all of them on the system prompt and the task's first
observation, a retry with its base up to the pivot (``wrappers.data.trajectory`` keeps them token-identical there), two
retries
of one base up to the earlier pivot. The rows form a trie whose nodes are spans of token positions; a node runs once,
for one of its rows, on top of its ancestors' KV cache, and its hidden states stand for every row below it. Autograd
sums the rows' gradients into the shared nodes (the cache is handed down differentiably), so values and gradients
equal the unshared pass up to float rounding.

A node shared by several rows is kept only when its span is at least ``min_shared`` tokens: a shorter one is run by
each of its children (its span prepended to theirs), so a few common tokens do not split a batch into small calls.
Each node with children runs alone (batch 1, no padding); the leaves under one parent run together, right-padded,
on copies of the parent's cache. Cache slots and positions coincide on every path, so each call is an ordinary
incremental forward: positions ``start, start + 1, ...`` and causal attention over the ancestors plus its own span.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from r3l_learn.policies.prompt_cache import cache_keyword, returned_cache

__all__ = ["Node", "build_prefix_tree", "hidden_on_prefix_tree", "tree_tokens"]

#: per decoder layer, the keys and values of a path: ``(1, heads, length, head_dim)`` each
PathCache = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class Node:
    """Token positions ``[start, stop)`` that ``rows`` share; its states are computed for ``rows[0]``."""

    start: int
    stop: int
    rows: list[int]
    children: list[Node] = field(default_factory=list)


def build_prefix_tree(
    input_ids: torch.Tensor, ends: list[int], min_shared: int, *, levels: int | None = None
) -> list[Node]:
    """The forest of spans that covers each row ``b``'s tokens ``[0, ends[b])`` (rows with ``ends[b] == 0`` are left
    out), sharing each run of tokens that several rows agree on from a common ancestor, if at least ``min_shared``
    long.

    Args:
        input_ids: ``(B, T)``; only ``input_ids[b, :ends[b]]`` is read.
        ends: per row, how many leading tokens it needs to run.
        min_shared: the shortest span worth running once for several rows (>= 1).
        levels: how deep shared spans may nest (None: no limit; 1: only the spans the rows begin with).
    """
    if min_shared < 1:
        raise ValueError(f"min_shared must be >= 1, got {min_shared}")
    ids = input_ids.detach().cpu()
    if levels is not None and levels < 0:
        raise ValueError(f"levels must be >= 0 or None, got {levels}")
    return _split(ids, ends, [b for b in range(len(ends)) if ends[b] > 0], 0, min_shared, levels)


def _split(
    ids: torch.Tensor, ends: list[int], rows: list[int], start: int, min_shared: int, levels: int | None
) -> list[Node]:
    """The nodes covering ``rows``' tokens from ``start`` on, given that they agree before it."""
    if len(rows) <= 1 or levels == 0:
        return [Node(start, ends[r], [r]) for r in rows if ends[r] > start]
    stop = min(ends[r] for r in rows)
    block = ids[rows, start:stop]
    mid = start + int((block == block[:1]).all(0).long().cumprod(0).sum())
    parts: dict[int, list[int]] = {}
    for r in rows:
        if ends[r] > mid:
            parts.setdefault(int(ids[r, mid]), []).append(r)
    if mid - start >= min_shared:
        below = None if levels is None else levels - 1
        return [
            Node(start, mid, rows, [n for p in parts.values() for n in _split(ids, ends, p, mid, min_shared, below)])
        ]
    # Too short to pay for a call of its own: each part runs these tokens itself (every part is a proper subset of
    # ``rows``, so this ends), and a row that ends here is a leaf.
    done = [Node(start, mid, [r]) for r in rows if ends[r] == mid and mid > start]
    return done + [n for part in parts.values() for n in _split(ids, ends, part, start, min_shared, levels)]


def tree_tokens(forest: list[Node]) -> int:
    """The tokens the forest runs through the decoder, padding aside."""
    return sum(n.stop - n.start + tree_tokens(n.children) for n in forest)


def hidden_on_prefix_tree(decoder: Any, input_ids: torch.Tensor, forest: list[Node]) -> list[list[torch.Tensor]]:
    """Per row, the decoder's last hidden states of its path through ``forest``, one ``(span, hidden)`` piece per
    node, root first (empty for a row the forest leaves out)."""
    pieces: list[list[torch.Tensor]] = [[] for _ in range(input_ids.shape[0])]
    _run(decoder, input_ids, forest, None, pieces)
    return pieces


def _run(decoder: Any, ids: torch.Tensor, nodes: list[Node], past: PathCache | None, pieces: list) -> None:
    """Run ``nodes`` (siblings: they all start where ``past`` ends) and, depth first, their subtrees."""
    leaves = [n for n in nodes if not n.children]
    if leaves:
        hidden, _ = _extend(decoder, ids, leaves, past)
        for i, leaf in enumerate(leaves):
            for r in leaf.rows:  # several rows when they are the same tokens to their end
                pieces[r].append(hidden[i, : leaf.stop - leaf.start])
    for node in nodes:
        if node.children:
            hidden, path = _extend(decoder, ids, [node], past)
            for r in node.rows:
                pieces[r].append(hidden[0])
            _run(decoder, ids, node.children, path, pieces)


def _extend(decoder: Any, ids: torch.Tensor, nodes: list[Node], past: PathCache | None) -> tuple[torch.Tensor, Any]:
    """One forward of ``nodes``' spans (right-padded) on ``past``: their hidden states, and the path cache of the
    first node when it has children (a node with children runs alone)."""
    start, count = nodes[0].start, len(nodes)
    width = max(n.stop - n.start for n in nodes)
    tokens = ids.new_zeros(count, width)
    mask = ids.new_zeros(count, start + width)
    mask[:, :start] = 1
    for i, n in enumerate(nodes):
        tokens[i, : n.stop - n.start] = ids[n.rows[0], n.start : n.stop]
        mask[i, start : n.stop] = 1
    keep = bool(nodes[0].children)
    # a fresh cache per call: the forward appends to it, and siblings must not see each other's tokens; the parent's
    # tensors are expanded, not copied, so the children's gradients add up in the parent's keys and values
    if past is not None:
        expanded = [(k.expand(count, -1, -1, -1), v.expand(count, -1, -1, -1)) for k, v in past]
        with_cache = {"use_cache": True, cache_keyword(decoder): DynamicCache(ddp_cache_data=expanded)}
    elif keep:
        with_cache = {"use_cache": True, cache_keyword(decoder): DynamicCache()}
    else:
        with_cache = {"use_cache": False}
    out = decoder(
        input_ids=tokens,
        attention_mask=None if bool(mask.all()) else mask,
        position_ids=torch.arange(start, start + width, device=ids.device).expand(count, -1),
        **with_cache,
    )
    path = None
    if keep:
        layers = returned_cache(out).layers
        if any(type(layer) is not DynamicLayer for layer in layers):
            raise TypeError("the prefix tree needs a plain full-attention KV cache (DynamicLayer)")
        path = [(layer.keys, layer.values) for layer in layers]
    return out.last_hidden_state, path
