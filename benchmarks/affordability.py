"""Trajectories trained per CPU-hour: where a training step's time goes, and what each lever saves.

Each variant is a short ``r3l train`` run (no evals) in its own process, on the learning study's TextWorld
setting (``learning_study.grid.ENVS``), with the same seed, tasks and group size. From its ``metrics.jsonl``:
the CPU seconds of collection (rollouts, env steps, retries) and of the update (forward, backward, optimiser),
summed over every thread of the process, so a loaded machine slows the wall clock but hardly these. The runs draw
their tasks from the first ``steps × tasks-per-step`` of the train split, each started once beforehand (TextWorld
compiles a game into its cache the first time), and the first step of each run is left out (first allocations).

Run: ``python benchmarks/affordability.py [--steps 3] [--tasks-per-step 2] [--variants before cache shared lora]``.
Writes the ``affordability`` section of ``benchmarks/RESULTS.md`` and ``benchmarks/results/affordability.json``.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import machine, machine_line, write_section
from learning_study.grid import CPU_AUTOCAST, ENVS

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
    "shared": ("+ the update runs a micro-batch's common prefix once (now the default)", [], []),
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
        cmd = [sys.executable, "-m", "r3l_learn.cli", "train", *args, "--out-dir", out]
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


def render(rows: list[dict], facts: dict, command: str, loads: tuple) -> str:
    base = rows[0]["trajectories_per_cpu_hour"]
    lines = [
        "## Trajectories trained per CPU-hour, lever by lever (`benchmarks/affordability.py`)",
        "",
        machine_line(facts),
        "",
        f"`{command}`; load average {loads[0]:.1f} at the start and {loads[1]:.1f} at the end. CPU seconds are the "
        "process's, all threads; the games were compiled beforehand and the first step of each run is left out. "
        "In every row the update's decoder stops at a micro-batch's last trained token (exact, so not a lever here).",
        "",
        "| variant | what changes | trajectories | tokens / trajectory | collect CPU s / traj | update CPU s / traj "
        "| trajectories / CPU-hour | vs first row |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['variant']} | {VARIANTS[row['variant']][0]} | {row['trajectories']} | "
            f"{row['tokens_per_trajectory']:.0f} | {row['collect_cpu_s_per_trajectory']:.2f} | "
            f"{row['update_cpu_s_per_trajectory']:.2f} | {row['trajectories_per_cpu_hour']:.0f} | "
            f"{row['trajectories_per_cpu_hour'] / base:.2f}× |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="textworld", choices=sorted(ENVS))
    parser.add_argument("--algo", default="r3l")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (runs go one at a time)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args(argv)
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
    loads.append(os.getloadavg()[0])
    command = "python benchmarks/affordability.py " + " ".join(argv if argv is not None else sys.argv[1:])
    data = {"machine": facts, "command": command, "loads": loads, "env": args.env, "rows": rows}
    write_section("affordability", render(rows, facts, command.strip(), tuple(loads)), data)


if __name__ == "__main__":
    main()
