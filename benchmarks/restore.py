"""Restore anywhere: a checkpoint restored in the instance that took it, in another instance, and by replay.

A retry may run on another env instance than its base (another thread's env, another Ray worker), so what a
restore costs *there* matters as much as in the instance that played the episode. For each env, a checkpoint
at step k of a seeded random episode (instance A) is restored:

* ``same`` — into A, which took it (median of repeats);
* ``other, first`` — into a fresh ``gym.make`` of the same id and kwargs (B), its first call (median over a few
  fresh instances; includes whatever the instance loads: a game, an engine);
* ``other, warm`` — into B, which has the game loaded, a *new* checkpoint each time (A plays the same k steps
  in a new episode before each): the case of a worker that receives other workers' checkpoints;
* ``other, again`` — the same checkpoint into B again (a worker retrying from one base several times);
* ``reset + replay`` — B reset to the task and the k actions replayed, the cost every restore had before
  restores were native in any instance;
* ``fresh process`` — seconds of the first restore in a new Python process (after ``import r3l_envs`` and
  ``gym.make``): the one-off engine and game loading a new worker pays.

Every restore in B is checked to be native where the env declares ``native`` (a replay there would raise).
Run: ``python -m benchmarks.restore [--envs r3l/ALFWorld-v0 ...] [--step 8] [--repeats 10]``. Writes the
``restore`` section of ``benchmarks/RESULTS.md`` and ``benchmarks/results/restore.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import r3l_envs
from benchmarks.results_page import machine, machine_line, write_section
from r3l_envs.errors import DataNotFoundError

# Small instances of each env; a large attempt budget keeps math episodes open for k wrong answers.
ENVS: dict[str, dict[str, Any]] = {
    "r3l/ALFWorld-v0": {"max_tasks": 6},
    "r3l/TextWorld-v0": {"game_type": "cooking", "difficulty": 1, "max_tasks": 2},
    "r3l/WebShop-v0": {"num_products": 1000},
    "r3l/ScienceWorld-v0": {},
    "r3l/Countdown-v0": {"max_attempts": 1000},
}
_FREE_TEXT = ("The answer is 42.", "<answer>0</answer>", "look around")


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _episode(env: gym.Env, steps: int, seed: int) -> tuple[str, list[str]]:
    """A task and ``steps`` actions of a seeded random policy that keep its episode open (``env`` is left there)."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    task_id, actions = info["task_id"], []
    for _ in range(50 * steps):
        if len(actions) == steps:
            return task_id, actions
        pool = info.get("admissible_actions") or _FREE_TEXT
        action = pool[int(rng.integers(len(pool)))]
        _, _, terminated, truncated, step_info = env.step(action)
        if terminated or truncated:  # that draw ended the episode: play the prefix again and draw anew
            _, info = env.reset(options={"task_id": task_id})
            for a in actions:
                *_, info = env.step(a)
            continue
        actions.append(action)
        info = step_info
    raise RuntimeError(f"could not play {steps} steps of {task_id} without the episode ending")


def _replay_forbidden(env: gym.Env) -> None:
    """Make a replay in ``env`` raise, so every restore measured there is native (for envs that declare it)."""

    def no_replay(episode: Any) -> None:
        raise AssertionError(f"{type(env.unwrapped).__name__} restored by replay, not natively")

    env.unwrapped._replay = no_replay


