"""Stress r3l/TextWorld-v0 (jericho's C interpreter behind ctypes) on threads and in processes; count crashes.

Each *attempt* is a child process (``python -X faulthandler``, so a native crash prints the Python stack of
every thread) that runs ``--threads`` threads at once. Every thread owns two envs and, for ``--rounds``
rounds, does what rollouts and checkers do: reset on a random task (switching games reloads the engine), step
random admissible and bad actions, checkpoint, restore natively and by replay, restore ``to_bytes`` copies
into its second env, pickle and deep-copy the env, drop or close envs (so jericho's finaliser runs on
whichever thread the garbage collector happens to be on), and now and then run ``r3l_envs.check_env`` on a
fresh env. ``--parallel`` attempts run at once (processes); the driver counts their exit codes (-11 is
SIGSEGV) and keeps the stderr of every failed attempt.

Run: ``python -m benchmarks.stress_textworld --attempts 40 --parallel 2`` (writes the ``stress_textworld``
section of ``benchmarks/RESULTS.md`` and ``benchmarks/results/stress_textworld.json`` unless ``--no-write``).
``--worker`` runs one attempt in this process (what the driver launches).
"""

from __future__ import annotations

import argparse
import collections
import copy
import gc
import os
import pickle
import random
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ENV_ID = "r3l/TextWorld-v0"
KWARGS = {"game_type": "cooking", "difficulty": 1, "max_tasks": 4}
BAD = ("", "x" * 5000, "look. quit", "undo", "\x00\x1b[31m", "🙂 ☃", "tw-trace-actions", "restore")


# ---------------------------------------------------------------------- one attempt (a child process)
def _thread(seed: int, rounds: int, check_every: int, copies: bool) -> int:
    import gymnasium as gym

    import r3l_envs

    rng = random.Random(seed)
    own, other = gym.make(ENV_ID, **KWARGS), gym.make(ENV_ID, **KWARGS)
    ops = 0
    for r in range(rounds):
        task = rng.choice(own.unwrapped.task_ids)
        _, info = own.reset(options={"task_id": task})
        ckpts = []
        for _ in range(rng.randint(2, 10)):
            action = rng.choice(BAD) if rng.random() < 0.2 else rng.choice(info["admissible_actions"])
            _, _, terminated, truncated, info = own.step(action)
            if rng.random() < 0.5:
                ckpts.append(r3l_envs.checkpoint(own))
            ops += 1
            if terminated or truncated:
                break
        for ckpt in rng.sample(ckpts, min(3, len(ckpts))):
            r3l_envs.restore(own, ckpt, via=rng.choice(("native", "replay")))
            r3l_envs.restore(other, r3l_envs.Checkpoint.from_bytes(ckpt.to_bytes(), trusted=True))
            other.step(rng.choice(BAD))
            ops += 2
        if copies and rng.random() < 0.3:  # a copy of the running env, played on and dropped
            clone = pickle.loads(pickle.dumps(own)) if rng.random() < 0.5 else copy.deepcopy(own)
            clone.step("look")
            del clone
            ops += 1
        if rng.random() < 0.3:  # replace the second env: closed, or left to the garbage collector
            if rng.random() < 0.5:
                other.close()
            other = gym.make(ENV_ID, **KWARGS)
        if rng.random() < 0.2:
            gc.collect()
        if check_every and r % check_every == check_every - 1:
            with gym.make(ENV_ID, **KWARGS) as env:
                r3l_envs.check_env(env, seed=rng.randrange(1000))
            ops += 1
    own.close()
    return ops


def worker(threads: int, rounds: int, check_every: int, seed: int, copies: bool) -> None:
    import r3l_envs.textworld.games as games

    # Build the games once, serially, so no thread waits minutes for the generator.
    for index in range(KWARGS["max_tasks"]):
        games.build_game(games.GameSpec(KWARGS["game_type"], KWARGS["difficulty"], "train", index))
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(_thread, seed * 1000 + i, rounds, check_every, copies) for i in range(threads)]
        ops = sum(f.result() for f in futures)
    print(f"ok: {threads} threads x {rounds} rounds, {ops} operations", flush=True)


