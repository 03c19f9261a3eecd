"""Trajectories trained per CPU-hour: where a training step's time goes, and what each lever saves.

Each variant is a short ``r3l train`` run (no evals) in its own process, on the learning study's TextWorld
setting (``benchmarks.learning_study.grid.ENVS``), with the same seed, tasks and group size. From its ``metrics.jsonl``:
the CPU seconds of collection (rollouts, env steps, retries) and of the update (forward, backward, optimiser),
summed over every thread of the process, so a loaded machine slows the wall clock but hardly these. The runs draw
their tasks from the first ``steps × tasks-per-step`` of the train split, each started once beforehand (TextWorld
compiles a game into its cache the first time), and the first step of each run is left out (first allocations).

Run: ``python -m benchmarks.affordability [--steps 3] [--tasks-per-step 2] [--group-size 8] [--variants ...]``.
Writes the ``affordability`` section of ``benchmarks/RESULTS.md`` and ``benchmarks/results/affordability.json``.

The machine's limit is stated beside the levers: the update's effective FLOP/s (6 FLOPs per weight of every matmul
per row token, forward and backward; attention scores left out, small at these lengths) per CPU-second, against a
matrix product's FLOP/s per CPU-second measured in the same run, in the dtype the update computes in.

``--prefix-modes`` measures the update alone instead, on the same rows for each way of sharing prefixes (every row
whole, a micro-batch's common prefix once, every shared span once): one short run collects its groups in this
process, then a fresh copy of the model accumulates their gradients once per mode and repeat, in turns. It counts the
tokens the decoder runs (padding included) against the rows' tokens, and the update's CPU seconds. Writes the
``affordability_prefix`` section and ``results/affordability_prefix.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.learning_study.grid import CPU_AUTOCAST, ENVS
from benchmarks.results_page import machine, machine_line, write_section

#: name -> (what it changes, extra ``r3l train`` arguments, extra env kwargs); each row adds its lever to the one
#: above. "before" is the learner as it was before the levers (TextWorld's title banner in every prompt).
VARIANTS: dict[str, tuple[str, list[str], list[str]]] = {
    "before": (
        "full fine-tuning, title banner, every turn scored from scratch",
        ["--prompt-cache-mb", "0", "--shared-prefix-min", "0"],
        ["banner=True"],
    ),
    "compact": (
        "+ no title banner in the first observation (now the default)",
        ["--prompt-cache-mb", "0", "--shared-prefix-min", "0"],
        [],
    ),
    "cache": (
        "+ the prompt KV cache: across turns, and a batch's common prefix once (now the default)",
        ["--shared-prefix-min", "0"],
        [],
    ),
    "shared": (
        "+ the update runs a micro-batch's common prefix once",
        ["--no-shared-prefix-tree"],
        [],
    ),
    "tree": ("+ the update runs every span a micro-batch's rows share once: a prefix tree (now the default)", [], []),
    "lora": ("+ LoRA r=16 instead of full fine-tuning", ["--lora-rank", "16"], []),
}


def train_args(env_key: str, steps: int, tasks: int, group: int, algo: str, kwargs: list[str]) -> list[str]:
    """The ``r3l train`` arguments of a variant with env kwargs ``kwargs`` added to the study's."""
    env = ENVS[env_key]
    kwargs = [f"{k}={v}" for k, v in env.kwargs.items()] + kwargs
    return [
        *("--env", env.env, "--env-kwargs", *kwargs, "--actions", env.actions),
        *("--max-turns", str(env.max_turns), "--max-new-tokens", str(env.max_new_tokens)),
        *("--algo", algo, "--reflector", "oracle", "--steps", str(steps), "--tasks-per-step", str(tasks)),
        *("--group-size", str(group), "--eval-episodes", "0", "--autocast", CPU_AUTOCAST, "--seed", "0"),
        *("--no-progress", "--no-save-final", "--no-tensorboard", "--checkpoint-every", "0"),
    ]


