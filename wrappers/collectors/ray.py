"""A :class:`wrappers.collectors.protocol.Collector` whose envs live in Ray actors, on this machine or across a cluster.

Each env worker is a Ray actor (:class:`_EnvWorker`) holding the envs of some slots, made with ``gym.make``
inside the actor (envs never travel). Slot ``i`` lives on worker ``i % workers``. Only plain data crosses:
actions, seeds, task ids, observations, infos, and checkpoints as ``Checkpoint.to_bytes()`` (rebuilt here with
the verified ``Checkpoint.from_bytes``). Ray's own transport pickles; a Ray cluster is one trust domain (never
expose its ports), so nothing else is decoded from what a worker sends. Checkpoints cross under a key made for
the run (HMAC-SHA256, 32 random bytes handed to each actor at its start): the driver and the actors read only
checkpoint bytes that one of them wrote in this run.

Faults. For every slot the driver keeps a journal: the slot's last checkpoint (one is always taken after a reset;
a step or restore with a checkpoint replaces it) and the calls made since. When a worker dies (its process
killed, its node removed, or a call over ``call_timeout_s``, whose worker is then killed), a new actor replaces
it, and each of its slots is rebuilt there by restoring its last checkpoint and replaying the journal before its
next call runs; the failed call itself is resubmitted. Restores are exact (native or verified replay), so the
results are those of an undisturbed run. A call is tried at most ``1 + max_retries`` times, then fails with
:class:`WorkerLostError` naming the call and the cause. Nothing is left behind: :meth:`RayCollector.close`
(also run at exit) kills the actors, and a Ray instance this collector started is shut down.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import logging
import math
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from r3l_envs import EnvInfo
from r3l_envs.checkpoint import Checkpoint
from wrappers.collectors.protocol import (
    MadeEnv,
    ResetResult,
    StepResult,
    describe_env,
    gather_futures,
    reset_env,
    step_env,
)

__all__ = ["RayCollector", "WorkerLostError", "connect", "make_ray_collector", "require_ray"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

INSTALL_HINT = 'pip install -e ".[ray]"  (or: pip install "r3l[ray]")'


class WorkerLostError(RuntimeError):
    """An env call could not complete: its worker kept dying (or timing out), or no new worker could start."""


def require_ray() -> Any:
    """Import ray, or raise ImportError saying how to install the extra."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(f"the Ray collection backend needs ray: {INSTALL_HINT}") from exc
    return ray


