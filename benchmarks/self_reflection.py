"""Self-reflection with the embedded model: free-text JSON reflections vs structured (scored) ones.

The policy (SmolLM2-135M-Instruct by default) plays base episodes on held-out (test-split) TextWorld games,
constrained (a choice among the admissible actions), at temperature 1.0, with per-turn checkpoints. On the same
failed bases, each reflector diagnoses every one, and the policy plays a retry from each usable pivot with the
reflection's guidance in its context (as :class:`wrappers.ReflectRetry` does). Per reflector:

* **parse rate**: reflections that yield a pivot and guidance (``Reflection.wants_retry``), over failed bases;
* **retry rate**: retries actually played, over failed bases;
* **retry success**: retries that won, over retries played (and over failed bases), and retries that beat
  their base (R³L's rule for auxiliary samples, :func:`wrappers.retry.reflect_retry.beats`).

Reflectors: ``free`` is :class:`wrappers.PolicyReflector` (the policy writes the JSON diagnosis; 512 new tokens at
temperature 1.0, the paper's settings); ``structured`` is
:class:`wrappers.retry.structured_reflection.StructuredReflector`
(the pivot the policy judges most likely, a suggestion chosen among the pivot turn's admissible actions);
``least_likely`` is the structured one with the pivot at the turn the policy played least confidently.

Usage (from the repository root; one model process at a time on a shared machine)::

    OMP_NUM_THREADS=1 python -m benchmarks.self_reflection [--configs treasure_hunter-d5 coin_collector-d2]
        [--tasks 32] [--samples 3] [--reflectors free structured least_likely]

Writes ``benchmarks/results/self_reflection.json`` after the bases and after each reflector (``"complete"`` says
whether every part finished). The bases are seeded, so one reflector can run in a later invocation on the same
bases (``--reflectors free --out ...``), as the recorded result did on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
from tqdm import tqdm

import r3l_envs  # noqa: F401  (registers the r3l/* envs)
from benchmarks import results_page
from r3l_learn.loop.evaluate import load_policy
from wrappers import AgentEpisode, RolloutConfig, SamplingParams, Trajectory, play, rollout_batch
from wrappers.retry.reflect_retry import beats
from wrappers.retry.reflection import PolicyReflector, Reflection, ReflectionRequest, Reflector
from wrappers.retry.structured_reflection import StructuredReflector

logger = logging.getLogger("bench.self_reflection")

ENV_ID = "r3l/TextWorld-v0"
#: The configurations measured: gym.make kwargs and the turn budget.
CONFIGS: dict[str, dict[str, Any]] = {
    "treasure_hunter-d5": {"env_kwargs": {"game_type": "treasure_hunter", "difficulty": 5}, "max_turns": 8},
    "coin_collector-d2": {"env_kwargs": {"game_type": "coin_collector", "difficulty": 2}, "max_turns": 4},
}
REFLECTORS = ("structured", "least_likely", "free")
OUT = Path(__file__).resolve().parent / "results" / "self_reflection.json"


def _reflector(name: str, policy: Any, seed: int) -> Reflector:
    if name == "free":
        return PolicyReflector(policy, SamplingParams(temperature=1.0, max_new_tokens=512, seed=seed))
    return StructuredReflector(policy, pivot="judged" if name == "structured" else "least_likely", seed=seed)


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def play_bases(policy, envs, rollout: RolloutConfig, task_ids: list[str], seed: int) -> list[Trajectory]:
    """One base episode per entry of ``task_ids``, in batches of ``len(envs)``."""
    bases: list[Trajectory] = []
    for n, chunk in enumerate(tqdm(_chunks(task_ids, len(envs)), desc="bases", unit="batch")):
        bases += rollout_batch(envs[: len(chunk)], policy, rollout, task_ids=chunk, seed=seed * 1000 + n)
    return bases


def reflect_and_retry(
    name: str, policy, envs, rollout: RolloutConfig, failed: list[Trajectory], seed: int
) -> dict[str, Any]:
    """Reflect on every failed base with reflector ``name``, play the retries, count what happened."""
    reflector = _reflector(name, policy, seed)
    started = time.perf_counter()
    reflections: list[Reflection] = []
    for chunk in tqdm(_chunks(failed, len(envs)), desc=f"reflect ({name})", unit="batch"):
        reflections += reflector.reflect([ReflectionRequest(t) for t in chunk])
    reflect_s = time.perf_counter() - started
    wanted = [(b, r) for b, r in zip(failed, reflections, strict=True) if r.wants_retry]
    retries: list[tuple[Trajectory, Trajectory]] = []
    started = time.perf_counter()
    for n, chunk in enumerate(tqdm(_chunks(wanted, len(envs)), desc=f"retries ({name})", unit="batch")):
        episodes = AgentEpisode.resume_many(
            envs[: len(chunk)],
            policy,
            rollout,
            [b for b, _ in chunk],
            [r.pivot for _, r in chunk],
            guidances=[r.guidance() for _, r in chunk],
        )
        played = play(episodes, policy, rollout, seed=seed * 1000 + 500 + n)
        retries += [(b, t) for (b, _), t in zip(chunk, played, strict=True)]
    retry_s = time.perf_counter() - started
    n_failed = len(failed)
    won = sum(t.won for _, t in retries)
    beat = sum(beats(t, b) for b, t in retries)
    parsed = [r for r in reflections if r.wants_retry]
    return {
        "failed_bases": n_failed,
        "parsed": len(parsed),
        "parse_rate": len(parsed) / n_failed if n_failed else None,
        "parse_failures": dict(Counter(r.error or f"outcome:{r.outcome}" for r in reflections if not r.wants_retry)),
        "retries": len(retries),
        "retry_rate": len(retries) / n_failed if n_failed else None,
        "retry_wins": won,
        "retry_success": won / len(retries) if retries else None,
        "retry_wins_per_failed_base": won / n_failed if n_failed else None,
        "retries_beating_base": beat,
        "pivots": dict(sorted(Counter(r.pivot for r in parsed).items())),
        "suggestions_admissible": sum(
            any(f"{a!r}" in r.suggestion for a in (b.turns[r.pivot].admissible or [])) for b, r in wanted
        ),
        "examples": [{"pivot": r.pivot, "guidance": r.guidance(), "text": r.text[:400]} for r in parsed[:2]],
        "reflect_seconds": round(reflect_s, 1),
        "retry_seconds": round(retry_s, 1),
    }


def run_config(name: str, policy, args, save) -> dict[str, Any]:
    """Bases on configuration ``name``, then each reflector on the failed ones; ``save(out)`` after each part."""
    spec = CONFIGS[name]
    rollout = RolloutConfig(
        sampling=SamplingParams(temperature=args.temperature, max_new_tokens=32),
        max_turns=spec["max_turns"],
        constrained=True,
        keep_checkpoints=True,
        env_workers=1,
    )
    envs = [gym.make(ENV_ID, split="test", **spec["env_kwargs"]) for _ in range(args.batch)]
    try:
        ids = list(envs[0].unwrapped.task_ids[: args.tasks])
        bases = play_bases(policy, envs, rollout, [t for t in ids for _ in range(args.samples)], args.seed)
        failed = [b for b in bases if not b.won]
        logger.info("%s: %d bases, %d failed", name, len(bases), len(failed))
        out: dict[str, Any] = {
            "env_id": ENV_ID,
            "env_kwargs": {**spec["env_kwargs"], "split": "test"},
            "max_turns": spec["max_turns"],
            "distinct_tasks": len(ids),
            "bases": len(bases),
            "base_wins": len(bases) - len(failed),
            "base_success": (len(bases) - len(failed)) / len(bases),
            "failed_bases": len(failed),
            "reflectors": {},
        }
        save(out)
        for reflector in args.reflectors:
            out["reflectors"][reflector] = reflect_and_retry(reflector, policy, envs, rollout, failed, args.seed)
            logger.info("%s %s: %s", name, reflector, out["reflectors"][reflector])
            save(out)
        return out
    finally:
        for env in envs:
            env.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--reflectors", nargs="+", default=list(REFLECTORS), choices=REFLECTORS)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--tasks", type=int, default=32, help="distinct test-split games per configuration")
    parser.add_argument("--samples", type=int, default=3, help="base episodes per game")
    parser.add_argument("--batch", type=int, default=16, help="episodes played (and reflections made) at once")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    started = time.perf_counter()
    load_before = os.getloadavg()
    policy = load_policy(args.model, device=args.device, seed=args.seed)
    results: dict[str, Any] = {}

    def save(partial: dict[str, Any] | None = None, name: str | None = None) -> None:
        """Write what is measured so far (a long run that is stopped keeps its finished parts)."""
        data = {
            "configs": {**results, **({name: partial} if name else {})},
            "complete": partial is None,
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "command": "python -m benchmarks.self_reflection " + shlex.join(sys.argv[1:] if argv is None else argv),
            "environment": {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")},
            "machine": results_page.machine(),
            "load_average_1_5_15": {"before": load_before, "now": os.getloadavg()},
            "seconds": round(time.perf_counter() - started, 1),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=2, default=str) + "\n")

    for name in args.configs:
        results[name] = run_config(name, policy, args, lambda out, name=name: save(out, name))
    save()
    for name, res in results.items():
        print(f"{name}: base success {res['base_success']:.3f} ({res['base_wins']}/{res['bases']})")
        for reflector, r in res["reflectors"].items():
            print(
                f"  {reflector:>12}: parse {r['parsed']}/{r['failed_bases']}, retries {r['retries']}, "
                f"retry wins {r['retry_wins']}, beating base {r['retries_beating_base']}"
            )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
