"""Runs the cells of a grid that are not done yet, each in its own subprocess (:mod:`benchmarks.learning_study.child`),
``jobs`` at a time: a finished run is skipped, a checkpointed one resumed, so rerunning an interrupted sweep
continues it; past the deadline the runs in flight are interrupted (they save a checkpoint) and no new one starts.
Each step a run finishes is logged with its pace and expected end, with a warning where that is past the deadline.
A start deadline stops new runs earlier and lets the runs in flight finish: on a machine wiped at the end of a
session an interrupted run's checkpoint is lost, a finished run's summary is not. For the same reason a run that is
not expected to finish before the deadline (judged from the committed runs of its env and method, and from its own
pace once it has trained a step) is not started; a shorter one later in the order may still be. A run of an
(env, seed) that a machine of another CPU kind began is left for such a machine
(:mod:`benchmarks.learning_study.kinds`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from . import BENCHMARKS, ROOT
from .aggregate import carried_over
from .child import register_setup
from .grid import ENVS, METHODS, EnvSetting, Method, Mode, Run, build_grid
from .kinds import kinds_of_seeds, split_by_kind, with_before_evals
from .quota import allowed_runs
from .rundir import MEMORY_ONLY, append_attempt, finished, metrics, start_over, state

logger = logging.getLogger("bench.learning")


def load_now() -> float:
    """The 1-minute load average (recorded with every run: the machine is shared)."""
    return os.getloadavg()[0]


def auto_threads(jobs: int) -> int:
    """Threads per run: the cores other work leaves free, shared among the parallel runs; at least 1. On a
    loaded machine torch's spin-waiting threads collapse when they outnumber free cores, so 1 is the safe floor."""
    cores = os.cpu_count() or 1
    return max(1, (cores - round(load_now())) // max(jobs, 1))


@dataclass
class Outcome:
    """What one invocation did with one cell."""

    run: Run
    # done, failed, interrupted, skipped, not-started, too-long (not expected to fit the budget), other-kind (its
    # seed was begun on a CPU of another kind)
    status: str
    wall_s: float = 0.0
    returncode: int | None = None


#: what an expected wall time is multiplied by: the same cells ran 10-15 % slower from one session to the next
WALL_MARGIN = 1.15


def wall_estimator(saved: Mapping[str, Any] | None, kind: str | None = None) -> Callable[[Run], float | None]:
    """How long a run is expected to take, in seconds, judged from the finished runs of its env and method in the
    committed report ``saved`` (made on CPU kind ``kind``, where given: kinds differ in speed several-fold): the
    median training time (collection and update) scaled by the share of steps the run has left, plus the median
    final eval, plus one more eval where the run makes the eval before training; times :data:`WALL_MARGIN`.
    ``None`` where no such run exists.

    From the work measured inside the runs, not their wall time: a run's wall also holds what the next run will
    not repeat (the eval before training that an env's first run on a machine makes for the others, its games'
    compilation, work lost to an interruption), and an AVX2 machine's first run, which held all three, would
    otherwise be expected to outlast any session. A run logged without the collection and update times counts
    its wall time less its final eval as training.

    Once the run has trained a step of its own, its own pace (:func:`own_pace`) stands for the committed one, and
    its final eval is scaled by the ratio of the collection times (an eval generates as a collection does), or of
    the step times where the committed runs did not log theirs: machines of one kind differ twofold in speed. A
    run whose cell has no finished run yet is judged so too, once it has a pace, with the final eval of its env's
    other methods."""
    # (training seconds, final-eval seconds, collection seconds or None) per finished run, by cell and by env
    done: dict[tuple[str, str], list[tuple[float, float, float | None]]] = {}
    done_in_env: dict[str, list[tuple[float, float, float | None]]] = {}
    for s in (saved or {}).get("runs", []):
        if s.get("finished") and s.get("wall_s") and kind in (None, s.get("machine")):
            eval_s = min((s.get("eval_after_detail") or {}).get("seconds") or 0.0, s["wall_s"])
            measured = s.get("collect_s") is not None and s.get("update_s") is not None
            train_s = s["collect_s"] + s["update_s"] if measured else s["wall_s"] - eval_s
            work = (train_s, eval_s, s.get("collect_s"))
            done.setdefault((s["env"], s["method"]), []).append(work)
            done_in_env.setdefault(s["env"], []).append(work)

    def expected(run: Run) -> float | None:
        records = metrics(run.run_dir)
        own = own_pace(records)
        work = done.get((run.env_key, run.method_key))
        if not work and own is not None:
            # a cell's first run on this kind: its own steps say what its training costs, and the env's other
            # methods what its final eval costs (the same episodes, whichever method trained the policy)
            work = done_in_env.get(run.env_key)
        if not work:
            return None
        steps = run.config["steps"]
        trained = steps_trained(records)
        train_s, eval_s = median(w[0] for w in work), median(w[1] for w in work)
        collect_s = median([w[2] for w in work if w[2]] or [0.0]) / steps
        step_s = train_s / steps
        if own is not None:  # this machine's pace, measured
            eval_s *= own.collect_s / collect_s if collect_s else own.step_s / step_s
            step_s = own.step_s
        before = eval_s if run.config.get("eval_before") and not trained else 0.0
        return (before + step_s * max(steps - trained, 0) + eval_s) * WALL_MARGIN

    return expected


def steps_trained(records: Sequence[Mapping[str, Any]]) -> int:
    """The last training step among a run's ``metrics.jsonl`` records (0 before the first)."""
    return max((r["step"] for r in records if "train/reward" in r), default=0)


@dataclass(frozen=True)
class Pace:
    """A run's mean seconds per training step, and per collection (the generating part of a step)."""

    step_s: float
    collect_s: float


def own_pace(records: Sequence[Mapping[str, Any]]) -> Pace | None:
    """A run's pace, from its own ``metrics.jsonl`` records; ``None`` before its first step (or where its steps
    were logged without times). The same cell ran at 6 min a step on one AVX2 machine and 14 on another, so a
    run's own pace says more about its end than the committed runs do."""
    timed = [
        (r["speed/collect_s"], r["speed/update_s"])
        for r in records
        if isinstance(r.get("speed/collect_s"), (int, float)) and isinstance(r.get("speed/update_s"), (int, float))
    ]
    if not timed:
        return None
    return Pace(sum(c + u for c, u in timed) / len(timed), sum(c for c, _ in timed) / len(timed))


#: how often a waiting run's ``metrics.jsonl`` is read for a new step to report
PROGRESS_EVERY_S = 30.0


class Sweep:
    """Runs cells in subprocesses, ``jobs`` at a time, until done or the deadline (``time.monotonic()``); no run
    starts after ``start_deadline``, and the runs in flight then go on to their end (or to ``deadline``). With a
    deadline and ``expected`` (a run's expected seconds, ``None``: unknown), a run that would end past the deadline
    is not started (``too-long``) and the sweep goes on to the next."""

    def __init__(
        self,
        *,
        jobs: int = 1,
        threads: int = 1,
        deadline: float | None = None,
        run_timeout: float | None = None,
        start_deadline: float | None = None,
        expected: Callable[[Run], float | None] | None = None,
    ):
        self.jobs, self.threads, self.deadline, self.run_timeout = jobs, threads, deadline, run_timeout
        self.expected = expected
        self.start_deadline = min((t for t in (deadline, start_deadline) if t is not None), default=None)
        self._stop = threading.Event()
        #: what first cut the sweep short ("interrupt", "time budget", "start window", "run timeout", "no fit");
        #: None if nothing
        self.stopped_by: str | None = None

    def _stopped(self, cause: str) -> None:
        self.stopped_by = self.stopped_by or cause  # the first cause is the one to report

    def _past_budget(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def _wont_fit(self, run: Run, now: float) -> bool:
        if self.deadline is None or self.expected is None or state(run) == "done":
            return False
        need = self.expected(run)
        if need is None or now + need <= self.deadline:
            return False
        left = (self.deadline - now) / 60
        logger.info(
            "%s: not started: expected to take %.0f min, %.0f min of the budget left", run.name, need / 60, left
        )
        return True

    def run(self, runs: Sequence[Run], *, keep_checkpoints: bool = False) -> list[Outcome]:
        def one(run: Run) -> Outcome:
            now = time.monotonic()
            if self._stop.is_set() or (self.start_deadline is not None and now >= self.start_deadline):
                limit = "time budget" if self._past_budget(now) else "start window"
                self._stopped("interrupt" if self._stop.is_set() else limit)
                return Outcome(run, "not-started")
            if self._wont_fit(run, now):
                self._stopped("no fit")
                return Outcome(run, "too-long")
            return self._execute(run, keep_checkpoints)

        # Ctrl-C sets the stop flag instead of raising: a KeyboardInterrupt can land anywhere (while runs are still
        # being queued, say), where an outcome would be lost; the flag is read by every waiting thread instead, which
        # sends its run one SIGINT (the learner saves a checkpoint) and starts nothing more
        main = threading.current_thread() is threading.main_thread()  # only the main thread may set a handler
        previous = signal.signal(signal.SIGINT, self._interrupt) if main else None
        try:
            with ThreadPoolExecutor(max_workers=max(self.jobs, 1)) as pool:
                futures = [pool.submit(one, run) for run in runs]
                return [f.result() for f in futures]
        finally:
            if main:  # a handler not set from Python reads as None: Python's default stands in for it
                signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)

    def _interrupt(self, signum: int, frame: Any) -> None:
        logger.warning("interrupted: stopping the runs in flight (each finishes its update and saves a checkpoint)")
        self._stopped("interrupt")
        self._stop.set()

    def _execute(self, run: Run, keep_checkpoints: bool) -> Outcome:
        status = state(run)
        if status == "done":
            return Outcome(run, "skipped")
        if status == "stale":
            raise RuntimeError(f"{run.run_dir} holds a run of another configuration (pass --rerun-stale)")
        if status == "fresh" and run.run_dir.exists():
            start_over(run.run_dir)  # stopped before the first checkpoint: only the eval's finished batches stay
        run.run_dir.mkdir(parents=True, exist_ok=True)
        spec = {"config": run.config, "setup": run.setup, "resume": status == "resume", "threads": self.threads}
        (run.run_dir / "spec.json").write_text(json.dumps(spec, indent=2) + "\n")
        cmd = [sys.executable, "-m", "benchmarks.learning_study.child", str(run.run_dir)]
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        paths = (str(ROOT), str(BENCHMARKS), env.get("PYTHONPATH", ""))  # r3l's packages, then this package
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        load_start, start, started = load_now(), time.monotonic(), time.strftime("%Y-%m-%d %H:%M:%S %Z")
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
            interrupted = self._wait(proc, start, run)
        wall = time.monotonic() - start
        attempt = {
            "returncode": proc.returncode,
            "wall_s": round(wall, 1),
            "resumed": spec["resume"],
            "interrupted": interrupted,
            "threads": self.threads,
            "load_start": round(load_start, 2),
            "load_end": round(load_now(), 2),
            "started": started,
        }
        append_attempt(run.run_dir, attempt)
        done = finished(run)
        if done and not keep_checkpoints:
            shutil.rmtree(run.run_dir / "checkpoints", ignore_errors=True)
        outcome = "done" if done else ("interrupted" if interrupted else "failed")
        logger.info("%s: %s in %.0f s (rc %s)", run.name, outcome, wall, proc.returncode)
        if outcome == "failed":
            logger.warning("%s failed; the end of its log:\n%s", run.name, _tail(run.run_dir / "train.log"))
        return Outcome(run, outcome, wall, proc.returncode)

    def _limit(self, started: float | None) -> tuple[float, str] | None:
        """When a run started at ``started`` (``time.monotonic()``; ``None``: unknown) will be interrupted, and by
        what (the cause :attr:`stopped_by` records): the time budget or its run timeout, whichever comes first (the
        budget on a tie); ``None`` if neither."""
        limits = [(self.deadline, "time budget")] if self.deadline is not None else []
        if self.run_timeout and started is not None:
            limits.append((started + self.run_timeout, "run timeout"))
        return min(limits, key=lambda limit: limit[0], default=None)

    def _progress(self, run: Run, reported: int | None, started: float | None = None) -> int:
        """Log the run's training steps past ``reported`` (``None``: the steps it resumes from are not news) with
        its pace and when it is expected to end; warn where that is past the hour it will be interrupted (the time
        budget, or the run timeout of a run started at ``started``), so the person at the machine can decide
        before then. Returns the last step trained."""
        records = metrics(run.run_dir)
        trained = steps_trained(records)
        if reported is None or trained <= reported:
            return trained
        pace = own_pace(records)
        left = self.expected(run) if self.expected else None
        pace_text = f", {pace.step_s / 60:.1f} min a step" if pace is not None else ""
        end_text = f"; expected to end in about {left / 60:.0f} min (by {_clock(left)})" if left is not None else ""
        logger.info("%s: step %d of %d%s%s", run.name, trained, run.config["steps"], pace_text, end_text)
        limit = self._limit(started)
        if left is not None and limit is not None and time.monotonic() + left > limit[0]:
            logger.warning(
                "%s: at this pace it ends after the %s, which interrupts it at %s",
                run.name,
                limit[1],
                _clock(limit[0] - time.monotonic()),
            )
        return trained

    def _wait(self, proc: subprocess.Popen, start: float, run: Run) -> bool:
        """Wait for ``proc``, logging each training step it finishes (:meth:`_progress`); past the deadline or the
        run timeout, SIGINT it (the learner checkpoints) and give it :func:`grace_s` before killing it. Returns
        whether it was interrupted."""
        limit = self._limit(start)
        reported, read_at = self._progress(run, None), time.monotonic()
        while True:
            try:
                proc.wait(timeout=1.0)
                return False
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() - read_at >= PROGRESS_EVERY_S:
                reported, read_at = self._progress(run, reported, start), time.monotonic()
            if self._stop.is_set():
                break
            if limit is not None and time.monotonic() >= limit[0]:
                self._stopped(limit[1])
                break
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=grace_s(run.run_dir))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return True


