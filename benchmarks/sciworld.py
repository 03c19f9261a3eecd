"""ScienceWorld: steps/s, restore vs reset+replay through upstream's ``env.step``, JVM start and memory.

Every number comes with a baseline measured in the same run on the same actions (boil, variation 0, its
gold path), because absolute times on shared machines are noisy:

* steps/s of ``r3l/ScienceWorld-v0`` (no admissible actions; with them) vs upstream ``ScienceWorldEnv.step``;
* ``r3l_envs.restore`` at steps 5/20/30 vs upstream reset + replay with ``ScienceWorldEnv.step``;
* how an episode starts: ``load`` vs the engine's own ``reset`` of an already loaded task;
* the deterministic JVM (``-XX:hashCode=2``) vs the default one;
* JVM start (process ready; engine classes loaded) and resident memory per env.

Run: ``python benchmarks/sciworld.py`` (about 2–4 minutes).
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
from pathlib import Path

# Not named scienceworld.py: the script's folder is first on sys.path and would shadow the engine's package.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import gymnasium as gym

import r3l_envs

TASK, VARIATION = "boil", 0
TASK_ID = f"{TASK}/var{VARIATION}"
REPS = 3


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def _median_time(fn, reps: int = REPS) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _ours_steps_per_s(env, gold: list[str]) -> float:
    def run():
        env.reset(options={"task_id": TASK_ID})
        for action in gold:
            env.step(action)

    env.reset(options={"task_id": TASK_ID})  # warm the JIT on this path first
    starts = _median_time(lambda: env.reset(options={"task_id": TASK_ID}))
    return len(gold) / (_median_time(run) - starts)


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    from scienceworld import ScienceWorldEnv

    data: dict = {"machine": _report.machine(), "task": TASK_ID, "load_average_at_start": os.getloadavg()[0]}

    # --- JVM start and memory, ours
    env = gym.make("r3l/ScienceWorld-v0", tasks=[TASK])
    base = env.unwrapped
    t0 = time.perf_counter()
    env.reset(options={"task_id": TASK_ID})
    data["first_reset_s"] = time.perf_counter() - t0
    data["jvm_ready_s"] = base.jvm.start_seconds
    data["engine_classes_s"] = base.jvm.engine_seconds
    gold = base.gold_actions()
    data["gold_len"] = len(gold)

    # --- steps/s: ours (no admissible actions), ours with them, upstream env.step
    data["ours_steps_per_s"] = _ours_steps_per_s(env, gold)
    data["rss_mib_after_episodes"] = _rss_mib(base.jvm.pid)
    with gym.make("r3l/ScienceWorld-v0", tasks=[TASK], admissible_actions=True) as env_adm:
        data["ours_admissible_steps_per_s"] = _ours_steps_per_s(env_adm, gold)
    with gym.make("r3l/ScienceWorld-v0", tasks=[TASK], deterministic=False) as env_nd:
        data["ours_nondeterministic_jvm_steps_per_s"] = _ours_steps_per_s(env_nd, gold)

    t0 = time.perf_counter()
    stock = ScienceWorldEnv("", envStepLimit=10_000)
    data["stock_constructor_s"] = time.perf_counter() - t0
    stock.load(TASK, VARIATION, "easy")
    stock.reset()

    def stock_episode(k: int):
        stock.reset()
        for action in gold[:k]:
            stock.step(action)

    stock_episode(len(gold))  # warm-up
    stock_reset = _median_time(stock.reset)
    data["stock_reset_s"] = stock_reset
    data["stock_steps_per_s"] = len(gold) / (_median_time(lambda: stock_episode(len(gold))) - stock_reset)

    # --- restore at k vs stock reset + replay through env.step
    data["restore"] = {}
    for k in (5, 20, 30):
        env.reset(options={"task_id": TASK_ID})
        for action in gold[:k]:
            env.step(action)
        ckpt = r3l_envs.checkpoint(env)
        env.step("look around")  # move away first
        ours = _median_time(lambda ckpt=ckpt: r3l_envs.restore(env, ckpt))
        theirs = _median_time(lambda k=k: stock_episode(k))
        data["restore"][k] = {"ours_s": ours, "stock_reset_replay_s": theirs, "speedup": theirs / ours}

    # --- how an episode starts: reload vs the engine's reset of the loaded task (both through our JVM)
    from r3l_envs.scienceworld import ScienceWorldJVM

    jvm = ScienceWorldJVM()  # a fresh engine: no gold path was ever requested in it
    jvm.start()
    jvm.call("load", TASK, VARIATION, "easy", False)
    data["engine_load_s"] = _median_time(lambda: jvm.call("load", TASK, VARIATION, "easy", False), reps=5)
    data["engine_reset_s"] = _median_time(lambda: jvm.call("reset"), reps=5)
    jvm.call("load", TASK, VARIATION, "easy", True)  # once a gold path was asked for, reset regenerates it
    data["engine_reset_after_gold_s"] = _median_time(lambda: jvm.call("reset"), reps=3)
    data["reset_s"] = _median_time(lambda: env.reset(options={"task_id": TASK_ID}), reps=5)
    data["rss_mib_stock_jvm"] = _rss_mib(stock._gateway.java_process.pid)
    stock.close()
    jvm.close()
    env.close()

    r, d = data["restore"], data
    rows = [
        (
            "steps/s, no admissible actions",
            f"{d['ours_steps_per_s']:.1f}",
            f"{d['stock_steps_per_s']:.1f} (`env.step`, always enumerates)",
            f"{d['ours_steps_per_s'] / d['stock_steps_per_s']:.1f}×",
        ),
        (
            "steps/s, `admissible_actions=True`",
            f"{d['ours_admissible_steps_per_s']:.1f}",
            f"{d['stock_steps_per_s']:.1f}",
            f"{d['ours_admissible_steps_per_s'] / d['stock_steps_per_s']:.1f}×",
        ),
        (
            "steps/s, default JVM (`deterministic=False`)",
            f"{d['ours_nondeterministic_jvm_steps_per_s']:.1f}",
            f"{d['ours_steps_per_s']:.1f} (ours, deterministic JVM)",
            f"{d['ours_nondeterministic_jvm_steps_per_s'] / d['ours_steps_per_s']:.2f}×",
        ),
    ]
    for k in (5, 20, 30):
        rows.append(
            (
                f"restore at step {k}",
                f"{r[k]['ours_s'] * 1000:.0f} ms",
                f"{r[k]['stock_reset_replay_s'] * 1000:.0f} ms (reset + replay via `env.step`)",
                f"{r[k]['speedup']:.1f}× faster",
            )
        )
    rows += [
        (
            "reset",
            f"{d['reset_s'] * 1000:.0f} ms",
            f"{d['stock_reset_s'] * 1000:.0f} ms",
            f"{d['stock_reset_s'] / d['reset_s']:.1f}× faster",
        ),
        (
            "JVM start",
            f"{d['jvm_ready_s']:.2f} s ready + {d['engine_classes_s']:.2f} s engine classes",
            f"{d['stock_constructor_s']:.2f} s (constructor)",
            "",
        ),
        (
            "JVM resident memory",
            f"{d['rss_mib_after_episodes']:.0f} MiB per env",
            f"{d['rss_mib_stock_jvm']:.0f} MiB",
            "",
        ),
    ]
    table = "\n".join(f"| {' | '.join(row)} |" for row in rows)
    md = f"""## ScienceWorld (`benchmarks/sciworld.py`)

{_report.machine_line(d["machine"])}
Task `{TASK_ID}` (gold path, {d["gold_len"]} actions), medians of {REPS} runs; baselines from the same run.
Load average when the run started: {d["load_average_at_start"]:.1f} (other jobs shared the machine: compare ratios).

| measure | r3l/ScienceWorld-v0 | baseline (upstream `ScienceWorldEnv`) | ratio |
|---|---|---|---|
{table}

Starting an episode: the engine's `load` of a loaded task takes {d["engine_load_s"] * 1000:.0f} ms and its
`reset` {d["engine_reset_s"] * 1000:.0f} ms (`reset` *is* a reload inside the engine, so keeping the task
loaded saves nothing), but after a gold path was requested once, every engine `reset` regenerates it
({d["engine_reset_after_gold_s"] * 1000:.0f} ms). So `_start` always calls `load` without a gold path.
"""
    _report.write_section("scienceworld", md, data)
    print(md)


if __name__ == "__main__":
    main()
