"""The model's base episodes and the oracle-guided retries of the failed ones, with the library's own
:class:`wrappers.ReflectRetry` and :class:`wrappers.retry.oracle.OracleReflector` (one base per task: group size 2)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from tqdm import tqdm

from wrappers import ReflectRetry, ReflectRetryConfig, RolloutConfig
from wrappers.policy import Policy, SamplingParams
from wrappers.retry.oracle import OracleReflector

#: Tasks per collect call: the progress bar moves after each, and a batch's rounds stay a modest size.
CHUNK = 16


def base_and_retry(
    env_id: str,
    env_kwargs: dict[str, Any],
    policy: Policy,
    ids: Sequence[str],
    *,
    max_turns: int,
    temperature: float,
    oracle_plan: str,
    constrained: bool,
    seed: int,
    progress: bool = True,
) -> dict[str, Any]:
    """Base success over ``ids`` (one episode each) and, over the failed bases, the guided retries' success."""
    rollout = RolloutConfig(
        sampling=SamplingParams(temperature=temperature, max_new_tokens=32),
        max_turns=max_turns,
        constrained=constrained,
        direct=not constrained,
    )
    config = ReflectRetryConfig(group_size=2, rollout=rollout, aux_samples=False, pivotal_credit=False)
    reflector = OracleReflector(plan=oracle_plan)
    rr = ReflectRetry(env_id, policy, reflector, config, env_kwargs={**env_kwargs, "split": "test"})
    bases, retries = [], []
    seconds = dict.fromkeys(("bases", "reflect", "retries"), 0.0)
    try:
        with tqdm(total=len(ids), desc=f"base + retry (T={temperature:g}, {oracle_plan})", unit="task") as bar:
            bar.disable = not progress
            for first in range(0, len(ids), CHUNK):
                groups = rr.collect(list(ids[first : first + CHUNK]), seed=seed * 1_000 + first)
                for phase in seconds:
                    seconds[phase] += rr.timings.get(phase, 0.0)
                for group in groups:
                    base = next(t for t in group.trajectories if t.kind == "base")
                    retry = next((t for t in group.trajectories if t.kind == "retry"), None)
                    bases.append(base)
                    retries.append(retry)
                bar.update(len(groups))
                won = sum(b.won for b in bases)
                bar.set_postfix(base=f"{won}/{len(bases)}", retry=f"{sum(bool(r and r.won) for r in retries)}")
    finally:
        rr.close()
    failed = [i for i, b in enumerate(bases) if not b.won]
    retried = [i for i in failed if retries[i] is not None]
    retry_wins = sum(retries[i].won for i in retried)
    no_retry = Counter(bases[i].metadata["reflection"].get("error") or "no_pivot" for i in failed if retries[i] is None)
    pivots = [retries[i].pivot for i in retried]
    return {
        "seconds": seconds,
        "base_success": sum(b.won for b in bases) / max(len(bases), 1),
        "base_wins": sum(b.won for b in bases),
        "bases": len(bases),
        # Over every failed base: a failure the oracle could not retry (no deviation from the plan) counts as a
        # failed retry, so the rate is what a group whose bases all failed can expect.
        "retry_success": retry_wins / len(failed) if failed else None,
        "retry_wins": retry_wins,
        "failed_bases": len(failed),
        "retries": len(retried),
        "failed_bases_without_retry": dict(no_retry),
        "mean_pivot": sum(pivots) / len(pivots) if pivots else None,
        "base_mean_turns": sum(b.num_turns for b in bases) / max(len(bases), 1),
        "base_sequences": Counter(tuple(t.action for t in b.turns if t.action) for b in bases),
        "retry_examples": [
            {
                "task": bases[i].task_id,
                "pivot": retries[i].pivot,
                "guidance": retries[i].guidance,
                "actions": [t.action for t in retries[i].turns],
                "won": retries[i].won,
            }
            for i in retried[:3]
        ],
    }
