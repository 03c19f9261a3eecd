"""The reflect-retry wrapper: stitched trajectory groups from pivot restarts (R³L, arXiv 2601.03715), for any learner.

``ReflectRetry(env, policy, reflector).collect(task_ids)`` returns one :class:`TrajectoryGroup` per task:

1. ``N/2`` base rollouts per task (all tasks' episodes batched into one generation call per round), with
   a checkpoint of the env before every turn.
2. One reflection per base (batched), stored in ``base.metadata["reflection"]``.
3. For each base whose reflection is usable, not ``success`` and names a pivot ``p``: the env is restored
   from the checkpoint the base took before turn ``p`` (native restore or verified replay — the prefix is
   never regenerated), the guidance goes into the generation context only, and the policy plays the retry
   suffix. All retries are batched together; their restores run concurrently.
4. The retry is the *distilled* trajectory (``kind="retry"``, ``base_id`` = its base's ``id``): its tokens up
   to the pivot are the base's, token-identical; the guidance is not in it; the pivot's observation appears once.
5. Pivotal credit (§2): for a base that got a retry and for the retry, agent tokens of turns ``< p`` get loss
   mask 0 (``agent_mask`` keeps them). Bases without a retry keep all their agent tokens.
6. Auxiliary samples (``reflection`` and ``guided_retry``) only when the retry verifiably beat its base
   (§1.6): retry reward ≥ ``success_threshold`` and (retry reward > base reward, or equal reward in fewer
   turns).
7. Optionally extra bases fill every group to ``N`` members (``fill=True``).

Batching and concurrency: generation (and all tokenising) happens on the calling thread, one batched call
per round across every task's episodes; env calls (reset, restore, step, checkpoint) go to a
:class:`wrappers.collectors.protocol.Collector`: by default a :class:`wrappers.collectors.local.LocalCollector` running
them in
``rollout.env_workers`` threads, so K slow restores cost about one, not K; another backend (e.g. Ray actors) can
be passed in instead of the env. The groups are bit-identical whatever the backend and ``env_workers`` are.
``max_envs`` caps the env instances (one per episode otherwise) by collecting in waves.

A group carries what a learner needs and nothing tied to R³L's loss: rewards, kinds, pivots, ids and base
links, agent and loss masks, token ids, behaviour log-probs (a retry's turns from the pivot on were generated
*with* the guidance in context, ``Turn.guided``: off-policy for the distilled sequence),
auxiliary samples, and ``metadata["stats"]``. See ``examples/grpo_with_reflect_retry.py`` for a user's own GRPO
consuming them. Ids are derived from ``seed`` (the same collect gives the same ids, whatever the waves).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from wrappers.chat import replay
from wrappers.collectors.local import as_collector
from wrappers.collectors.protocol import Collector
from wrappers.data.trajectory import Sample, Trajectory, TrajectoryGroup, new_id
from wrappers.policy import Policy, SamplingParams
from wrappers.retry.reflection import Reflection, ReflectionRequest, Reflector
from wrappers.rollout import AgentEpisode, RolloutConfig, play

__all__ = ["ReflectRetry", "ReflectRetryConfig", "aggregate_stats", "beats", "pivotal_mask"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReflectRetryConfig:
    """How groups are built.

    Attributes:
        group_size: the group budget N; ``N // 2`` bases are rolled out per task.
        rollout: how episodes are played (``keep_checkpoints`` is forced on; ``history`` must stay ``None``
            since a retry shares its prefix with the base).
        fill: add extra bases so every group has ``group_size`` members.
        pivotal_credit: zero the loss mask of turns before the pivot (pivotal credit); off for the ablation.
        restart: ``"pivot"`` (R³L) restores the base's checkpoint before the reflector's pivot; ``"scratch"``
            replays the retry from turn 0 with the same guidance (a Reflect-GRPO-style retry: the whole episode
            is generated again and every turn is target), the baseline that restart-at-pivot is measured against.
        aux_samples: build the auxiliary ``reflection`` / ``guided_retry`` samples (kept when the retry beat its base).
        reflection_samples: with ``aux_samples``, build the ``reflection`` sample too. It teaches the policy to
            diagnose like the reflector, a skill a run uses only when the policy reflects itself; with another
            reflector (the oracle, another model) it distils that reflector into the policy. ``r3l_learn`` builds it
            only when the policy reflects, by default (``TrainConfig.aux_reflection``).
        success_threshold: the reward a retry must reach to count as having beaten its base.
        keep_checkpoints: keep the per-turn env checkpoints in the output (off: groups stay small).
        max_envs: at most this many env instances (and episodes in flight): the bases are played, reflected
            on and retried in waves of ``max_envs``. ``None``: one env per base, ``N/2`` per task, all in one
            wave (for ScienceWorld that is one JVM, some 200–700 MB, each). With a sampling policy the groups
            depend on the waves (the batches differ), never on timing or on ``rollout.env_workers``.
    """

    group_size: int = 8
    rollout: RolloutConfig = field(default_factory=lambda: RolloutConfig(sampling=SamplingParams(temperature=1.0)))
    fill: bool = False
    pivotal_credit: bool = True
    restart: Literal["pivot", "scratch"] = "pivot"
    aux_samples: bool = True
    reflection_samples: bool = True
    success_threshold: float = 1.0
    keep_checkpoints: bool = False
    max_envs: int | None = None

    def __post_init__(self) -> None:
        if self.max_envs is not None and self.max_envs < 1:
            raise ValueError(f"max_envs must be None (one env per base) or >= 1, got {self.max_envs}")
        if self.restart not in ("pivot", "scratch"):
            raise ValueError(f"restart must be 'pivot' or 'scratch', got {self.restart!r}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (N/2 bases plus their retries), got {self.group_size}")
        if self.rollout.history is not None:
            raise ValueError("reflect-retry needs full-history rollouts: set RolloutConfig(history=None)")


def beats(retry: Trajectory, base: Trajectory, success_threshold: float = 1.0) -> bool:
    """R³L's rule for auxiliary samples: the retry reached the success threshold and did better than its base
    (more reward, or the same reward in fewer turns)."""
    if retry.reward < success_threshold:
        return False
    return retry.reward > base.reward or (retry.reward == base.reward and retry.num_turns < base.num_turns)


def pivotal_mask(traj: Trajectory, pivot: int) -> list[int]:
    """``traj.agent_mask`` with the agent tokens of turns before ``pivot`` set to 0 (pivotal credit)."""
    spans = [turn.span for turn in traj.turns[:pivot]]
    if None in spans:
        raise ValueError("pivotal credit needs full-history trajectories (every turn has a span)")
    return _without_spans(traj.agent_mask, spans)


def _without_spans(mask: Sequence[int], spans: Sequence[tuple[int, int]]) -> list[int]:
    """``mask`` with the tokens of ``spans`` (a pivot's prefix turns) set to 0: pivotal credit, written once."""
    out = list(mask)
    for start, end in spans:
        out[start:end] = [0] * (end - start)
    return out


class ReflectRetry:
    """Collect reflect-retry groups.

    Args:
        env: a registered env id (made with ``env_kwargs``) or a zero-argument factory returning a new env (both
            run in a :class:`LocalCollector` with ``config.rollout.env_workers`` threads), or a
            :class:`wrappers.collectors.protocol.Collector` of the env: where the envs live and run (the caller closes
            it).
        policy: the policy that plays bases and retries (any :class:`wrappers.Policy`).
        reflector: any :class:`wrappers.retry.reflection.Reflector` (``PolicyReflector(policy)`` for self-reflection,
            ``OracleReflector()`` for privileged diagnoses).
        config: see :class:`ReflectRetryConfig`.
        env_kwargs: ``gym.make`` keyword arguments when ``env`` is an id.

    Env slots are used from 0 and reused across ``collect`` calls: one per base of a wave (``N/2`` × tasks, or
    ``config.max_envs``); a base's retry restores on the slot that played it (where a native restore is fastest).
    """

    def __init__(
        self,
        env: str | Callable[[], gym.Env] | Collector,
        policy: Policy,
        reflector: Reflector,
        config: ReflectRetryConfig | None = None,
        *,
        env_kwargs: dict[str, Any] | None = None,
    ):
        self.config = config or ReflectRetryConfig()
        self.collector, self._owns_collector = as_collector(env, env_kwargs, self.config.rollout.env_workers)
        self.policy, self.reflector = policy, reflector
        self._rollout = replace(self.config.rollout, keep_checkpoints=True)
        #: Wall seconds of the last ``collect``, by phase: bases, reflect, retries, fill, total.
        self.timings: dict[str, float] = {}

    def close(self) -> None:
        """Close the env instances this wrapper made (a Collector passed in stays open: its maker closes it)."""
        if self._owns_collector:
            self.collector.close()

    # ------------------------------------------------------------------ collection
    def collect(self, task_ids: Sequence[str], *, seed: int | None = None) -> list[TrajectoryGroup]:
        """One group per task id, in order. ``seed`` makes env resets and sampling reproducible."""
        cfg = self.config
        k = cfg.group_size // 2
        jobs = [(g, task) for g, task in enumerate(task_ids) for _ in range(k)]
        self.timings = dict.fromkeys(("bases", "reflect", "retries", "fill"), 0.0)
        start = time.perf_counter()
        bases: list[Trajectory] = []
        reflections: list[Reflection] = []
        retries: list[Trajectory | None] = []
        size = cfg.max_envs or max(len(jobs), 1)
        for wave, first in enumerate(range(0, len(jobs), size)):
            b, r, t = self._wave(jobs[first : first + size], first, wave, seed)
            bases += b
            reflections += r
            retries += t
        groups = [TrajectoryGroup(env_id="", task_id=task) for task in task_ids]
        stats = [_Stats() for _ in task_ids]
        for (g, _), base, refl, retry in zip(jobs, bases, reflections, retries, strict=True):
            if refl.ok and refl.outcome == "success" and not base.won:
                # The env's verdict wins; the claim is kept (no retry, as the reflector asked) but counted.
                refl.notes.append("success_claimed_on_failure")
            base.metadata["reflection"] = refl.to_dict()
            stats[g].reflection(refl)
            groups[g].trajectories.append(base)
            if retry is None:
                continue
            base.metadata["retried"] = True
            won = beats(retry, base, cfg.success_threshold)
            retry.metadata["beat_base"] = won
            retry.metadata["pivot_rule"] = "scratch" if cfg.restart == "scratch" else refl.pivot_rule
            stats[g].retry(retry, won, cfg.success_threshold)
            if cfg.pivotal_credit:
                base.loss_mask = pivotal_mask(base, retry.pivot)
                retry.loss_mask = pivotal_mask(retry, retry.pivot)
            groups[g].trajectories.append(retry)
            if won and cfg.aux_samples:
                groups[g].samples += self._aux(base, refl, retry)
        if cfg.fill:
            lap = _Lap()
            self._fill(groups, seed)
            self.timings["fill"] = lap()
        for group, st in zip(groups, stats, strict=True):
            group.env_id = group.trajectories[0].env_id
            group.metadata["stats"] = st.as_dict()
            group.metadata["group_size"] = cfg.group_size
            if not cfg.keep_checkpoints:
                for traj in group.trajectories:
                    for turn in traj.turns:
                        turn.checkpoint = None
        self.timings["total"] = time.perf_counter() - start
        return groups

    def _wave(
        self, jobs: Sequence[tuple[int, str]], first: int, wave: int, seed: int | None
    ) -> tuple[list[Trajectory], list[Reflection], list[Trajectory | None]]:
        """Bases, reflections and retries for ``jobs`` (one env each); ``first``: the index of ``jobs[0]``."""
        lap = _Lap(self.timings)
        bases = self._bases(jobs, seed, _BASES, first, wave)
        logger.info("reflect-retry wave %d: %d bases in %.1fs", wave, len(bases), lap("bases"))
        # Slot i played base i and is idle now: an env-consulting reflector (the oracle) may use it.
        requests = [
            ReflectionRequest(b, self.collector.local_env(i), call=partial(self.collector.call, i))
            for i, b in enumerate(bases)
        ]
        reflections = self.reflector.reflect(requests)
        if len(reflections) != len(bases):
            raise RuntimeError(f"the reflector returned {len(reflections)} reflections for {len(bases)} trajectories")
        logger.info("reflect-retry wave %d: %d reflections in %.1fs", wave, len(reflections), lap("reflect"))
        retries = self._retries(bases, reflections, _mix(seed, _RETRIES, wave))
        n = sum(r is not None for r in retries)
        logger.info("reflect-retry wave %d: %d retries in %.1fs", wave, n, lap("retries"))
        return bases, reflections, retries

    def _bases(
        self, jobs: Sequence[tuple[int, str]], seed: int | None, phase: int, first: int, wave: int
    ) -> list[Trajectory]:
        """Base rollouts for ``jobs`` (``first``: the index of ``jobs[0]`` among all of the phase's jobs)."""
        seeds = [None if seed is None else seed * 1_000_003 + phase * 10_007 + first + i for i in range(len(jobs))]
        episodes = AgentEpisode.start_many(
            self.collector, self.policy, self._rollout, seeds=seeds, task_ids=[task for _, task in jobs]
        )
        trajs = play(episodes, self.policy, self._rollout, seed=_mix(seed, phase, wave))
        for i, t in enumerate(trajs):
            t.kind = "base"
            if seed is not None:  # by the job, not the wave: the same ids whatever max_envs is
                t.id = new_id("reflect-retry", seed, phase, first + i, t.task_id)
        return trajs

    def _retries(
        self, bases: Sequence[Trajectory], reflections: Sequence[Reflection], seed: int | None
    ) -> list[Trajectory | None]:
        """Each wanted retry restarts from its base's own checkpoint before turn p (native restore or verified
        replay, no regeneration) on the slot that played the base; the restores run concurrently, the retries are
        played as one batch."""
        wanted = [i for i, refl in enumerate(reflections) if refl.wants_retry]
        scratch = self.config.restart == "scratch"
        episodes = AgentEpisode.resume_many(
            self.collector,
            self.policy,
            self._rollout,
            [bases[i] for i in wanted],
            [0 if scratch else reflections[i].pivot for i in wanted],
            guidances=[reflections[i].guidance() for i in wanted],
            slots=wanted,
        )
        out: list[Trajectory | None] = [None] * len(bases)
        if episodes:
            for i, traj in zip(wanted, play(episodes, self.policy, self._rollout, seed=seed), strict=True):
                traj.id = new_id("retry", bases[i].id)  # one retry per base: its id follows from the base's
                out[i] = traj
        return out

    def _fill(self, groups: list[TrajectoryGroup], seed: int | None) -> None:
        jobs = [
            (g, grp.task_id)
            for g, grp in enumerate(groups)
            for _ in range(self.config.group_size - len(grp.trajectories))
        ]
        size = self.config.max_envs or max(len(jobs), 1)
        for wave, first in enumerate(range(0, len(jobs), size)):
            chunk = jobs[first : first + size]
            for (g, _), extra in zip(chunk, self._bases(chunk, seed, _FILL, first, wave), strict=True):
                extra.metadata["extra"] = True
                groups[g].trajectories.append(extra)

    # ------------------------------------------------------------------ auxiliary samples
    def _aux(self, base: Trajectory, refl: Reflection, retry: Trajectory) -> list[Sample]:
        """The reflection sample (prompt → diagnosis) and the guided-retry sample (prefix + guidance → suffix)."""
        policy, meta = self.policy, {"task_id": base.task_id, "pivot": retry.pivot, "reward": retry.reward}
        samples = []
        if refl.prompt and self.config.reflection_samples:
            prompt = policy.tokenize(policy.render(refl.prompt, add_generation_prompt=True))
            own = (
                refl.token_ids is not None
                and getattr(self.reflector, "policy", None) is policy
                and getattr(self.reflector, "prefill", None) is None
            )
            # A reflection the policy generated keeps its exact ids; another reflector's (a model's, the oracle's)
            # is taught in canonical form (clean JSON, repaired pivot), tokenised once and ended like a turn.
            text = refl.text if own else refl.as_json()
            target = list(refl.token_ids) if own else [*policy.tokenize(text), policy.eos_token_ids[0]]
            samples.append(
                Sample(
                    kind="reflection",
                    token_ids=prompt + target,
                    loss_mask=[0] * len(prompt) + [1] * len(target),
                    messages=[*refl.prompt, {"role": "assistant", "content": text}],
                    metadata=dict(meta),
                )
            )
        samples.append(self._guided(retry, retry.guidance or refl.guidance(), dict(meta)))
        return samples

    def _guided(self, retry: Trajectory, guidance: str, meta: dict[str, Any]) -> Sample:
        """The retry as it was generated: guidance before the pivot's user turn; only turns >= p are target."""
        p, system = retry.pivot, retry.messages[0]["content"]
        seq = replay(
            self.policy, system, [t.prompt_text for t in retry.turns], retry.turns, guidance=guidance, guided_at=p
        )
        mask = _without_spans(seq.agent_mask, seq.spans[:p])  # the prefix is context, not target (pivotal credit)
        cut = [0] * len(mask)  # the target replies cut at the token cap, for a learner that leaves them out
        for turn, (start, end) in list(zip(retry.turns, seq.spans))[p:]:
            if turn.reply_cut:
                cut[start:end] = seq.agent_mask[start:end]
        if any(cut):
            meta["cut_mask"] = cut
        return Sample(
            kind="guided_retry", token_ids=seq.token_ids, loss_mask=mask, messages=seq.messages, metadata=meta
        )


# Phases of a collect, for seeding: each (phase, wave) samples with its own seed.
_BASES, _FILL, _RETRIES = 0, 1, 2


def _mix(seed: int | None, phase: int, wave: int) -> int | None:
    """The sampling seed of one phase and wave of a collect (independent streams, unlike ``seed + phase``,
    which would hand collect(seed=s)'s fill the bases' seed of collect(seed=s + 1))."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, phase, wave]).generate_state(1)[0])


class _Lap:
    """Seconds since the previous call (or since creation), for phase timings; ``lap(phase)`` also adds them
    to ``totals[phase]``."""

    def __init__(self, totals: dict[str, float] | None = None) -> None:
        self._last = time.perf_counter()
        self._totals = totals

    def __call__(self, phase: str | None = None) -> float:
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        if phase is not None and self._totals is not None:
            self._totals[phase] = self._totals.get(phase, 0.0) + elapsed
        return elapsed


class _Stats:
    """Per-group counters (see :func:`aggregate_stats` for the fields)."""

    def __init__(self) -> None:
        self.bases = self.parsed = self.retries = self.beat = self.retry_success = 0
        self.failures: Counter[str] = Counter()
        self.notes: Counter[str] = Counter()
        self.pivots: list[int] = []
        self.retry_tokens = self.retry_steps = self.scratch_tokens = self.scratch_steps = 0

    def reflection(self, refl: Reflection) -> None:
        self.bases += 1
        if refl.ok:
            self.parsed += 1
        else:
            self.failures[refl.error or "unknown"] += 1
        self.notes.update(refl.notes)

    def retry(self, retry: Trajectory, won: bool, threshold: float) -> None:
        p = retry.pivot or 0
        self.retries += 1
        self.beat += won
        self.retry_success += retry.reward >= threshold
        self.pivots.append(p)
        suffix = retry.turns[p:]
        self.retry_tokens += sum(len(t.token_ids) for t in suffix)
        self.retry_steps += sum(t.action is not None for t in suffix)
        # From scratch, the prefix would have been generated and stepped again.
        self.scratch_tokens += retry.num_tokens
        self.scratch_steps += sum(t.action is not None for t in retry.turns)

    def as_dict(self) -> dict[str, Any]:
        return {
            "bases": self.bases,
            "reflections_parsed": self.parsed,
            "reflection_failures": dict(self.failures),
            "reflection_notes": dict(self.notes),
            "retries": self.retries,
            "retries_beat_base": self.beat,
            "retries_succeeded": self.retry_success,
            "pivots": self.pivots,
            "retry_tokens": self.retry_tokens,
            "retry_env_steps": self.retry_steps,
            "scratch_tokens": self.scratch_tokens,
            "scratch_env_steps": self.scratch_steps,
        }


def aggregate_stats(groups: Sequence[TrajectoryGroup]) -> dict[str, Any]:
    """Sum the per-group stats and derive the rates: parse rate, retry success rate, fraction of retries that
    beat their base (arXiv 2601.03715 reports 0.65 on ALFWorld), mean pivot, and retry cost relative to retrying
    from scratch (tokens and env steps)."""
    total: dict[str, Any] = {"groups": len(groups)}
    failures: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    pivots: list[int] = []
    for group in groups:
        st = group.metadata.get("stats", {})
        for key, value in st.items():
            if key == "reflection_failures":
                failures.update(value)
            elif key == "reflection_notes":
                notes.update(value)
            elif key == "pivots":
                pivots += value
            else:
                total[key] = total.get(key, 0) + value
    total["reflection_failures"], total["reflection_notes"] = dict(failures), dict(notes)

    def ratio(a: float, b: float) -> float | None:
        return a / b if b else None

    total["parse_rate"] = ratio(total.get("reflections_parsed", 0), total.get("bases", 0))
    total["retry_success_rate"] = ratio(total.get("retries_succeeded", 0), total.get("retries", 0))
    total["beat_base_rate"] = ratio(total.get("retries_beat_base", 0), total.get("retries", 0))
    total["mean_pivot"] = ratio(sum(pivots), len(pivots))
    total["token_cost_vs_scratch"] = ratio(total.get("retry_tokens", 0), total.get("scratch_tokens", 0))
    total["step_cost_vs_scratch"] = ratio(total.get("retry_env_steps", 0), total.get("scratch_env_steps", 0))
    return total
