"""TextWorld and ALFWorld: steps/s with admissible actions, native restore vs reset + replay, exact speed-ups.

All ALFWorld numbers are on games from our offline generator (``source="generated"``), not the official
ALFWorld data. Measured:

* ALFWorld steps/s with admissible actions: random admissible actions on a generated kitchen through
  ``gym.make`` (its TimeLimit of 50 steps, so resets are included), with our speed-ups and, as the baseline,
  in a child process with ``speedups.set_enabled(False)`` (the engine as shipped);
* bit-identical traces: a random 6-task run (one task per task type, with a checkpoint, a divergence and a
  native restore in each) must give the same transcript digest with and without the speed-ups;
* restore at step 20: native restore vs reset + verified replay of the 20 actions (ratio, target >= 10x);
* TextWorld (cooking, level 1): steps/s with admissible actions, native restore ms (target <= 2 ms) and the
  same ratio against replay.

Run: ``python -m benchmarks.textworld_alfworld``. Writes the ``textworld_alfworld`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import time

from benchmarks.results_page import machine, machine_line, write_section

ALFWORLD = "r3l/ALFWorld-v0"
TEXTWORLD = "r3l/TextWorld-v0"
KITCHEN = 2  # alfgen-train-00002: a generated kitchen with ~35 admissible commands per step


def _steps_per_second(env, task_id: str, steps: int, seed: int = 0) -> dict:
    """Random admissible actions for ``steps`` steps, resetting the same task when an episode ends."""
    rng = random.Random(seed)
    _, info = env.reset(options={"task_id": task_id})
    commands, resets = [], 0
    start = time.perf_counter()
    for _ in range(steps):
        *_, terminated, truncated, info = env.step(rng.choice(info["admissible_actions"]))
        commands.append(len(info["admissible_actions"]))
        if terminated or truncated:
            _, info = env.reset(options={"task_id": task_id})
            resets += 1
    seconds = time.perf_counter() - start
    return {
        "steps_per_s": steps / seconds,
        "steps": steps,
        "resets": resets,
        "mean_commands": statistics.mean(commands),
    }


def _digest_run(env, steps: int = 20) -> str:
    """Digest of a random run over the first 6 tasks (one per task type), with a native restore in each."""
    import r3l_envs

    digest = hashlib.sha256()
    rng = random.Random(1)
    for task_id in env.unwrapped.task_ids[:6]:
        obs, info = env.reset(options={"task_id": task_id})
        digest.update(repr((obs, info)).encode())
        ckpt = None
        for step in range(steps):
            if step == 8:
                ckpt = r3l_envs.checkpoint(env)
            if step == 14:
                r3l_envs.restore(env, ckpt)
            out = env.step(rng.choice(info["admissible_actions"]))
            digest.update(repr(out).encode())
            info = out[4]
            if out[2] or out[3]:
                break
    return digest.hexdigest()


def alfworld_child(steps: int, speedups: bool) -> None:
    """Steps/s and the trace digest in this process, with or without the speed-ups."""
    import gymnasium as gym

    import r3l_envs  # noqa: F401 - registers the ids
    from r3l_envs.alfworld import speedups as alfworld_speedups

    alfworld_speedups.set_enabled(speedups)

    env = gym.make(ALFWORLD, max_tasks=6)
    digest = _digest_run(env)
    speed = _steps_per_second(env, env.unwrapped.task_ids[KITCHEN], steps)
    print(json.dumps({"digest": digest, **speed}), flush=True)


def _in_child(speedups: bool, steps: int) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.textworld_alfworld", "--alfworld-child", str(steps)]
    cmd += [] if speedups else ["--no-speedups"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _restore_vs_replay(env, task_id: str, at_step: int, repeats: int, replays: int) -> dict:
    import r3l_envs

    rng = random.Random(2)
    _, info = env.reset(options={"task_id": task_id})
    for _ in range(at_step):
        *_, info = env.step(rng.choice(info["admissible_actions"]))
    checkpoint_ms = []
    ckpt = None
    for _ in range(5):
        start = time.perf_counter()
        ckpt = r3l_envs.checkpoint(env)
        checkpoint_ms.append(1000 * (time.perf_counter() - start))
    expected = [env.step(a) for a in ("look", "inventory")]

    def timed(via: str, count: int) -> list[float]:
        out = []
        for _ in range(count):
            for _ in range(3):  # move away first
                pool = env.unwrapped._episode.info["admissible_actions"]
                _, _, terminated, truncated, _ = env.step(rng.choice(pool))
                if terminated or truncated:
                    break
            start = time.perf_counter()
            r3l_envs.restore(env, ckpt, via=via)
            out.append(1000 * (time.perf_counter() - start))
            assert [env.step(a) for a in ("look", "inventory")] == expected, f"restore via {via} is not exact"
            r3l_envs.restore(env, ckpt, via=via)
        return out

    native = statistics.median(timed("native", repeats))
    replay = statistics.median(timed("replay", replays))
    return {
        "step": at_step,
        "checkpoint_ms": statistics.median(checkpoint_ms),
        "restore_ms": native,
        "replay_ms": replay,
        "ratio": replay / native,
        "checkpoint_kb": len(ckpt.to_bytes()) / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--alfworld-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-speedups", action="store_true", help=argparse.SUPPRESS)  # the child's baseline
    parser.add_argument("--steps", type=int, default=1000, help="ALFWorld steps timed with the speed-ups")
    parser.add_argument("--baseline-steps", type=int, default=60, help="ALFWorld steps timed without them")
    args = parser.parse_args()
    if args.alfworld_child is not None:
        alfworld_child(args.alfworld_child, speedups=not args.no_speedups)
        return

    import gymnasium as gym

    import r3l_envs  # noqa: F401 - registers the ids

    fast = _in_child(True, args.steps)
    slow = _in_child(False, args.baseline_steps)
    alf = gym.make(ALFWORLD, max_tasks=6)
    alf_restore = _restore_vs_replay(alf, alf.unwrapped.task_ids[KITCHEN], 20, repeats=20, replays=3)
    alf.close()

    tw = gym.make(TEXTWORLD, game_type="cooking", difficulty=1, max_tasks=1)
    tw_task = tw.unwrapped.task_ids[0]
    tw.reset(options={"task_id": tw_task})  # builds the game into the cache if needed (not timed)
    tw_speed = _steps_per_second(tw, tw_task, 2000)
    tw_restore = _restore_vs_replay(tw, tw_task, 20, repeats=50, replays=10)
    tw.close()

    facts = machine()
    data = {
        "machine": facts,
        "alfworld": {
            "source": "generated",
            "speedups": fast,
            "baseline_no_speedups": slow,
            "speedup_ratio": fast["steps_per_s"] / slow["steps_per_s"],
            "traces_identical": fast["digest"] == slow["digest"],
            "restore_at_20": alf_restore,
        },
        "textworld": {"steps": tw_speed, "restore_at_20": tw_restore},
    }
    a, t = data["alfworld"], data["textworld"]
    rows = [
        ("measure", "value", "target"),
        ("---", "---", "---"),
        (
            f"ALFWorld steps/s with admissible actions (kitchen, ~{fast['mean_commands']:.0f} commands/step)",
            f"{fast['steps_per_s']:.0f}",
            ">= 200",
        ),
        ("same, engine as shipped (speed-ups off, same run)", f"{slow['steps_per_s']:.1f}", ""),
        ("speed-up", f"{a['speedup_ratio']:.0f}x", ""),
        (
            "6-task transcript digest (with native restores), with vs without speed-ups",
            f"{'identical' if a['traces_identical'] else 'DIFFERENT'} (`{fast['digest'][:16]}`)",
            "identical",
        ),
        ("ALFWorld native restore at step 20 (median)", f"{alf_restore['restore_ms']:.2f} ms", "~5 ms"),
        ("ALFWorld reset + verified replay of 20 steps (median)", f"{alf_restore['replay_ms']:.0f} ms", ""),
        ("ALFWorld restore vs replay", f"{alf_restore['ratio']:.0f}x", ">= 10x"),
        (
            "ALFWorld checkpoint (median) / size",
            f"{alf_restore['checkpoint_ms']:.2f} ms / {alf_restore['checkpoint_kb']:.0f} KB",
            "",
        ),
        ("TextWorld steps/s with admissible actions (cooking level 1)", f"{t['steps']['steps_per_s']:.0f}", ""),
        ("TextWorld native restore at step 20 (median)", f"{tw_restore['restore_ms']:.2f} ms", "<= 2 ms"),
        ("TextWorld reset + verified replay of 20 steps (median)", f"{tw_restore['replay_ms']:.1f} ms", ""),
        ("TextWorld restore vs replay", f"{tw_restore['ratio']:.0f}x", ""),
    ]
    table = "\n".join("| " + " | ".join(row) + " |" for row in rows)
    markdown = f"""
## TextWorld and ALFWorld (`benchmarks/textworld_alfworld.py`)

{machine_line(facts)}

ALFWorld games are from our offline generator (`source="generated"`), not the official ALFWorld data.
Random admissible actions through `gym.make` (TimeLimit 50: resets are included in steps/s).

{table}

The replay baseline restarts the game with the speed-ups on (the PDDL translation of the game is cached
after its first reset, so replay is mostly the 20 re-derived steps); a cold first reset of a kitchen costs
1-3 s more.
"""
    print(markdown)
    write_section("textworld_alfworld", markdown, data)


if __name__ == "__main__":
    main()