# ---------------------------------------------------------------------- the driver
def _attempt(i: int, args: argparse.Namespace) -> tuple[int | str, str]:
    command = [sys.executable, "-X", "faulthandler", "-m", "benchmarks.stress_textworld", "--worker"]
    command += ["--threads", str(args.threads), "--rounds", str(args.rounds), "--check-every", str(args.check_every)]
    command += ["--seed", str(args.seed + i)] + ([] if args.copies else ["--no-copies"])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        return "timeout", (exc.stderr or b"")[-6000:].decode("utf-8", "replace")
    # A worker that printed its "ok" line and still died crashed in interpreter shutdown, after faulthandler
    # was torn down (which is why such crashes print nothing): keep stdout to tell the two apart.
    return done.returncode, done.stdout[-500:] + done.stderr[-6000:]


def drive(args: argparse.Namespace) -> dict:
    start = time.time()
    load_before = os.getloadavg()
    codes: collections.Counter[int | str] = collections.Counter()
    failures = []
    lock = threading.Lock()

    def run(i: int) -> None:
        code, stderr = _attempt(i, args)
        with lock:
            codes[code] += 1
            if code != 0:
                failures.append({"attempt": i, "exit_code": code, "stderr_tail": stderr})
                print(f"attempt {i}: exit {code}\n{stderr[-1500:]}", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(run, range(args.attempts)))
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "attempts": args.attempts,
        "parallel": args.parallel,
        "threads": args.threads,
        "rounds": args.rounds,
        "check_every": args.check_every,
        "copies": args.copies,
        "exit_codes": {str(k): v for k, v in sorted(codes.items(), key=str)},
        "crashes": sum(v for k, v in codes.items() if isinstance(k, int) and k < 0),
        "seconds": round(time.time() - start, 1),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "failures": failures,
    }


def _write(result: dict) -> None:
    from benchmarks.results_page import machine, machine_line, write_section

    facts = machine()
    codes = ", ".join(f"{k}: {v}" for k, v in result["exit_codes"].items())
    markdown = f"""## TextWorld stress (jericho on threads and in processes)

{machine_line(facts)}

`{result["command"]}`: {result["attempts"]} attempts, {result["parallel"]} at a time, each {result["threads"]}
threads x {result["rounds"]} rounds (reset, steps, checkpoint, native and replay restore, restore into a second
env, pickle/deepcopy, env drops and GC, check_env every {result["check_every"]} rounds).
Exit codes: {codes}. Native crashes (negative codes): **{result["crashes"]}**. {result["seconds"]} s; load
average {result["load_average_before"]} before, {result["load_average_after"]} after.
"""
    write_section("stress_textworld", markdown, {"machine": facts, **result})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help="run one attempt in this process")
    parser.add_argument("--attempts", type=int, default=40, help="child processes to run in all")
    parser.add_argument("--parallel", type=int, default=2, help="child processes at once")
    parser.add_argument("--threads", type=int, default=4, help="threads per child, each with its own envs")
    parser.add_argument("--rounds", type=int, default=30, help="episodes per thread")
    parser.add_argument("--check-every", type=int, default=15, help="run check_env every N rounds (0: never)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-copies", dest="copies", action="store_false", help="skip pickle/deepcopy of envs")
    parser.add_argument("--timeout", type=float, default=900, help="seconds before an attempt counts as hung")
    parser.add_argument("--no-write", action="store_true", help="print the result, do not write RESULTS.md")
    args = parser.parse_args()
    if args.worker:
        worker(args.threads, args.rounds, args.check_every, args.seed, args.copies)
        return
    result = drive(args)
    print({k: v for k, v in result.items() if k != "failures"})
    if not args.no_write:
        _write(result)


if __name__ == "__main__":
    main()
