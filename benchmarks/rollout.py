"""Rollout throughput and the rollout machinery's overhead over bare ``generate``.

Measures, for the embedded SmolLM2 (or ``--model``) on CPU, or a GPU with ``--device cuda``:

* overhead: one batched rollout turn (prompt building, chat-sequence bookkeeping, parsing, env step,
  trajectory records) vs ``model.generate`` on the very same padded prompts with the same generation
  config and seed, so both sample the same tokens. Target ≤ 5 % on CPU. Runs alternate; medians reported.
* throughput: generated tokens/s and env steps/s of full batched multi-turn rollouts, free text on
  Countdown and constrained choice on TextWorld.
* shared prefix: a batch of direct-action episodes (the learning study's short sums, as its evals play them)
  with the batch's common prompt prefix run once vs every prompt run whole (``PromptCache(0)``); runs alternate,
  medians reported, and both must play the same trajectories.

Usage: ``python -m benchmarks.rollout [--model smollm2-135m-instruct] [--dtype bfloat16] [--device cpu]``
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import time
from collections.abc import Iterator
from importlib import metadata

import gymnasium as gym
import torch

import r3l_envs  # noqa: F401  (registers the ids)
from benchmarks import results_page
from benchmarks.learning_study.grid import ENVS
from r3l_learn.loop.config import action_flags
from r3l_learn.policies.hf import HFPolicy, auto_dtype
from r3l_learn.policies.prompt_cache import PromptCache
from wrappers import AgentEpisode, RolloutConfig, SamplingParams, rollout_batch

logger = logging.getLogger("bench.rollout")


def overhead(policy: HFPolicy, env_id: str, batch: int, new_tokens: int, repeats: int) -> dict:
    """Median wall time of a one-turn batched rollout vs bare generate on its prompts (run it with the prompt
    cache off, :func:`_prompt_cache`, so both do identical work: no shared prefix outside ``model.generate``)."""
    config = RolloutConfig(sampling=SamplingParams(max_new_tokens=new_tokens, temperature=1.0), max_turns=1)
    envs = [gym.make(env_id) for _ in range(batch)]
    seeds = list(range(batch))
    # the exact prompts and generation settings the rollout will use
    episodes = [AgentEpisode(env, policy, config, seed=s) for env, s in zip(envs, seeds)]
    prompts = [ep.prompt() for ep in episodes]
    stop = tuple(dict.fromkeys(ep.template.answer.stop for ep in episodes))
    from dataclasses import replace

    from wrappers.rollout import round_seed

    params = replace(config.sampling, seed=round_seed(0, 0), stop=stop)
    gen_config = policy.generation_config(params)
    input_ids, attention_mask = policy.pad_left(prompts)

    def bare() -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(params.seed)
            policy.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=gen_config,
                tokenizer=policy.tokenizer,
            )
        return time.perf_counter() - wall, time.process_time() - cpu

    def ours() -> tuple[float, float, float]:
        with _TimedModel(policy) as timed:
            wall, cpu = time.perf_counter(), time.process_time()
            rollout_batch(envs, policy, config, seeds=seeds, seed=0)
            wall = time.perf_counter() - wall
        return wall, time.process_time() - cpu, wall - timed.seconds

    bare()  # warm-up (allocator, kernels)
    runs = {"bare_wall": [], "bare_cpu": [], "ours_wall": [], "ours_cpu": [], "outside_generate": []}
    for _ in range(repeats):  # alternate, so slow phases of a shared machine hit both sides
        w, c = bare()
        runs["bare_wall"].append(w)
        runs["bare_cpu"].append(c)
        w, c, outside = ours()
        runs["ours_wall"].append(w)
        runs["ours_cpu"].append(c)
        runs["outside_generate"].append(outside)
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "env": env_id,
        "batch": batch,
        "prompt_tokens": [len(p) for p in prompts],
        "new_tokens": new_tokens,
        "runs": runs,
        "median": med,
        "overhead_wall": med["ours_wall"] / med["bare_wall"] - 1,
        "overhead_cpu": med["ours_cpu"] / med["bare_cpu"] - 1,
        # the robust figure on a loaded machine: time the rollout spends outside policy.generate, per run,
        # relative to that run's own generate time
        "machinery_fraction": statistics.median(
            o / (w - o) for o, w in zip(runs["outside_generate"], runs["ours_wall"])
        ),
    }


class _TimedModel:
    """Sums the wall time spent inside ``model.generate`` while active (the policy's own log-prob extraction
    and cutting count as rollout machinery, not as generation)."""

    def __init__(self, policy: HFPolicy):
        self.model, self.seconds = policy.model, 0.0
        self._generate = policy.model.generate

    def _timed(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self._generate(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start

    def __enter__(self):
        self.seconds = 0.0
        self.model.generate = self._timed
        return self

    def __exit__(self, *exc):
        del self.model.generate  # back to the class method


@contextlib.contextmanager
def _prompt_cache(policy: HFPolicy, max_bytes: int) -> Iterator[None]:
    """The policy with a fresh ``PromptCache(max_bytes)``, its own cache back afterwards."""
    saved, policy.prompt_cache = policy.prompt_cache, PromptCache(max_bytes)
    try:
        yield
    finally:
        policy.prompt_cache = saved


def shared_prefix(policy: HFPolicy, batch: int, repeats: int) -> dict:
    """Median process CPU seconds of one batch of the study's short-sum episodes (direct actions, 2 attempts),
    the batch's common prefix run once vs every prompt run whole."""
    study = ENVS["chainsum"]
    sampling = SamplingParams(max_new_tokens=study.max_new_tokens, temperature=0.4)
    config = RolloutConfig(sampling=sampling, max_turns=study.max_turns, **action_flags(study.actions))
    envs = [gym.make(study.env, **study.kwargs) for _ in range(batch)]

    def play(cache_bytes: int) -> tuple[float, list]:
        with _prompt_cache(policy, cache_bytes):  # a fresh cache: each run pays for its prefix
            cpu = time.process_time()
            trajs = rollout_batch(envs, policy, config, seeds=list(range(batch)), seed=0)
            return time.process_time() - cpu, [t.token_ids for t in trajs]

    runs: dict[str, list[float]] = {"shared": [], "whole": []}
    same = True
    for _ in range(repeats):
        shared_cpu, shared_ids = play(2 << 30)
        whole_cpu, whole_ids = play(0)
        runs["shared"].append(shared_cpu)
        runs["whole"].append(whole_cpu)
        same &= shared_ids == whole_ids
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {"env": study.env, "batch": batch, "runs": runs, "median": med, "same_trajectories": same}