#: the least time an interrupted run gets to save its checkpoint before it is killed
MIN_GRACE_S = 120.0


def grace_s(run_dir: Path) -> float:
    """How long a run SIGINTed in ``run_dir`` may take to stop. The learner defers Ctrl-C past the update in flight
    (weights are never left half-updated) and then saves a checkpoint; killing it sooner loses every step since the
    last checkpoint. An update of the R³L family on two cores was measured at over three minutes, longer than a
    fixed two-minute grace, so the grace is twice the run's longest update so far plus a minute for the save, and
    never less than :data:`MIN_GRACE_S`."""
    updates = [r["speed/update_s"] for r in metrics(run_dir) if isinstance(r.get("speed/update_s"), (int, float))]
    return max(MIN_GRACE_S, 2 * max(updates, default=0.0) + 60.0)


def stop_cause(
    cause: str,
    *,
    time_budget_min: float | None = None,
    start_within_min: float | None = None,
    run_timeout_min: float | None = None,
) -> str:
    """How the page names what cut a sweep short (``cause``: a :attr:`Sweep.stopped_by`)."""
    return {
        "interrupt": "an interrupt (Ctrl-C or SIGINT)",
        "time budget": f"its time budget ({time_budget_min} min)",
        "start window": f"its start window ({start_within_min} min)",
        "run timeout": f"a run's timeout ({run_timeout_min} min)",
        "no fit": f"its time budget ({time_budget_min} min): the runs left were not expected to finish within it",
    }[cause]