def warm_up(env_key: str, tasks: int) -> None:
    """Start every task the runs will draw once, so that one-off work (TextWorld compiles its games into the cache)
    is paid here and by no variant."""
    import gymnasium as gym

    import r3l_envs  # noqa: F401  (registers the envs)

    env = ENVS[env_key]
    instance = gym.make(env.env, **{**env.kwargs, "max_tasks": tasks})
    try:
        for task_id in instance.unwrapped.task_ids:
            instance.reset(options={"task_id": task_id})
    finally:
        instance.close()


def measure(name: str, args: list[str], threads: int) -> dict:
    """Run one variant; its per-step CPU seconds and trajectories (first step left out)."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        start = time.perf_counter()
        cmd = [sys.executable, "-m", "r3l_learn.cli.main", "train", *args, "--out-dir", out]
        subprocess.run(cmd, check=True, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        steps = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if "speed/collect_cpu_s" in s][1:]
    if not steps:
        raise SystemExit(f"{name}: no step after the first was logged; use --steps >= 2")
    traj = sum(s["train/trajectories"] for s in steps)
    collect = sum(s["speed/collect_cpu_s"] for s in steps)
    update = sum(s["speed/update_cpu_s"] for s in steps)
    tokens = sum(s["speed/train_tokens_per_s"] * s["speed/update_s"] for s in steps)
    return {
        "variant": name,
        "steps": len(steps),
        "trajectories": traj,
        "tokens_per_trajectory": tokens / traj,
        "collect_cpu_s_per_trajectory": collect / traj,
        "update_cpu_s_per_trajectory": update / traj,
        "trajectories_per_cpu_hour": 3600 * traj / (collect + update),
        "wall_s": wall,
    }


def flops_per_token(model: str) -> int:
    """FLOPs a training step spends per token on ``model``'s matmuls: 2 per weight forward, 4 backward."""
    from transformers import AutoConfig

    from r3l_learn.policies.models import resolve_model

    c = AutoConfig.from_pretrained(resolve_model(model))
    kv = c.num_key_value_heads * (c.hidden_size // c.num_attention_heads)
    per_layer = 2 * c.hidden_size * c.hidden_size + 2 * c.hidden_size * kv + 3 * c.hidden_size * c.intermediate_size
    return 6 * (c.num_hidden_layers * per_layer + c.hidden_size * c.vocab_size)  # + the LM head


def matmul_peak(dtype: str, threads: int, n: int = 1024, repeats: int = 30) -> float:
    """FLOP/s per CPU-second of an ``n``×``n`` matrix product in ``dtype`` on ``threads`` threads (best of three)."""
    import torch

    torch.set_num_threads(threads)
    kind = torch.bfloat16 if dtype == "bf16" else torch.float32
    a, b = torch.randn(n, n, dtype=kind), torch.randn(n, n, dtype=kind)
    a @ b  # warm-up: the kernel's first call
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(repeats):
            a @ b
        best = min(best, time.process_time() - start)
    return 2 * n**3 * repeats / best


def add_flops(rows: list[dict], flops: int, peak: float) -> None:
    """Each row's effective update FLOP/s per CPU-second, and its share of the measured peak."""
    for row in rows:
        row["update_flops_per_cpu_s"] = flops * row["tokens_per_trajectory"] / row["update_cpu_s_per_trajectory"]
        row["peak_share"] = row["update_flops_per_cpu_s"] / peak


def render(rows: list[dict], facts: dict, command: str, loads: tuple, limits: dict) -> str:
    base = rows[0]["trajectories_per_cpu_hour"]
    lines = [
        "## Trajectories trained per CPU-hour, lever by lever (`benchmarks/affordability.py`)",
        "",
        machine_line(facts),
        "",
        f"`{command}`; load average {loads[0]:.1f} at the start and {loads[1]:.1f} at the end. CPU seconds are the "
        "process's, all threads; the games were compiled beforehand and the first step of each run is left out. "
        "In every row the update's decoder stops at a micro-batch's last trained token (exact, so not a lever here). "
        f"Weights in float32, computed under {limits['dtype']} autocast (the study's cpu mode on this CPU); group size "
        f"{limits.get('group_size', '?')}.",
        "",
        "| variant | what changes | trajectories | tokens / trajectory | collect CPU s / traj | update CPU s / traj "
        "| update GFLOP/s per CPU-s (share of peak) | trajectories / CPU-hour | vs first row |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['variant']} | {VARIANTS[row['variant']][0]} | {row['trajectories']} | "
            f"{row['tokens_per_trajectory']:.0f} | {row['collect_cpu_s_per_trajectory']:.2f} | "
            f"{row['update_cpu_s_per_trajectory']:.2f} | {row['update_flops_per_cpu_s'] / 1e9:.1f} "
            f"({row['peak_share']:.0%}) | {row['trajectories_per_cpu_hour']:.0f} | "
            f"{row['trajectories_per_cpu_hour'] / base:.2f}× |"
        )
    best = max(rows, key=lambda row: row["trajectories_per_cpu_hour"])
    lines += [
        "",
        f"The machine's limit: a {limits['dtype']} matrix product ({limits['n']}×{limits['n']}) runs at "
        f"{limits['peak_flops_per_cpu_s'] / 1e9:.1f} GFLOP/s per CPU-second here, and a trajectory's update needs "
        f"{limits['flops_per_token'] * best['tokens_per_trajectory'] / 1e9:.0f} GFLOP "
        f"({limits['flops_per_token'] / 1e6:.0f} MFLOP per row token: 6 per matmul weight of {limits['model']}, "
        "the LM head included). At that peak the update alone would cost "
        f"{limits['flops_per_token'] * best['tokens_per_trajectory'] / limits['peak_flops_per_cpu_s']:.2f} CPU-s "
        f"per trajectory, against {best['update_cpu_s_per_trajectory']:.2f} measured in the fastest row "
        f"({best['variant']}); its rollouts add {best['collect_cpu_s_per_trajectory']:.2f}. The effective rate counts "
        "every row token, so sharing prefixes (shared spans run once) raises it without raising the real one.",
    ]
    return "\n".join(lines)


#: how the update shares a micro-batch's prefixes: name -> (what it does, LossConfig fields)
PREFIX_MODES: dict[str, tuple[str, dict]] = {
    "plain": ("every row runs all its tokens", {"min_shared_prefix": 0}),
    "shared": ("a micro-batch's common prefix once (one level)", {"prefix_levels": 1}),
    "tree": ("every span a micro-batch's rows share once (a prefix tree)", {"prefix_levels": None}),
}


def collect_groups(args: argparse.Namespace) -> tuple[Any, list]:
    """One short ``r3l train`` run in this process (the study's setting): its config and every step's groups."""
    from r3l_learn.cli.train_args import ConfigArgumentParser, add_train_arguments, config_from_args
    from r3l_learn.loop.train import train

    parser = ConfigArgumentParser()
    add_train_arguments(parser)
    tasks = args.steps * args.tasks_per_step
    common = train_args(args.env, args.steps, args.tasks_per_step, args.group_size, args.algo, [f"max_tasks={tasks}"])
    groups: list = []
    with tempfile.TemporaryDirectory() as out:
        config = config_from_args(parser.parse_args([*common, "--out-dir", out]))
        train(config, on_step=[lambda info: groups.extend(info.groups)])
    return config, groups


def measure_prefix_modes(config: Any, groups: list, repeats: int, modes: list[str], sizes: list[int]) -> list[dict]:
    """The update of ``groups``' rows under each of ``modes`` (:data:`PREFIX_MODES`) and micro-batch sizes, on a
    fresh model (no optimiser step, so every pass sees the same weights); CPU seconds are the fastest of ``repeats``
    passes, made in turns."""
    import torch

    from r3l_learn.algorithms.batch import rows_from_groups
    from r3l_learn.algorithms.update import LossConfig, accumulate_gradients
    from r3l_learn.loop.setup import load_train_policy
    from r3l_learn.policies.device import resolve_autocast

    policy = load_train_policy(config)
    model = policy.model
    model.train()
    rows = rows_from_groups(groups, config.algorithm, hyper=config.hyper_values())
    trajectories = sum(len(g.trajectories) for g in groups)
    autocast = torch.bfloat16 if resolve_autocast(config.autocast, config.device) == "bf16" else None
    ran = [0]

    def count(module: Any, args: tuple, kwargs: dict) -> None:
        ran[0] += kwargs["input_ids"].numel()

    hook = model.get_decoder().register_forward_pre_hook(count, with_kwargs=True)
    results = {(size, name): {"cpu": [], "ran": 0, "tokens": 0} for size in sizes for name in modes}
    try:
        for _ in range(repeats):
            for size, name in results:
                fields = PREFIX_MODES[name][1]
                loss = LossConfig.for_algorithm(
                    config.algorithm,
                    config.hyper_values(),
                    aux_weight=config.aux_weight,
                    aggregation=config.aggregation,
                    aux_mean=config.aux_mean,
                    kl_estimator=config.kl_estimator,
                    chunk_size=config.logprob_chunk,
                    **{"min_shared_prefix": config.shared_prefix_min, **fields},
                )
                model.zero_grad(set_to_none=True)
                ran[0], start = 0, time.process_time()
                stats = accumulate_gradients(
                    model,
                    rows,
                    loss,
                    micro_batch_size=size,
                    pad_id=policy.pad_token_id,
                    autocast=autocast,
                )
                results[size, name]["cpu"].append(time.process_time() - start)
                results[size, name]["ran"], results[size, name]["tokens"] = ran[0], stats.tokens
    finally:
        hook.remove()
    return [
        {
            "mode": name,
            "micro_batch_size": size,
            "autocast": "bf16" if autocast is not None else "off",
            "trajectories": trajectories,
            "rows": len(rows),
            "row_tokens": r["tokens"],
            "decoder_tokens": r["ran"],
            "decoder_tokens_per_row_token": r["ran"] / r["tokens"],
            "update_cpu_s_per_trajectory": min(r["cpu"]) / trajectories,
            "update_cpu_s_all": r["cpu"],
        }
        for (size, name), r in results.items()
    ]


def render_prefix(rows: list[dict], facts: dict, command: str, loads: tuple) -> str:
    lines = [
        "### The update alone, by how it shares prefixes (`benchmarks/affordability.py --prefix-modes`)",
        "",
        machine_line(facts),
        "",
        f"`{command}`; load average {loads[0]:.1f} at the start and {loads[1]:.1f} at the end (a machine shared by "
        f"about 8 engineers). The same {rows[0]['rows']} rows ({rows[0]['trajectories']} trajectories with their "
        "auxiliary samples) updated by a fresh SmolLM2-135M (float32 weights, "
        f"{rows[0]['autocast']} autocast) once per mode and repeat, in turns; CPU seconds are the process's, the "
        "fastest repeat. Decoder tokens include padding.",
        "",
        "| micro-batch | mode | decoder tokens / row token | update CPU s / trajectory | vs one level |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        same = [r for r in rows if r["mode"] == "shared" and r["micro_batch_size"] == row["micro_batch_size"]]
        versus = f"{same[0]['update_cpu_s_per_trajectory'] / row['update_cpu_s_per_trajectory']:.2f}×" if same else "–"
        lines.append(
            f"| {row['micro_batch_size']} | {row['mode']}: {PREFIX_MODES[row['mode']][0]} | "
            f"{row['decoder_tokens_per_row_token']:.3f} | {row['update_cpu_s_per_trajectory']:.2f} | {versus} |"
        )
    return "\n".join(lines)


def prefix_modes(args: argparse.Namespace, argv: list[str] | None) -> None:
    facts, loads = machine(), [os.getloadavg()[0]]
    warm_up(args.env, args.steps * args.tasks_per_step)
    config, groups = collect_groups(args)
    sizes = args.micro_batch_sizes or [config.micro_batch_size]
    rows = measure_prefix_modes(config, groups, args.repeats, args.modes, sizes)
    for row in rows:
        print(json.dumps(row), flush=True)
    loads.append(os.getloadavg()[0])
    command = "python -m benchmarks.affordability " + " ".join(argv if argv is not None else sys.argv[1:])
    data = {"machine": facts, "command": command, "loads": loads, "env": args.env, "rows": rows}
    markdown = render_prefix(rows, facts, command.strip(), tuple(loads))
    write_section("affordability_prefix", markdown, data)


def rerender(path: Path) -> None:
    """Rewrite the ``affordability`` section from a run's saved JSON (after a change to the page's wording)."""
    data = json.loads(path.read_text())
    markdown = render(data["rows"], data["machine"], data["command"].strip(), tuple(data["loads"]), data["limits"])
    write_section("affordability", markdown, data)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="textworld", choices=sorted(ENVS))
    parser.add_argument("--algo", default="r3l")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8, help="the paper's N (and the pre-registered study's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (runs go one at a time)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--prefix-modes", action="store_true", help="measure the update alone, per prefix sharing")
    parser.add_argument("--repeats", type=int, default=2, help="passes per mode of --prefix-modes")
    parser.add_argument("--modes", nargs="+", default=list(PREFIX_MODES), choices=list(PREFIX_MODES))
    parser.add_argument("--micro-batch-sizes", nargs="+", type=int, help="of --prefix-modes (default: the run's)")
    parser.add_argument("--render", type=Path, help="measure nothing: rewrite the section from this saved JSON")
    args = parser.parse_args(argv)
    if args.render:
        rerender(args.render)
        return
    if args.prefix_modes:
        prefix_modes(args, argv)
        return
    facts, loads = machine(), [os.getloadavg()[0]]
    tasks = args.steps * args.tasks_per_step
    warm_up(args.env, tasks)
    rows = []
    for name in args.variants:
        _, extra, kwargs = VARIANTS[name]
        kwargs = [*kwargs, f"max_tasks={tasks}"]
        common = train_args(args.env, args.steps, args.tasks_per_step, args.group_size, args.algo, kwargs)
        rows.append(measure(name, common + extra, args.threads))
        print(json.dumps(rows[-1]), flush=True)
    from r3l_learn.policies.device import resolve_autocast
    from r3l_learn.policies.models import DEFAULT_MODEL

    dtype = "bf16" if resolve_autocast(CPU_AUTOCAST, "cpu") == "bf16" else "fp32"
    limits = {"model": DEFAULT_MODEL, "dtype": dtype, "n": 1024, "flops_per_token": flops_per_token(DEFAULT_MODEL)}
    limits["group_size"] = args.group_size
    limits["peak_flops_per_cpu_s"] = matmul_peak(dtype, args.threads, limits["n"])
    add_flops(rows, limits["flops_per_token"], limits["peak_flops_per_cpu_s"])
    loads.append(os.getloadavg()[0])
    command = "python -m benchmarks.affordability " + " ".join(argv if argv is not None else sys.argv[1:])
    data = {
        "machine": facts,
        "command": command,
        "loads": loads,
        "env": args.env,
        "group_size": args.group_size,
        "limits": limits,
        "rows": rows,
    }
    write_section("affordability", render(rows, facts, command.strip(), tuple(loads), limits), data)


if __name__ == "__main__":
    main()