def connect(address: str, *, num_cpus: int | None = None) -> bool:
    """Start or join Ray: ``"local"`` starts an instance in this process (``num_cpus`` logical CPUs, no
    dashboard), ``"auto"`` joins the cluster ``ray start`` runs on this machine, anything else is a cluster
    address (``HOST:PORT`` or ``ray://HOST:10001``). Returns whether this call started or joined Ray (``False``:
    it was already initialised, and its owner shuts it down)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    if address == "local":
        # On a busy machine a local start can outlast Ray's own startup wait ("The current node timed out during
        # startup"), and a second try usually starts: try once more before giving up.
        for attempt in (1, 2):
            try:
                # address="local": a new instance even where another one runs on this machine (without it Ray
                # joins the latest cluster in /tmp/ray, e.g. a test's, and then refuses num_cpus)
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING)
                break
            except Exception as exc:  # Ray raises plain Exception/RuntimeError subclasses for a failed start
                ray.shutdown()
                if attempt == 2 or "timed out" not in str(exc):
                    raise
                logger.warning("Ray's local start timed out (%s); trying once more", exc)
    else:
        ray.init(address=address, logging_level=logging.WARNING)
    return True


# ---------------------------------------------------------------------------------------------- the actor
class _EnvWorker:
    """The env worker (a Ray actor class once :func:`remote_class` wraps it): envs per slot, made on first use."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], key: bytes):
        self.env_id, self.env_kwargs, self.key = env_id, env_kwargs, key
        self.envs: dict[int, Any] = {}

    def whoami(self) -> tuple[int, str]:
        """This actor's process id and Ray node id."""
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def _env(self, slot: int, rebuild: tuple[bytes | None, list[tuple[Any, ...]]] | None) -> Any:
        import gymnasium as gym

        import r3l_envs  # registers the r3l/* ids in this process

        if slot not in self.envs:
            self.envs[slot] = gym.make(self.env_id, **self.env_kwargs)
        env = self.envs[slot]
        if rebuild is not None:
            anchor, journal = rebuild
            if anchor is not None:
                r3l_envs.restore(env, Checkpoint.from_bytes(anchor, key=self.key))
            for call in journal:
                _replay(env, call)
        return env

    def made_env(self, slot: int, rebuild: Any = None) -> tuple[str, int | None, dict[str, Any]]:
        made = describe_env(self._env(slot, rebuild))
        return made.env_id, made.time_limit, dataclasses.asdict(made.info)

    def reset(self, slot: int, seed: int | None, task_id: str | None, rebuild: Any = None) -> tuple[Any, ...]:
        result = reset_env(self._env(slot, rebuild), seed, task_id, checkpoint=True)  # the journal starts here
        return result.observation, result.info, result.checkpoint.to_bytes(key=self.key)

    def step(self, slot: int, action: str, checkpoint: bool, rebuild: Any = None) -> tuple[Any, ...]:
        r = step_env(self._env(slot, rebuild), action, checkpoint)
        after = r.checkpoint.to_bytes(key=self.key) if r.checkpoint is not None else None
        return r.observation, r.reward, r.terminated, r.truncated, r.info, after

    def restore(self, slot: int, data: bytes, rebuild: Any = None) -> None:
        import r3l_envs

        r3l_envs.restore(self._env(slot, rebuild), Checkpoint.from_bytes(data, key=self.key))

    def call(self, slot: int, fn: Callable[..., Any], args: tuple[Any, ...], rebuild: Any = None) -> Any:
        return fn(self._env(slot, rebuild), *args)

    def batch(self, calls: list[tuple[int, str, tuple[Any, ...], Any]]) -> list[tuple[bool, Any]]:
        """Run a round's calls for this actor's slots, in order, as one Ray call: ``(True, result)`` or
        ``(False, the exception the env raised)`` for each, so one failing call does not fail the others."""
        out: list[tuple[bool, Any]] = []
        for slot, method, args, rebuild in calls:
            if method not in _BATCHED_METHODS:
                raise ValueError(f"{method!r} is not an env call")
            try:
                out.append((True, getattr(self, method)(slot, *args, rebuild)))
            except Exception as exc:  # the env's own error is the call's result, delivered to its caller
                out.append((False, exc))
        return out

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs.clear()


_BATCHED_METHODS = frozenset({"made_env", "reset", "step", "restore", "call"})


def _made_env_from_worker(result: tuple[str, int | None, dict[str, Any]]) -> MadeEnv:
    """The :class:`MadeEnv` a worker described as plain data."""
    env_id, time_limit, info = result
    return MadeEnv(env_id, time_limit, EnvInfo(**info))


def _replay(env: Any, call: tuple[Any, ...]) -> None:
    """Re-run one journaled call on a rebuilt slot (its result was already delivered)."""
    if call[0] == "step":
        env.step(call[1])
    else:  # ("call", fn, args)
        call[1](env, *call[2])


@functools.cache
def remote_class(cls: type) -> Any:
    """``cls`` as a Ray actor class (made once per process): never restarted by Ray, whose restart would lose the
    actor's state; the owner replaces a dead actor itself."""
    return require_ray().remote(max_restarts=0, max_task_retries=0)(cls)


def local_cpus(declared: float) -> int:
    """Logical CPUs for a local Ray: at least what its actors declare (they all run on this machine, where they
    mostly wait on env calls or on each other), and no fewer than the machine has."""
    return max(os.cpu_count() or 1, math.ceil(declared))


# ---------------------------------------------------------------------------------------------- the driver side
@dataclass
class _Worker:
    handle: Any
    generation: int
    pid: int | None = None
    node_id: str | None = None


@dataclass
class _Slot:
    anchor: bytes | None = None  # the last checkpoint's bytes
    journal: list[tuple[Any, ...]] = field(default_factory=list)  # calls since the anchor
    generation: int = -1  # the worker generation holding this slot's env state (-1: none yet)