def _clock(seconds_from_now: float) -> str:
    """The local time of day ``seconds_from_now`` from now, as the log prints it."""
    return time.strftime("%H:%M", time.localtime(time.time() + seconds_from_now))


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def within_quotas(
    mode: Mode, todo: Sequence[Run], runs: Sequence[Run], carried: Mapping[str, dict[str, Any]], kind: str
) -> tuple[list[Run], list[Run]]:
    """``todo`` split into the runs the seed quotas have this CPU kind make (all of them where the mode has no
    quotas) and the runs of candidate seeds no quota needs now (:mod:`~benchmarks.learning_study.quota`; a finished
    run is kept: the runner reports it done)."""
    if not mode.seed_quotas:
        return list(todo), []
    done = set(carried) | {r.name for r in runs if r.name not in carried and finished(r)}
    allowed = allowed_runs(mode.seed_quotas, done, kinds_of_seeds(runs, carried, kind), kind) | done
    return [r for r in todo if r.name in allowed], [r for r in todo if r.name not in allowed]


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
    start_within_min: float | None = None,
    run_timeout_min: float | None = None,
    rerun_stale: bool = False,
    keep_checkpoints: bool = False,
    overrides: dict[str, Any] | None = None,
    command: str = "",
    saved: dict[str, Any] | None = None,
) -> tuple[list[Run], dict[str, Any]]:
    """Run the cells of ``mode`` that are not done yet (those ``only`` selects); returns the grid and what this
    invocation did, which is also appended to ``out_root/sweeps.jsonl`` (the page lists every invocation).
    ``time_budget_min``: then the runs in flight are interrupted; ``start_within_min``: then no run starts.
    ``saved``: a committed report; the cells its finished runs stand for are done (see ``carried_over``)."""
    from r3l_learn.policies.device import cpu_kind

    kind = cpu_kind()
    runs = build_grid(mode, out_root, envs=envs, methods=methods)
    carried = carried_over(runs, saved)
    chosen = [r for r in runs if only is None or only(r)]
    todo, elsewhere = split_by_kind([r for r in chosen if r.name not in carried], runs, carried, kind)
    for r in elsewhere:
        logger.info("%s: left for a machine of the CPU kind that began its seed (this one: %s)", r.name, kind)
    todo, beyond = within_quotas(mode, todo, runs, carried, kind)
    if beyond:
        logger.info("%d runs of candidate seeds are beyond what the seed quotas need now", len(beyond))
    if mode.before_once_per_env:
        todo = with_before_evals(todo, runs, carried, kind)
    if overrides:
        if set(overrides) - MEMORY_ONLY:
            raise ValueError(f"only {sorted(MEMORY_ONLY)} may be overridden, got {sorted(overrides)}")
        todo = [dataclasses.replace(r, config={**r.config, **overrides}) for r in todo]
    for setup in {r.setup for r in todo if r.setup}:
        register_setup(setup)
    from r3l_learn.loop.train import TrainConfig

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
    info.update(load_start=round(load_now(), 2), threads=threads, jobs=jobs)
    runner = Sweep(
        jobs=jobs,
        threads=threads,
        deadline=deadline,
        run_timeout=run_timeout_min * 60 if run_timeout_min else None,
        start_deadline=start + start_within_min * 60 if start_within_min else None,
        expected=wall_estimator(saved, kind),
    )
    outcomes = runner.run(todo, keep_checkpoints=keep_checkpoints) + [Outcome(r, "other-kind") for r in elsewhere]
    info["wall_min"] = round((time.monotonic() - start) / 60, 1)
    info["load_end"] = round(load_now(), 2)
    info["outcomes"] = {o.run.name: {"status": o.status, "wall_s": round(o.wall_s, 1)} for o in outcomes}
    carried_count = len(chosen) - len(todo) - len(elsewhere) - len(beyond)
    counts: dict[str, int] = {"carried over": carried_count} if carried_count else {}
    if beyond:
        counts["beyond the seed quotas"] = len(beyond)
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    info["counts"] = counts
    if runner.stopped_by:
        cause = stop_cause(
            runner.stopped_by,
            time_budget_min=time_budget_min,
            start_within_min=start_within_min,
            run_timeout_min=run_timeout_min,
        )
        info["stopped"] = (
            f"The sweep stopped at {cause}: runs not started or interrupted are missing above; rerunning the same "
            "command resumes them."
        )
    out_root.mkdir(parents=True, exist_ok=True)
    with open(out_root / "sweeps.jsonl", "a") as f:
        f.write(json.dumps(info) + "\n")
    return runs, info
