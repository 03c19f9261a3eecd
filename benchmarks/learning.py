"""Learning at an equal sampling budget: R³L vs GRPO, RAFT and OPMD, R³L's ablations, self vs oracle reflection.

The grid is ``methods × envs × seeds`` for one *mode* (``MODES``): every cell is one
:class:`r3l_learn.train.TrainConfig` run by :func:`r3l_learn.train.train` in its own subprocess (a crash costs
one cell, not the sweep), in its own run directory under ``--out-root``. Every method samples ``group_size``
trajectories for each of ``tasks_per_step`` tasks per step for the same number of steps (R³L tops its groups up
to ``group_size`` with extra bases, ``fill=True``), so the sampled trajectories are equal; the generated tokens
are not (retries restart at the pivot) and are recorded per run.

* ``ENVS`` is the one table of per-env settings (env kwargs, free or constrained actions, max turns, max new
  tokens per turn, what data the env runs on); ``METHODS`` the methods; ``MODES`` the budgets:
  ``quick`` (minutes: tiny budgets, a smoke test of the whole pipeline), ``cpu`` (what 2 cores do in a few
  hours), ``gpu`` (larger settings, ``--device cuda``).
* Cached per run: a run whose final eval is in its ``metrics.jsonl`` (and whose ``summary.txt`` exists) is
  skipped; a run with checkpoints but no final eval is resumed (``train(config, resume=True)``); so an
  interrupted sweep resumes where it stopped. ``--time-budget`` interrupts the runs in flight at the deadline
  (SIGINT: the learner saves a checkpoint) and starts no new ones.
* The child adds counters to every step's metrics (``bench/*``: trajectories, successes, tokens generated in
  rollouts and in reflections, env steps, the retry counters), computed from the step's groups, so that the
  retry economics below are ratios of sums rather than means of per-step ratios. ``speed/generated_tokens``
  (the learner's own) leaves out self-reflection tokens (and before r3l commit 1483fd5 counted a retry's reused
  prefix as generated); ``bench/rollout_tokens`` + ``bench/reflection_tokens`` count both right.
* Aggregation: per (method, env), the mean over seeds with a 95 % t-interval (n = seeds) of the final held-out
  success and score, their change from the eval before training, the budget (trajectories, tokens, env steps,
  wall time), and the retry economics; paired differences across seeds (the same seed evaluates the same
  held-out episodes) for R³L vs each baseline and each ablation; success-vs-budget plots with CI bands. The
  section ``learning`` of ``benchmarks/RESULTS.md`` and ``benchmarks/results/learning.json`` are rewritten
  from the run directories; the discussion is generated from the numbers.

Restart-at-pivot vs retry-from-scratch: the method ``r3l-retry-from-scratch`` is R³L with each retry replayed
from turn 0 with the same guidance (a Reflect-GRPO-style retry at the same budget of N trajectories); the page
also reports what the collected pivot retries would have cost from scratch (tokens and env steps).

Usage::

    python benchmarks/learning.py --mode quick                  # minutes (tiny budgets)
    python benchmarks/learning.py --mode cpu --time-budget 240  # resumable; rerun to continue
    python benchmarks/learning.py --mode gpu --jobs 2           # --device cuda
    python benchmarks/learning.py --mode quick --report-only    # re-aggregate existing runs
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import json
import logging
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _report  # noqa: E402

logger = logging.getLogger("bench.learning")

from r3l_learn.device import cpu_kind, resolve_autocast  # noqa: E402

# bf16 autocast only where this CPU computes bf16 natively (~2.9x faster there, ~57x slower where emulated); the
# choice is fixed here, so a rerun on the same machine resumes its runs, and the page names the CPU kind.
_CPU_AUTOCAST = resolve_autocast("auto", "cpu")

SECTION = "learning"


# ---------------------------------------------------------------------------------------------- the grid
@dataclass(frozen=True)
class EnvSetting:
    """How one env is trained on and evaluated (the same for every method and mode)."""

    env: str  # registered id
    kwargs: dict[str, Any]  # gym.make kwargs (train and eval)
    actions: str  # "free" or "constrained" (choice among admissible actions by likelihood)
    max_turns: int | None  # agent turns per episode (parse errors count); None: the env's own limit
    max_new_tokens: int  # per agent turn
    kind: str  # what sort of task, for the page
    data: str  # what the env runs on (names never lie: generated data is called generated)
    setup: str | None = None  # "DIR:module:function" called before the env is made (test envs outside r3l_envs)


ENVS: dict[str, EnvSetting] = {
    # A turn without a usable answer does not step the env, so max_turns bounds it: 2 attempts + 1 spare turn.
    "countdown": EnvSetting(
        "r3l/Countdown-v0",
        {"num_numbers": 3, "max_number": 10, "max_attempts": 2},
        "free",
        3,
        64,
        "math, 2 attempts with feedback",
        "generated Countdown puzzles (3 numbers ≤ 10)",
    ),
    # Coin collector level 2 (the coin is two rooms away), actions chosen among the admissible ones. SmolLM2 won
    # 1 of 8 sampled episodes (T = 1) in 5 turns: sparse successes, the regime R³L's retries are for. Level 1 is
    # too easy (held-out success 1.0 before training at T = 0.4), level 3 as sparse as 2 and slower, cooking
    # level 1 (expert plans of 5-6 actions) gave 0 of 8.
    "textworld": EnvSetting(
        "r3l/TextWorld-v0",
        {"game_type": "coin_collector", "difficulty": 2},
        "constrained",
        5,
        16,
        "text game",
        "generated TextWorld coin-collector games, level 2",
    ),
    # Clicks are chosen among the page's links; on the search page the policy fills search[<query>]'s slot.
    # A purchase needs search, product, Buy Now at least. SmolLM2 bought nothing in 8 sampled episodes of 6 turns.
    "webshop": EnvSetting(
        "r3l/WebShop-v0",
        {"num_products": 1000},
        "constrained",
        6,
        16,
        "web shopping",
        "generated WebShop catalogue of 1,000 products (not the real WebShop data)",
    ),
    # Expert plans take 5-9 actions.
    "alfworld": EnvSetting(
        "r3l/ALFWorld-v0",
        {},
        "constrained",
        12,
        16,
        "household (ALFWorld domain)",
        "generated ALFWorld-domain households (not the official ALFWorld games)",
    ),
}


@dataclass(frozen=True)
class Method:
    """A row of the tables: an algorithm, R³L ablations, and the reflector."""

    label: str
    algo: str
    ablations: tuple[str, ...] = ()
    reflector: str = "oracle"
    role: str = "baseline"  # "r3l", "baseline", "ablation" or "reflector": which table it belongs to


# A 135M model cannot reflect (0 of 8 reflections parsed in r3l_learn's tests), so R³L and its ablations use the
# oracle reflector; "r3l-self" is the paper's self-reflection, for the reflector study. Listed in run order:
# when a sweep cannot finish, R³L and GRPO (the comparison the issue asks for) are done first.
METHODS: dict[str, Method] = {
    "r3l": Method("R³L", "r3l", role="r3l"),
    "grpo": Method("GRPO", "grpo"),
    "raft": Method("RAFT", "raft"),
    "opmd": Method("OPMD", "opmd"),
    "r3l-no-reflect-retry": Method("R³L − reflect-retry", "r3l", ("no_reflect_retry",), role="ablation"),
    "r3l-no-amplification": Method("R³L − amplification", "r3l", ("no_amplification",), role="ablation"),
    "r3l-no-pivot-credit": Method("R³L − pivotal credit", "r3l", ("no_pivot_credit",), role="ablation"),
    "r3l-retry-from-scratch": Method("R³L, retry from scratch", "r3l", ("retry_from_scratch",), role="ablation"),
    "r3l-self": Method("R³L, self-reflection", "r3l", reflector="self", role="reflector"),
}
BASELINES = ("grpo", "raft", "opmd")
PAPER_ROWS = ("grpo", "raft", "opmd", "r3l")  # the paper's table order


@dataclass(frozen=True)
class Mode:
    """A budget for the whole grid; every other TrainConfig field keeps its default (or comes from ``extra``)."""

    name: str
    description: str
    envs: tuple[str, ...]
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    steps: int
    tasks_per_step: int
    group_size: int
    eval_episodes: int
    eval_every: int  # 0: only before and after training
    lr: float = 5e-5  # SmolLM2-135M on CPU: the cpu-demo preset's rate (R3L.md §4: small models need 1e-5..1e-4)
    model: str = "smollm2-135m-instruct"
    device: str = "cpu"
    dtype: str = "float32"
    checkpoint_every: int = 0  # 0: at the end (and on an interrupt) only
    extra: dict[str, Any] = field(default_factory=dict)  # further TrainConfig overrides
    method_envs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # methods run on these envs only

    def runs_on(self, method: str, env: str) -> bool:
        """Whether the grid has the cell (method, env)."""
        return method in self.methods and env in self.envs and env in self.method_envs.get(method, self.envs)

    def envs_of(self, methods: Sequence[str]) -> tuple[str, ...]:
        """The envs on which any of ``methods`` runs, in table order."""
        return tuple(e for e in self.envs if any(self.runs_on(m, e) for m in methods))


ALL_METHODS = tuple(METHODS)
MODES: dict[str, Mode] = {
    "quick": Mode(
        "quick",
        "a smoke test of the whole pipeline: 1 step of 1 task × 4 trajectories, 2 held-out episodes, one seed; "
        "every method on TextWorld, R³L and GRPO on the other envs; far too small to show learning",
        envs=("textworld", "webshop", "countdown"),
        methods=ALL_METHODS,
        seeds=(0,),
        steps=1,
        tasks_per_step=1,
        group_size=4,
        eval_episodes=2,
        eval_every=0,
        extra={"autocast": _CPU_AUTOCAST},
        method_envs={m: ("textworld",) for m in ALL_METHODS if m not in ("r3l", "grpo")},
    ),
    # What 2 cores finish in about two hours with 2 runs at a time (measured with bf16 autocast on a CPU with
    # avx512_bf16; an AVX2-only CPU computes in fp32 instead):
    # the four methods on every env and seed, the ablations and the reflector study on TextWorld, where the model
    # wins some episodes. Rerunning resumes (--time-budget to stop cleanly).
    "cpu": Mode(
        "cpu",
        "4 steps of 1 task × 4 trajectories, 8 held-out episodes before and after, 3 seeds; "
        f"autocast {_CPU_AUTOCAST} (bf16 only where the CPU has it); "
        "the ablations and self-reflection on TextWorld only",
        envs=("textworld", "webshop", "countdown"),
        methods=ALL_METHODS,
        seeds=(0, 1, 2),
        steps=4,
        tasks_per_step=1,
        group_size=4,
        eval_episodes=8,
        eval_every=0,
        extra={"autocast": _CPU_AUTOCAST},
        method_envs={m: ("textworld",) for m in ALL_METHODS if METHODS[m].role in ("ablation", "reflector")},
    ),
    "gpu": Mode(
        "gpu",
        "larger settings for one GPU: 60 steps of 8 tasks × 8 trajectories, 64 held-out episodes every 10 "
        "steps, 3 seeds, ALFWorld added",
        envs=("countdown", "textworld", "webshop", "alfworld"),
        methods=ALL_METHODS,
        seeds=(0, 1, 2),
        steps=60,
        tasks_per_step=8,
        group_size=8,
        eval_episodes=64,
        eval_every=10,
        lr=1e-5,
        device="cuda",
        dtype="auto",
        checkpoint_every=10,
        extra={"micro_batch_size": 8, "eval_batch_size": 32},
    ),
}


@dataclass(frozen=True)
class Run:
    """One cell of the grid: where it lives and the TrainConfig fields it runs with."""

    env_key: str
    method_key: str
    seed: int
    run_dir: Path
    config: dict[str, Any]
    setup: str | None

    @property
    def name(self) -> str:
        return f"{self.env_key}/{self.method_key}/seed{self.seed}"


def run_config(
    mode: Mode, env: EnvSetting, method: Method, seed: int, run_dir: Path, *, eval_before: bool = True
) -> dict[str, Any]:
    """The TrainConfig fields of one cell (as JSON types, the way ``config.json`` stores them)."""
    config = {
        "env": env.env,
        "env_kwargs": dict(env.kwargs),
        "model": mode.model,
        "algo": method.algo,
        "ablations": list(method.ablations),
        "reflector": method.reflector,
        "steps": mode.steps,
        "tasks_per_step": mode.tasks_per_step,
        "group_size": mode.group_size,
        "fill": True,
        "max_new_tokens": env.max_new_tokens,
        "max_turns": env.max_turns,
        "actions": env.actions,
        "lr": mode.lr,
        "device": mode.device,
        "dtype": mode.dtype,
        "eval_every": mode.eval_every,
        "eval_episodes": mode.eval_episodes,
        "eval_batch_size": mode.eval_episodes,
        "eval_before": eval_before,
        "out_dir": str(run_dir),
        "seed": seed,
        "checkpoint_every": mode.checkpoint_every,
        "save_final": False,
        "tensorboard": False,
        "progress": False,
        **mode.extra,
    }
    return json.loads(json.dumps(config))


def build_grid(
    mode: Mode, out_root: Path, *, envs: dict[str, EnvSetting] = ENVS, methods: dict[str, Method] = METHODS
) -> list[Run]:
    """Every cell of ``mode``, in run order: R³L and GRPO on every env and seed first, then the next pair."""
    rank = {key: i for i, key in enumerate(methods)}
    order = sorted(
        ((m, e, s) for m in mode.methods for e in mode.envs for s in mode.seeds if mode.runs_on(m, e)),
        key=lambda c: (rank[c[0]] // 2, c[2], mode.envs.index(c[1]), rank[c[0]]),
    )
    runs = []
    for method_key, env_key, seed in order:
        run_dir = out_root / env_key / method_key / f"seed{seed}"
        # The initial model is the same in every cell of an (env, seed) and so are the held-out episodes: the
        # env's first method evaluates it before training, the others reuse that eval (see ``aggregate``).
        first = next(m for m in mode.methods if mode.runs_on(m, env_key))
        config = run_config(mode, envs[env_key], methods[method_key], seed, run_dir, eval_before=method_key == first)
        runs.append(Run(env_key, method_key, seed, run_dir, config, envs[env_key].setup))
    return runs


# ---------------------------------------------------------------------------------------------- run state
#: TrainConfig fields an invocation may override for memory: the loss does not depend on them (1×8 = 8×1 is tested)
_MEMORY_ONLY = {"micro_batch_size"}


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    from r3l_learn.metrics import read_metrics

    path = run_dir / "metrics.jsonl"
    return read_metrics(path) if path.is_file() else []


def finished(run: Run) -> bool:
    """The run wrote its summary and its final record (the final eval, or the last step without evals)."""
    if not (run.run_dir / "summary.txt").is_file():
        return False
    key = "eval/success_rate" if run.config["eval_episodes"] else "train/reward"
    return any(r.get("step") == run.config["steps"] and key in r for r in _metrics(run.run_dir))


def state(run: Run) -> str:
    """``done``, ``resume`` (checkpoints, no final eval), ``fresh`` (nothing usable) or ``stale`` (the run
    directory holds a run of another configuration)."""
    from r3l_learn.train import RESUMABLE_CHANGES  # what a run may change and still resume

    saved = run.run_dir / "config.json"
    if saved.is_file():
        old = json.loads(saved.read_text())
        free = RESUMABLE_CHANGES | _MEMORY_ONLY
        changed = [k for k in run.config if k not in free and old.get(k) != run.config[k]]
        if changed:
            return "stale"
    if finished(run):
        return "done"
    from r3l_learn.checkpoints import latest_checkpoint

    return "resume" if latest_checkpoint(run.run_dir / "checkpoints") else "fresh"


# ---------------------------------------------------------------------------------------------- executing
def _load_now() -> float:
    return os.getloadavg()[0]


def auto_threads(jobs: int) -> int:
    """Threads per run: the cores other work leaves free, shared among the parallel runs; at least 1. On a
    loaded machine torch's spin-waiting threads collapse when they outnumber free cores, so 1 is the safe floor."""
    cores = os.cpu_count() or 1
    return max(1, (cores - round(_load_now())) // max(jobs, 1))


@dataclass
class Outcome:
    run: Run
    status: str  # done, failed, interrupted, skipped, not-started
    wall_s: float = 0.0
    returncode: int | None = None


class Sweep:
    """Runs cells in subprocesses, ``jobs`` at a time, until done or the deadline (``time.monotonic()``)."""

    def __init__(
        self, *, jobs: int = 1, threads: int = 1, deadline: float | None = None, run_timeout: float | None = None
    ):
        self.jobs, self.threads, self.deadline, self.run_timeout = jobs, threads, deadline, run_timeout
        self._stop = threading.Event()

    def run(self, runs: Sequence[Run], *, keep_checkpoints: bool = False) -> list[Outcome]:
        def one(run: Run) -> Outcome:
            if self._stop.is_set() or (self.deadline is not None and time.monotonic() >= self.deadline):
                return Outcome(run, "not-started")
            return self._execute(run, keep_checkpoints)

        with ThreadPoolExecutor(max_workers=max(self.jobs, 1)) as pool:
            futures = [pool.submit(one, run) for run in runs]
            try:
                return [f.result() for f in futures]
            except KeyboardInterrupt:
                logger.warning("interrupted: stopping the runs in flight (each saves a checkpoint)")
                self._stop.set()  # each waiting thread sends its run one SIGINT (a second one would abort the save)
                return [f.result() for f in futures]

    def _execute(self, run: Run, keep_checkpoints: bool) -> Outcome:
        status = state(run)
        if status == "done":
            return Outcome(run, "skipped")
        if status == "stale":
            raise RuntimeError(f"{run.run_dir} holds a run of another configuration (pass --rerun-stale)")
        if status == "fresh" and run.run_dir.exists():
            shutil.rmtree(run.run_dir)  # a crash before the first checkpoint: nothing to resume
        run.run_dir.mkdir(parents=True, exist_ok=True)
        spec = {"config": run.config, "setup": run.setup, "resume": status == "resume", "threads": self.threads}
        (run.run_dir / "spec.json").write_text(json.dumps(spec, indent=2) + "\n")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(run.run_dir)]
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        load_start, start, started = _load_now(), time.monotonic(), time.strftime("%Y-%m-%d %H:%M:%S %Z")
        logger.info(
            "%s: %s (threads %d, load %.1f)",
            run.name,
            "resuming" if spec["resume"] else "starting",
            self.threads,
            load_start,
        )
        with open(run.run_dir / "train.log", "a") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True
            )
            interrupted = self._wait(proc, start)
        wall = time.monotonic() - start
        attempt = {
            "returncode": proc.returncode,
            "wall_s": round(wall, 1),
            "resumed": spec["resume"],
            "interrupted": interrupted,
            "threads": self.threads,
            "load_start": round(load_start, 2),
            "load_end": round(_load_now(), 2),
            "started": started,
        }
        _append_attempt(run.run_dir, attempt)
        done = finished(run)
        if done and not keep_checkpoints:
            shutil.rmtree(run.run_dir / "checkpoints", ignore_errors=True)
        outcome = "done" if done else ("interrupted" if interrupted else "failed")
        logger.info("%s: %s in %.0f s (rc %s)", run.name, outcome, wall, proc.returncode)
        if outcome == "failed":
            logger.warning("%s failed; the end of its log:\n%s", run.name, _tail(run.run_dir / "train.log"))
        return Outcome(run, outcome, wall, proc.returncode)

    def _wait(self, proc: subprocess.Popen, start: float) -> bool:
        """Wait for ``proc``; past the deadline or the run timeout, SIGINT it (the learner checkpoints) and
        give it two minutes before killing it. Returns whether it was interrupted."""
        limits = [t for t in (self.deadline, start + self.run_timeout if self.run_timeout else None) if t]
        while True:
            try:
                proc.wait(timeout=1.0)
                return False
            except subprocess.TimeoutExpired:
                pass
            if self._stop.is_set() or (limits and time.monotonic() >= min(limits)):
                break
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return True


