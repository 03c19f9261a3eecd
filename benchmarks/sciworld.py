"""ScienceWorld: steps/s, restore vs reset+replay through upstream's ``env.step``, JVM start and memory.

Every number comes with a baseline measured in the same run on the same actions (boil, variation 0, its
gold path), because absolute times on shared machines are noisy:

* steps/s of ``r3l/ScienceWorld-v0`` (no admissible actions; with them; through ``PythonInterface.step``
  instead of the compiled step helper, as without ``javac``) vs upstream ``ScienceWorldEnv.step``. Only the
  steps are timed, episode by episode (resets are measured on their own). A fresh JVM runs its first
  episodes interpreted while the JIT compiles the engine (on the same cores), so the first episode is
  reported apart from the warm ones (after ``WARMUP`` episodes), which are what a long RL run sees. CPU time
  per step (JVM process + Python process) is recorded too: it moves much less than wall time when other jobs
  share the machine;
* ``r3l_envs.restore`` at steps 5/20/30 vs upstream reset + replay with ``ScienceWorldEnv.step``;
* how an episode starts: ``load`` vs the engine's own ``reset`` of an already loaded task;
* the deterministic JVM (``-XX:hashCode=2``) vs the default one;
* JVM start (process ready; engine classes loaded) and resident memory per env.

Run: ``python -m benchmarks.sciworld`` (about 3–5 minutes).
"""

from __future__ import annotations

import logging
import os
import statistics
import time

import gymnasium as gym

import r3l_envs

# Not named scienceworld.py: the script's folder is first on sys.path and would shadow the engine's package.
from benchmarks import results_page

TASK, VARIATION = "boil", 0
TASK_ID = f"{TASK}/var{VARIATION}"
REPS = 3
#: Episodes played before timing "warm" steps: the JIT compiles the engine's hot paths over the first ones.
WARMUP = 10
#: Timed warm episodes (the slow paths, which enumerate every valid action on each step, play fewer).
EPISODES, SLOW_WARMUP, SLOW_EPISODES = 20, 2, 3
_TICKS = os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) used so far by process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _median_time(fn, reps: int = REPS) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _steps_per_s(reset, step, gold: list[str], jvm_pid: int, warmup: int, episodes: int) -> dict:
    """Play ``warmup + episodes`` gold-path episodes in a fresh JVM, timing only the steps of each.

    Returns the first episode's steps/s (``cold``), the median and best of the last ``episodes`` (``warm``,
    ``best``), their CPU milliseconds per step (JVM and Python), and the load average while they ran.
    """
    rates, jvm_cpu, py_cpu, load = [], 0.0, 0.0, os.getloadavg()[0]
    for episode in range(warmup + episodes):
        reset()
        j0, p0, t0 = _cpu_s(jvm_pid), time.process_time(), time.perf_counter()
        for action in gold:
            step(action)
        rates.append(len(gold) / (time.perf_counter() - t0))
        if episode >= warmup:
            jvm_cpu += _cpu_s(jvm_pid) - j0
            py_cpu += time.process_time() - p0
    steps = episodes * len(gold)
    return {
        "cold": rates[0],
        "warm": statistics.median(rates[warmup:]),
        "best": max(rates[warmup:]),
        "episode_rates": rates,
        "jvm_cpu_ms_per_step": 1000 * jvm_cpu / steps,
        "python_cpu_ms_per_step": 1000 * py_cpu / steps,
        "load_average": (load + os.getloadavg()[0]) / 2,
    }


