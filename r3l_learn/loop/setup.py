"""A training run's parts, built from its :class:`r3l_learn.loop.config.TrainConfig`: the policy (and the rollout
policy that shares its weights), the reflector, the KL reference, how episodes are played, and the task stream."""

from __future__ import annotations

import contextlib
import copy
import logging
from typing import Any

import numpy as np
import torch

from r3l_learn.algorithms.batch import Batch
from r3l_learn.algorithms.logprobs import sequence_logprobs
from r3l_learn.loop.config import TrainConfig, action_flags
from r3l_learn.loop.evaluate import load_policy
from r3l_learn.policies.backends import ROLLOUT_BACKENDS, resolve_rollout_backend
from r3l_learn.policies.reflectors import make_reflector as build_reflector
from wrappers import RolloutConfig, SamplingParams
from wrappers.retry.reflection import Reflector

__all__ = [
    "TaskStream",
    "connect_ray",
    "load_train_policy",
    "make_reflector",
    "reference_fn",
    "rollout_config",
    "rollout_policy",
]

logger = logging.getLogger(__name__)


class TaskStream:
    """Train task ids in a seeded random order, epoch after epoch; its state is one integer (the cursor)."""

    def __init__(self, task_ids: Any, seed: int, cursor: int = 0):
        if len(task_ids) == 0:
            raise ValueError("the train split has no tasks")
        self.task_ids, self.seed, self.cursor = task_ids, seed, cursor
        self._epoch, self._order = -1, np.arange(0)

    def take(self, k: int) -> list[str]:
        out = []
        for _ in range(k):
            epoch, pos = divmod(self.cursor, len(self.task_ids))
            if epoch != self._epoch:
                rng = np.random.default_rng([self.seed, epoch])
                self._epoch, self._order = epoch, rng.permutation(len(self.task_ids))
            out.append(self.task_ids[int(self._order[pos])])
            self.cursor += 1
        return out


def enable_checkpointing(model: Any) -> None:
    """Recompute activations in the backward pass. transformers renamed the call (in 5.24 the old name warns and
    goes in v6); the older releases the pin allows have only the old name."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def load_train_policy(config: TrainConfig) -> Any:
    """The policy to train: ``config.model`` loaded, with LoRA adapters and gradient checkpointing if asked."""
    policy = load_policy(config.model, dtype=config.dtype, device=config.device, seed=config.seed)
    if config.lora_rank:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:
            raise ImportError("lora_rank > 0 needs peft: pip install peft") from exc
        lora = LoraConfig(
            r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
        )
        policy.model = get_peft_model(policy.model, lora)
    if config.gradient_checkpointing:
        enable_checkpointing(policy.model)
        if config.lora_rank:
            policy.model.enable_input_require_grads()
    return policy


def rollout_policy(config: TrainConfig, policy: Any) -> Any:
    """Who plays the episodes: the trained policy itself, a copy in a Ray actor (``ray_generation``), or a vLLM
    engine; the latter two receive every update. The run closes a Ray player at its end. ``rollout_backend="auto"``
    is resolved here (:func:`r3l_learn.policies.backends.resolve_rollout_backend`, logged)."""
    if config.ray_generation:
        from r3l_learn.policies.ray import RayPolicy

        dtype = "bfloat16" if policy.model.dtype == torch.bfloat16 else "float32"
        return RayPolicy(policy, config.model, dtype=dtype, seed=config.seed)
    if not ROLLOUT_BACKENDS[resolve_rollout_backend(config.to_dict())].engine:
        return policy
    from r3l_learn.policies.vllm import shared_engine

    # The engine computes in the learner's dtype, so its sampled log-probs are the learner's behaviour log-probs.
    bf16 = policy.autocast == torch.bfloat16 or policy.model.dtype == torch.bfloat16
    dtype = "bfloat16" if bf16 else "float32"
    extra = {"gpu_memory_utilization": 0.4} if config.device.startswith("cuda") else {}
    engine = shared_engine(config.model, dtype=dtype, device=config.device, seed=config.seed, **extra)
    engine.update_weights(policy.model.state_dict())  # start from the trained model's weights (resume)
    logger.info("rollouts on vLLM: engine start %.1f s", engine.start_seconds)
    return engine


def make_reflector(config: TrainConfig, policy: Any) -> Reflector | None:
    """Who reflects for ``config.algo`` (``None`` for algorithms without reflect-retry): the row of
    :data:`r3l_learn.policies.reflectors.REFLECTORS` that ``config.reflector`` names, reflecting with ``policy`` where
    the
    row uses the trained policy."""
    if not config.algorithm.reflect_retry:
        return None
    return build_reflector(
        config.reflector, policy, base_url=config.reflector_base_url, device=config.device, seed=config.seed
    )


def reference_fn(config: TrainConfig, model: Any, needed: bool) -> Any:
    """Log-probs of the initial policy (KL reference): the adapters switched off for LoRA, else a frozen copy."""
    if not needed:
        return None
    ref = model if config.lora_rank else copy.deepcopy(model).eval().requires_grad_(False)

    @torch.no_grad()
    def ref_logprobs(batch: Batch) -> torch.Tensor:
        with model.disable_adapter() if config.lora_rank else contextlib.nullcontext():
            return sequence_logprobs(
                ref,
                batch.input_ids,
                batch.attention_mask,
                positions=batch.loss_mask > 0,
                min_shared_prefix=config.shared_prefix_min,
            )

    return ref_logprobs


def rollout_config(config: TrainConfig, temperature: float) -> RolloutConfig:
    """How training (or eval, at its temperature) episodes are played."""
    sampling = SamplingParams(temperature=temperature, max_new_tokens=config.max_new_tokens)
    return RolloutConfig(sampling=sampling, max_turns=config.max_turns, **action_flags(config.actions))


def connect_ray(config: TrainConfig) -> bool:
    """Start or join the Ray of ``config.ray`` for the whole run (env workers and the generation actor share it);
    a local Ray gets the logical CPUs they declare. Returns whether this call started it (the run then stops it)."""
    from wrappers.collectors.ray import connect, local_cpus

    declared = config.ray_workers * config.ray_cpus + (1 if config.ray_generation else 0)
    return connect(config.ray, num_cpus=local_cpus(declared) if config.ray == "local" else None)
