"""Reuse of a prompt's KV cache across the turns of multi-turn episodes (HF policies).

A multi-turn episode's prompt at turn t is its prompt at turn t-1, the action, and the new observation. Scoring it
from scratch re-runs the whole history every turn, so an episode of T turns costs ~T/2 times its final length in
forward passes. :class:`PromptCache` keeps the KV cache (and the next-token log-probs) of recent prompts; a new
prompt that extends one of them runs only its new tokens on a copy of that cache.

The cache belongs to one set of weights: it is keyed by the weights' version (torch bumps a tensor's ``_version``
on every in-place write, which is how optimiser steps, ``load_state_dict`` and weight pushes change a model), so an
update empties it without anyone having to remember to. Results with and without the cache agree to float
rounding (the new tokens attend to the same keys and values, computed in a different chunking).
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["PromptCache"]


class PromptCache:
    """A byte-bounded LRU of ``prompt token ids -> (KV cache after the prompt, next-token log-probs)``.

    Args:
        max_bytes: the most KV memory kept (the least recently used prompts go first); 0 turns caching off.
    """

    def __init__(self, max_bytes: int = 2 << 30):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, ...], tuple[Any, torch.Tensor, int]] = OrderedDict()
        self._bytes = 0
        self._weights: tuple[Any, ...] | None = None
        self.hits = self.misses = 0  # prompts served from a cached prefix / run whole
        self.reused_tokens = self.computed_tokens = 0

    def head(self, model: Any, prompt: Sequence[int], context: Any) -> tuple[Any, torch.Tensor]:
        """The KV cache after ``prompt`` and the log-probs of the token after it, running only what no cached
        prompt covers. The returned cache is shared: copy it before extending it.

        ``context`` identifies everything besides the weights that changes the numbers (e.g. an autocast dtype).
        """
        prompt = tuple(prompt)
        self._check_weights(model, context)
        base = self._longest_prefix(prompt) if self.max_bytes else None
        if base is not None and len(base) == len(prompt):
            self._entries.move_to_end(base)
            self.hits += 1
            self.reused_tokens += len(prompt)
            cache, first, _ = self._entries[base]
            return cache, first
        past, start = None, 0
        if base is not None:  # not marked as used: once extended, a prefix is stale and should go first
            past, start = copy.deepcopy(self._entries[base][0]), len(base)
            self.hits += 1
            self.reused_tokens += start
        else:
            self.misses += 1
        self.computed_tokens += len(prompt) - start
        ids = torch.tensor([prompt[start:]], device=_device(model))
        out = model(input_ids=ids, **with_cache(model, past), use_cache=True, logits_to_keep=1)
        cache, first = returned_cache(out), torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        if self.max_bytes:
            self._store(prompt, cache, first)
        return cache, first

    def clear(self) -> None:
        """Forget every cached prompt."""
        self._entries.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _longest_prefix(self, prompt: tuple[int, ...]) -> tuple[int, ...] | None:
        best = None
        for key in self._entries:
            if len(key) <= len(prompt) and (best is None or len(key) > len(best)) and prompt[: len(key)] == key:
                best = key
        return best

    def _store(self, prompt: tuple[int, ...], cache: Any, first: torch.Tensor) -> None:
        size = _cache_bytes(cache)
        if size > self.max_bytes:
            return
        old = self._entries.pop(prompt, None)
        if old is not None:
            self._bytes -= old[2]
        while self._entries and self._bytes + size > self.max_bytes:
            self._bytes -= self._entries.popitem(last=False)[1][2]
        self._entries[prompt] = (cache, first, size)
        self._bytes += size

    def _check_weights(self, model: Any, context: Any) -> None:
        # Parameters and buffers: a LoRA adapter's weights are parameters too.
        weights = (context, tuple(p._version for p in model.parameters()), id(model))
        if weights != self._weights:
            self.clear()
            self._weights = weights


def with_cache(model: Any, cache: Any) -> dict[str, Any]:
    """The keyword that hands a KV cache to ``model``'s forward and ``generate``: ``cache`` where the model's
    forward names it (transformers ≥ 5.2x; ``past_key_values`` is deprecated there and goes in 5.40), else
    ``past_key_values``. Read off the signature, never guessed: a name the forward does not declare would vanish
    into ``**kwargs`` and the model would silently run without the cache."""
    return {cache_keyword(model): cache}


def cache_keyword(model: Any) -> str:
    """``"cache"`` or ``"past_key_values"``: the name ``model``'s forward (a causal LM or its decoder) gives the
    KV cache (see :func:`with_cache`)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a LoRA-wrapped model forwards
    return _cache_name(type(base))


@functools.cache
def _cache_name(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def returned_cache(out: Any) -> Any:
    """The KV cache a forward returned (``out.cache``, or ``out.past_key_values`` before the rename)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _cache_bytes(cache: Any) -> int:
    """The memory of a transformers cache's key and value tensors."""
    total = 0
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total