@dataclass
class _Op:
    """One env call: what to send, how to finish it, and its tries."""

    slot: int
    method: str
    args: tuple[Any, ...]
    what: str  # for errors: "step 'go north' on slot 3"
    future: Future[Any]
    finish: Callable[[Any], Any]  # the actor's result -> the call's result (journal updated here)
    starts_state: bool = False  # reset/restore: the slot's earlier state does not matter
    tries: int = 0
    ref: Any = None  # the Ray call carrying this op (one per worker per round)
    index: int = 0  # this op's place in that call's results
    deadline: float = 0.0
    worker: _Worker | None = None
    timed_out: bool = False
    causes: list[str] = field(default_factory=list)


class RayCollector:
    """Env slots in Ray actors (see the module docstring); Ray must be initialised (:func:`connect`).

    Args:
        env: a registered env id; each actor makes its slots' envs with ``gym.make(env, **env_kwargs)``.
        workers: env actors; slot ``i`` lives on actor ``i % workers``.
        num_cpus, memory: resources each actor declares (``memory`` in bytes), so Ray places actors where
            they fit (a ScienceWorld JVM's size: the ScienceWorld section of benchmarks/RESULTS.md).
        max_retries: resubmissions of one call after its worker died, before :class:`WorkerLostError`.
        call_timeout_s: a call still running after this long has its worker killed and counts as a failed try.
        start_timeout_s: how long a new actor may take to start (e.g. waiting for resources) before a try fails.
        shutdown_ray: also ``ray.shutdown()`` on :meth:`close` (for a Ray this collector's owner started).
        batch_calls: send the calls submitted together (a round: every slot's step, then :meth:`gather`) as one
            Ray call per actor instead of one per slot, which divides the driver's dispatch work by the slots per
            actor. Off only to measure what it saves.
    """

    def __init__(
        self,
        env: str,
        *,
        env_kwargs: dict[str, Any] | None = None,
        workers: int = 2,
        num_cpus: float = 1.0,
        memory: int | None = None,
        max_retries: int = 3,
        call_timeout_s: float = 600.0,
        start_timeout_s: float = 120.0,
        shutdown_ray: bool = False,
        batch_calls: bool = True,
    ):
        if not isinstance(env, str):
            raise TypeError(f"a RayCollector makes its envs by id inside the actors: pass an env id, got {env!r}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if max_retries < 0 or call_timeout_s <= 0 or start_timeout_s <= 0:
            raise ValueError("max_retries must be >= 0 and the timeouts > 0")
        self._ray = require_ray()
        if not self._ray.is_initialized():
            raise RuntimeError('Ray is not initialised: call wrappers.collectors.ray.connect("local" or an address)')
        self.env_id, self.env_kwargs = env, dict(env_kwargs or {})
        self.max_retries, self.call_timeout_s, self.start_timeout_s = max_retries, call_timeout_s, start_timeout_s
        self._options: dict[str, Any] = {"num_cpus": num_cpus}
        if memory is not None:
            self._options["memory"] = memory
        self._shutdown_ray = shutdown_ray
        self.batch_calls = batch_calls
        self._key = secrets.token_bytes(32)  # this run's checkpoint key (module docstring)
        self._generations = 0
        self._workers: list[_Worker | None] = [None] * workers
        self._slots: dict[int, _Slot] = {}
        self._inflight: dict[int, _Op] = {}  # id(op) -> op, touched on the dispatcher thread only
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._made_env: MadeEnv | None = None
        self._closed = False
        self._dispatcher = threading.Thread(target=self._dispatch, name="r3l-ray-dispatch", daemon=True)
        self._dispatcher.start()
        atexit.register(self.close)  # the actors die with the driver anyway; this closes their envs first
        #: Worker replacements so far (deaths survived).
        self.replacements = 0
        #: Ray calls sent to env workers so far (with ``batch_calls``, one per worker per round).
        self.ray_calls = 0

    @property
    def workers(self) -> int:
        return len(self._workers)

    def __enter__(self) -> RayCollector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ the Collector protocol
    def made_env(self) -> MadeEnv:
        if self._made_env is None:
            future = self._submit(0, "made_env", (), "made_env on slot 0", _made_env_from_worker)
            self._made_env = self.gather([future])[0]
        return self._made_env

    def reset(self, slot: int, *, seed: int | None, task_id: str | None, checkpoint: bool) -> Future[ResetResult]:
        def finish(result: tuple[Any, ...]) -> ResetResult:
            observation, info, data = result
            self._slots[slot] = _Slot(anchor=data, generation=self._slots[slot].generation)
            return ResetResult(observation, info, Checkpoint.from_bytes(data, key=self._key) if checkpoint else None)

        what = f"reset of slot {slot} (task {task_id}, seed {seed})"
        return self._submit(slot, "reset", (seed, task_id), what, finish, starts_state=True)

    def step(self, slot: int, action: str, *, checkpoint: bool) -> Future[StepResult]:
        def finish(result: tuple[Any, ...]) -> StepResult:
            observation, reward, terminated, truncated, info, data = result
            state = self._slots[slot]
            if data is not None:
                state.anchor, state.journal = data, []
            else:
                state.journal.append(("step", action))
            after = Checkpoint.from_bytes(data, key=self._key) if data is not None else None
            return StepResult(observation, reward, terminated, truncated, info, after)

        return self._submit(slot, "step", (action, checkpoint), f"step {action[:60]!r} on slot {slot}", finish)

    def restore(self, slot: int, checkpoint: Checkpoint) -> Future[None]:
        data = checkpoint.to_bytes(key=self._key)

        def finish(_: None) -> None:
            state = self._slots[slot]
            state.anchor, state.journal = data, []

        what = f"restore of slot {slot} (task {checkpoint.task_id}, step {checkpoint.step})"
        return self._submit(slot, "restore", (data,), what, finish, starts_state=True)

    def call(self, slot: int, fn: Callable[..., T], *args: Any) -> Future[T]:
        def finish(result: T) -> T:
            self._slots[slot].journal.append(("call", fn, args))
            return result

        name = getattr(fn, "__qualname__", repr(fn))
        return self._submit(slot, "call", (fn, args), f"call {name} on slot {slot}", finish)

    def local_env(self, slot: int) -> None:
        """Always ``None``: the envs live in the actors (use :meth:`call`)."""
        return None

    def gather(self, futures: Sequence[Future[T]], then: Callable[[int, T], None] | None = None) -> list[T]:
        self._events.put(("flush", None))  # the round is complete: send what was submitted
        return gather_futures(futures, then)

    def close(self) -> None:
        """Close the envs (briefly), kill every actor, stop the dispatcher; ``ray.shutdown()`` if asked. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._events.put(("stop", None))
        self._dispatcher.join(timeout=30)
        workers = [w for w in self._workers if w is not None]
        closing = [w.handle.close.remote() for w in workers]
        try:
            self._ray.wait(closing, num_returns=len(closing), timeout=10)
        except Exception as exc:  # a dead actor: it is killed below either way
            logger.debug("closing env workers: %s", exc)
        for w in workers:
            self._kill(w)
        self._workers = [None] * len(self._workers)
        atexit.unregister(self.close)
        if self._shutdown_ray and self._ray.is_initialized():
            self._ray.shutdown()

    # ------------------------------------------------------------------ internals
    def pids(self) -> list[int | None]:
        """The process id of each worker actor started so far (``None``: not started)."""
        return [w.pid if w is not None else None for w in self._workers]

    def node_ids(self) -> list[str | None]:
        """The Ray node id each worker actor runs on."""
        return [w.node_id if w is not None else None for w in self._workers]

    def _submit(
        self,
        slot: int,
        method: str,
        args: tuple[Any, ...],
        what: str,
        finish: Callable[[Any], Any],
        *,
        starts_state: bool = False,
    ) -> Future[Any]:
        if self._closed:
            raise RuntimeError("this RayCollector is closed")
        if slot < 0:
            raise ValueError(f"slots are numbered from 0, got {slot}")
        self._slots.setdefault(slot, _Slot())
        op = _Op(slot, method, args, what, Future(), finish, starts_state=starts_state)
        self._events.put(("submit", op))
        return op.future

    def _dispatch(self) -> None:
        """The one thread that sends calls, finishes them, replaces dead workers and enforces timeouts.

        Submitted calls wait in ``pending`` until :meth:`gather` says the round is complete (or nothing more
        arrives for ``_LINGER_S`` (10 ms), for a caller that waits on a future by other means); then each actor gets its
        share as one call."""
        pending: list[_Op] = []
        while True:
            try:
                kind, item = self._events.get(timeout=_LINGER_S if pending else 1.0)
            except queue.Empty:
                kind, item = ("flush" if pending else "tick"), None
            if kind == "stop":
                for op in [*self._inflight.values(), *pending]:
                    op.future.set_exception(RuntimeError(f"{op.what}: the collector was closed"))
                self._inflight.clear()
                return
            if kind == "submit":
                pending.append(item)
                if self.batch_calls and len(pending) < _MAX_BATCH:
                    continue
                kind = "flush"
            ops = pending if kind == "flush" else []
            pending = [] if kind == "flush" else pending
            try:
                if ops:
                    self._send(ops)
                elif kind == "done":
                    self._done(item)
                self._check_deadlines()
            except BaseException as exc:  # never lose a call: its future carries any failure of ours
                failed = ops if ops else [op for op in item[0] if id(op) in self._inflight] if kind == "done" else []
                if not failed:
                    logger.exception("RayCollector dispatcher")
                for op in failed:
                    self._inflight.pop(id(op), None)
                    if not op.future.done():
                        op.future.set_exception(exc)

    def _send(self, ops: Sequence[_Op]) -> None:
        """Send ``ops`` (in submission order), one Ray call per worker."""
        by_worker: dict[int, list[_Op]] = {}
        for op in ops:
            op.tries += 1
            by_worker.setdefault(op.slot % len(self._workers), []).append(op)
        for w, group in by_worker.items():
            try:
                worker = self._worker(w)
            except WorkerLostError as exc:
                for op in group:
                    op.causes.append(str(exc))
                    self._retry_or_fail(op)
                continue
            calls = [(op.slot, op.method, op.args, self._rebuild(op, worker, w)) for op in group]
            ref = worker.handle.batch.remote(calls)
            self.ray_calls += 1
            deadline = time.monotonic() + self.call_timeout_s
            for i, op in enumerate(group):
                op.worker, op.timed_out, op.ref, op.index, op.deadline = worker, False, ref, i, deadline
                self._inflight[id(op)] = op
            done = tuple(group)
            ref.future().add_done_callback(lambda _f, ops=done, ref=ref: self._events.put(("done", (ops, ref))))

    def _rebuild(self, op: _Op, worker: _Worker, w: int) -> tuple[bytes | None, list[tuple[Any, ...]]] | None:
        """What the worker must replay before ``op`` if the slot's state lives on an earlier worker (it died)."""
        state = self._slots[op.slot]
        rebuild = None
        if state.generation != worker.generation and not op.starts_state and state.generation >= 0:
            rebuild = (state.anchor, list(state.journal))
            logger.info("rebuilding slot %d on worker %d (%d journaled calls)", op.slot, w, len(state.journal))
        state.generation = worker.generation
        return rebuild

    def _done(self, item: tuple[tuple[_Op, ...], Any]) -> None:
        ops, ref = item
        live = [op for op in ops if op.ref is ref and id(op) in self._inflight]  # else a stale, earlier try
        if not live:
            return
        for op in live:
            del self._inflight[id(op)]
        try:
            results = self._ray.get(ref, timeout=0)
        except self._ray.exceptions.RayTaskError as exc:  # the batch itself failed (not one env call)
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            for op in live:
                op.future.set_exception(cause)
            return
        except _lost_errors(self._ray) as exc:
            timed_out = any(op.timed_out for op in live)
            reason = f"timed out after {self.call_timeout_s:g} s" if timed_out else f"{type(exc).__name__}"
            logger.warning("%s: worker lost (%s); rebuilding it", live[0].what, reason)
            self._replace(live[0].worker)
            for op in live:
                op.causes.append(f"try {op.tries}: worker {op.slot % len(self._workers)} lost ({reason})")
            for op in live:
                self._retry_or_fail(op)
            return
        for op in live:
            ok, result = results[op.index]
            if not ok:  # the env raised: that is the call's result
                op.future.set_exception(result)
                continue
            try:
                value = op.finish(result)
            except BaseException as exc:  # a corrupt checkpoint from the worker: a typed error, never swallowed
                op.future.set_exception(exc)
            else:
                op.future.set_result(value)

    def _retry_or_fail(self, op: _Op) -> None:
        if op.tries > self.max_retries:
            op.future.set_exception(
                WorkerLostError(
                    f"{op.what} failed after {op.tries} tries (max_retries={self.max_retries}): " + "; ".join(op.causes)
                )
            )
            return
        self._send([op])

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        for op in list(self._inflight.values()):
            if not op.timed_out and now > op.deadline and op.worker is not None:
                op.timed_out = True
                logger.warning("%s: no answer after %g s; killing its worker", op.what, self.call_timeout_s)
                self._kill(op.worker)  # its calls now fail as lost, and are retried on a new worker

    def _worker(self, w: int) -> _Worker:
        worker = self._workers[w]
        if worker is None:
            worker = self._workers[w] = self._start(w)
        return worker

    def _replace(self, dead: _Worker | None) -> None:
        for w, worker in enumerate(self._workers):
            if worker is not None and worker is dead:
                self._kill(worker)
                self._workers[w] = None  # the next call on one of its slots starts the replacement
                self.replacements += 1

    def _start(self, w: int) -> _Worker:
        """A new actor, ready (it answered) within ``start_timeout_s``."""
        ray = self._ray
        handle = remote_class(_EnvWorker).options(**self._options).remote(self.env_id, self.env_kwargs, self._key)
        try:
            pid, node = ray.get(handle.whoami.remote(), timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.kill(handle, no_restart=True)
            raise WorkerLostError(
                f"env worker {w} did not start within {self.start_timeout_s:g} s: no node has free resources "
                f"{self._options} (declare fewer, or add nodes)"
            ) from None
        except _lost_errors(ray) as exc:
            raise WorkerLostError(f"env worker {w} died while starting: {type(exc).__name__}: {exc}") from exc
        self._generations += 1
        logger.info("env worker %d: pid %d on node %s (generation %d)", w, pid, node, self._generations)
        return _Worker(handle, self._generations, pid, node)

    def _kill(self, worker: _Worker) -> None:
        try:
            self._ray.kill(worker.handle, no_restart=True)
        except Exception as exc:  # already gone
            logger.debug("kill env worker: %s", exc)


# How long submitted calls wait for more of their round when no gather() says it is complete, and the most calls
# sent at once.
_LINGER_S = 0.01
_MAX_BATCH = 4096


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """The errors that mean the worker (or its node) is gone, not that the env raised."""
    e = ray.exceptions
    return (e.RayActorError, e.WorkerCrashedError, e.NodeDiedError, e.ObjectLostError, e.OwnerDiedError)


def make_ray_collector(
    env: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    address: str = "local",
    workers: int = 2,
    num_cpus: float = 1.0,
    memory_mb: int | None = None,
) -> RayCollector:
    """Start or join Ray (:func:`connect`) and make a :class:`RayCollector` on it; closing the collector shuts down
    a Ray instance this call started (``r3l train --ray ...`` uses this). A ``"local"`` Ray gets at least the
    logical CPUs the workers declare: all of them are to run on this machine, where they mostly wait on env calls."""
    started = connect(address, num_cpus=local_cpus(workers * num_cpus) if address == "local" else None)
    try:
        memory = None if memory_mb is None else memory_mb * 2**20
        return RayCollector(
            env, env_kwargs=env_kwargs, workers=workers, num_cpus=num_cpus, memory=memory, shutdown_ray=started
        )
    except BaseException:
        if started:
            require_ray().shutdown()
        raise