def throughput(policy: HFPolicy, env_id: str, batch: int, config: RolloutConfig) -> dict:
    envs = [gym.make(env_id) for _ in range(batch)]
    start = time.perf_counter()
    trajs = rollout_batch(envs, policy, config, seeds=list(range(batch)), seed=0)
    seconds = time.perf_counter() - start
    tokens = sum(t.num_tokens for t in trajs)
    steps = sum(1 for t in trajs for turn in t.turns if turn.action is not None)
    turns = sum(t.num_turns for t in trajs)
    return {
        "env": env_id,
        "batch": batch,
        "constrained": config.constrained,
        "seconds": seconds,
        "generated_tokens": tokens,
        "turns": turns,
        "env_steps": steps,
        "tokens_per_s": tokens / seconds,
        "steps_per_s": steps / seconds,
        "turns_per_s": turns / seconds,
        "max_context_tokens": max(len(t.token_ids) for t in trajs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prefix-batch", type=int, default=32, help="episodes of the shared-prefix measurement")
    parser.add_argument("--name", default=None, help="RESULTS.md section (default rollout-<device>)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)

    args.dtype = auto_dtype(args.device) if args.dtype == "auto" else args.dtype
    policy = HFPolicy.from_pretrained(args.model, dtype=args.dtype, device=args.device)
    with _prompt_cache(policy, 0):
        over = overhead(policy, "r3l/Countdown-v0", args.batch, args.new_tokens, args.repeats)
    logger.info("overhead %s", over)
    free = throughput(
        policy,
        "r3l/Countdown-v0",
        args.batch,
        RolloutConfig(sampling=SamplingParams(max_new_tokens=args.new_tokens), max_turns=3),
    )
    logger.info("free %s", free)
    constrained = throughput(
        policy,
        "r3l/TextWorld-v0",
        max(2, args.batch // 2),
        RolloutConfig(sampling=SamplingParams(max_new_tokens=args.new_tokens), max_turns=4, constrained=True),
    )
    logger.info("constrained %s", constrained)
    prefix = shared_prefix(policy, args.prefix_batch, args.repeats)
    logger.info("shared prefix %s", prefix)

    facts = results_page.machine()
    versions = {d: metadata.version(d) for d in ("torch", "transformers")}
    device = (
        torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU ({torch.get_num_threads()} threads)"
    )
    o, f, c, p = over, free, constrained, prefix
    rows = [
        (
            f"one-turn rollout vs bare `generate`, {o['env']}, batch {o['batch']}, {o['new_tokens']} new tokens "
            f"(medians of {args.repeats} alternating runs)",
            f"wall {o['median']['ours_wall']:.2f} s vs {o['median']['bare_wall']:.2f} s "
            f"({100 * o['overhead_wall']:+.1f} %); process CPU {o['median']['ours_cpu']:.2f} s vs "
            f"{o['median']['bare_cpu']:.2f} s ({100 * o['overhead_cpu']:+.1f} %)",
        ),
        (
            "time the rollout spends outside `model.generate`, relative to it (same runs)",
            f"**{100 * o['machinery_fraction']:.2f} %** (target ≤ 5 %)",
        ),
        (
            f"free text, {f['env']}, batch {f['batch']}, ≤ 3 turns",
            f"{f['tokens_per_s']:.1f} generated tokens/s, {f['turns_per_s']:.2f} turns/s, {f['steps_per_s']:.2f} "
            f"env steps/s ({f['generated_tokens']} tokens, {f['turns']} turns, {f['env_steps']} parsed actions "
            f"stepped, {f['seconds']:.1f} s)",
        ),
        (
            f"constrained, {c['env']}, batch {c['batch']}, ≤ 4 turns",
            f"{c['steps_per_s']:.2f} env steps/s ({c['env_steps']} steps, {c['seconds']:.1f} s, "
            f"longest context {c['max_context_tokens']} tokens)",
        ),
        (
            f"direct actions, {p['env']} (the study's short sums), batch {p['batch']}, ≤ 2 turns: the batch's "
            f"common prompt prefix run once vs every prompt whole (medians of {args.repeats} alternating runs)",
            f"process CPU {p['median']['shared']:.1f} s vs {p['median']['whole']:.1f} s "
            f"(**{p['median']['whole'] / p['median']['shared']:.2f}×** less); same trajectories: "
            f"{'yes' if p['same_trajectories'] else 'NO'}",
        ),
    ]
    command = "python -m benchmarks.rollout " + " ".join(sys.argv[1:])
    md = "\n".join(
        [
            "## Rollout: overhead over bare generate, and batched rollout throughput",
            "",
            f"{results_page.machine_line(facts)} torch {versions['torch']}, transformers {versions['transformers']}.",
            f"Model {args.model} ({args.dtype}) on {device}. Command: `{command}`.",
            "",
            "| measure | value |",
            "|---|---|",
            *(f"| {k} | {v} |" for k, v in rows),
            "",
            "The bare/rollout comparison is identical work: the same padded prompts, generation config and seed,",
            "so both sample the same tokens; the rollout adds prompt building, log-prob extraction, parsing, env",
            "steps and records. On a loaded shared machine wall times swing several-fold between runs, so the",
            "robust figure is the share of each rollout's own time spent outside `model.generate`.",
        ]
    )
    results_page.write_section(
        args.name or f"rollout-{args.device.split(':')[0]}",
        md,
        {
            "machine": facts,
            "versions": versions,
            "args": vars(args),
            "overhead": over,
            "free": free,
            "constrained": constrained,
            "shared_prefix": prefix,
        },
    )
    print(md)


if __name__ == "__main__":
    main()
