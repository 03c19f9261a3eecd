"""Env operations of a batch off the calling thread, with exactly the results of running them one by one.

Rollouts keep everything that touches the policy (tokenising, generating) on the calling thread: HF tokenizers
are not thread-safe. What an env does between two generation rounds (reset, restore, step, checkpoint) is
independent per env instance, and the slow part of it (a JVM round trip, a replay, C code behind ctypes)
releases the GIL, so :class:`EnvOps` runs those calls in a small thread pool while the caller tokenises.

Exactness: each env instance has at most one operation in flight, the caller waits for every operation of a
round before the next generation, and what the caller does with a result (``then``) touches only that
result's own episode. So the results are those of the serial loop whatever order the threads finish in; only
the wall time differs. Env instances must not share unsynchronised mutable state (every r3l env qualifies:
shared catalogues are read-only, shared graders take a lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from wrappers.collectors.protocol import gather_futures

__all__ = ["EnvOps"]

T = TypeVar("T")


class EnvOps:
    """A bounded pool for env calls; ``workers=1`` runs each call inline on the calling thread (no threads).

    While it waits (:meth:`gather`), the calling thread runs the submitted calls that no pool thread has
    started yet, so fast calls cost no thread hand-off and slow ones still overlap.

    Use as a context manager: leaving it waits for every call still running, so no env is touched after.
    An exception raised by a call is re-raised on the calling thread (never swallowed).
    """

    def __init__(self, workers: int):
        if workers < 1:
            raise ValueError(f"workers must be >= 1 (1 runs env calls serially), got {workers}")
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._calls: dict[Future[Any], _Call] = {}

    def __enter__(self) -> EnvOps:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Start ``fn(*args)``; inline (``workers=1``) it runs now and an exception propagates at once."""
        if self.workers == 1:
            done: Future[T] = Future()
            done.set_result(fn(*args))
            return done
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="r3l-env")
        call = _Call(fn, args)
        self._calls[call.future] = call
        self._pool.submit(call.run)
        return call.future

    def gather(self, futures: Sequence[Future[T]], then: Callable[[int, T], None] | None = None) -> list[T]:
        """Wait for ``futures``; call ``then(i, result)`` on the calling thread as each one finishes.

        If a call failed, no further ``then`` runs, every other call is waited for, and the failure of the
        lowest index is raised (the same one whatever the timing, when failures are deterministic).
        """
        for future in futures:
            call = self._calls.pop(future, None)
            if call is not None:
                call.run()  # unless a pool thread has claimed it; never raises (the future holds a failure)
        return gather_futures(futures, then)

    def map(self, calls: Sequence[Callable[[], T]], then: Callable[[int, T], None] | None = None) -> list[T]:
        """``gather`` over ``submit(call)`` for every call, in order."""
        return self.gather([self.submit(call) for call in calls], then)


class _Call:
    """One submitted call, run exactly once: by a pool thread or by the caller, whichever claims it first."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]):
        self.fn, self.args = fn, args
        self.future: Future[Any] = Future()
        self._claim = threading.Lock()

    def run(self) -> None:
        if not self._claim.acquire(blocking=False):
            return
        try:
            result = self.fn(*self.args)
        except BaseException as exc:  # handed to the caller by gather(), which re-raises it
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)
