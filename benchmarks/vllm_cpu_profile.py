"""Where free-text rollout time goes, vLLM-cpu vs HF: prefill, per-step decode, and everything outside the model.

`benchmarks/vllm_cpu.py` measured free-text Countdown collection at 1.6-1.9x HF's throughput, short of the
2.5x target. This splits one group's wall time, per backend, into

- **generate**: time inside ``policy.generate`` during the rollout (the rest is env steps, prompt building,
  tokenization and bookkeeping in ``rollout_batch``);
- **prefill**: the same prompts generated again with ``max_new_tokens=1`` (the prompt's forward pass and one
  sampled token; vLLM's prefix cache is emptied first, so the replay computes the prompts again);
- **decode per step**: ``(generate - prefill) / (decode steps - 1)``, where the decode steps are the longest reply
  in the batch (both engines run a batch until its last sequence ends).

Both backends compute in the same dtype (``auto``: fp32 on CPUs without native bf16). Needs the ``vllm-cpu`` extra.

Usage: ``.venv-vllm/bin/python benchmarks/vllm_cpu_profile.py [--batches 8 32] [--new-tokens 48]``
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import gymnasium as gym

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report
from vllm_cpu import start_backends

import r3l_envs  # noqa: F401  (registers the ids)
from r3l_learn.device import cpu_kind
from wrappers import RolloutConfig, SamplingParams, rollout_batch

logger = logging.getLogger("bench.vllm_cpu_profile")


class TimedPolicy:
    """A policy seen through a stopwatch: every ``generate`` call's prompts, reply lengths and seconds."""

    def __init__(self, policy):
        self.policy = policy
        self.calls: list[dict] = []

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def generate(self, prompts, params):
        start = time.perf_counter()
        out = self.policy.generate(prompts, params)
        seconds = time.perf_counter() - start
        self.calls.append({"prompts": [list(p) for p in prompts], "params": params, "seconds": seconds, "out": out})
        return out


