"""Learner cost: training tokens/s and peak memory of one update, and the R³L loss's overhead over a plain
causal-LM loss on the same tokens.

Every configuration runs in its own subprocess (peak RSS is per process), on the same synthetic batch: ``B``
sequences of ``T`` random token ids of the model's vocabulary, where the last 60 % of each sequence is
target (agent turns are a minority of an agent trace; observations and prompts are context). Rows:

* ``causal-lm``: the baseline, HF's own loss (``model(input_ids, labels=...)``: full logits, mean NLL of the
  target tokens), forward + backward.
* ``r3l``: :func:`r3l_learn.algorithms.update.accumulate_gradients` with the R³L objective (reinforce, token-mean,
  per-sequence advantages) on the same tokens and targets: chunked LM head, only target positions.
* ``r3l + grad-ckpt``, ``r3l + LoRA r=16``, ``r3l + bf16 autocast``: the memory/speed options. The bf16 row runs
  only where the device computes bf16 natively (a CPU with avx512_bf16 or AMX, or a bf16 GPU; where it is emulated
  it is many times slower and nobody should use it): elsewhere it is recorded as skipped, unless ``--bf16-anyway``.

The overhead ratio is ``r3l`` time / ``causal-lm`` time from the same run (target ≤ 1.10); memory is peak RSS
(CPU) or peak allocated (CUDA). Timings are the median of ``--repeats`` updates after one warm-up update.

Usage: ``python -m benchmarks.learner [--model smollm2-135m-instruct] [--batch 8] [--length 512] [--device cpu]``
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time

from benchmarks import results_page

logger = logging.getLogger("bench.learner")

CONFIGS = {
    "causal-lm": {},
    "r3l": {},
    "r3l + grad-ckpt": {"checkpointing": True},
    "r3l + LoRA r=16": {"lora": 16},
    "r3l + bf16 autocast": {"autocast": True},
}


def _one(args: argparse.Namespace, name: str) -> dict:
    """Run configuration ``name`` in this process and return its measurements."""
    import torch

    from r3l_learn.algorithms.batch import Row
    from r3l_learn.algorithms.update import LossConfig, accumulate_gradients
    from r3l_learn.loop.evaluate import load_policy

    opts = CONFIGS[name]
    policy = load_policy(args.model, dtype="float32", device=args.device)
    model = policy.model
    if opts.get("lora"):
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=opts["lora"], target_modules="all-linear", task_type="CAUSAL_LM"))
    if opts.get("checkpointing"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size if hasattr(model.config, "vocab_size") else len(policy.tokenizer)
    ids = torch.randint(3, vocab, (args.batch, args.length), generator=gen)
    start = int(args.length * 0.4)
    mask = torch.zeros_like(ids)
    mask[:, start:] = 1
    adv = torch.linspace(-1, 3, args.batch)
    rows = [Row(ids[i].tolist(), mask[i].tolist(), [0.0] * args.length, float(adv[i])) for i in range(args.batch)]
    labels = ids.masked_fill(mask == 0, -100).to(args.device)
    x = ids.to(args.device)
    autocast = torch.bfloat16 if opts.get("autocast") else None
    params = [p for p in model.parameters() if p.requires_grad]

    def update() -> None:
        for p in params:
            p.grad = None
        if name == "causal-lm":
            model(input_ids=x, labels=labels).loss.backward()
        else:
            accumulate_gradients(
                model, rows, LossConfig(), micro_batch_size=args.micro_batch, pad_id=0, autocast=autocast
            )

    times, cpu = [], []
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    for i in range(args.repeats + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        update()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        if i:  # the first update warms caches and allocators
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    seconds = statistics.median(times)
    if args.device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated() / 2**30
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    return {
        "config": name,
        "seconds": seconds,
        "cpu_seconds": statistics.median(cpu),
        "threads": torch.get_num_threads(),
        "tokens_per_s": args.batch * args.length / seconds,
        "peak_gib": peak,
        "trainable": sum(p.numel() for p in params),
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--micro-batch", type=int, default=8, help="rows per forward pass in the r3l rows")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bf16-anyway", action="store_true", help="run the bf16 row where bf16 is emulated too")
    parser.add_argument("--only", default=None, help=argparse.SUPPRESS)  # internal: run one config, print JSON
    args = parser.parse_args()
    if args.only:
        print(json.dumps(_one(args, args.only)))
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from r3l_learn.policies.device import cpu_kind, native_dtype

    bf16_native = native_dtype(args.device) == "bfloat16"
    kind = cpu_kind() if args.device == "cpu" else args.device
    logger.info("device %s (%s): bf16 %s", args.device, kind, "native" if bf16_native else "emulated")
    results = []
    for name in CONFIGS:
        if CONFIGS[name].get("autocast") and not (bf16_native or args.bf16_anyway):
            reason = f"skipped: no native bf16 on this device ({kind}); --bf16-anyway measures it"
            results.append({"config": name, "failed": reason, "load": os.getloadavg()[0]})
            logger.info("%s %s", name, reason)
            continue
        cmd = [sys.executable, "-m", "benchmarks.learner", "--only", name] + [
            f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("only", "bf16_anyway")
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:  # e.g. killed for memory: record it and measure the rest
            logger.warning("%s failed (exit code %d):\n%s", name, out.returncode, out.stderr[-3000:])
            results.append(
                {"config": name, "failed": f"failed (exit code {out.returncode})", "load": os.getloadavg()[0]}
            )
            continue
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        logger.info("%s", results[-1])
    base = results[0]["seconds"]
    ratio = results[1]["seconds"] / base
    cpu_ratio = results[1]["cpu_seconds"] / results[0]["cpu_seconds"]
    facts = results_page.machine()
    lines = [
        f"## Learner: training tokens/s, peak memory, R³L loss overhead (`benchmarks/learner.py "
        f"--model {args.model} --device {args.device} --batch {args.batch} --length {args.length}`)",
        "",
        results_page.machine_line(facts),
        f"CPU kind: {kind}.",
        "",
        f"One update (forward + backward, no optimiser step) on {args.batch} × {args.length} tokens, 60 % of them "
        f"targets; median of {args.repeats} after a warm-up; each row in its own process.",
        "",
        "| configuration | s / update | CPU s / update | tokens/s | peak memory (GiB) | trainable params | load avg |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "failed" in r:
            lines.append(f"| {r['config']} | {r['failed']} | | | | | {r['load']:.1f} |")
            continue
        lines.append(
            f"| {r['config']} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {r['tokens_per_s']:.0f} | "
            f"{r['peak_gib']:.2f} | {r['trainable'] / 1e6:.1f} M | {r['load']:.1f} |"
        )
    verdict = "meets" if ratio <= 1.10 else "misses"
    lines += [
        "",
        f"**R³L loss overhead vs a plain causal-LM loss on the same tokens: {ratio:.2f}× wall time, {cpu_ratio:.2f}× "
        f"CPU time** ({verdict} the ≤ 1.10× target on wall time; CPU time is the steadier measure on a shared "
        f"machine; {results[0]['threads']} torch threads). The chunked LM head computes only target positions and "
        "never holds the full-vocabulary logits, which is where the memory difference comes from.",
    ]
    name = "learner" if args.device == "cpu" else f"learner-{args.device.split(':')[0]}"
    record = {"machine": facts, "cpu_kind": kind, "bf16_native": bf16_native, "args": vars(args), "results": results}
    results_page.write_section(name, "\n".join(lines), record)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
