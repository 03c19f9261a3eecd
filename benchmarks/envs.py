"""Env speed: steps/s, reset, checkpoint and restore times, and restore vs replay-from-reset as ratios.

For every registered ``r3l/*`` env whose data is on this machine:

* ``reset`` — mean seconds per ``reset(seed=i)``;
* ``steps/s`` — steps under a seeded random policy (admissible actions where the env lists them);
* ``checkpoint`` / ``restore`` — mean seconds per ``r3l_envs.checkpoint`` / ``r3l_envs.restore`` (the env's
  own restore kind);
* ``replay/restore @k`` — time to get back to step k by reset + replaying the k actions, divided by the time
  of ``restore`` of a checkpoint taken at step k. Both are measured in the same run, so the ratio is robust
  to the noise of a shared machine; > 1 means restore is faster.

Run: ``python -m benchmarks.envs [--envs r3l/Countdown-v0 ...] [--quick]``. Writes the ``envs`` section of
``benchmarks/RESULTS.md`` and ``benchmarks/results/envs.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

import r3l_envs
from benchmarks.results_page import machine, machine_line, write_section
from r3l_envs.errors import DataNotFoundError

# Episodes must be long enough to checkpoint at step 50: lift the envs' own episode limits where they have one.
BENCH_KWARGS: dict[str, dict[str, Any]] = {
    "r3l/Countdown-v0": {"max_attempts": 1000},
    "r3l/GSMSymbolic-v0": {"max_attempts": 1000},
    "r3l/CHAMP-v0": {"max_attempts": 1000},
}
DEPTHS = (5, 20, 50)
_FREE_TEXT = ("The answer is 42.", "\\boxed{7}", "<answer>3</answer>", "look around")


def _action(info: dict[str, Any], rng: np.random.Generator) -> str:
    pool = info.get("admissible_actions") or _FREE_TEXT
    return pool[int(rng.integers(len(pool)))]


def _timed(fn, repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _prefix(env: gym.Env, seed: int, depth: int) -> tuple[str, list[str]]:
    """Play ``depth`` non-terminal steps from ``reset(seed)``; return the task id and the actions."""
    _, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    actions: list[str] = []
    for _ in range(100 * depth):
        if len(actions) == depth:
            return info["task_id"], actions
        action = _action(info, rng)
        _, _, terminated, truncated, step_info = env.step(action)
        if terminated or truncated:  # keep the prefix live: start over with the next draw
            _, info = env.reset(seed=seed)
            for a in actions:
                _, _, _, _, info = env.step(a)
            continue
        actions.append(action)
        info = step_info
    if len(actions) == depth:
        return info["task_id"], actions
    raise RuntimeError(f"could not play {depth} steps without the episode ending")


def bench_env(env_id: str, *, quick: bool) -> dict[str, Any]:
    kwargs = {**BENCH_KWARGS.get(env_id, {}), "max_episode_steps": 10_000}
    t0 = time.perf_counter()
    env = gym.make(env_id, **kwargs)
    env.reset(seed=0)
    first = time.perf_counter() - t0
    n_resets, n_steps, repeat = (5, 100, 3) if quick else (20, 1000, 10)

    # Warm up a fixed set of tasks first: envs that build games on first use (TextWorld, ALFWorld) report
    # that one-off cost as first_make_reset_s, not as reset or step time.
    task_ids = [env.reset(seed=i)[1]["task_id"] for i in range(n_resets)]
    reset_s = statistics.mean(_timed(lambda t=t: env.reset(options={"task_id": t}), 1) for t in task_ids)

    rng = np.random.default_rng(0)
    _, info = env.reset(options={"task_id": task_ids[0]})
    start = time.perf_counter()
    for i in range(n_steps):
        _, _, terminated, truncated, info = env.step(_action(info, rng))
        if terminated or truncated:
            _, info = env.reset(options={"task_id": task_ids[i % len(task_ids)]})
    steps_per_s = n_steps / (time.perf_counter() - start)

    row: dict[str, Any] = {
        "env": env_id,
        "restore_kind": env.unwrapped.restore_kind,
        "first_make_reset_s": first,
        "reset_s": reset_s,
        "steps_per_s": steps_per_s,
    }
    for depth in DEPTHS:
        task_id, actions = _prefix(env, seed=1, depth=depth)
        ckpt = r3l_envs.checkpoint(env)
        if depth == DEPTHS[0]:
            row["checkpoint_s"] = _timed(lambda: r3l_envs.checkpoint(env), repeat)

        def replay(task_id=task_id, actions=actions):
            env.reset(options={"task_id": task_id})
            for a in actions:
                env.step(a)

        restore_s = _timed(lambda ckpt=ckpt: r3l_envs.restore(env, ckpt), repeat)
        replay_s = _timed(replay, repeat)
        row[f"restore_s@{depth}"] = restore_s
        row[f"replay_over_restore@{depth}"] = replay_s / restore_s
    env.close()
    return row


def _markdown(rows: list[dict[str, Any]], skipped: dict[str, str], facts: dict[str, str], command: str) -> str:
    head = "| env | restore | reset ms | steps/s | checkpoint ms | restore ms @5/20/50 | replay ÷ restore @5/20/50 |"
    lines = ["## Environments: speed and restore", "", machine_line(facts), f"Command: `{command}`", "", head]
    lines.append("|---|---|---|---|---|---|---|")
    for r in rows:
        restores = " / ".join(f"{r[f'restore_s@{d}'] * 1e3:.2f}" for d in DEPTHS)
        ratios = " / ".join(f"{r[f'replay_over_restore@{d}']:.1f}×" for d in DEPTHS)
        lines.append(
            f"| {r['env']} | {r['restore_kind']} | {r['reset_s'] * 1e3:.2f} | {r['steps_per_s']:.0f} | "
            f"{r['checkpoint_s'] * 1e3:.3f} | {restores} | {ratios} |"
        )
    if skipped:
        lines += ["", "Not measured (no data on this machine): " + ", ".join(f"{k} ({v})" for k, v in skipped.items())]
    lines += [
        "",
        "Medians of repeated calls. `replay ÷ restore @k`: seconds to reach step k by reset + replaying the k actions,",
        "divided by seconds of `r3l_envs.restore` of a checkpoint taken at step k, measured in the same run.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="*", default=None, help="ids to measure (default: every registered id)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (for a smoke run)")
    args = parser.parse_args(argv)
    rows, skipped = [], {}
    for env_id in args.envs or r3l_envs.list_envs():
        try:
            rows.append(bench_env(env_id, quick=args.quick))
        except DataNotFoundError as exc:
            skipped[env_id] = str(exc).split(".")[0]
            continue
        print(f"{env_id}: {rows[-1]['steps_per_s']:.0f} steps/s", flush=True)
    facts = machine()
    command = "python -m benchmarks.envs" + (" --quick" if args.quick else "")
    if args.envs:
        command += " --envs " + " ".join(args.envs)
    write_section(
        "envs", _markdown(rows, skipped, facts, command), {"machine": facts, "rows": rows, "skipped": skipped}
    )


if __name__ == "__main__":
    main()