def _append_attempt(run_dir: Path, attempt: dict[str, Any]) -> None:
    path = run_dir / "run.json"
    data = json.loads(path.read_text()) if path.is_file() else {"attempts": []}
    data["attempts"].append(attempt)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# ---------------------------------------------------------------------------------------------- the child
def _setup(setup: str | None) -> None:
    """Register an env that lives outside r3l_envs: ``DIR:module:function`` (DIR relative to the repository)."""
    if not setup:
        return
    import wrappers  # noqa: F401  (first: a tests/ folder on sys.path would shadow the package)

    folder, module, function = setup.split(":")
    path = str((ROOT / folder).resolve())
    if path not in sys.path:
        sys.path.append(path)
    getattr(importlib.import_module(module), function)()


def budget_counts(groups: Sequence[Any]) -> dict[str, int]:
    """What one step's groups cost and yielded, as sums (``bench/*`` metrics): trajectories, successes, tokens
    generated in rollouts (a retry's reused prefix excluded) and in reflections, env steps, retry counters."""
    trajs = [t for g in groups for t in g.trajectories]
    stats = [g.metadata.get("stats", {}) for g in groups]

    def total(key: str) -> int:
        return int(sum(s.get(key, 0) for s in stats))

    reused_tokens = total("scratch_tokens") - total("retry_tokens")
    reused_steps = total("scratch_env_steps") - total("retry_env_steps")
    reflection_tokens = 0
    for t in trajs:
        reflection = t.metadata.get("reflection") or {}
        reflection_tokens += len(reflection.get("token_ids") or [])
    counts = {
        "trajectories": len(trajs),
        "successes": sum(bool(t.won) for t in trajs),
        "rollout_tokens": sum(t.num_tokens for t in trajs) - reused_tokens,
        "reflection_tokens": reflection_tokens,
        "env_steps": sum(sum(turn.action is not None for turn in t.turns) for t in trajs) - reused_steps,
        "bases_reflected": total("bases"),
        "reflections_parsed": total("reflections_parsed"),
        "retries": total("retries"),
        "retries_beat_base": total("retries_beat_base"),
        "retries_succeeded": total("retries_succeeded"),
        "retry_tokens": total("retry_tokens"),
        "scratch_tokens": total("scratch_tokens"),
        "retry_env_steps": total("retry_env_steps"),
        "scratch_env_steps": total("scratch_env_steps"),
        # where pivotal credit changed the gradient: agent tokens vs those left in the loss (the difference is
        # the prefix turns of retried bases and their retries, masked out)
        "agent_tokens": sum(len(turn.token_ids) for t in trajs for turn in t.turns),
        "target_tokens": sum(sum(t.loss_mask) for t in trajs),
    }
    return {f"bench/{k}": v for k, v in counts.items()}