def _fresh_process(env_id: str, kwargs: dict[str, Any], data: bytes) -> float:
    """Seconds of the first restore in a new process, after import and make."""
    code = (
        "import sys, time, gymnasium as gym, r3l_envs\n"
        f"env = gym.make({env_id!r}, **{kwargs!r})\n"
        "ckpt = r3l_envs.Checkpoint.from_bytes(open(sys.argv[1], 'rb').read(), trusted=True)\n"
        "t = time.perf_counter(); r3l_envs.restore(env, ckpt); print(time.perf_counter() - t)\n"
        "env.close()\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ckpt"
        path.write_bytes(data)
        done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def bench_env(env_id: str, *, step: int, repeats: int, fresh: int) -> dict[str, Any]:
    kwargs = ENVS.get(env_id, {})
    a = gym.make(env_id, **kwargs)
    task_id, actions = _episode(a, step, seed=1)
    ckpt = r3l_envs.checkpoint(a)
    native = a.unwrapped.restore_kind == "native"

    def play_in_a() -> r3l_envs.Checkpoint:
        a.reset(options={"task_id": task_id})
        for action in actions:
            a.step(action)
        return r3l_envs.checkpoint(a)

    same = [_timed(lambda: r3l_envs.restore(a, ckpt)) for _ in range(repeats)]
    first, others = [], []
    for _ in range(fresh):
        b = gym.make(env_id, **kwargs)
        if native:
            _replay_forbidden(b)
        data = ckpt.to_bytes()
        first.append(
            _timed(lambda b=b, data=data: r3l_envs.restore(b, r3l_envs.Checkpoint.from_bytes(data, trusted=True)))
        )
        others.append(b)
    b = others.pop()
    for env in others:
        env.close()
    warm, again = [], []
    for _ in range(repeats):
        new = play_in_a()  # a new episode in A: a checkpoint B has never seen
        warm.append(_timed(lambda new=new: r3l_envs.restore(b, new)))
        b.step(actions[0])  # move B away before restoring the same checkpoint again
        again.append(_timed(lambda new=new: r3l_envs.restore(b, new)))

    def replay() -> None:
        b.reset(options={"task_id": task_id})
        for action in actions:
            b.step(action)

    replays = [_timed(replay) for _ in range(max(3, repeats // 2))]
    a.close()
    b.close()
    row = {
        "env": env_id,
        "kwargs": kwargs,
        "restore_kind": a.unwrapped.restore_kind,
        "step": step,
        "same_s": statistics.median(same),
        "other_first_s": statistics.median(first),
        "other_warm_s": statistics.median(warm),
        "other_again_s": statistics.median(again),
        "replay_s": statistics.median(replays),
        "fresh_process_s": _fresh_process(env_id, kwargs, ckpt.to_bytes()),
    }
    row["replay_over_other_warm"] = row["replay_s"] / row["other_warm_s"]
    return row


def _markdown(rows: list[dict[str, Any]], skipped: dict[str, str], facts: dict[str, str], note: str) -> str:
    head = (
        "| env | kind | step | same ms | other: first ms | other: warm ms | other: again ms | reset + replay ms "
        "| replay ÷ other warm | fresh process s |"
    )
    lines = ["## Restore anywhere: same instance vs another instance vs replay", "", machine_line(facts), note, ""]
    lines += [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['env']} | {r['restore_kind']} | {r['step']} | {r['same_s'] * 1e3:.2f} | "
            f"{r['other_first_s'] * 1e3:.1f} | {r['other_warm_s'] * 1e3:.2f} | {r['other_again_s'] * 1e3:.2f} | "
            f"{r['replay_s'] * 1e3:.1f} | {r['replay_over_other_warm']:.1f}× | {r['fresh_process_s']:.3f} |"
        )
    if skipped:
        lines += ["", "Not measured: " + ", ".join(f"{k} ({v})" for k, v in skipped.items())]
    lines += [
        "",
        "Medians. *same*: restore into the instance that took the checkpoint. *other: first*: the first restore into",
        "a fresh `gym.make` of the same id and kwargs (it loads the game). *other: warm*: into that instance, a",
        "checkpoint of a new episode each time. *other: again*: the same checkpoint into it once more.",
        "*reset + replay*: reset and replay the k actions there. *fresh process*: the first restore in a new Python",
        "process after import and make. Restores into another instance of a `native` env were checked to be native.",
        "",
        "Across instances: ALFWorld restarts the planner at the checkpoint's PDDL facts (a new fast-downward registry,",
        "`r3l_envs/alfworld/planner.py`) and then loads the snapshot as in its own episode; TextWorld sets jericho's",
        "machine state and TextWorld's tracker (the game's logic is loaded once per process); WebShop and the math",
        "envs hold plain Python state; ScienceWorld has no save API and restores by verified replay everywhere. The",
        "fresh-process column is mostly importing the engines (TextWorld parses its knowledge base at import): a",
        "worker pays it once, at its first reset or restore.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="*", default=None, help=f"ids to measure (default: {' '.join(ENVS)})")
    parser.add_argument("--step", type=int, default=8, help="the step the checkpoint is taken at")
    parser.add_argument("--repeats", type=int, default=10, help="restores per median")
    parser.add_argument("--fresh", type=int, default=3, help="fresh instances for 'other: first'")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    rows, skipped = [], {}
    for env_id in args.envs or list(ENVS):
        try:
            rows.append(bench_env(env_id, step=args.step, repeats=args.repeats, fresh=args.fresh))
        except DataNotFoundError as exc:
            skipped[env_id] = str(exc).split(".")[0]
            continue
        r = rows[-1]
        print(
            f"{env_id}: same {r['same_s'] * 1e3:.2f} ms, other warm {r['other_warm_s'] * 1e3:.2f} ms, "
            f"replay {r['replay_s'] * 1e3:.1f} ms",
            flush=True,
        )
    load_after = os.getloadavg()
    command = f"python -m benchmarks.restore --step {args.step} --repeats {args.repeats} --fresh {args.fresh}"
    if args.envs:
        command += " --envs " + " ".join(args.envs)
    note = (
        f"Command: `{command}`. Load average (1/5/15 min) before: {'/'.join(f'{x:.1f}' for x in load_before)}, "
        f"after: {'/'.join(f'{x:.1f}' for x in load_after)}."
    )
    facts = machine()
    data = {"machine": facts, "load_before": load_before, "load_after": load_after, "rows": rows, "skipped": skipped}
    write_section("restore", _markdown(rows, skipped, facts, note), data)


if __name__ == "__main__":
    main()
