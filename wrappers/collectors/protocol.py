"""The collection backend: where env episodes run, behind one small protocol.

Rollouts, :class:`wrappers.ReflectRetry` and ``r3l_learn.loop.train`` never hold env objects: they address env
*slots* (``0, 1, ...``) of a :class:`Collector` and ask it to reset, step, checkpoint or restore them. Everything
that touches the policy (tokenising, generating, parsing, recording) stays on the caller's thread; only the env
calls and their plain-data results cross the boundary. So a backend may run its envs in threads of this process
(:class:`wrappers.collectors.local.LocalCollector`, the default) or in other processes and machines (Ray actors), and
the
trajectories are the same.

What an implementation must provide (and a remote one, e.g. Ray actors holding envs made by ``gym.make``, can):

* **Slots made on first use.** Slot ``i`` is one env instance of the collector's env id and kwargs, made the
  first time ``i`` is used and kept for later calls; slots ``0..n-1`` are what a batch of ``n`` episodes uses.
  A slot has at most one call in flight (the caller guarantees it) and its calls run in submission order.
* **Only plain data crosses:** arguments are ``str``/``int``/``None``/:class:`r3l_envs.Checkpoint`, results are
  the frozen records below (infos are JSON-like dicts). A remote backend ships checkpoints as
  ``Checkpoint.to_bytes()`` and rebuilds them with ``Checkpoint.from_bytes()``; it never unpickles what a
  worker sends back except through that typed, verified format.
* **Restore anywhere:** ``restore(slot, ckpt)`` must work whichever slot (or worker, or machine) took ``ckpt``
  (any instance of the same env id and kwargs restores it: natively or by verified replay). A backend that
  loses a worker may therefore rebuild the slot elsewhere and restore the slot's last checkpoint; the caller
  never relies on a slot keeping an env object alive between episodes.
* **Futures:** every env call returns a :class:`concurrent.futures.Future` at once (a Ray ``ObjectRef`` gives
  one with ``ref.future()``); :meth:`Collector.gather` waits for them and re-raises the first failure in
  submission order, on the caller's thread, never swallowing it.
* **Exactness:** results must equal those of running the same calls one by one on envs made in this process.
  The tests compare any backend's groups with :class:`wrappers.collectors.local.LocalCollector`'s (``workers=1``).
* ``local_env(slot)`` returns the slot's live env only when it lives in this process (reflectors that consult an
  env, such as the oracle, use it); a remote backend returns ``None`` and serves such needs through
  :meth:`Collector.call` with a module-level (picklable) function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import r3l_envs
from r3l_envs import EnvInfo
from r3l_envs.checkpoint import Checkpoint

__all__ = [
    "Collector",
    "MadeEnv",
    "ResetResult",
    "StepResult",
    "describe_env",
    "gather_futures",
    "reset_env",
    "step_env",
]

T = TypeVar("T")


@dataclass(frozen=True)
class MadeEnv:
    """The env a collector's slots hold, as made: what it adds to the env's own declaration (:class:`EnvInfo`) is
    its id and the ``TimeLimit`` it was made with.

    Attributes:
        env_id: the registered id (``spec.id``), or the env class name for an unregistered factory.
        time_limit: the ``TimeLimit`` wrapper's ``max_episode_steps``, or ``None`` if it was made without one.
        info: what the env declares (:func:`r3l_envs.env_info`): prompt family, turn limit, expert plan.
    """

    env_id: str
    time_limit: int | None = None
    info: EnvInfo = field(default_factory=EnvInfo)

    @property
    def max_turns(self) -> int | None:
        """The env's own turn limit: its ``TimeLimit``, else the limit its rules set (:attr:`EnvInfo.max_turns`),
        else ``None``."""
        return self.time_limit or self.info.max_turns


@dataclass(frozen=True)
class ResetResult:
    """``env.reset``'s result, and the checkpoint taken right after it when one was asked for."""

    observation: str
    info: dict[str, Any]
    checkpoint: Checkpoint | None = None


