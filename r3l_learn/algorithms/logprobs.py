"""Token log-probs of a causal LM without materialising the full-vocabulary logits of a batch.

A batch of 8 × 512 tokens over SmolLM2's 49k vocabulary is 800 MB of fp32 logits, and autograd keeps about
three copies (logits, log-softmax, its gradient): that, not the 135M parameters, is what blows a small
machine's memory. So the decoder runs once, and the LM head + log-softmax run in chunks of
positions, each under activation checkpointing: the backward pass recomputes one chunk's logits at a time.
Only the positions the loss reads (``positions``) are computed at all.

Every prefix that several rows of a batch share runs once (:mod:`r3l_learn.algorithms.prefix_tree`): a group's
trajectories
share the system prompt and the task's first observation, a retry shares its base's turns up to the pivot. The
shared spans form a trie; each span's hidden states and KV cache are computed for one row and handed to the rows
below it, and autograd sums their gradients into it, so values and gradients equal the unshared pass up to float
rounding. There, each row runs only up to its own last wanted token.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from r3l_learn.algorithms.prefix_tree import build_prefix_tree, hidden_on_prefix_tree

__all__ = ["MIN_SHARED_PREFIX", "sequence_logprobs"]

#: the default shortest common prefix worth running once (a group's system prompt alone is longer)
MIN_SHARED_PREFIX = 32


def _parts(model: Any) -> tuple[Any, Any, float | None]:
    """The decoder (hidden states), the LM head, and the final logit soft-cap of a HF causal LM (a PEFT
    model's LoRA layers live inside the wrapped model's modules, so its decoder is the adapted one)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = base.get_decoder(), base.get_output_embeddings()
    if decoder is None or head is None:
        raise TypeError(f"{type(base).__name__} exposes no decoder/LM head; chunked log-probs need a causal LM")
    return decoder, head, getattr(base.config, "final_logit_softcapping", None)


def _chunk_logprobs(hidden: torch.Tensor, targets: torch.Tensor, head: Any, softcap: float | None) -> torch.Tensor:
    logits = head(hidden).float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None])[:, 0]


def sequence_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    positions: torch.Tensor | None = None,
    chunk_size: int = 1024,
    min_shared_prefix: int = MIN_SHARED_PREFIX,
    prefix_levels: int | None = None,
) -> torch.Tensor:
    """``out[b, t] = log π(input_ids[b, t] | input_ids[b, :t])`` for ``t >= 1`` (``out[:, 0]`` is 0).

    Args:
        model: a HF causal LM (or a PEFT model around one).
        input_ids: ``(B, T)``, right-padded.
        attention_mask: ``(B, T)``, 1 on real tokens.
        positions: ``(B, T)`` bool, the tokens whose log-prob is wanted (default: every real token after the
            first); other entries of the result are 0 and carry no gradient.
        chunk_size: positions per LM-head chunk; peak logits memory is ``chunk_size × vocab × 4`` bytes (×2
            in the backward pass).
        min_shared_prefix: run a span that several rows share once when it is at least this long (0: never). Not
            under activation checkpointing, which turns the KV cache off.
        prefix_levels: how deep shared spans nest (None: as deep as the rows share; 1: only the spans the rows
            begin with, below which each row runs alone).

    Differentiable when grad is enabled; the logits of a chunk are recomputed in the backward pass.
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (batch, length), got shape {tuple(input_ids.shape)}")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    wanted = attention_mask.bool().clone() if positions is None else positions.bool() & attention_mask.bool()
    wanted[:, 0] = False  # the first token has no context
    decoder, head, softcap = _parts(model)
    # Attention is causal: the tokens from a row's last wanted one on (an episode's final observation) change no
    # wanted log-prob, so its decoder stops before it.
    ends = _ends(wanted)
    end = max([1, *ends])
    hidden = None
    if min_shared_prefix > 0 and len(ends) > 1 and not getattr(decoder, "gradient_checkpointing", False):
        hidden = _hidden_on_shared_prefixes(decoder, input_ids, attention_mask, ends, min_shared_prefix, prefix_levels)
    if hidden is None:
        # use_cache=False: no KV cache is needed (building one costs memory, and under activation checkpointing
        # transformers warns and turns it off itself)
        ids, mask = input_ids[:, :end], attention_mask[:, :end]
        hidden = decoder(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
    rows, cols = wanted.nonzero(as_tuple=True)
    states = hidden[rows, cols - 1]  # the state *before* each wanted token predicts it
    targets = input_ids[rows, cols]
    pieces = []
    for lo in range(0, len(targets), chunk_size):
        h, y = states[lo : lo + chunk_size], targets[lo : lo + chunk_size]
        if torch.is_grad_enabled() and h.requires_grad:
            pieces.append(checkpoint(_chunk_logprobs, h, y, head, softcap, use_reentrant=False))
        else:
            pieces.append(_chunk_logprobs(h, y, head, softcap))
    values = torch.cat(pieces) if pieces else hidden.new_zeros(0, dtype=torch.float32)
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    return out.index_put((rows, cols), values)


def shared_prefix(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """How many leading tokens every row of a right-padded batch has in common, less one token of the shortest
    row (every row must keep a token of its own to run); 0 for a single row."""
    if input_ids.shape[0] < 2:
        return 0
    same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)
    common = int(same.long().cumprod(0).sum())
    return max(0, min(common, int(attention_mask.sum(1).min()) - 1))


def _ends(wanted: torch.Tensor) -> list[int]:
    """Per row, how many leading tokens its wanted log-probs read (its last wanted position; 0 for none)."""
    last = torch.where(wanted, torch.arange(wanted.shape[1], device=wanted.device), 0).amax(1)
    return [int(x) for x in last.tolist()]


def _hidden_on_shared_prefixes(
    decoder: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    ends: list[int],
    min_shared: int,
    levels: int | None,
) -> torch.Tensor | None:
    """The decoder's last hidden states ``(B, max(ends), H)`` with every shared span run once, each row up to its
    end (beyond it: zeros); None where no span is shared or the batch is not right-padded."""
    mask = attention_mask.bool()
    if bool((mask[:, 1:] & ~mask[:, :-1]).any()):  # a real token after a pad: not right-padded
        return None
    forest = build_prefix_tree(input_ids, ends, min_shared, levels=levels)
    if not any(len(node.rows) > 1 for node in forest):
        return None
    pieces = hidden_on_prefix_tree(decoder, input_ids, forest)
    rows = [torch.cat(p) if p else None for p in pieces]
    some = next(r for r in rows if r is not None)
    width = max(ends)
    return torch.stack(
        [
            torch.nn.functional.pad(r, (0, 0, 0, width - len(r)))
            if r is not None
            else some.new_zeros(width, some.shape[1])
            for r in rows
        ]
    )
