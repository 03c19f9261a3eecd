"""Evaluate a policy on an env: batched rollouts, a summary (success, score, turns, tokens), and JSONL output."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from wrappers import Policy, RolloutConfig, Trajectory, rollout_batch, save_jsonl

__all__ = ["EvalSummary", "evaluate", "load_policy"]

logger = logging.getLogger(__name__)

#: Name of the randomly initialised test model (no download, no conversion; useless as an agent).
TINY_RANDOM = "tiny-random"


@dataclass
class EvalSummary:
    """Aggregates over the evaluated episodes."""

    env_id: str
    split: str
    episodes: int
    success_rate: float
    mean_score: float
    mean_reward: float
    mean_turns: float
    mean_tokens: float
    parse_error_rate: float  # unusable replies per turn
    stop_reasons: dict[str, int]
    seconds: float
    tokens_per_second: float

    def lines(self) -> list[str]:
        return [
            f"{self.env_id} [{self.split}]: {self.episodes} episodes in {self.seconds:.1f} s",
            f"  success rate  {self.success_rate:.3f}",
            f"  mean score    {self.mean_score:.3f}   (mean reward {self.mean_reward:.3f})",
            f"  mean turns    {self.mean_turns:.2f}   (parse errors per turn {self.parse_error_rate:.3f})",
            f"  mean tokens   {self.mean_tokens:.1f}   ({self.tokens_per_second:.1f} generated tokens/s)",
            f"  ended by      {dict(sorted(self.stop_reasons.items()))}",
        ]


#: Policy backends of :func:`load_policy` (and of ``--rollout-backend``).
BACKENDS = ("hf", "vllm")


def load_policy(model: str, *, dtype: str = "auto", device: str = "cpu", seed: int = 0, backend: str = "hf") -> Policy:
    """A policy for an embedded model name, a local HF folder, or ``tiny-random``, on ``backend`` (see BACKENDS)."""
    from r3l_learn.hf_policy import HFPolicy

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "vllm":
        from r3l_learn.vllm_policy import shared_engine

        if model == TINY_RANDOM:
            raise ValueError(f"{TINY_RANDOM} lives only in memory, vLLM loads folders: use backend='hf'")
        return shared_engine(model, dtype=dtype, device=device, seed=seed)  # one engine per process, reused

    if model == TINY_RANDOM:
        from r3l_learn.models import tiny_model

        net, tokenizer = tiny_model(seed=seed)
        return HFPolicy(net, tokenizer, name=TINY_RANDOM)
    return HFPolicy.from_pretrained(model, dtype=dtype, device=device)


def _summarise(env_id: str, split: str, trajs: list[Trajectory], seconds: float) -> EvalSummary:
    n = max(len(trajs), 1)
    turns = sum(t.num_turns for t in trajs)
    tokens = sum(t.num_tokens for t in trajs)
    return EvalSummary(
        env_id=env_id,
        split=split,
        episodes=len(trajs),
        success_rate=sum(t.won for t in trajs) / n,
        mean_score=sum(t.score for t in trajs) / n,
        mean_reward=sum(t.reward for t in trajs) / n,
        mean_turns=turns / n,
        mean_tokens=tokens / n,
        parse_error_rate=sum(t.num_parse_errors for t in trajs) / max(turns, 1),
        stop_reasons=dict(Counter(t.stop_reason for t in trajs)),
        seconds=seconds,
        tokens_per_second=tokens / seconds if seconds > 0 else 0.0,
    )


def evaluate(
    env_id: str,
    policy: Policy,
    *,
    episodes: int,
    split: str = "test",
    config: RolloutConfig | None = None,
    batch_size: int = 8,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    out: str | Path | None = None,
    progress: bool = True,
) -> tuple[EvalSummary, list[Trajectory]]:
    """Play ``episodes`` episodes of ``env_id`` (episode i resets with seed ``seed + i``), ``batch_size`` at
    a time with generation batched across them; optionally write the trajectories to ``out`` (JSONL)."""
    from tqdm import tqdm

    if episodes < 1 or batch_size < 1:
        raise ValueError(f"episodes and batch_size must be >= 1, got {episodes} and {batch_size}")
    envs = [gym.make(env_id, split=split, **(env_kwargs or {})) for _ in range(min(batch_size, episodes))]
    trajs: list[Trajectory] = []
    start = time.perf_counter()
    try:
        with tqdm(total=episodes, desc=env_id, unit="ep", disable=not progress) as bar:
            for first in range(0, episodes, len(envs)):
                k = min(len(envs), episodes - first)
                seeds = [seed + first + i for i in range(k)]
                batch = rollout_batch(envs[:k], policy, config, seeds=seeds, seed=seed + first)
                trajs.extend(batch)
                bar.update(k)
                bar.set_postfix(success=f"{sum(t.won for t in trajs) / len(trajs):.2f}")
    finally:
        for env in envs:
            env.close()
    summary = _summarise(env_id, split, trajs, time.perf_counter() - start)
    if out is not None:
        save_jsonl(out, trajs)
        logger.info("wrote %d trajectories to %s", len(trajs), out)
    return summary, trajs
