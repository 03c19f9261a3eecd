"""Group builders: what turns task ids into :class:`wrappers.TrajectoryGroup` s for the learner.

:class:`wrappers.ReflectRetry` builds R³L's groups; :class:`PlainGroups` builds the groups GRPO, RAFT and
OPMD sample (``N`` independent rollouts per task). Both return the same format, so every algorithm can
train on either, and :func:`make_group_builder` picks one for an algorithm. Both play their episodes on the
env slots of a :class:`wrappers.collectors.protocol.Collector` (where the envs live: threads here, or Ray actors).
:func:`groups_with_contrast` is DAPO's dynamic sampling on top of either: groups without contrast are replaced
by groups of fresh tasks until a step has the groups it asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from wrappers.collectors.local import as_collector
from wrappers.collectors.protocol import Collector
from wrappers.data.trajectory import TrajectoryGroup
from wrappers.policy import Policy
from wrappers.retry.expert import expert_plans, expert_rollouts, require_expert
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig
from wrappers.retry.reflection import Reflector
from wrappers.rollout import RolloutConfig, rollout_batch

__all__ = [
    "DynamicSample",
    "GroupBuilder",
    "PlainGroups",
    "expert_demos_problem",
    "groups_with_contrast",
    "make_group_builder",
]


class GroupBuilder(Protocol):
    """Builds one group per task id (in order); ``seed`` makes it reproducible."""

    def collect(self, task_ids: Sequence[str], *, seed: int | None = None) -> list[TrajectoryGroup]: ...

    def close(self) -> None: ...


def expert_demos_problem(expert_demos: int, group_size: int, *, reflect_retry: bool) -> str | None:
    """None if a group of ``group_size`` may hold ``expert_demos`` expert trajectories, else why not (the rule,
    written once: the config checks it, and so do the group builders).

    A group keeps at least one policy rollout, and only plain groups take expert demonstrations: reflect-retry
    groups get the expert's knowledge through the oracle reflector instead.
    """
    if not 0 <= expert_demos < group_size:
        return (
            f"expert_demos must be in [0, group_size) = [0, {group_size}) so that every group keeps a policy rollout, "
            f"got {expert_demos}"
        )
    if expert_demos and reflect_retry:
        return (
            "expert_demos puts expert trajectories into plain groups (grpo, raft, opmd): reflect-retry groups (r3l) "
            "take the expert's knowledge through the oracle reflector instead; set expert_demos to 0"
        )
    return None


class PlainGroups:
    """``group_size`` independent rollouts per task, all tasks' episodes batched together; with ``expert_demos``
    ``k``, ``group_size - k`` rollouts and ``k`` trajectories that play the env's expert plan as the agent
    (:mod:`wrappers.retry.expert`, ``kind == "expert"``, last in the group): the privileged control for R³L with the
    oracle reflector, at the same budget of ``group_size`` trajectories per task.

    Args:
        env: a registered env id (made with ``env_kwargs``) or a zero-argument env factory (both run in a
            :class:`LocalCollector` with ``rollout.env_workers`` threads), or a
            :class:`wrappers.collectors.protocol.Collector`
            (the caller closes it).
        policy: plays every episode (and scores the expert replies).
        group_size: trajectories per task.
        rollout: how episodes are played.
        expert_demos: expert trajectories per task, in ``[0, group_size)``; > 0 needs an env with an expert plan
            (:class:`wrappers.retry.expert.NoExpertPlanError` otherwise).
    """

    def __init__(
        self,
        env: str | Callable[[], gym.Env] | Collector,
        policy: Policy,
        *,
        group_size: int = 8,
        rollout: RolloutConfig | None = None,
        env_kwargs: dict[str, Any] | None = None,
        expert_demos: int = 0,
    ):
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        problem = expert_demos_problem(expert_demos, group_size, reflect_retry=False)
        if problem:
            raise ValueError(problem)
        self.policy, self.group_size, self.expert_demos = policy, group_size, expert_demos
        self.rollout = rollout or RolloutConfig()
        self.collector, self._owns_collector = as_collector(env, env_kwargs, self.rollout.env_workers)
        self._plans: dict[str, list[str]] = {}  # each task's expert plan, asked once
        if expert_demos:
            try:
                require_expert(self.collector)
            except BaseException:
                self.close()
                raise

    def collect(self, task_ids: Sequence[str], *, seed: int | None = None) -> list[TrajectoryGroup]:
        # member j of group g is job g * N + j (its reset seed): the policy's rollouts first, then the expert's
        n, own = self.group_size, self.group_size - self.expert_demos
        mine = [(task, g * n + j) for g, task in enumerate(task_ids) for j in range(own)]
        theirs = [(task, g * n + j) for g, task in enumerate(task_ids) for j in range(own, n)]
        trajs = rollout_batch(
            self.collector, self.policy, self.rollout, seeds=_seeds(mine, seed), task_ids=_tasks(mine), seed=seed
        )
        if theirs:
            todo = [t for t in dict.fromkeys(task_ids) if t not in self._plans]
            if todo:
                self._plans.update(expert_plans(self.collector, todo))
            demos = expert_rollouts(
                self.collector,
                self.policy,
                self.rollout,
                task_ids=_tasks(theirs),
                seeds=_seeds(theirs, seed),
                plans=self._plans,
                seed=seed,
            )
        groups = []
        for g, task in enumerate(task_ids):
            members = trajs[g * own : (g + 1) * own]
            meta: dict[str, Any] = {"group_size": self.group_size}
            if theirs:
                members += demos[g * self.expert_demos : (g + 1) * self.expert_demos]
                meta["expert_demos"] = self.expert_demos
            groups.append(TrajectoryGroup(env_id=members[0].env_id, task_id=task, trajectories=members, metadata=meta))
        return groups

    def close(self) -> None:
        """Close the env instances this builder made (a Collector passed in stays open: its maker closes it)."""
        if self._owns_collector:
            self.collector.close()


def _seeds(jobs: Sequence[tuple[str, int]], seed: int | None) -> list[int | None]:
    """The reset seeds of jobs ``(task, index)``: a function of the job's index in the step, so a member's episode
    does not depend on how many expert demonstrations the group holds."""
    return [None if seed is None else seed * 1_000_003 + i for _, i in jobs]


def _tasks(jobs: Sequence[tuple[str, int]]) -> list[str]:
    return [task for task, _ in jobs]


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
    reflection_samples: bool = True,
    fill: bool = True,
    env_kwargs: dict[str, Any] | None = None,
    expert_demos: int = 0,
) -> GroupBuilder:
    """The group builder an algorithm asks for (see :class:`r3l_learn.algorithms.catalog.Algorithm`), on ``env``: an
    env id
    (made with ``env_kwargs``) or the :class:`wrappers.collectors.protocol.Collector` its envs live in. ``expert_demos``
    (plain groups only) puts that many expert trajectories in each group (:class:`PlainGroups`)."""
    if not reflect_retry:
        return PlainGroups(
            env, policy, group_size=group_size, rollout=rollout, env_kwargs=env_kwargs, expert_demos=expert_demos
        )
    problem = expert_demos_problem(expert_demos, group_size, reflect_retry=True)
    if problem:
        raise ValueError(problem)
    if reflector is None:
        raise ValueError("reflect-retry groups need a reflector (the policy itself, another model, or the oracle)")
    config = ReflectRetryConfig(
        group_size=group_size,
        rollout=rollout,
        fill=fill,
        pivotal_credit=pivotal_credit,
        restart=restart,
        aux_samples=aux_samples,
        reflection_samples=reflection_samples,
    )
    return ReflectRetry(env, policy, reflector, config, env_kwargs=env_kwargs)


@dataclass
class DynamicSample:
    """What :func:`groups_with_contrast` built for one step.

    Attributes:
        groups: the groups with contrast the step trains on (at most the number asked for), in the order built.
        built: every group built, those without contrast included (the step's rewards are taken over these: the
            extra tasks are drawn from the stream whatever their outcome, so they are as fair a sample of it as the
            first ones).
        rounds: rounds made, the first included.
        extra_groups: groups built after the first round (each one a fresh task).
        extra_trajectories: their trajectories.
    """

    groups: list[TrajectoryGroup]
    built: list[TrajectoryGroup]
    rounds: int
    extra_groups: int
    extra_trajectories: int

    def metrics(self) -> dict[str, int]:
        """What a training step logs about it (``collect/...``, the names its metrics have always had)."""
        return {
            "collect/rounds": self.rounds,
            "collect/extra_groups": self.extra_groups,
            "collect/extra_trajectories": self.extra_trajectories,
            "collect/contrast_groups": len(self.groups),
            "collect/dropped_groups": len(self.built) - len(self.groups),
        }


def groups_with_contrast(
    builder: GroupBuilder,
    take: Callable[[int], list[str]],
    wanted: int,
    *,
    seed: int | None,
    with_contrast: Callable[[list[TrajectoryGroup]], list[bool]],
    max_rounds: int = 3,
) -> DynamicSample:
    """Dynamic sampling (DAPO, arXiv 2503.14476): build groups for ``wanted`` tasks, drop those without contrast,
    and build groups for as many fresh tasks as are missing, until ``wanted`` groups have contrast or
    ``max_rounds`` rounds (the first included) are made; the step then trains on the groups with contrast it has.

    Args:
        builder: builds the groups (:class:`PlainGroups`, :class:`wrappers.ReflectRetry`, ...).
        take: ``take(k)`` gives the next ``k`` task ids of the run's stream (:meth:`TaskStream.take`), so the
            extra tasks are those the following steps would have drawn, and the stream's cursor counts them.
        wanted: groups with contrast the step asks for (``tasks_per_step``).
        seed: the step's seed (round 0 uses it as is, so a run without resampling builds exactly the groups it
            would without dynamic sampling; each later round a seed derived from it and its number).
        with_contrast: for a list of groups, whether each has contrast (the learner asks whether its rows would
            carry signal, :func:`r3l_learn.algorithms.update.signal_rows`).
        max_rounds: the cap on rounds, >= 1; a step draws at most ``wanted * max_rounds`` tasks.
    """
    if wanted < 1 or max_rounds < 1:
        raise ValueError(f"wanted and max_rounds must be >= 1, got {wanted} and {max_rounds}")
    kept: list[TrajectoryGroup] = []
    built: list[TrajectoryGroup] = []
    rounds = 0
    while len(kept) < wanted and rounds < max_rounds:
        found = builder.collect(take(wanted - len(kept)), seed=_round_seed(seed, rounds))
        flags = with_contrast(found)
        if len(flags) != len(found):
            raise ValueError(f"with_contrast gave {len(flags)} answers for {len(found)} groups")
        kept += [g for g, has in zip(found, flags) if has]
        built += found
        rounds += 1
    extra = built[wanted:]  # the first round built exactly ``wanted`` groups
    return DynamicSample(
        groups=kept,
        built=built,
        rounds=rounds,
        extra_groups=len(extra),
        extra_trajectories=sum(len(g.trajectories) for g in extra),
    )


def _round_seed(seed: int | None, round_index: int) -> int | None:
    """The seed of resampling round ``round_index`` of a step seeded ``seed``: the step's own for round
    0, then one drawn from both, so a later round plays other episodes than any step's first round."""
    if seed is None or round_index == 0:
        return seed
    return int(np.random.SeedSequence([seed, round_index]).generate_state(1)[0])
