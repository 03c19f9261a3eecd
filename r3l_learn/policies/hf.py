"""The HF transformers policy: batched, left-padded, seeded generation and log-likelihood scoring.

Works on CPU and GPU. bf16 weights roughly double CPU throughput on CPUs with native bf16 (avx512_bf16 or
AMX) but are many times *slower* where bf16 is emulated, so ``dtype="auto"`` picks bf16 only where the hardware
has it (:mod:`r3l_learn.policies.device`).
Keep old and new log-probs in the same precision (bf16 and fp32 differ by up to ~0.1 nats).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from r3l_learn.loop.progress import phase
from r3l_learn.policies.chat_io import HFTokenizerIO
from r3l_learn.policies.device import native_dtype, resolve_dtype
from r3l_learn.policies.models import resolve_model
from r3l_learn.policies.prompt_cache import PromptCache, with_cache
from wrappers.policy import Generation, SamplingParams

__all__ = ["HFPolicy", "auto_dtype"]

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def auto_dtype(device: str = "cpu") -> str:
    """What ``dtype="auto"`` means on ``device``: :func:`r3l_learn.policies.device.native_dtype`."""
    return native_dtype(device)


class HFPolicy(HFTokenizerIO):
    """A :class:`wrappers.Policy` over a ``transformers`` causal LM and its tokenizer."""

    def __init__(self, model: Any, tokenizer: Any, *, max_context: int | None = None, name: str | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", None) or type(model).__name__
        eos = {tokenizer.eos_token_id}
        config_eos = getattr(model.generation_config, "eos_token_id", None)
        eos.update(config_eos if isinstance(config_eos, list) else [config_eos])
        self.eos_token_ids: tuple[int, ...] = tuple(sorted(i for i in eos if i is not None))
        self.pad_token_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        self.max_context: int = max_context or int(getattr(model.config, "max_position_embeddings", 2048))
        self.score_chunk = 16  # continuations scored together on one copy of a shared prompt cache
        self.score_chunk_tokens = 1024  # and at most this many tokens of them (~200 MB of SmolLM2 logits)
        # KV caches of recent prompts: a multi-turn episode's next prompt extends its last one, so scoring runs
        # only the new turn (PromptCache(0) turns this off).
        self.prompt_cache = PromptCache()
        # generate() runs a batch's common prefix once when it is at least this long (shorter ones save too
        # little to pay for copying the cache into every row).
        self.min_shared_prefix = 16
        # Lower-precision compute for fp32 weights (the learner's bf16 autocast also covers its rollouts):
        # None computes in the weights' dtype.
        self.autocast: torch.dtype | None = None
        # Tokens generated or scored so far: a progress probe that grows within a long round (a bar's live status
        # reads it from another thread; only this policy's calls write it).
        self.tokens_done = 0

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, *, dtype: str = "auto", device: str = "cpu", max_context: int | None = None
    ) -> HFPolicy:
        """Load a local HF folder or an embedded model name (see :func:`r3l_learn.policies.models.resolve_model`).
        ``dtype`` is ``"auto"`` (bf16 where native, see :mod:`r3l_learn.policies.device`), ``"float32"`` or
        ``"bfloat16"``."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        dtype = resolve_dtype(dtype, device)
        folder = resolve_model(name_or_path)
        with phase(f"loading {name_or_path} ({dtype}, {device})"):
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=_DTYPES[dtype]).to(device)
        return cls(model, tokenizer, max_context=max_context, name=str(name_or_path))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Sample one completion per prompt, the batch in one ``generate`` call.

        The prompts' longest common prefix (a batch's system prompt and task preamble) runs once, from the prompt
        cache when an earlier call ran it, and the batch prefills only what differs: on CPU, prefill is most of a
        short reply's cost. The rows are ``[prefix][padding][own tokens]``; the padding is masked and positions
        count real tokens only, so every row sees what it would see alone (up to float rounding).
        """
        if not prompts:
            return []
        with torch.random.fork_rng(devices=self._rng_devices()), self._compute():
            shared = self.shared_prefix(prompts)
            input_ids, attention_mask = self.pad_left([p[shared:] for p in prompts])
            past = None
            if shared:
                past = copy.deepcopy(self.prompt_cache.head(self.model, prompts[0][:shared], self.autocast)[0])
                past.batch_repeat_interleave(len(prompts))
                head = torch.tensor([list(prompts[0][:shared])], device=self.device).expand(len(prompts), -1)
                input_ids = torch.cat([head, input_ids], dim=1)
                attention_mask = torch.cat([torch.ones_like(head), attention_mask], dim=1)
            if params.seed is not None:
                torch.manual_seed(params.seed)
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                **with_cache(self.model, past),
                generation_config=self.generation_config(params),
                tokenizer=self.tokenizer if params.stop else None,
            )
        new = out.sequences[:, input_ids.shape[1] :]
        logits = torch.stack(out.logits, dim=1).float()  # raw logits: (batch, new, vocab)
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        done = [self._finish(new[i].tolist(), logprobs[i].tolist(), params) for i in range(len(prompts))]
        self.tokens_done += sum(len(g.token_ids) for g in done)
        return done

    def shared_prefix(self, prompts: Sequence[Sequence[int]]) -> int:
        """How many leading tokens :meth:`generate` runs once for the whole batch: the prompts' longest common
        prefix, less one token (every row must feed ``generate`` a token of its own), 0 where it is shorter than
        :attr:`min_shared_prefix` or the prompt cache is off."""
        if not self.prompt_cache.max_bytes:
            return 0
        first, shortest = prompts[0], min(len(p) for p in prompts)
        shared = shortest - 1
        for prompt in prompts[1:]:
            shared = min(shared, next((i for i in range(shared) if prompt[i] != first[i]), shared))
        return shared if shared >= self.min_shared_prefix else 0

    def generation_config(self, params: SamplingParams) -> Any:
        """The ``transformers.GenerationConfig`` for ``params`` (raw logits kept for exact log-probs)."""
        from transformers import GenerationConfig

        greedy = params.temperature == 0
        return GenerationConfig(
            do_sample=not greedy,
            # Unset (None) fields are filled from the model's generation_config and then transformers' defaults
            # (top_k=50!), so every field that shapes the distribution is set explicitly.
            temperature=1.0 if greedy else params.temperature,
            top_p=params.top_p,
            top_k=0,
            repetition_penalty=1.0,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=list(self.eos_token_ids),
            pad_token_id=self.pad_token_id,
            stop_strings=list(params.stop) or None,
            output_logits=True,
            return_dict_in_generate=True,
        )

    def _finish(self, ids: list[int], logprobs: list[float], params: SamplingParams) -> Generation:
        """Cut a row where it really ended: its first end-of-turn token (kept) or stop string; after that,
        ``generate`` only wrote padding."""
        end, reason = len(ids), "length"
        for i, tok in enumerate(ids):
            if tok in self.eos_token_ids:
                end, reason = i + 1, "stop"
                break
        if params.stop:
            cut = self._stop_index(ids[:end], params.stop)
            if cut is not None:
                end, reason = cut, "stop"
        ids, logprobs = ids[:end], logprobs[:end]
        return Generation(text=self.decode(ids), token_ids=ids, logprobs=logprobs, finish_reason=reason)

    def _stop_index(self, ids: list[int], stops: tuple[str, ...]) -> int | None:
        """Length of the shortest prefix of ``ids`` whose text contains a stop string, if any."""
        if not any(s in self.decode(ids) for s in stops):
            return None
        lo, hi = 1, len(ids)
        while lo < hi:  # the property is monotone in the prefix length: bisect
            mid = (lo + hi) // 2
            if any(s in self.decode(ids[:mid]) for s in stops):
                hi = mid
            else:
                lo = mid + 1
        return lo

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def score(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per-token log-probs of each continuation after its prompt.

        Pairs that share a prompt (constrained mode scores every admissible action after the same context)
        run the prompt once and the continuations as one batch on top of its KV cache. Prompts with one
        continuation each (a batch of free-text replies re-scored) run together on their common prefix, as
        :meth:`generate` runs them.
        """
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, prompt in enumerate(prompts):
            groups.setdefault(tuple(prompt), []).append(i)
        out: list[list[float]] = [[] for _ in prompts]
        with self._compute():
            singles = [m[0] for p, m in groups.items() if len(m) == 1 and p and continuations[m[0]]]
            shared = self.shared_prefix([prompts[i] for i in singles]) if len(singles) > 1 else 0
            batched = set(singles) if shared else set()
            if batched:
                pairs = [(list(prompts[i]), list(continuations[i])) for i in singles]
                for i, lp in zip(singles, self._score_on_shared_prefix(pairs, shared)):
                    out[i] = lp
                self.tokens_done += sum(len(continuations[i]) for i in singles)
            for prompt, members in groups.items():
                if members[0] not in batched:
                    scored = self._score_shared_prompt(list(prompt), [list(continuations[i]) for i in members])
                    for i, lp in zip(members, scored):
                        out[i] = lp
                    self.tokens_done += sum(len(continuations[i]) for i in members)
        return out

    def _score_on_shared_prefix(self, pairs: list[tuple[list[int], list[int]]], shared: int) -> list[list[float]]:
        """Log-probs of each continuation after its prompt, the rows batched on copies of the KV cache of the
        prompts' first ``shared`` tokens (each row runs its own rest of the prompt and its continuation)."""
        past, _ = self.prompt_cache.head(self.model, pairs[0][0][:shared], self.autocast)
        tails = [prompt[shared:] + cont for prompt, cont in pairs]
        rows = max(1, min(self.score_chunk, self.score_chunk_tokens // max(len(t) for t in tails)))
        results = []
        for lo in range(0, len(tails), rows):
            scored = self._score_on_cache(past, shared, tails[lo : lo + rows])
            for (prompt, cont), lp in zip(pairs[lo : lo + rows], scored):
                start = len(prompt) - shared - 1  # lp[k] is the log-prob of tail[k + 1]
                results.append(lp[start : start + len(cont)])
        return results

    def _score_shared_prompt(self, prompt: list[int], conts: list[list[int]]) -> list[list[float]]:
        if not prompt:
            raise ValueError("score() needs a non-empty prompt")
        past, first = self.prompt_cache.head(self.model, prompt, self.autocast)
        results = [[float(first[c[0]])] if c else [] for c in conts]
        # The shared cache is copied once per candidate in a chunk (~46 KB per prompt token for SmolLM2), so
        # chunks bound the memory of long contexts with many admissible actions.
        for lo in range(0, len(conts), self.score_chunk):
            chunk = conts[lo : lo + self.score_chunk]
            if max(len(c) for c in chunk) > 1:
                for row, lp in enumerate(self._score_on_cache(past, len(prompt), chunk)):
                    results[lo + row] += lp
        return results

    def _score_on_cache(self, prefix_cache: Any, prompt_len: int, conts: list[list[int]]) -> list[list[float]]:
        """Log-probs of tokens 1.. of each continuation, run right-padded on copies of the prompt's cache
        (padding only ever follows real tokens, so it never changes them)."""
        device = self.device
        width = max(len(c) for c in conts)
        cache = copy.deepcopy(prefix_cache)
        cache.batch_repeat_interleave(len(conts))
        ids = torch.full((len(conts), width - 1), self.pad_token_id, device=device)
        mask = torch.zeros((len(conts), prompt_len + width - 1), dtype=torch.long, device=device)
        mask[:, :prompt_len] = 1
        for row, cont in enumerate(conts):
            if len(cont) > 1:
                ids[row, : len(cont) - 1] = torch.tensor(cont[:-1], device=device)
                mask[row, prompt_len : prompt_len + len(cont) - 1] = 1
        positions = torch.arange(prompt_len, prompt_len + width - 1, device=device).expand(len(conts), -1)
        logits = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, **with_cache(self.model, cache), use_cache=True
        ).logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        out = []
        for row, cont in enumerate(conts):
            if len(cont) <= 1:
                out.append([])
                continue
            target = torch.tensor(cont[1:], device=device, dtype=torch.long)
            out.append(logp[row, : len(cont) - 1].gather(-1, target.unsqueeze(-1)).squeeze(-1).tolist())
        return out

    @torch.no_grad()
    def sequence_logprobs(self, token_ids: Sequence[int]) -> list[float]:
        """log π(token_ids[t] | token_ids[:t]) for t ≥ 1 from one forward pass (index t-1 in the result)."""
        ids = torch.tensor([list(token_ids)], device=self.device)
        with self._compute():
            logits = self.model(input_ids=ids).logits[0, :-1].float()
        return torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1).tolist()

    # ------------------------------------------------------------------ helpers
    def _compute(self) -> contextlib.AbstractContextManager[Any]:
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast)

    def pad_left(self, prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``input_ids`` and ``attention_mask`` of the prompts, left-padded into one batch on the model's device."""
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError("generate() needs non-empty prompts")
            ids[row, width - len(prompt) :] = torch.tensor(list(prompt))
            mask[row, width - len(prompt) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _rng_devices(self) -> list[int]:
        device = self.device
        return [device.index or 0] if device.type == "cuda" else []