def _ours(gold: list[str], *, step_helper: bool = True, slow: bool = False, **kwargs) -> dict:
    """:func:`_steps_per_s` of a fresh ``r3l/ScienceWorld-v0`` (its own JVM) made with ``kwargs``."""
    with gym.make("r3l/ScienceWorld-v0", tasks=[TASK], **kwargs) as env:
        env.unwrapped.jvm.step_helper = step_helper
        env.reset(options={"task_id": TASK_ID})  # starts the JVM
        assert env.unwrapped.jvm.uses_step_helper == step_helper, "the step helper could not be built (javac?)"
        return _steps_per_s(
            lambda: env.reset(options={"task_id": TASK_ID}),
            env.step,
            gold,
            env.unwrapped.jvm.pid,
            SLOW_WARMUP if slow else WARMUP,
            SLOW_EPISODES if slow else EPISODES,
        )


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    from scienceworld import ScienceWorldEnv

    data: dict = {"machine": results_page.machine(), "task": TASK_ID, "load_average_at_start": os.getloadavg()[0]}

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

    # --- steps/s, each in a fresh JVM: ours; ours through PythonInterface.step; with admissible actions; default
    # JVM; upstream env.step
    data["steps"] = {
        "ours": _ours(gold),
        "ours_python_interface_step": _ours(gold, step_helper=False),
        "ours_admissible": _ours(gold, admissible_actions=True, slow=True),
        "ours_nondeterministic_jvm": _ours(gold, deterministic=False),
    }

    t0 = time.perf_counter()
    stock = ScienceWorldEnv("", envStepLimit=10_000)
    data["stock_constructor_s"] = time.perf_counter() - t0
    stock.load(TASK, VARIATION, "easy")
    stock.reset()
    stock_pid = stock._gateway.java_process.pid
    data["steps"]["stock"] = _steps_per_s(stock.reset, stock.step, gold, stock_pid, SLOW_WARMUP, SLOW_EPISODES)
    data["stock_reset_s"] = _median_time(stock.reset)

    def stock_episode(k: int):
        stock.reset()
        for action in gold[:k]:
            stock.step(action)

    # --- restore at k vs stock reset + replay through env.step (both JVMs warmed by whole episodes first)
    for _ in range(WARMUP):
        env.reset(options={"task_id": TASK_ID})
        for action in gold:
            env.step(action)
    data["rss_mib_after_episodes"] = _rss_mib(base.jvm.pid)
    data["restore"] = {}
    for k in (5, 20, 30):
        env.reset(options={"task_id": TASK_ID})
        for action in gold[:k]:
            env.step(action)
        ckpt = r3l_envs.checkpoint(env)
        env.step("look around")  # move away first
        restore_s = _median_time(lambda ckpt=ckpt: r3l_envs.restore(env, ckpt))
        replay_s = _median_time(lambda k=k: stock_episode(k))
        data["restore"][k] = {"ours_s": restore_s, "stock_reset_replay_s": replay_s, "speedup": replay_s / restore_s}

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

    r, d, st = data["restore"], data, data["steps"]
    ours, stock_steps = st["ours"], st["stock"]

    def rate(x: dict) -> str:
        return f"{x['warm']:.1f} (best {x['best']:.1f})"

    def cpu_ms(x: dict) -> float:
        return x["jvm_cpu_ms_per_step"] + x["python_cpu_ms_per_step"]

    def cpu(x: dict) -> str:
        return f"{cpu_ms(x):.1f} ms"

    rows = [
        (
            "steps/s, no admissible actions (warm)",
            rate(ours),
            f"{rate(stock_steps)} (`env.step`, always enumerates)",
            f"{ours['warm'] / stock_steps['warm']:.1f}×",
        ),
        (
            "steps/s, first episode of a fresh JVM",
            f"{ours['cold']:.1f}",
            f"{stock_steps['cold']:.1f}",
            f"{ours['cold'] / stock_steps['cold']:.1f}×",
        ),
        (
            "CPU per step, JVM + Python (warm)",
            f"{cpu(ours)} ({ours['jvm_cpu_ms_per_step']:.1f} + {ours['python_cpu_ms_per_step']:.1f})",
            cpu(stock_steps),
            f"{cpu_ms(stock_steps) / cpu_ms(ours):.1f}× less",
        ),
        (
            "steps/s through `PythonInterface.step` (no `javac`)",
            f"{rate(st['ours_python_interface_step'])}; CPU {cpu(st['ours_python_interface_step'])}",
            f"{rate(ours)} (ours, step helper)",
            f"{st['ours_python_interface_step']['warm'] / ours['warm']:.2f}×",
        ),
        (
            "steps/s, `admissible_actions=True` (warm)",
            rate(st["ours_admissible"]),
            rate(stock_steps),
            f"{st['ours_admissible']['warm'] / stock_steps['warm']:.1f}×",
        ),
        (
            "steps/s, default JVM (`deterministic=False`, warm)",
            f"{rate(st['ours_nondeterministic_jvm'])}; CPU {cpu(st['ours_nondeterministic_jvm'])}",
            f"{rate(ours)} (ours, deterministic JVM)",
            f"{st['ours_nondeterministic_jvm']['warm'] / ours['warm']:.2f}×",
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
    data["load_average_at_end"] = os.getloadavg()[0]
    first = ", ".join(f"{x:.0f}" for x in ours["episode_rates"][:5])
    md = f"""## ScienceWorld (`benchmarks/sciworld.py`)

{results_page.machine_line(d["machine"])}
Task `{TASK_ID}` (gold path, {d["gold_len"]} actions); baselines from the same run.
Load average (2 cores): {d["load_average_at_start"]:.1f} at the start, {ours["load_average"]:.1f} while ours was timed,
{stock_steps["load_average"]:.1f} while upstream's was, {d["load_average_at_end"]:.1f} at the end (other jobs shared the
machine: compare ratios and CPU per step).

Steps/s: only the steps are timed, each configuration in a fresh JVM. "Warm" is the median (and best) episode
after the first {WARMUP} ({EPISODES} timed; {SLOW_WARMUP} + {SLOW_EPISODES} for the two that enumerate valid actions
on every step). A fresh JVM runs the engine interpreted while the JIT compiles it on the same cores: the first
five episodes of ours ran at {first} steps/s. Restore and reset: medians of {REPS} runs.

| measure | r3l/ScienceWorld-v0 | baseline (upstream `ScienceWorldEnv`) | ratio |
|---|---|---|---|
{table}

Starting an episode: the engine's `load` of a loaded task takes {d["engine_load_s"] * 1000:.0f} ms and its
`reset` {d["engine_reset_s"] * 1000:.0f} ms (`reset` *is* a reload inside the engine, so keeping the task
loaded saves nothing), but after a gold path was requested once, every engine `reset` regenerates it
({d["engine_reset_after_gold_s"] * 1000:.0f} ms). So `_start` always calls `load` without a gold path.
"""
    results_page.write_section("scienceworld", md, data)
    print(md)


if __name__ == "__main__":
    main()