def child(run_dir: Path) -> int:
    """Run one cell in this process (``--child``): set up, train (or resume), write ``result.json``."""
    import torch

    import r3l_learn.train as train_module

    spec = json.loads((run_dir / "spec.json").read_text())
    torch.set_num_threads(int(spec.get("threads") or 1))
    _setup(spec.get("setup"))
    original = getattr(train_module, "_step_metrics", None)
    if original is None:
        logger.warning("r3l_learn.train has no _step_metrics: the bench/* counters are not recorded")
    else:

        def step_metrics(groups: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
            return {**original(groups, *args, **kwargs), **budget_counts(groups)}

        train_module._step_metrics = step_metrics
    config = train_module.TrainConfig(**spec["config"])
    result = train_module.train(config, resume=spec["resume"])
    summary = {
        "steps_done": result.steps_done,
        "interrupted": result.interrupted,
        "eval_before": dataclasses.asdict(result.eval_before) if result.eval_before else None,
        "eval_after": dataclasses.asdict(result.eval_after) if result.eval_after else None,
    }
    if not result.interrupted:
        (run_dir / "result.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 130 if result.interrupted else 0


# ---------------------------------------------------------------------------------------------- statistics
@functools.cache
def t_quantile(df: int, p: float = 0.975) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (Simpson's rule on the density, then
    bisection; accurate to ~1e-6, so no SciPy is needed)."""
    if df < 1 or not 0.5 <= p < 1:
        raise ValueError(f"need df >= 1 and 0.5 <= p < 1, got df={df}, p={p}")
    norm = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t: float, n: int = 2000) -> float:
        h = t / n
        ys = [norm * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2) for i in range(n + 1)]
        return 0.5 + h / 3 * (ys[0] + ys[-1] + 4 * sum(ys[1:-1:2]) + 2 * sum(ys[2:-1:2]))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def mean_ci(values: Sequence[float]) -> dict[str, Any]:
    """Mean and the half-width of its 95 % t-interval (``None`` for fewer than 2 values)."""
    values = [float(v) for v in values if v is not None]
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "ci": None, "lo": None, "hi": None}
    mean = statistics.fmean(values)
    half = t_quantile(n - 1) * statistics.stdev(values) / math.sqrt(n) if n > 1 else None
    lo, hi = (mean - half, mean + half) if half is not None else (None, None)
    return {"n": n, "mean": mean, "ci": half, "lo": lo, "hi": hi}


def paired(a: dict[int, float], b: dict[int, float]) -> dict[str, Any]:
    """The mean difference ``a − b`` over the seeds both have, with its 95 % t-interval (paired by seed)."""
    seeds = sorted(set(a) & set(b))
    out = mean_ci([a[s] - b[s] for s in seeds])
    out["seeds"] = seeds
    return out


def verdict(diff: dict[str, Any]) -> str:
    """``higher``, ``lower``, ``no significant difference``, ``identical`` or ``too few seeds``."""
    if diff["n"] < 2:
        return "too few seeds"
    if diff["ci"] == 0:
        return "identical" if diff["mean"] == 0 else ("higher" if diff["mean"] > 0 else "lower")
    if diff["lo"] > 0:
        return "higher"
    if diff["hi"] < 0:
        return "lower"
    return "no significant difference"


# ---------------------------------------------------------------------------------------------- aggregation
def _num(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def run_summary(run: Run) -> dict[str, Any]:
    """What one run measured: evals (with the budget spent before each), totals, and the retry counters. A run
    directory that holds a run of another configuration (``stale``) counts as not finished."""
    stale = state(run) == "stale"
    records = _metrics(run.run_dir)
    steps = [r for r in records if "train/reward" in r]
    sums: dict[str, float] = {}
    for r in steps:  # the mean pivot is logged per step: weight it by the step's retries
        if _num(r.get("retry/mean_pivot")) is not None and r.get("retry/retries"):
            sums["bench/pivot_sum"] = sums.get("bench/pivot_sum", 0.0) + r["retry/mean_pivot"] * r["retry/retries"]
    for r in steps:
        for key, value in r.items():
            if (
                key.startswith("bench/") or key in ("speed/generated_tokens", "speed/collect_s", "speed/update_s")
            ) and (_num(value) is not None):
                sums[key] = sums.get(key, 0.0) + float(value)
    curve = []
    for r in records:
        if "eval/success_rate" not in r:
            continue
        before = [s for s in steps if s["step"] <= r["step"]]
        curve.append(
            {
                "step": r["step"],
                "trajectories": sum(s.get("train/trajectories", 0) for s in before),
                "tokens": sum(s.get("bench/rollout_tokens", s.get("speed/generated_tokens", 0)) for s in before),
                "success": _num(r.get("eval/success_rate")),
                "score": _num(r.get("eval/mean_score")),
                "first_attempt": _num(r.get("eval/first_attempt_success")),
            }
        )
    first = next((c for c in curve if c["step"] == 0), None)
    last = next((c for c in curve if c["step"] == run.config["steps"]), None)
    attempts = (
        json.loads((run.run_dir / "run.json").read_text())["attempts"] if (run.run_dir / "run.json").is_file() else []
    )
    result_path = run.run_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    return {
        "env": run.env_key,
        "method": run.method_key,
        "seed": run.seed,
        "run_dir": str(run.run_dir),
        "finished": not stale and finished(run),
        "stale": stale,
        "steps_logged": len(steps),
        "curve": curve,
        "before": first,
        "after": last,
        "trajectories": sum(s.get("train/trajectories", 0) for s in steps),
        # steps whose gradient was not zero: with equal rewards in every group (and no aux sample, no KL drift) a
        # step has nothing to learn from (only weight decay and Adam's momentum move the weights)
        "updates": sum(1 for s in steps if (_num(s.get("grad_norm")) or 0.0) > 0),
        "logged_generated_tokens": sums.get("speed/generated_tokens"),
        "sums": {k.removeprefix("bench/"): v for k, v in sums.items() if k.startswith("bench/")},
        "collect_s": sums.get("speed/collect_s"),
        "update_s": sums.get("speed/update_s"),
        "wall_s": sum(a.get("wall_s", 0.0) for a in attempts) or None,
        "load": [a.get("load_start") for a in attempts] + [a.get("load_end") for a in attempts[-1:]],
        "eval_after_detail": result.get("eval_after"),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def cell_summary(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Across the finished seeds of one (method, env): means with 95 % CIs, budgets, retry economics."""
    done = [s for s in summaries if s["finished"] and s["after"]]
    out: dict[str, Any] = {"seeds": [s["seed"] for s in done]}
    for key in ("success", "score", "first_attempt"):
        after = {s["seed"]: s["after"][key] for s in done if s["after"][key] is not None}
        before = {s["seed"]: s["before"][key] for s in done if s["before"] and s["before"][key] is not None}
        out[key] = mean_ci(list(after.values()))
        out[f"{key}_before"] = mean_ci(list(before.values()))
        out[f"{key}_delta"] = paired(after, before)
        out[f"{key}_by_seed"] = after
    out["trajectories"] = mean_ci([s["trajectories"] for s in done])
    out["updates"] = mean_ci([s["updates"] for s in done])
    out["logged_generated_tokens"] = mean_ci([s["logged_generated_tokens"] for s in done])
    out["wall_min"] = mean_ci([s["wall_s"] / 60 for s in done if s["wall_s"]])
    details = [s["eval_after_detail"] for s in done if s["eval_after_detail"]]
    out["eval_turns"] = mean_ci([d["mean_turns"] for d in details])
    out["eval_parse_errors"] = mean_ci([d["parse_error_rate"] for d in details])
    pooled: dict[str, float] = {}
    for s in done:
        for key, value in s["sums"].items():
            pooled[key] = pooled.get(key, 0.0) + value
    out["pooled"] = pooled
    has = bool(pooled)
    out["generated_tokens"] = mean_ci(
        [s["sums"].get("rollout_tokens", 0) + s["sums"].get("reflection_tokens", 0) for s in done] if has else []
    )
    out["env_steps"] = mean_ci([s["sums"].get("env_steps") for s in done] if has else [])
    spent = pooled.get("rollout_tokens", 0) + pooled.get("reflection_tokens", 0)
    out["economics"] = {
        "retries": pooled.get("retries"),
        "mean_pivot": _ratio(pooled.get("pivot_sum", 0.0), pooled.get("retries")),
        "parse_rate": _ratio(pooled.get("reflections_parsed"), pooled.get("bases_reflected")),
        "beat_base_rate": _ratio(pooled.get("retries_beat_base"), pooled.get("retries")),
        "retry_success_rate": _ratio(pooled.get("retries_succeeded"), pooled.get("retries")),
        "token_cost_vs_scratch": _ratio(pooled.get("retry_tokens"), pooled.get("scratch_tokens")),
        "step_cost_vs_scratch": _ratio(pooled.get("retry_env_steps"), pooled.get("scratch_env_steps")),
        "train_success_rate": _ratio(pooled.get("successes"), pooled.get("trajectories")),
        "tokens_per_success": _ratio(spent, pooled.get("successes")) if has else None,
        "env_steps_per_success": _ratio(pooled.get("env_steps"), pooled.get("successes")),
        "masked_share": (1 - pooled["target_tokens"] / pooled["agent_tokens"] if pooled.get("agent_tokens") else None),
        "successes": pooled.get("successes"),
    }
    return out


def aggregate(mode: Mode, runs: Sequence[Run], methods: dict[str, Method] = METHODS) -> dict[str, Any]:
    """Per-run and per-cell summaries, paired comparisons, missing cells and sanity checks."""
    per_run = [run_summary(r) for r in runs]
    # Runs that did not evaluate the initial model themselves (``eval_before`` off) take the eval of the run of
    # the same (env, seed) that did: same model, same episodes, same seeds.
    initial = {(s["env"], s["seed"]): s["before"] for s in per_run if s["finished"] and s["before"]}
    for s in per_run:
        s["before_shared"] = not s["before"] and (s["env"], s["seed"]) in initial
        if s["before_shared"]:
            s["before"] = initial[(s["env"], s["seed"])]
            s["curve"].insert(0, s["before"])
    cells: dict[str, dict[str, Any]] = {}
    for env in mode.envs:
        for method in mode.methods:
            mine = [s for s in per_run if s["env"] == env and s["method"] == method]
            cells[f"{method}|{env}"] = cell_summary(mine)
    comparisons = []
    for env in mode.envs:
        if "r3l" not in mode.methods:
            continue
        for other in mode.methods:
            if other == "r3l":
                continue
            a, b = cells[f"r3l|{env}"], cells[f"{other}|{env}"]
            for key in ("success", "score"):
                diff = paired(a[f"{key}_by_seed"], b[f"{key}_by_seed"])
                comparisons.append({"env": env, "other": other, "metric": key, **diff, "verdict": verdict(diff)})
    missing = []
    for env in mode.envs:
        for method in (m for m in mode.methods if mode.runs_on(m, env)):
            have = set(cells[f"{method}|{env}"]["seeds"])
            lacking = [s for s in mode.seeds if s not in have]
            stale = [r["seed"] for r in per_run if r["env"] == env and r["method"] == method and r["stale"]]
            if lacking:
                missing.append({"env": env, "method": method, "seeds": lacking, "stale": stale})
    # The same seed evaluates the same held-out episodes with the same initial model: every method's eval before
    # training should agree (a check of the harness, not a result).
    before_agree = {}
    for env in mode.envs:
        for seed in mode.seeds:
            vals = {
                (s["before"]["success"], s["before"]["score"])
                for s in per_run
                if s["env"] == env and s["seed"] == seed and s["finished"] and s["before"] and not s["before_shared"]
            }
            if vals:
                before_agree[f"{env}|{seed}"] = len(vals) == 1
    return {
        "runs": per_run,
        "cells": cells,
        "comparisons": comparisons,
        "missing": missing,
        "before_agree": before_agree,
    }


# ---------------------------------------------------------------------------------------------- the page
def _f(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _ci(stat: dict[str, Any], digits: int = 3, *, signed: bool = False) -> str:
    if not stat or stat["n"] == 0:
        return "—"
    mean = f"{stat['mean']:+.{digits}f}" if signed else f"{stat['mean']:.{digits}f}"
    if stat["ci"] is None:
        return f"{mean} (n={stat['n']})"
    return f"{mean} ± {stat['ci']:.{digits}f} (n={stat['n']})"


def _int(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _comparison(agg: dict[str, Any], env: str, other: str, metric: str) -> dict[str, Any] | None:
    return next(
        (c for c in agg["comparisons"] if c["env"] == env and c["other"] == other and c["metric"] == metric), None
    )


def _beside_r3l(cells: dict[str, Any], env: str, variant: str) -> tuple[dict, dict] | None:
    """The retry economics of an R³L variant and of R³L on ``env``, when both have finished runs."""
    mine, r3l = cells.get(f"{variant}|{env}"), cells.get(f"r3l|{env}")
    if mine and mine["seeds"] and r3l and r3l["seeds"]:
        return mine["economics"], r3l["economics"]
    return None


def _versus(agg: dict[str, Any], env: str, other: str, name: str) -> str:
    """`` Held-out success, R³L (oracle) minus <name>: ...`` from the paired comparison, or nothing without one."""
    comp = _comparison(agg, env, other, "success")
    if comp is None or comp["n"] == 0:
        return ""
    interval = "" if comp["ci"] is None else f", 95 % CI [{comp['lo']:+.3f}, {comp['hi']:+.3f}]"
    return (
        f" Held-out success, R³L (oracle) minus {name}: {comp['mean']:+.3f}{interval} (n={comp['n']}, "
        f"{comp['verdict']})."
    )


def discussion(mode: Mode, agg: dict[str, Any], methods: dict[str, Method] = METHODS) -> list[str]:
    """Statements that follow from the numbers (95 % paired t-intervals over seeds); nothing hard-coded."""
    cells, lines = agg["cells"], []
    for env in mode.envs:
        env_cells = {m: cells[f"{m}|{env}"] for m in mode.methods}
        finished_runs = sum(len(c["seeds"]) for c in env_cells.values())
        if not finished_runs:
            lines.append(f"- **{env}**: no finished run; nothing to compare.")
            continue
        all_success = [v for c in env_cells.values() for v in c["success_by_seed"].values()]
        all_before = [c["success_before"]["mean"] for c in env_cells.values() if c["success_before"]["n"]]
        parts = []
        if all_success and max(all_success) == 0 and (not all_before or max(all_before) == 0):
            parts.append(
                f"no run solved a held-out episode before or after training ({finished_runs} finished run(s)), so "
                "the success comparison is empty"
            )
        for other in (m for m in mode.methods if m != "r3l"):
            for metric in ("success", "score"):
                comp = _comparison(agg, env, other, metric)
                if comp is None or comp["n"] == 0:
                    continue
                what = f"R³L vs {methods[other].label} ({metric})"
                v = comp["verdict"]
                if v == "too few seeds":
                    parts.append(f"{what}: {comp['mean']:+.3f} on {comp['n']} paired seed (no interval)")
                elif v == "identical":
                    parts.append(f"{what}: identical in every seed (n={comp['n']})")
                elif v == "no significant difference":
                    parts.append(
                        f"{what}: no significant difference ({comp['mean']:+.3f}, 95 % CI "
                        f"[{comp['lo']:+.3f}, {comp['hi']:+.3f}], n={comp['n']})"
                    )
                else:
                    bounds = "" if comp["ci"] == 0 else f", 95 % CI [{comp['lo']:+.3f}, {comp['hi']:+.3f}]"
                    parts.append(f"{what}: R³L **{v}** by {abs(comp['mean']):.3f}{bounds} (n={comp['n']})")
        updates = [f"{methods[m].label} {c['updates']['mean']:.1f}" for m, c in env_cells.items() if c["updates"]["n"]]
        if updates:
            parts.append(f"steps with a non-zero gradient (mean over seeds, of {mode.steps}): " + ", ".join(updates))
        parse = [c["eval_parse_errors"]["mean"] for c in env_cells.values() if c["eval_parse_errors"]["n"]]
        if parse and min(parse) >= 0.5:
            share = f"{min(parse):.0%}" if min(parse) == max(parse) else f"{min(parse):.0%}-{max(parse):.0%}"
            parts.append(
                f"{share} of the held-out turns (every finished method) were unusable replies with no parseable "
                "action: on this env the model fails at the answer format before the task"
            )
        moved = []
        for key in mode.methods:
            delta = env_cells[key]["success_delta"]
            v = verdict(delta) if delta["n"] else None
            if v in ("higher", "lower"):
                moved.append(f"{methods[key].label} {'up' if v == 'higher' else 'down'} {abs(delta['mean']):.3f}")
        with_delta = sum(1 for key in mode.methods if env_cells[key]["success_delta"]["n"] >= 2)
        if moved:
            parts.append("held-out success changed significantly with training for " + ", ".join(moved))
        elif with_delta:
            parts.append(
                f"no method's held-out success changed significantly with training ({with_delta} with ≥ 2 seeds)"
            )
        pairs = [
            (r["before"]["success"], r["after"]["success"])
            for r in agg["runs"]
            if r["env"] == env and r["finished"] and r["before"] and r["after"]
        ]
        if pairs:
            same = sum(1 for b, a in pairs if a == b)
            parts.append(
                f"{same} of {len(pairs)} finished runs ended with exactly the held-out success they started with "
                f"(one episode is {1 / mode.eval_episodes:.3f} of it)"
            )
        lines.append(f"- **{env}**: " + "; ".join(parts) + ".")
    for env in mode.envs:
        econ = cells.get(f"r3l|{env}", {}).get("economics", {})
        if econ.get("retries"):
            lines.append(
                f"- Retries on **{env}** (R³L, oracle reflector): {_int(econ['retries'])} retries, "
                f"{_f(econ['beat_base_rate'], 2)} beat their base (paper: ALFWorld 0.65, math 0.06), "
                f"{_f(econ['retry_success_rate'], 2)} succeeded; from the pivot they generated "
                f"{_f(econ['token_cost_vs_scratch'], 2)}× the tokens and played {_f(econ['step_cost_vs_scratch'], 2)}× "
                "the env steps that retries from scratch would have"
                + (
                    " (every pivot was turn 0: the reflector found the first turn already wrong, so restarting at "
                    "the pivot saved nothing)."
                    if econ.get("mean_pivot") == 0
                    else f" (mean pivot: turn {_f(econ.get('mean_pivot'), 1)})."
                )
                + (
                    f" Pivotal credit took {econ['masked_share']:.1%} of the generated agent tokens out of the loss."
                    if econ.get("masked_share") is not None
                    else ""
                )
            )
    for env in mode.envs:
        if pair := _beside_r3l(cells, env, "r3l-self"):
            se, oe = pair
            lines.append(
                f"- Reflector on **{env}**: self-reflection parsed {_f(se['parse_rate'], 2)} of its reflections and "
                f"produced {_int(se['retries'])} retries ({_f(se['beat_base_rate'], 2)} beat their base); the oracle "
                f"produced {_int(oe['retries'])} ({_f(oe['beat_base_rate'], 2)})."
                + _versus(agg, env, "r3l-self", "self-reflection")
            )
    for env in mode.envs:
        if pair := _beside_r3l(cells, env, "r3l-retry-from-scratch"):
            se, pe = pair
            lines.append(
                f"- Restart at the pivot vs from scratch on **{env}** (same reflections, same budget of trajectories): "
                f"{_f(pe['beat_base_rate'], 2)} vs {_f(se['beat_base_rate'], 2)} of the retries beat their base; "
                f"generated tokens per training success {_int(pe['tokens_per_success'])} vs "
                f"{_int(se['tokens_per_success'])}, env steps per success {_f(pe['env_steps_per_success'], 1)} vs "
                f"{_f(se['env_steps_per_success'], 1)}." + _versus(agg, env, "r3l-retry-from-scratch", "from scratch")
            )
    tokens = []
    for env in mode.envs:
        r, g = cells.get(f"r3l|{env}"), cells.get(f"grpo|{env}")
        if r and g and r["generated_tokens"]["n"] and g["generated_tokens"]["n"]:
            ratio = _ratio(r["generated_tokens"]["mean"], g["generated_tokens"]["mean"])
            if ratio is not None:
                tokens.append(f"{env} {ratio:.2f}×")
    if tokens:
        lines.append(
            "- Same number of sampled trajectories, different generated tokens (rollouts + reflections), R³L ÷ GRPO: "
            + ", ".join(tokens)
            + "."
        )
    disagree = [k for k, ok in agg["before_agree"].items() if not ok]
    if agg["before_agree"]:
        lines.append(
            "- Check: the eval before training (same seed, same episodes, same initial model) "
            + ("agrees across all methods." if not disagree else f"differs across methods for {', '.join(disagree)}.")
        )
    return lines


def plot_curves(
    mode: Mode, agg: dict[str, Any], plots_dir: Path, methods: dict[str, Method] = METHODS
) -> dict[str, Path]:
    """Per env: held-out success and score vs sampled trajectories, mean over seeds with a 95 % CI band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    groups = {
        "R³L vs baselines": [m for m in mode.methods if methods[m].role in ("r3l", "baseline")],
        "R³L variants": [m for m in mode.methods if methods[m].role != "baseline"],
    }
    for env in mode.envs:
        fig, axes = plt.subplots(2, 2, figsize=(11, 6.5), sharex=True, squeeze=False)
        drawn = False
        for col, (title, keys) in enumerate(groups.items()):
            for row, metric in enumerate(("success", "score")):
                ax = axes[row][col]
                for key in keys:
                    runs = [r for r in agg["runs"] if r["env"] == env and r["method"] == key and r["finished"]]
                    if not runs:
                        continue
                    steps = sorted({c["step"] for r in runs for c in r["curve"]})
                    xs, ms, los, his = [], [], [], []
                    for step in steps:
                        points = [c for r in runs for c in r["curve"] if c["step"] == step and c[metric] is not None]
                        if len(points) < len(runs):
                            continue
                        stat = mean_ci([p[metric] for p in points])
                        xs.append(statistics.fmean(p["trajectories"] for p in points))
                        ms.append(stat["mean"])
                        los.append(stat["lo"] if stat["lo"] is not None else stat["mean"])
                        his.append(stat["hi"] if stat["hi"] is not None else stat["mean"])
                    if not xs:
                        continue
                    line = ax.plot(xs, ms, marker="o", label=f"{methods[key].label} (n={len(runs)})")[0]
                    ax.fill_between(xs, los, his, color=line.get_color(), alpha=0.15)
                    drawn = True
                ax.set_title(f"{env}: held-out {metric} — {title}", fontsize=9)
                ax.set_ylim(-0.03, 1.03)
                ax.grid(alpha=0.3)
                if row == 1:
                    ax.set_xlabel("sampled trajectories")
                if ax.lines:
                    ax.legend(fontsize=7)
        fig.tight_layout()
        if drawn:
            path = plots_dir / f"{env}.png"
            fig.savefig(path, dpi=100)
            written[env] = path
        plt.close(fig)
    return written


def _versions() -> str:
    from importlib import metadata

    out = []
    for dist in ("torch", "transformers"):
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(out)


def _grid(
    cells: dict[str, Any], mode: Mode, methods: dict[str, Method], rows: Sequence[str], fmt: Callable
) -> list[str]:
    """A methods × envs table whose cells are ``fmt(cell)``."""
    body = [
        [methods[m].label, *(fmt(cells[f"{m}|{e}"]) if mode.runs_on(m, e) else "not run" for e in mode.envs)]
        for m in rows
    ]
    return _table(["method", *mode.envs], body)


_BUDGET_HEADER = (
    "env|method|trajectories|generated tokens|speed/generated_tokens|env steps|train success|tokens / success|"
    "env steps / success|steps with a gradient|held-out turns|held-out parse errors / turn|wall min"
)
_RETRY_HEADER = (
    "env|method|reflector|reflections parsed|retries|mean pivot|beat base|retry success|tokens pivot ÷ scratch|"
    "env steps pivot ÷ scratch|agent tokens masked"
)
_ENV_HEADER = "env|id|kwargs|actions|max turns|max new tokens|kind|data"


def render(
    mode: Mode,
    agg: dict[str, Any],
    *,
    command: str,
    facts: dict[str, str],
    plots: dict[str, Path],
    page_dir: Path,
    history: Sequence[dict[str, Any]] = (),
    envs: dict[str, EnvSetting] = ENVS,
    methods: dict[str, Method] = METHODS,
) -> str:
    """The RESULTS.md section: tables, plots, discussion, missing cells, settings."""
    cells = agg["cells"]
    total = sum(mode.runs_on(m, e) for m in mode.methods for e in mode.envs) * len(mode.seeds)
    done = sum(len(c["seeds"]) for c in cells.values())
    per_seed = mode.steps * mode.tasks_per_step * mode.group_size
    md = [
        f"## Learning at an equal sampling budget (`benchmarks/learning.py`, mode `{mode.name}`)",
        "",
        f"{_report.machine_line(facts)} {_versions()}.",
        f"Model `{mode.model}` ({mode.dtype}) on `{mode.device}`. The runs were made by "
        + (f"{len(history)} invocation(s) (each resumes what the previous left):" if history else "(no record):"),
        "",
        *(f"- {_invocation(h)}" for h in history),
        f"- this page: `{command}`",
        "",
        f"Mode `{mode.name}`: {mode.description}. Every cell samples {mode.steps} steps × "
        f"{mode.tasks_per_step} task(s) × {mode.group_size} trajectories = {per_seed} trajectories per seed "
        f"(R³L: N/2 = {mode.group_size // 2} base(s) per task, their retries, topped up with bases); lr {mode.lr:g}; "
        f"held out: {mode.eval_episodes} episodes of the test split at temperature 0.4, the same episodes for every "
        "method of a seed (so the eval before training, when a run did not make it itself, is that of the first "
        f"method of the same env and seed). Seeds {', '.join(map(str, mode.seeds))}. "
        f"**{done} of {total} runs finished.**",
        "",
        "Cells: mean over seeds ± half-width of the 95 % t-interval (n = finished seeds; one seed has no interval; "
        "intervals are not clipped to [0, 1], and with n = 2 the t quantile is 12.7, so they are wide). "
        "The paper's numbers (R3L.md §8) are for Qwen2.5-1.5B with 96 tasks × 8 samples per step on 8 GPUs; nothing "
        "here is comparable to them in size.",
    ]
    main_rows = [m for m in PAPER_ROWS if m in mode.methods]
    md += ["", "### Held-out success after training (the paper's table shape)", ""]
    md += _grid(cells, mode, methods, main_rows, lambda c: _ci(c["success"]))
    md += ["", "### Held-out score after training", ""]
    md += _grid(cells, mode, methods, main_rows, lambda c: _ci(c["score"]))
    md += ["", "### Change from the eval before training (paired by seed): success / score", ""]
    md += _grid(
        cells,
        mode,
        methods,
        mode.methods,
        lambda c: f"{_ci(c['success_delta'], signed=True)} / {_ci(c['score_delta'], signed=True)}",
    )
    ablation_rows = [m for m in mode.methods if methods[m].role in ("r3l", "ablation")]
    if len(ablation_rows) > 1:
        md += ["", "### Ablations: held-out success / score", ""]
        md += _grid(
            cells,
            dataclasses.replace(mode, envs=mode.envs_of(ablation_rows[1:])),
            methods,
            ablation_rows,
            lambda c: f"{_ci(c['success'])} / {_f(c['score']['mean'])}",
        )
    math_envs = tuple(e for e in mode.envs if any(cells[f"{m}|{e}"]["first_attempt"]["n"] for m in mode.methods))
    if math_envs:
        md += ["", "### Math: first-attempt success (pass@1) / solved within the attempts", ""]
        md += _grid(
            cells,
            dataclasses.replace(mode, envs=math_envs),
            methods,
            mode.methods,
            lambda c: f"{_ci(c['first_attempt'])} / {_f(c['success']['mean'])}",
        )
    md += [
        "",
        "### Budget per run (mean over finished seeds)",
        "",
        "Sampled trajectories are the budget every method gets. Generated tokens: what the policy generated in "
        "rollouts (a retry's reused prefix excluded) plus self-reflections (the oracle generates none); the learner's "
        "own `speed/generated_tokens`, summed, leaves out reflections. Env steps: actions played. Train success: the "
        "fraction of sampled trajectories that won; per success: pooled over seeds. Steps with a gradient: steps whose "
        "gradient norm was not 0 (in a step where every group's rewards were equal and there was no auxiliary sample, "
        "only weight decay and Adam's momentum move the weights; GRPO's KL term has a gradient once weight decay has "
        "moved the weights off the reference, rewards or not). Held-out turns and parse errors "
        "(replies with no usable action, which do not step the env): the eval after training.",
        "",
    ]
    rows = []
    for e in mode.envs:
        for m in mode.methods:
            c, econ = cells[f"{m}|{e}"], cells[f"{m}|{e}"]["economics"]
            if c["seeds"]:
                counts = (c["trajectories"], c["generated_tokens"], c["logged_generated_tokens"], c["env_steps"])
                per_success = (_int(econ["tokens_per_success"]), _f(econ["env_steps_per_success"], 1))
                success = _f(econ["train_success_rate"])
                row = [e, methods[m].label, *(_int(s["mean"]) for s in counts), success, *per_success]
                row.append(f"{_f(c['updates']['mean'], 1)} of {mode.steps}")
                held_out = (_f(c["eval_turns"]["mean"], 1), _f(c["eval_parse_errors"]["mean"], 2))
                rows.append([*row, *held_out, _f(c["wall_min"]["mean"], 1)])
    md += _table(_BUDGET_HEADER.split("|"), rows or [["—"] * 13])
    md += [
        "",
        "### Retry economics (reflect-retry methods, pooled over seeds and steps)",
        "",
        "Ratios of sums over every collected retry. *Pivot ÷ scratch*: what the retries generated and played from "
        "their pivot, relative to what the same retries would have cost replayed from turn 0 (the prefix again + the "
        "same suffix). The learning result of retrying from scratch is the row *R³L, retry from scratch* of the "
        "ablation table (same reflections, retries replayed from turn 0). *Agent tokens masked*: the share of the "
        "generated agent tokens that pivotal credit took out of the loss (the turns before the pivot of a retried "
        "base and of its retry); where it is 0 the masks did not change the gradient.",
        "",
    ]
    rows = []
    for e in mode.envs:
        for m in mode.methods:
            c, econ = cells[f"{m}|{e}"], cells[f"{m}|{e}"]["economics"]
            if c["seeds"] and econ["parse_rate"] is not None:
                rates = ("parse_rate", "retries", "mean_pivot", "beat_base_rate", "retry_success_rate")
                costs = ("token_cost_vs_scratch", "step_cost_vs_scratch", "masked_share")
                rows.append(
                    [e, methods[m].label, methods[m].reflector]
                    + [_int(econ[k]) if k == "retries" else _f(econ[k], 2) for k in rates + costs]
                )
    md += _table(_RETRY_HEADER.split("|"), rows or [["—"] * 11])
    if plots:
        md += ["", "### Held-out success and score vs sampled trajectories (95 % CI bands over seeds)", ""]
        md += [f"![{env}]({os.path.relpath(path, page_dir)})" for env, path in plots.items()]
    md += ["", "### Discussion (generated from the numbers above)", "", *discussion(mode, agg, methods)]
    if agg["missing"]:
        md += ["", "### Missing cells", ""]
        md += [
            f"- {m['env']} × {methods[m['method']].label}: seed(s) {', '.join(map(str, m['seeds']))} not finished"
            + (f" (seed(s) {', '.join(map(str, m['stale']))}: a run of an older configuration)" if m["stale"] else "")
            for m in agg["missing"]
        ]
        if history and history[-1].get("stopped"):
            md += ["", history[-1]["stopped"]]
    md += ["", "### Settings", "", "Per env (the `ENVS` table; the same for every method):", ""]
    rows = []
    for key in mode.envs:
        s = envs[key]
        rows.append([key, f"`{s.env}`", f"`{json.dumps(s.kwargs)}`", s.actions, str(s.max_turns)])
        rows[-1] += [str(s.max_new_tokens), s.kind, s.data]
    md += _table(_ENV_HEADER.split("|"), rows)
    flags = "; ".join(f"{methods[m].label} = `{_method_flags(methods[m])}`" for m in mode.methods)
    md += ["", f"Methods: {flags}."]
    config_path = Path(agg["runs"][0]["run_dir"]) / "config.json" if agg["runs"] else None
    if config_path and config_path.is_file():
        varying = ("env", "env_kwargs", "algo", "ablations", "reflector", "max_turns", "max_new_tokens", "actions")
        shared = {k: v for k, v in json.loads(config_path.read_text()).items() if k not in varying}
        shared.update(out_dir="<run dir>", seed="<seed>")
        md += ["", "Every other TrainConfig field (one run's `config.json`):", "", f"`{json.dumps(shared)}`"]
        differ = []
        for r in agg["runs"]:
            path = Path(r["run_dir"]) / "config.json"
            saved = json.loads(path.read_text()) if r["finished"] and path.is_file() else {}
            diff = {k: saved[k] for k in _MEMORY_ONLY if k in saved and saved[k] != shared.get(k)}
            if diff:
                differ.append(f"{r['env']}/{r['method']}/seed{r['seed']} ({json.dumps(diff)[1:-1]})")
        if differ:
            md += [
                "",
                "Runs made with another micro-batch size, for memory (the loss does not depend on it): "
                + ", ".join(differ)
                + ".",
            ]
    return "\n".join(md)


def _invocation(h: dict[str, Any]) -> str:
    counts = ", ".join(f"{v} {k}" for k, v in sorted(h.get("counts", {}).items()))
    return (
        f"`{h.get('command', '?')}` on {h.get('started', '?')}: {h.get('wall_min', '?')} min, {h.get('jobs', '?')} "
        f"run(s) at a time with {h.get('threads', '?')} torch thread(s) each, load average {h.get('load_start', '?')} "
        f"at the start and {h.get('load_end', '?')} at the end (2-core machine shared with other jobs); runs: {counts}"
    )


def _method_flags(method: Method) -> str:
    flags = f"--algo {method.algo}"
    if method.ablations:
        flags += " --ablations " + " ".join(method.ablations)
    if method.algo == "r3l" and "no_reflect_retry" not in method.ablations:
        flags += f" --reflector {method.reflector}"
    return flags


def write_report(
    mode: Mode,
    runs: Sequence[Run],
    *,
    command: str,
    results_md: Path,
    results_dir: Path,
    plots_dir: Path,
    history: Sequence[dict[str, Any]] = (),
    envs: dict[str, EnvSetting] = ENVS,
    methods: dict[str, Method] = METHODS,
) -> dict[str, Any]:
    """Aggregate the run directories of ``runs`` and write the section, the JSON and the plots."""
    agg = aggregate(mode, runs, methods)
    facts = _report.machine()
    plots = plot_curves(mode, agg, plots_dir, methods)
    markdown = render(
        mode,
        agg,
        command=command,
        facts=facts,
        plots=plots,
        page_dir=results_md.parent,
        history=history,
        envs=envs,
        methods=methods,
    )
    data = {
        "mode": dataclasses.asdict(mode),
        "command": command,
        "machine": facts,
        "versions": _versions(),
        "invocations": list(history),
        "envs": {k: dataclasses.asdict(envs[k]) for k in mode.envs},
        "methods": {k: dataclasses.asdict(methods[k]) for k in mode.methods},
        "configs": {r.name: r.config for r in runs},
        **agg,
        "discussion": discussion(mode, agg, methods),
        "plots": {k: str(v) for k, v in plots.items()},
    }
    saved = _report.RESULTS_MD, _report.RESULTS_DIR
    _report.RESULTS_MD, _report.RESULTS_DIR = Path(results_md), Path(results_dir)
    try:  # write_section reads these module globals: point them at the requested files for this call only
        _report.write_section(SECTION, markdown, data)
    finally:
        _report.RESULTS_MD, _report.RESULTS_DIR = saved
    return data


# ---------------------------------------------------------------------------------------------- main
def sweep(
    mode: Mode,
    *,
    out_root: Path,
    envs: dict[str, EnvSetting] = ENVS,
    methods: dict[str, Method] = METHODS,
    only: Callable[[Run], bool] | None = None,
    jobs: int = 1,
    threads: int | None = None,
    time_budget_min: float | None = None,
    run_timeout_min: float | None = None,
    rerun_stale: bool = False,
    keep_checkpoints: bool = False,
    overrides: dict[str, Any] | None = None,
    command: str = "",
) -> tuple[list[Run], dict[str, Any]]:
    """Run the cells of ``mode`` that are not done yet (those ``only`` selects); returns the grid and what this
    invocation did, which is also appended to ``out_root/sweeps.jsonl`` (the page lists every invocation)."""
    runs = build_grid(mode, out_root, envs=envs, methods=methods)
    todo = [r for r in runs if only is None or only(r)]
    if overrides:
        if set(overrides) - _MEMORY_ONLY:
            raise ValueError(f"only {sorted(_MEMORY_ONLY)} may be overridden, got {sorted(overrides)}")
        todo = [dataclasses.replace(r, config={**r.config, **overrides}) for r in todo]
    for setup in {r.setup for r in todo if r.setup}:
        _setup(setup)
    from r3l_learn.train import TrainConfig

    for r in todo:
        TrainConfig(**r.config)  # every cell's config is valid before anything runs
    stale = [r for r in todo if state(r) == "stale"]
    if stale and not rerun_stale:
        names = ", ".join(str(r.run_dir) for r in stale[:5])
        raise SystemExit(
            f"{len(stale)} run dirs hold runs of another configuration ({names}, ...): "
            "pass --rerun-stale to delete and rerun them, or choose another --out-root"
        )
    for r in stale:
        shutil.rmtree(r.run_dir)
    threads = threads or auto_threads(jobs)
    start = time.monotonic()
    deadline = start + time_budget_min * 60 if time_budget_min else None
    info: dict[str, Any] = {"command": command, "started": time.strftime("%Y-%m-%d %H:%M %Z")}
    info.update(load_start=round(_load_now(), 2), threads=threads, jobs=jobs)
    runner = Sweep(
        jobs=jobs, threads=threads, deadline=deadline, run_timeout=run_timeout_min * 60 if run_timeout_min else None
    )
    outcomes = runner.run(todo, keep_checkpoints=keep_checkpoints)
    info["wall_min"] = round((time.monotonic() - start) / 60, 1)
    info["load_end"] = round(_load_now(), 2)
    info["outcomes"] = {o.run.name: {"status": o.status, "wall_s": round(o.wall_s, 1)} for o in outcomes}
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    info["counts"] = counts
    if counts.get("not-started") or counts.get("interrupted"):
        info["stopped"] = (
            f"The sweep stopped at its time budget ({time_budget_min} min): runs not started or interrupted are "
            "missing above; rerunning the same command resumes them."
        )
    out_root.mkdir(parents=True, exist_ok=True)
    with open(out_root / "sweeps.jsonl", "a") as f:
        f.write(json.dumps(info) + "\n")
    return runs, info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=sorted(MODES), default="quick")
    parser.add_argument("--out-root", type=Path, default=None, help="run directories (default runs/learning/MODE)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per run (default: free cores / jobs)")
    parser.add_argument("--envs", nargs="*", default=None, help="run only these envs (the page shows the whole grid)")
    parser.add_argument("--methods", nargs="*", default=None, help="run only these methods")
    parser.add_argument("--seeds", nargs="*", type=int, default=None, help="run only these seeds")
    parser.add_argument("--model", default=None, help="override the mode's model")
    parser.add_argument("--device", default=None, help="override the mode's device (e.g. cuda)")
    parser.add_argument("--time-budget", type=float, default=None, help="minutes; then stop (resumable)")
    parser.add_argument("--run-timeout", type=float, default=None, help="minutes per run; then interrupt it")
    parser.add_argument(
        "--micro-batch-size", type=int, default=None, help="override for this invocation's runs (memory only)"
    )
    parser.add_argument("--rerun-stale", action="store_true", help="delete and rerun runs of another configuration")
    parser.add_argument("--keep-checkpoints", action="store_true", help="keep finished runs' checkpoints")
    parser.add_argument("--report-only", action="store_true", help="aggregate the existing runs; run nothing")
    parser.add_argument("--no-report", action="store_true", help="run; do not write RESULTS.md")
    parser.add_argument("--results-md", type=Path, default=_report.RESULTS_MD)
    parser.add_argument("--results-dir", type=Path, default=_report.RESULTS_DIR)
    parser.add_argument("--plots-dir", type=Path, default=HERE / "learning")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S")
    if args.child is not None:
        return child(args.child)

    # A sweep started in the background (nohup, &) inherits SIGINT ignored; stopping it must still let the runs in
    # flight save their checkpoints, so SIGINT and SIGTERM both raise KeyboardInterrupt in the sweeping thread.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    mode = MODES[args.mode]
    logger.info("CPU: %s; CPU modes use autocast %s", cpu_kind(), _CPU_AUTOCAST)
    overrides = {k: v for k, v in (("model", args.model), ("device", args.device)) if v}
    if overrides:
        mode = dataclasses.replace(mode, **overrides)
    for name, given, known in (("envs", args.envs, ENVS), ("methods", args.methods, METHODS)):
        unknown = sorted(set(given or ()) - set(known))
        if unknown:
            parser.error(f"unknown {name} {unknown}; choose among {sorted(known)}")
    out_root = args.out_root or ROOT / "runs" / "learning" / mode.name

    def only(run: Run) -> bool:
        return (
            (args.envs is None or run.env_key in args.envs)
            and (args.methods is None or run.method_key in args.methods)
            and (args.seeds is None or run.seed in args.seeds)
        )

    command = "python benchmarks/learning.py " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    if args.report_only:
        runs = build_grid(mode, out_root)
    else:
        runs, _ = sweep(
            mode,
            out_root=out_root,
            only=only,
            jobs=args.jobs,
            threads=args.threads,
            time_budget_min=args.time_budget,
            run_timeout_min=args.run_timeout,
            rerun_stale=args.rerun_stale,
            keep_checkpoints=args.keep_checkpoints,
            overrides={"micro_batch_size": args.micro_batch_size} if args.micro_batch_size else None,
            command=command,
        )
    if not args.no_report:
        log = out_root / "sweeps.jsonl"
        history = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.is_file() else []
        for setup in {r.setup for r in runs if r.setup}:
            _setup(setup)
        data = write_report(
            mode,
            runs,
            command=command.strip(),
            results_md=args.results_md,
            results_dir=args.results_dir,
            plots_dir=args.plots_dir,
            history=history,
        )
        logger.info("%s: section %r; %d cells missing", args.results_md, SECTION, len(data["missing"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