def profile_group(policy, batch: int, new_tokens: int, seed: int) -> dict:
    """One free-text Countdown group through ``policy``, then its prompts again for one token (the prefill)."""
    timed = TimedPolicy(policy)
    config = RolloutConfig(sampling=SamplingParams(max_new_tokens=new_tokens, temperature=1.0), max_turns=1)
    envs = [gym.make("r3l/Countdown-v0") for _ in range(batch)]
    start = time.perf_counter()
    rollout_batch(envs, timed, config, seeds=[seed] * batch, seed=seed)
    wall = time.perf_counter() - start
    for env in envs:
        env.close()
    generate = sum(c["seconds"] for c in timed.calls)
    prefill = 0.0
    llm = getattr(policy, "llm", None)
    if llm is not None:  # vLLM: the rollout just cached these prompts; the replay must compute them again
        llm.reset_prefix_cache()
    for call in timed.calls:
        begin = time.perf_counter()
        policy.generate(call["prompts"], replace(call["params"], max_new_tokens=1))
        prefill += time.perf_counter() - begin
    steps = sum(max(len(g.token_ids) for g in c["out"]) for c in timed.calls)
    tokens = sum(len(g.token_ids) for c in timed.calls for g in c["out"])
    prompt_tokens = sum(len(p) for c in timed.calls for p in c["prompts"])
    decode_steps = steps - len(timed.calls)  # the first token of each call comes with its prefill
    return {
        "wall_s": wall,
        "generate_s": generate,
        "outside_s": wall - generate,
        "prefill_s": prefill,
        "decode_s": generate - prefill,
        "decode_ms_per_step": 1000 * (generate - prefill) / decode_steps if decode_steps > 0 else None,
        "steps": steps,
        "tokens": tokens,
        "prompt_tokens": prompt_tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--new-tokens", type=int, default=48, help="max new tokens per free-text turn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from r3l_learn.vllm_policy import shutdown_engine

    dtype, policies, _, load_before = start_backends(args.model, args.dtype, args.seed)
    for policy in policies.values():  # warm-up, not counted
        profile_group(policy, 2, 8, 99)
    rows = []
    for index, batch in enumerate(args.batches):
        order = ["hf", "vllm"] if index % 2 == 0 else ["vllm", "hf"]
        for backend in order:
            row = {"backend": backend, "batch": batch, **profile_group(policies[backend], batch, args.new_tokens, 7)}
            logger.info("%s", row)
            rows.append(row)
    shutdown_engine()
    write(args, rows, dtype, load_before, os.getloadavg())


def verdicts(rows: list[dict]) -> list[str]:
    """Per batch, vLLM against HF in words: the throughput ratio and which part of the time makes it."""
    out = []
    for batch in sorted({r["batch"] for r in rows}):
        by = {r["backend"]: r for r in rows if r["batch"] == batch}
        if set(by) != {"hf", "vllm"}:
            continue
        hf, vllm = by["hf"], by["vllm"]
        throughput = (vllm["tokens"] / vllm["wall_s"]) / (hf["tokens"] / hf["wall_s"])
        out.append(
            f"- Batch {batch}: vLLM collects a group in {hf['wall_s'] / vllm['wall_s']:.2f}× less wall time and "
            f"generates {throughput:.2f}× HF's tokens per second. Prefill: {hf['prefill_s'] / vllm['prefill_s']:.1f}× "
            f"faster ({hf['prefill_s'] / hf['generate_s']:.0%} of HF's generate time, "
            f"{vllm['prefill_s'] / vllm['generate_s']:.0%} of vLLM's); decode: "
            f"{hf['decode_ms_per_step'] / vllm['decode_ms_per_step']:.1f}× faster per step; outside the model: "
            f"{max(hf['outside_s'] / hf['wall_s'], vllm['outside_s'] / vllm['wall_s']):.1%} of the wall time at most."
        )
    return out


def write(args, rows, dtype, load_before, load_after) -> None:
    """The section ``vllm_cpu_profile`` of RESULTS.md and its JSON."""
    loads = (" / ".join(f"{x:.1f}" for x in load) for load in (load_before, load_after))
    lines = [
        "## Where free-text rollout time goes, vLLM-cpu vs HF (`benchmarks/vllm_cpu_profile.py`)",
        "",
        _report.machine_line(),
        "",
        f"CPU: {cpu_kind()}; dtype {dtype} for both; vllm-cpu {metadata.version('vllm-cpu')}. Command: "
        f"`.venv-vllm/bin/python benchmarks/vllm_cpu_profile.py --batches {' '.join(map(str, args.batches))} "
        f"--new-tokens {args.new_tokens}`. Load average (1/5/15 min) before: {next(loads)}, after: {next(loads)}.",
        "",
        "One free-text Countdown group (one turn of up to "
        f"{args.new_tokens} tokens per episode). *Generate*: inside `policy.generate` during the rollout; *outside*: "
        "the rest of `rollout_batch` (envs, prompts, tokenization); *prefill*: the same prompts again for one token; "
        "*decode*: generate − prefill, per decode step (the batch's longest reply).",
        "",
        "| backend | batch | wall s | outside s | prefill s | decode s | decode ms / step | decode steps | "
        "tokens | prompt tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        per_step = "—" if r["decode_ms_per_step"] is None else f"{r['decode_ms_per_step']:.1f}"
        lines.append(
            f"| {r['backend']} | {r['batch']} | {r['wall_s']:.2f} | {r['outside_s']:.2f} | {r['prefill_s']:.2f} | "
            f"{r['decode_s']:.2f} | {per_step} | {r['steps']} | {r['tokens']} | {r['prompt_tokens']} |"
        )
    lines += ["", *verdicts(rows)]
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    if not args.no_write:
        data = {"rows": rows, "dtype": dtype, "cpu": cpu_kind(), "load_before": load_before, "load_after": load_after}
        data.update(batches=args.batches, new_tokens=args.new_tokens)
        _report.write_section("vllm_cpu_profile", markdown, data)


if __name__ == "__main__":
    main()
