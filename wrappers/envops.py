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

import r3l_envs
from r3l_envs.checkpoint import Checkpoint
from wrappers.collector import Collector, EnvProfile, ResetResult, StepResult, gather_futures

__all__ = ["EnvOps", "EnvPool", "LocalCollector", "as_collector", "env_profile"]

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


class EnvPool:
    """Env instances made on first need and reused: from a registered id (made with ``env_kwargs``) or from a
    zero-argument factory. Group builders take the first ``n`` for a batch of ``n`` concurrent episodes."""

    def __init__(self, env: str | Callable[[], Any], env_kwargs: dict[str, Any] | None = None):
        if isinstance(env, str):
            import gymnasium as gym

            kwargs = dict(env_kwargs or {})
            self._make: Callable[[], Any] = lambda: gym.make(env, **kwargs)
        else:
            if env_kwargs:
                raise ValueError("env_kwargs only apply to an env id; bake them into the factory instead")
            self._make = env
        self._envs: list[Any] = []

    def __len__(self) -> int:
        return len(self._envs)

    def take(self, n: int) -> list[Any]:
        """The first ``n`` instances, making the missing ones."""
        while len(self._envs) < n:
            self._envs.append(self._make())
        return self._envs[:n]

    def close(self) -> None:
        """Close every instance made."""
        for env in self._envs:
            env.close()
        self._envs.clear()


class LocalCollector:
    """The default :class:`wrappers.collector.Collector`: env instances in this process, their calls in an
    :class:`EnvOps` thread pool of ``workers`` threads (``workers=1``: inline on the calling thread).

    Args:
        env: a registered env id (made with ``env_kwargs``), a zero-argument env factory, or a sequence of env
            instances to use as slots ``0..n-1`` (the caller keeps them: ``close()`` leaves them open).
        workers: threads for env calls; the results do not depend on it (see the module docstring).
    """

    def __init__(
        self,
        env: str | Callable[[], Any] | Sequence[Any],
        *,
        env_kwargs: dict[str, Any] | None = None,
        workers: int = 8,
    ):
        self._given: list[Any] | None = None
        if isinstance(env, Sequence) and not isinstance(env, str):
            if env_kwargs:
                raise ValueError("env_kwargs only apply to an env id, not to env instances")
            self._given = list(env)
            if len({id(e) for e in self._given}) != len(self._given):
                raise ValueError("each episode needs its own env instance: the same env appears twice in one batch")
        else:
            self._pool = EnvPool(env, env_kwargs)
        self._ops = EnvOps(workers)
        self._profile: EnvProfile | None = None

    @property
    def workers(self) -> int:
        return self._ops.workers

    def __len__(self) -> int:
        """How many env instances there are (made so far, or given)."""
        return len(self._given) if self._given is not None else len(self._pool)

    def __enter__(self) -> LocalCollector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def local_env(self, slot: int) -> Any:
        """The slot's env, made if it is new."""
        if slot < 0:
            raise ValueError(f"slots are numbered from 0, got {slot}")
        if self._given is not None:
            if slot >= len(self._given):
                raise ValueError(f"slot {slot} out of range: this collector was given {len(self._given)} envs")
            return self._given[slot]
        return self._pool.take(slot + 1)[slot]

    def profile(self) -> EnvProfile:
        if self._profile is None:
            self._profile = env_profile(self.local_env(0))
        return self._profile

    def reset(self, slot: int, *, seed: int | None, task_id: str | None, checkpoint: bool) -> Future[ResetResult]:
        return self._ops.submit(_reset, self.local_env(slot), seed, task_id, checkpoint)

    def step(self, slot: int, action: str, *, checkpoint: bool) -> Future[StepResult]:
        return self._ops.submit(_step, self.local_env(slot), action, checkpoint)

    def restore(self, slot: int, checkpoint: Checkpoint) -> Future[None]:
        return self._ops.submit(r3l_envs.restore, self.local_env(slot), checkpoint)

    def call(self, slot: int, fn: Callable[..., T], *args: Any) -> Future[T]:
        return self._ops.submit(fn, self.local_env(slot), *args)

    def gather(self, futures: Sequence[Future[T]], then: Callable[[int, T], None] | None = None) -> list[T]:
        return self._ops.gather(futures, then)

    def close(self) -> None:
        """Wait for calls in flight, then close the envs this collector made (never the ones it was given)."""
        self._ops.__exit__()
        if self._given is None:
            self._pool.close()


def env_profile(env: Any) -> EnvProfile:
    """An env instance's :class:`wrappers.collector.EnvProfile` (what a remote worker sends back for its envs)."""
    from wrappers.prompts import template_for

    spec = getattr(env, "spec", None)
    env_id = spec.id if spec is not None else type(env.unwrapped).__name__
    limit = (spec.max_episode_steps if spec else None) or getattr(env.unwrapped, "max_attempts", None)
    return EnvProfile(env_id=env_id, max_turns=limit, prompt_family=template_for(env).family)


def _reset(env: Any, seed: int | None, task_id: str | None, checkpoint: bool) -> ResetResult:
    options = {"task_id": task_id} if task_id is not None else None
    observation, info = env.reset(seed=seed, options=options)
    return ResetResult(observation, info, r3l_envs.checkpoint(env) if checkpoint else None)


def _step(env: Any, action: str, checkpoint: bool) -> StepResult:
    observation, reward, terminated, truncated, info = env.step(action)
    after = r3l_envs.checkpoint(env) if checkpoint and not (terminated or truncated) else None
    return StepResult(observation, float(reward), terminated, truncated, info, after)


def as_collector(env: Any, env_kwargs: dict[str, Any] | None, workers: int) -> tuple[Collector, bool]:
    """``env`` as a collector, and whether the caller made it (and so closes it): a :class:`Collector` is used as
    given (``env_kwargs`` must then be empty: it was made with its own); an env id or factory gets a
    :class:`LocalCollector` with ``workers`` threads."""
    if isinstance(env, Collector):
        if env_kwargs:
            raise ValueError("env_kwargs apply to an env id; a Collector was made with its own")
        return env, False
    return LocalCollector(env, env_kwargs=env_kwargs, workers=workers), True
