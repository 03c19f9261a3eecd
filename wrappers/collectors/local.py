"""The default collection backend: env instances in this process, their calls in a thread pool.

:class:`LocalCollector` implements :class:`wrappers.collectors.protocol.Collector` over env instances (given, or made
on first
need by :class:`EnvPool`), running their calls in an :class:`wrappers.collectors.threads.EnvOps` pool;
:func:`as_collector`
turns whatever a caller was handed (a collector, an env id, a factory, env instances) into one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import gymnasium as gym

import r3l_envs
from r3l_envs.checkpoint import Checkpoint
from wrappers.collectors.protocol import Collector, MadeEnv, ResetResult, StepResult, describe_env, reset_env, step_env
from wrappers.collectors.threads import EnvOps

__all__ = ["DEFAULT_ENV_WORKERS", "EnvPool", "LocalCollector", "as_collector"]

T = TypeVar("T")

#: Env calls of one round run in this many threads by default. Env calls mostly wait (a JVM, a replay, C code),
#: so a few threads overlap them even on two cores; results are identical to serial
#: (:mod:`wrappers.collectors.threads`).
DEFAULT_ENV_WORKERS = 8


class EnvPool:
    """Env instances made on first need and reused: from a registered id (made with ``env_kwargs``) or from a
    zero-argument factory. Group builders take the first ``n`` for a batch of ``n`` concurrent episodes."""

    def __init__(self, env: str | Callable[[], Any], env_kwargs: dict[str, Any] | None = None):
        if isinstance(env, str):
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
    """The default :class:`wrappers.collectors.protocol.Collector`: env instances in this process, their calls in an
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
        workers: int = DEFAULT_ENV_WORKERS,
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
        self._made_env: MadeEnv | None = None

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

    def made_env(self) -> MadeEnv:
        if self._made_env is None:
            self._made_env = describe_env(self.local_env(0))
        return self._made_env

    def reset(self, slot: int, *, seed: int | None, task_id: str | None, checkpoint: bool) -> Future[ResetResult]:
        return self._ops.submit(reset_env, self.local_env(slot), seed, task_id, checkpoint)

    def step(self, slot: int, action: str, *, checkpoint: bool) -> Future[StepResult]:
        return self._ops.submit(step_env, self.local_env(slot), action, checkpoint)

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


def as_collector(
    env: Collector | str | Callable[[], Any] | Sequence[Any],
    env_kwargs: dict[str, Any] | None = None,
    workers: int = DEFAULT_ENV_WORKERS,
) -> tuple[Collector, bool]:
    """``env`` as a collector, and whether this call made it (the caller then closes it).

    Args:
        env: a :class:`Collector`, used as given; or a registered env id, a zero-argument env factory, or a
            sequence of env instances, which get a :class:`LocalCollector` (given instances stay open on its
            ``close()``).
        env_kwargs: with an env id, what the envs are made with; must be empty for anything else.
        workers: the new :class:`LocalCollector`'s threads for env calls (the results do not depend on it).

    Raises:
        ValueError: ``env_kwargs`` given with a collector, a factory or env instances.
    """
    if isinstance(env, Collector):
        if env_kwargs:
            raise ValueError("env_kwargs apply to an env id; a Collector was made with its own")
        return env, False
    return LocalCollector(env, env_kwargs=env_kwargs, workers=workers), True