@dataclass(frozen=True)
class StepResult:
    """``env.step``'s result, and the checkpoint taken after it when asked for and the episode goes on."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    checkpoint: Checkpoint | None = None


def describe_env(env: Any) -> MadeEnv:
    """An env instance's :class:`MadeEnv` (what a remote worker sends back for its envs)."""
    spec = getattr(env, "spec", None)
    env_id = spec.id if spec is not None else type(env.unwrapped).__name__
    return MadeEnv(env_id, spec.max_episode_steps if spec is not None else None, r3l_envs.env_info(env))


def reset_env(env: Any, seed: int | None, task_id: str | None, checkpoint: bool) -> ResetResult:
    """``env.reset(seed=seed, options={"task_id": task_id} or None)``, and with ``checkpoint`` a checkpoint right
    after it: what :meth:`Collector.reset` does next to the slot's env, whichever backend runs it."""
    options = {"task_id": task_id} if task_id is not None else None
    observation, info = env.reset(seed=seed, options=options)
    return ResetResult(observation, info, r3l_envs.checkpoint(env) if checkpoint else None)


def step_env(env: Any, action: str, checkpoint: bool) -> StepResult:
    """``env.step(action)``, and with ``checkpoint`` a checkpoint after it unless the step ended the episode: what
    :meth:`Collector.step` does next to the slot's env, whichever backend runs it."""
    observation, reward, terminated, truncated, info = env.step(action)
    ended = terminated or truncated
    after = r3l_envs.checkpoint(env) if checkpoint and not ended else None
    return StepResult(observation, float(reward), bool(terminated), bool(truncated), info, after)


@runtime_checkable
class Collector(Protocol):
    """Env slots of one env id and kwargs, and the calls that play episodes on them (see the module docstring).

    The caller owns the collector it made: ``close()`` it (or use it as a context manager where the
    implementation supports it) when done; a :class:`wrappers.ReflectRetry` or ``train()`` that was handed one
    leaves it open.
    """

    def made_env(self) -> MadeEnv:
        """What the slots' env is: its id, ``TimeLimit`` and declaration (may make slot 0's env on first call)."""
        ...

    def reset(self, slot: int, *, seed: int | None, task_id: str | None, checkpoint: bool) -> Future[ResetResult]:
        """``env.reset(seed=seed, options={"task_id": task_id} or None)``; with ``checkpoint``, also
        ``r3l_envs.checkpoint(env)`` right after it."""
        ...

    def step(self, slot: int, action: str, *, checkpoint: bool) -> Future[StepResult]:
        """``env.step(action)``; with ``checkpoint``, also ``r3l_envs.checkpoint(env)`` after it unless the step
        terminated or truncated the episode."""
        ...

    def restore(self, slot: int, checkpoint: Checkpoint) -> Future[None]:
        """``r3l_envs.restore(env, checkpoint)``; ``checkpoint`` may come from any slot of this collector."""
        ...

    def call(self, slot: int, fn: Callable[..., T], *args: Any) -> Future[T]:
        """``fn(env, *args)`` next to the slot's env (for privileged look-ups such as an expert plan). A remote
        backend needs ``fn`` importable by name and ``args``/result picklable plain data."""
        ...

    def local_env(self, slot: int) -> Any | None:
        """The slot's live env if it lives in this process, else ``None``."""
        ...

    def gather(self, futures: Sequence[Future[T]], then: Callable[[int, T], None] | None = None) -> list[T]:
        """Wait for ``futures`` (from this collector), calling ``then(i, result)`` on the calling thread as each
        finishes; on failure, wait for the rest and raise the failure of the lowest index."""
        ...

    def close(self) -> None:
        """Close every env this collector made and release its workers."""
        ...


def gather_futures(futures: Sequence[Future[T]], then: Callable[[int, T], None] | None = None) -> list[T]:
    """Wait for ``futures``; call ``then(i, result)`` as each completes (until one fails); return the results in
    order, or re-raise the first failure in submission order once all have settled (what :meth:`Collector.gather`
    promises, for implementations to share)."""
    from concurrent.futures import as_completed, wait

    index = {f: i for i, f in enumerate(futures)}
    try:
        for future in as_completed(futures):
            if future.exception() is not None:
                break
            if then is not None:
                then(index[future], future.result())
    finally:
        wait(futures)
    failed = [f for f in futures if f.exception() is not None]
    if failed:
        raise failed[0].exception()
    return [f.result() for f in futures]
