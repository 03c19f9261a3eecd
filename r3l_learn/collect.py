"""Group builders: what turns task ids into :class:`wrappers.TrajectoryGroup` s for the learner.

:class:`wrappers.ReflectRetry` builds R³L's groups; :class:`PlainGroups` builds the groups GRPO, RAFT and
OPMD sample (``N`` independent rollouts per task). Both return the same format, so every algorithm can
train on either, and :func:`make_group_builder` picks one for an algorithm. Both play their episodes on the
env slots of a :class:`wrappers.collector.Collector` (where the envs live: threads here, or Ray actors).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import gymnasium as gym

from wrappers.collector import Collector
from wrappers.data import TrajectoryGroup
from wrappers.envops import as_collector
from wrappers.policy import Policy
from wrappers.reflect_retry import ReflectRetry, ReflectRetryConfig
from wrappers.reflection import Reflector
from wrappers.rollout import RolloutConfig, rollout_batch

__all__ = ["GroupBuilder", "PlainGroups", "make_group_builder"]


class GroupBuilder(Protocol):
    """Builds one group per task id (in order); ``seed`` makes it reproducible."""

    def collect(self, task_ids: Sequence[str], *, seed: int | None = None) -> list[TrajectoryGroup]: ...

    def close(self) -> None: ...


class PlainGroups:
    """``group_size`` independent rollouts per task, all tasks' episodes batched together.

    Args:
        env: a registered env id (made with ``env_kwargs``) or a zero-argument env factory (both run in a
            :class:`LocalCollector` with ``rollout.env_workers`` threads), or a :class:`wrappers.collector.Collector`
            (the caller closes it).
        policy: plays every episode.
        group_size: rollouts per task.
        rollout: how episodes are played.
    """

    def __init__(
        self,
        env: str | Callable[[], gym.Env] | Collector,
        policy: Policy,
        *,
        group_size: int = 8,
        rollout: RolloutConfig | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ):
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        self.policy, self.group_size = policy, group_size
        self.rollout = rollout or RolloutConfig()
        self.collector, self._owns_collector = as_collector(env, env_kwargs, self.rollout.env_workers)

    def collect(self, task_ids: Sequence[str], *, seed: int | None = None) -> list[TrajectoryGroup]:
        jobs = [task for task in task_ids for _ in range(self.group_size)]
        seeds = [None if seed is None else seed * 1_000_003 + i for i in range(len(jobs))]
        trajs = rollout_batch(self.collector, self.policy, self.rollout, seeds=seeds, task_ids=jobs, seed=seed)
        groups = []
        for g, task in enumerate(task_ids):
            members = trajs[g * self.group_size : (g + 1) * self.group_size]
            meta = {"group_size": self.group_size}
            groups.append(TrajectoryGroup(env_id=members[0].env_id, task_id=task, trajectories=members, metadata=meta))
        return groups

    def close(self) -> None:
        """Close the env instances this builder made (a Collector passed in stays open: its maker closes it)."""
        if self._owns_collector:
            self.collector.close()


def make_group_builder(
    env: str | Collector,
    policy: Policy,
    *,
    reflect_retry: bool,
    group_size: int,
    rollout: RolloutConfig,
    reflector: Reflector | None = None,
    pivotal_credit: bool = True,
    restart: str = "pivot",
    aux_samples: bool = True,
    fill: bool = True,
    env_kwargs: dict[str, Any] | None = None,
) -> GroupBuilder:
    """The group builder an algorithm asks for (see :class:`r3l_learn.algorithms.Algorithm`), on ``env``: an env id
    (made with ``env_kwargs``) or the :class:`wrappers.collector.Collector` its envs live in."""
    if not reflect_retry:
        return PlainGroups(env, policy, group_size=group_size, rollout=rollout, env_kwargs=env_kwargs)
    if reflector is None:
        raise ValueError("reflect-retry groups need a reflector (the policy itself, another model, or the oracle)")
    config = ReflectRetryConfig(
        group_size=group_size,
        rollout=rollout,
        fill=fill,
        pivotal_credit=pivotal_credit,
        restart=restart,
        aux_samples=aux_samples,
    )
    return ReflectRetry(env, policy, reflector, config, env_kwargs=env_kwargs)
