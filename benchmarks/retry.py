"""What a retry from the pivot saves over a retry from scratch, and what concurrent env calls save in collect.

For each offline env (Countdown, TextWorld, ALFWorld generated, WebShop generated; ScienceWorld with
``--sciworld``), with the scripted policy (``r3l_learn/policies/scripted.py``) and the ``OracleReflector``:

* retry cost: ``ReflectRetry.collect`` on ``--tasks`` tasks; per retry, the agent tokens generated and env
  steps played from the pivot vs what a retry from scratch (reset, then the prefix again) would generate and
  play — the same trajectory, counted both ways (``aggregate_stats``).
* time: each retry is played again alone, alternating (a) from the pivot: restore the base's checkpoint and
  play the suffix, and (b) from scratch: reset and play the whole retry; the policy replays the retry's own
  replies, so both do exactly the work a policy would cause and land in the same state (checked). Also the
  restore alone vs reaching the pivot's state from scratch (reset + the prefix's env steps).
* concurrency: the same collect with ``env_workers=1`` (serial env calls) vs the default, wall time; the
  groups are checked to be identical. Besides the real engines, TextWorld behind a wrapper whose restores
  wait ``--latency`` seconds (a modelled remote or slow-to-restore env: the wait leaves the CPU free, as a
  server round trip would) shows what the pool does when restores wait rather than compute.

The scripted policy follows the expert plan and leaves it at a chosen turn (a quarter, half or three
quarters into the plan, cycling over tasks), then detours until ``--max-turns``; the oracle names that turn
as the pivot and the guided retry follows the plan again. So the pivots, and the token ratios, follow from
this choice: they measure the machinery, not where a real policy errs. Countdown's oracle pivot is the last
wrong attempt (``OracleReflector(math_pivot="last_wrong")``, the default): for a solver that is always wrong, the
last of its attempts, so the earlier ones are a shared prefix.
With ``--model`` the embedded SmolLM2 (or any HF folder) plays the bases and retries instead (constrained
choice among admissible actions where the env lists them), so the pivots are where that model left the plan.

Usage: ``python -m benchmarks.retry [--tasks 8] [--sciworld] [--model smollm2-135m-instruct]``
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import statistics
import sys
import time

import gymnasium as gym

import r3l_envs
from benchmarks import results_page
from r3l_learn.policies.scripted import ScriptedPolicy
from wrappers import AgentEpisode, OracleReflector, ReflectRetry, ReflectRetryConfig, RolloutConfig, play
from wrappers.retry.oracle import expert_plan
from wrappers.retry.reflect_retry import aggregate_stats
from wrappers.rollout import DEFAULT_ENV_WORKERS

logger = logging.getLogger("bench.retry")

PLAN_ENVS = ("r3l/TextWorld-v0", "r3l/ALFWorld-v0", "r3l/WebShop-v0")
# ScienceWorld: one task of each of these types, whose gold paths ("easy") take 10-29 actions.
SCIWORLD_TYPES = (
    "freeze",
    "use-thermometer",
    "test-conductivity",
    "chemistry-mix",
    "power-component",
    "identify-life-stages-2",
    "find-plant",
    "chemistry-mix-paint-secondary-color",
)
SCIWORLD_MAX_TURNS = 32
DETOUR = "inventory"
FRACTIONS = (0.25, 0.5, 0.75)  # where the scripted policy leaves the plan, cycling over tasks


# ---------------------------------------------------------------------- scripted agents
def countdown_solver(prompt_text: str) -> str:
    """Always answers 1 + 2 (wrong) unless the guidance gives the answer."""
    found = re.search(r"The correct answer is (.+?)\.\n", prompt_text)
    return f"<action>{found.group(1)}</action>" if found else "<action>1 + 2</action>"


def plan_agent(env_id: str, count: int) -> tuple[list[str], ScriptedPolicy, dict[str, int]]:
    """``count`` tasks whose first observations tell them apart, and a policy that follows each task's plan up
    to its own turn d, then detours (unless the oracle's guidance is in the context)."""
    env = gym.make(env_id)
    tasks, openings, plans = [], [], []
    candidates = env.unwrapped.task_ids
    if env_id == "r3l/ScienceWorld-v0":
        candidates = [f"{kind}/var0" for kind in SCIWORLD_TYPES]
    for task in candidates:
        if len(tasks) == count:
            break
        opening = env.reset(options={"task_id": task})[0]
        plan = expert_plan(env, task)
        if plan and len(plan) >= 3 and opening not in openings:
            tasks.append(task)
            openings.append(opening)
            plans.append(plan)
    env.close()
    keyed, leave = {}, {}
    for i, (task, opening, plan) in enumerate(zip(tasks, openings, plans)):
        others = [o for o in openings if o is not opening]
        key = next(ln.strip() for ln in opening.splitlines() if ln.strip() and all(ln.strip() not in o for o in others))
        d = max(1, min(len(plan) - 1, round(FRACTIONS[i % len(FRACTIONS)] * len(plan))))
        keyed[key] = (plan, d)
        leave[task] = d

    def rule(prompt_text: str) -> str:
        plan, d = next(v for k, v in keyed.items() if k in prompt_text)
        done = prompt_text.count("<|im_start|>assistant") - 1  # the generation prompt opens one more
        if "What to do instead" in prompt_text or done < d:
            return f"<action>{plan[min(done, len(plan) - 1)]}</action>"
        return f"<action>{DETOUR}</action>"

    return tasks, ScriptedPolicy(rule), leave


def setup(env_id: str, count: int, model) -> tuple[list[str], object, OracleReflector, dict[str, int]]:
    if env_id == "r3l/Countdown-v0":
        tasks = [f"countdown-train-{i:06d}" for i in range(count)]
        policy = model or ScriptedPolicy(countdown_solver)
        return tasks, policy, OracleReflector(reveal_answer=model is None), {}
    tasks, policy, leave = plan_agent(env_id, count)
    return tasks, model or policy, OracleReflector(), leave


class RestoreLatency(gym.Wrapper):
    """Benchmark harness: ``env`` with restores that wait ``delay`` seconds more (the CPU stays free)."""

    def __init__(self, env: gym.Env, delay: float):
        super().__init__(env)
        self.delay = delay

    def checkpoint_state(self) -> None:
        return None

    def restore_state(self, state: None) -> None:
        time.sleep(self.delay)


# ---------------------------------------------------------------------- measurements
def _strip(groups) -> list[dict]:
    out = [g.to_dict() for g in groups]
    for g in out:
        for t in g["trajectories"]:
            for turn in t["turns"]:
                turn["checkpoint"] = None
    return out


def collect(envs, tasks, policy, reflector, rollout: RolloutConfig, group_size: int, seed: int):
    """One collect on the given env instances (reused across calls: warm engines, one JVM each)."""
    config = ReflectRetryConfig(group_size=group_size, rollout=rollout, keep_checkpoints=True)
    rr = ReflectRetry(iter(envs).__next__, policy, reflector, config)
    groups = rr.collect(tasks, seed=seed)
    return groups, dict(rr.timings)


def replay_costs(env_id: str, groups, rollout: RolloutConfig, repeats: int) -> dict:
    """Play every retry again alone, from its pivot and from scratch, alternating; and time the restore
    against reaching the pivot's state from a reset."""
    env = gym.make(env_id)
    config = RolloutConfig(max_turns=rollout.max_turns, constrained=rollout.constrained, env_workers=1)
    pivot_s, scratch_s, restore_s, prefix_s, pivots = [], [], [], [], []
    for group in groups:
        for retry in (t for t in group.trajectories if t.kind == "retry"):
            base = group.by_id()[retry.base_id]
            p = retry.pivot
            expected = [(t.action, t.outcome, t.reward) for t in retry.turns]
            replies = [t.response for t in retry.turns]
            runs = {"pivot": [], "scratch": [], "restore": [], "prefix": []}
            for _ in range(repeats + 1):  # the first round warms caches and is dropped
                start = time.perf_counter()
                episode = AgentEpisode.resume(
                    env, ScriptedPolicy(replies[p:]), config, base, p, guidance=retry.guidance
                )
                (again,) = play([episode], episode.policy, config)
                runs["pivot"].append(time.perf_counter() - start)
                assert [(t.action, t.outcome, t.reward) for t in again.turns] == expected, "pivot replay diverged"

                start = time.perf_counter()
                seed = base.metadata.get("seed")
                episode = AgentEpisode(env, ScriptedPolicy(replies), config, seed=seed, task_id=retry.task_id)
                (again,) = play([episode], episode.policy, config)
                runs["scratch"].append(time.perf_counter() - start)
                assert [(t.action, t.outcome, t.reward) for t in again.turns] == expected, "scratch replay diverged"

                start = time.perf_counter()
                r3l_envs.restore(env, base.turns[p].checkpoint)
                runs["restore"].append(time.perf_counter() - start)

                start = time.perf_counter()
                env.reset(options={"task_id": base.task_id})
                for turn in base.turns[:p]:
                    if turn.action is not None:
                        env.step(turn.action)
                runs["prefix"].append(time.perf_counter() - start)
            pivot_s.append(statistics.median(runs["pivot"][1:]))
            scratch_s.append(statistics.median(runs["scratch"][1:]))
            restore_s.append(statistics.median(runs["restore"][1:]))
            prefix_s.append(statistics.median(runs["prefix"][1:]))
            pivots.append(p)
    kind = env.unwrapped.restore_kind
    env.close()
    if not pivots:
        return {"retries": 0}
    return {
        "retries": len(pivots),
        "pivots": pivots,
        "restore_kind": kind,
        "pivot_s": sum(pivot_s),
        "scratch_s": sum(scratch_s),
        "time_ratio": sum(pivot_s) / sum(scratch_s),
        "restore_median_ms": 1000 * statistics.median(restore_s),
        "prefix_from_reset_median_ms": 1000 * statistics.median(prefix_s),
        "restore_vs_prefix": sum(restore_s) / sum(prefix_s),
    }


def measure(env_id: str, args, model, latency: float = 0.0) -> dict:
    count = args.sciworld_tasks if env_id == "r3l/ScienceWorld-v0" else args.tasks
    tasks, policy, reflector, leave = setup(env_id, count, model)
    constrained = model is not None and env_id != "r3l/Countdown-v0"
    max_turns = {"r3l/Countdown-v0": None, "r3l/ScienceWorld-v0": SCIWORLD_MAX_TURNS}.get(env_id, args.max_turns)
    rollout = RolloutConfig(max_turns=max_turns, constrained=constrained)
    envs = [gym.make(env_id) for _ in range(len(tasks) * (args.group_size // 2))]
    if latency:
        envs = [RestoreLatency(env, latency) for env in envs]
    try:
        groups, timings = collect(envs, tasks, policy, reflector, rollout, args.group_size, args.seed)
        stats = aggregate_stats(groups)
        logger.info(
            "%s: %s", env_id, {k: stats[k] for k in ("retries", "token_cost_vs_scratch", "step_cost_vs_scratch")}
        )
        result = {
            "env": env_id,
            "restore_latency_s": latency,
            "tasks": tasks,
            "max_turns": max_turns,
            "plan_left_at": leave,
            "stats": stats,
            "collect_timings": timings,
            "replay": replay_costs(env_id, groups, rollout, args.repeats) if model is None and not latency else None,
        }
        if args.concurrency:
            result["concurrency"] = concurrency(envs, tasks, policy, reflector, rollout, args)
    finally:
        for env in envs:
            env.close()
    return result


def concurrency(envs, tasks, policy, reflector, rollout: RolloutConfig, args) -> dict:
    """Wall time of the same collect (on the same, warm env instances) with serial env calls and with a pool,
    alternating; the oracle computes its plans with as many threads."""
    configs = {
        "serial": (RolloutConfig(**{**rollout.__dict__, "env_workers": 1}), _oracle_like(reflector, 1)),
        "pooled": (
            RolloutConfig(**{**rollout.__dict__, "env_workers": args.workers}),
            _oracle_like(reflector, args.workers),
        ),
    }
    walls = {"serial": [], "pooled": []}
    phases = {"serial": [], "pooled": []}
    reference = None
    for _ in range(args.repeats):
        for name, (cfg, refl) in configs.items():
            start = time.perf_counter()
            groups, timings = collect(envs, tasks, policy, refl, cfg, args.group_size, args.seed)
            walls[name].append(time.perf_counter() - start)
            phases[name].append(timings)
            stripped = _strip(groups)
            reference = reference or stripped
            assert stripped == reference, f"{name} collect differs from the first one"
    med = {k: statistics.median(v) for k, v in walls.items()}
    phase = {
        k: {p: statistics.median(t[p] for t in v) for p in ("bases", "reflect", "retries")} for k, v in phases.items()
    }
    return {
        "workers": args.workers,
        "walls": walls,
        "phases": phases,
        "serial_s": med["serial"],
        "pooled_s": med["pooled"],
        "speedup": med["serial"] / med["pooled"],
        "phase_medians": phase,
        "identical": True,
    }


def _oracle_like(reflector: OracleReflector, workers: int) -> OracleReflector:
    return OracleReflector(
        reveal_answer=reflector.reveal_answer,
        reveal_steps=reflector.reveal_steps,
        math_pivot=reflector.math_pivot,
        workers=workers,
    )


# ---------------------------------------------------------------------- report
def _short(env_id: str) -> str:
    return env_id.removeprefix("r3l/").removesuffix("-v0")


def markdown(results: list[dict], args, facts: dict, load: tuple[float, float], command: str, model_name) -> str:
    who = f"model {model_name} (constrained where the env lists actions)" if model_name else "scripted policy"
    ran = {r["env"] for r in results}
    sci = "r3l/ScienceWorld-v0" in ran
    sci_tasks = f" ({args.sciworld_tasks} for ScienceWorld)" if sci else ""
    exceptions = [f"ScienceWorld {SCIWORLD_MAX_TURNS}"] * sci + ["Countdown its 3 attempts"] * (
        "r3l/Countdown-v0" in ran
    )
    turns = f" ({', '.join(exceptions)})" if exceptions else ""
    lines = [
        f"## Reflect-retry with {model_name}: retry from the pivot vs from scratch"
        if model_name
        else "## Reflect-retry: retry from the pivot vs from scratch; serial vs concurrent env calls",
        "",
        results_page.machine_line(facts),
        f"Command: `{command}`. {who}, `OracleReflector`, {args.tasks} tasks per env{sci_tasks}, group size "
        f"{args.group_size}, bases up to {args.max_turns} turns{turns}. Load average "
        f"{load[0]:.1f} at the start and {load[1]:.1f} at the end on {facts['cores']} cores"
        + (" (the machine was shared: compare ratios, not absolute times)." if max(load) > 1.5 else "."),
        "",
        "Retry cost. Tokens and env steps are counted on the collected retries: generated from the pivot vs "
        "what a retry from scratch generates (prefix again + the same suffix). "
        + (
            "Time columns: scripted runs only."
            if model_name
            else f"Time: each retry replayed alone, median of {args.repeats} alternating runs, pivot (restore + "
            "suffix) vs scratch (reset + everything); restore alone vs reset + the prefix's env steps."
        ),
        "",
        "| env | restore | retries | mean pivot | tokens pivot ÷ scratch | env steps pivot ÷ scratch "
        "| time pivot ÷ scratch | restore vs reset + prefix (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in (r for r in results if not r["restore_latency_s"]):
        st, rp = r["stats"], r["replay"] or {}
        cells = [
            _short(r["env"]),
            rp.get("restore_kind", "—"),
            str(st["retries"]),
            f"{st['mean_pivot']:.1f}" if st["mean_pivot"] is not None else "—",
            f"{st['token_cost_vs_scratch']:.2f}" if st["token_cost_vs_scratch"] is not None else "—",
            f"{st['step_cost_vs_scratch']:.2f}" if st["step_cost_vs_scratch"] is not None else "—",
            f"{rp['time_ratio']:.2f} ({rp['pivot_s']:.2f} s vs {rp['scratch_s']:.2f} s)" if rp.get("retries") else "—",
            (
                f"{rp['restore_median_ms']:.1f} ms vs {rp['prefix_from_reset_median_ms']:.1f} ms "
                f"({rp['restore_vs_prefix']:.2f}×)"
                if rp.get("retries")
                else "—"
            ),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if model_name:
        lines += [
            "",
            "Where one collect's time went (retries generate from the pivot, bases from the start):",
            "",
        ]
        lines += ["| env | bases | reflect (oracle) | retries | retries ÷ bases |", "|---|---|---|---|---|"]
        for r in results:
            t = r["collect_timings"]
            lines.append(
                f"| {_short(r['env'])} | {t['bases']:.1f} s | {t['reflect']:.1f} s | {t['retries']:.1f} s | "
                f"{t['retries'] / t['bases']:.2f} |"
            )
    conc = [r for r in results if r.get("concurrency")]
    if conc:
        lines += [
            "",
            f"Concurrency: the same collect with serial env calls (`env_workers=1`) vs `env_workers={args.workers}`, "
            f"median of {args.repeats} alternating runs; every run's groups are identical (checked).",
            "",
            "| env | collect serial | collect concurrent | speedup | bases | reflect (oracle plans) | retries |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in conc:
            c = r["concurrency"]
            ph = c["phase_medians"]
            cells = [
                f"{ph['serial'][p]:.2f} → {ph['pooled'][p]:.2f} s ({ph['serial'][p] / max(ph['pooled'][p], 1e-9):.1f}×)"
                for p in ("bases", "reflect", "retries")
            ]
            name = _short(r["env"])
            if r["restore_latency_s"]:
                name += f" + {1000 * r['restore_latency_s']:.0f} ms wait per restore (modelled)"
            lines.append(
                f"| {name} | {c['serial_s']:.2f} s | {c['pooled_s']:.2f} s | {c['speedup']:.2f}× | "
                + " | ".join(cells)
                + " |"
            )
    if model_name:
        lines += [
            "",
            "How to read it. The token and step ratios are what restarting at the pivot saved in generation and "
            "env steps, with the pivots where the model first left the expert plan (or first answered wrong): a "
            "weak model leaves the plan early, so its retries save little. The phase times are one collect's, on a "
            "shared machine: the phases differ in load as well as in work (a retry may take fewer or more turns "
            "than its base), so read them as where the time went, not as a controlled ratio.",
        ]
        return "\n".join(lines)
    lines += [
        "",
        "How to read it. The token and step ratios are what restarting at the pivot saves in generation and env "
        "steps; they follow from where the pivots fall (here where the scripted policy leaves the plan; Countdown's "
        "pivot is the always-wrong solver's last attempt, its earlier attempts shared). The scripted "
        "policy generates for free, so the time ratio measures the machinery and the env only: the pivot path "
        "pays the restore and tokenises the prefix twice (training sequence and guided context) but skips the "
        "prefix's env steps; with a model, generation dominates and the token ratio is the saving. Restores: "
        "TextWorld's and WebShop's native restores take about a millisecond; ALFWorld's costs about as much as a "
        "cached reset plus a few steps; ScienceWorld's is a verified replay (reload, the prefix's steps, digest "
        "checks), a little more than replaying without checks.",
        "",
        "Concurrency overlaps only what waits outside the Python interpreter. ScienceWorld's restores and steps "
        "are JVM CPU work (one JVM per env): they spread over free cores, and a 2-core machine already loaded by "
        "other jobs has none, hence about 1× here. The modelled row (restores that wait without computing, like "
        "a server round trip) shows the mechanism: the retries' waits overlap instead of adding up. The Python "
        "engines run under the GIL: about 1×, within noise.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=2, help="2: one base per task (a scripted policy repeats)")
    parser.add_argument("--max-turns", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=DEFAULT_ENV_WORKERS, help="env_workers of the concurrent run")
    parser.add_argument("--sciworld", action="store_true", help="add ScienceWorld (needs Java; slow)")
    parser.add_argument("--sciworld-tasks", type=int, default=4, help="ScienceWorld tasks (one JVM, ~1 GB, each)")
    parser.add_argument("--no-concurrency", dest="concurrency", action="store_false")
    parser.add_argument("--latency", type=float, default=0.2, help="modelled restore wait (s); 0: no such row")
    parser.add_argument("--envs", nargs="*", default=None, help="env ids (default: the offline ones)")
    parser.add_argument("--model", default=None, help="play with this model instead of the scripted policy")
    parser.add_argument("--name", default=None, help="RESULTS.md section (default retry, or retry-model)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    envs = args.envs or ["r3l/Countdown-v0", *PLAN_ENVS] + (["r3l/ScienceWorld-v0"] if args.sciworld else [])
    model = None
    if args.model:
        from r3l_learn.policies.hf import HFPolicy

        model = HFPolicy.from_pretrained(args.model)
        args.concurrency = False
    command = "python -m benchmarks.retry " + " ".join(sys.argv[1:])  # before an engine rewrites sys.argv
    load_start = os.getloadavg()[0]
    results = []
    for env_id in envs:
        start = time.perf_counter()
        results.append(measure(env_id, args, model))
        logger.info("%s measured in %.0f s", env_id, time.perf_counter() - start)
    if args.concurrency and args.latency:
        results.append(measure("r3l/TextWorld-v0", args, model, latency=args.latency))
    load = (load_start, os.getloadavg()[0])
    facts = results_page.machine()
    md = markdown(results, args, facts, load, command, args.model)
    name = args.name or ("retry-model" if args.model else "retry")
    results_page.write_section(name, md, {"machine": facts, "load": load, "args": vars(args), "results": results})
    print(md)


if __name__ == "__main__":
    main()
