"""Generation in a Ray actor: the rollout policy runs on a cluster worker while the learner stays on the driver.

:class:`RayPolicy` is a :class:`wrappers.Policy` whose ``generate`` and ``score`` run in one Ray actor holding its
own copy of the model (loaded there by name, as ``r3l eval`` loads it). Chat rendering and tokenising stay on the
driver, with the learner's tokenizer, so prompts and sampled token ids mean the same on both sides. After each
optimiser step the learner pushes its weights (:meth:`RayPolicy.update_weights`, one ``ray.put`` of the state
dict), so the actor always samples from the model being trained; the first push happens at start, which also
carries resumed weights.

``TrainConfig(ray=..., ray_generation=True)`` (``r3l train --ray local --ray-generation``) plays episodes through
it; without ``ray_generation`` generation stays on the driver. Like every Ray transfer, the weights and results
cross as pickles: a Ray cluster is one trust domain (see :mod:`wrappers.collectors.ray`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from wrappers.collectors.ray import remote_class, require_ray
from wrappers.policy import Generation, SamplingParams

__all__ = ["RayPolicy"]

logger = logging.getLogger(__name__)


class _GenerationWorker:
    """The actor's body (a Ray actor class once ``remote_class`` wraps it): one policy, loaded in the actor."""

    def __init__(self, model: str, dtype: str, seed: int, autocast: Any):
        from r3l_learn.loop.evaluate import load_policy

        self.policy = load_policy(model, dtype=dtype, device="cpu", seed=seed)
        if autocast is not None and hasattr(self.policy, "autocast"):
            self.policy.autocast = autocast

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return self.policy.generate(prompts, params)

    def score(self, prompts: list[list[int]], continuations: list[list[int]]) -> list[list[float]]:
        return self.policy.score(prompts, continuations)

    def load_weights(self, state: dict[str, Any]) -> int:
        missing, unexpected = self.policy.model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"pushed weights do not fit the actor's model: missing {missing}, unexpected {unexpected}")
        return len(state)


class RayPolicy:
    """A policy whose generation and scoring run in a Ray actor; rendering and tokenising use ``local``.

    Args:
        local: the learner's policy (an ``HFPolicy``): its tokenizer renders and tokenises here, and its
            attributes (``eos_token_ids``, ``pad_token_id``, ``max_context``, ``name``) describe the remote copy.
        model: what the actor loads (an embedded model name or a folder visible to the worker).
        dtype: the actor's dtype (the learner's, so sampled log-probs are the learner's behaviour log-probs).
        seed: the actor's model seed (only matters for ``tiny-random`` before the first weight push).
        num_cpus: logical CPUs the actor reserves.
        num_gpus: GPUs it reserves (0 on CPU machines).
        timeout_s: the longest one call may take before :class:`TimeoutError`.
    """

    def __init__(
        self,
        local: Any,
        model: str,
        *,
        dtype: str = "float32",
        seed: int = 0,
        num_cpus: float = 1,
        num_gpus: float = 0,
        timeout_s: float = 3600.0,
    ):
        ray = require_ray()
        self._ray, self.local, self.timeout_s = ray, local, timeout_s
        start = time.perf_counter()
        actor = remote_class(_GenerationWorker).options(num_cpus=num_cpus, num_gpus=num_gpus)
        self.actor = actor.remote(model, dtype, seed, getattr(local, "autocast", None))
        self.update_weights(local.model.state_dict())  # also waits until the actor has loaded its model
        self.start_seconds = time.perf_counter() - start
        logger.info("generation actor for %s ready in %.1f s", model, self.start_seconds)

    def __getattr__(self, name: str) -> Any:  # eos_token_ids, pad_token_id, max_context, name, ...
        if name == "local":  # not set yet (a failed __init__): no recursion
            raise AttributeError(name)
        return getattr(self.local, name)

    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool) -> str:
        return self.local.render(messages, add_generation_prompt=add_generation_prompt)

    def tokenize(self, text: str) -> list[int]:
        return self.local.tokenize(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.local.decode(token_ids)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        return self._get(self.actor.generate.remote([list(p) for p in prompts], params))

    def score(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[list[float]]:
        return self._get(self.actor.score.remote([list(p) for p in prompts], [list(c) for c in continuations]))

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Send the learner's weights to the actor (after every optimiser step)."""
        state = {k: v.detach().to("cpu") for k, v in state_dict.items()}
        self._get(self.actor.load_weights.remote(self._ray.put(state)))

    def close(self) -> None:
        """Stop the actor (also done when Ray shuts down)."""
        if getattr(self, "actor", None) is not None:
            self._ray.kill(self.actor)
            self.actor = None

    def _get(self, ref: Any) -> Any:
        try:
            return self._ray.get(ref, timeout=self.timeout_s)
        except self._ray.exceptions.GetTimeoutError as exc:
            raise TimeoutError(f"the generation actor did not answer within {self.timeout_s:g} s") from exc
