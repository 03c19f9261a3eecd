"""Evaluate a policy on an env: batched rollouts, a summary (success, score, turns, tokens), and JSONL output.

Progress shows within episodes (the turn being generated, tokens so far; :mod:`r3l_learn.loop.progress`), and Ctrl-C
stops cleanly: the episodes finished so far are summarised and written, then :class:`EvaluationInterrupted` is
raised. With a ``resume`` folder, the finished batches are kept there and a later call plays only the rest
(:mod:`r3l_learn.loop.eval_resume`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from r3l_learn.loop.eval_resume import FinishedBatch, FinishedBatches
from r3l_learn.loop.progress import Phase, phase
from r3l_learn.policies.backends import ROLLOUT_BACKENDS
from wrappers import AgentEpisode, Policy, RolloutConfig, Trajectory, rollout_batch, save_jsonl

__all__ = ["EvalSummary", "EvaluationInterrupted", "evaluate", "load_policy"]

logger = logging.getLogger(__name__)

#: Name of the randomly initialised test model (no download, no conversion; useless as an agent).
TINY_RANDOM = "tiny-random"


@dataclass
class EvalSummary:
    """Aggregates over the evaluated episodes."""

    env_id: str
    split: str
    episodes: int
    success_rate: float
    mean_score: float
    mean_reward: float
    mean_turns: float
    mean_tokens: float
    parse_error_rate: float  # unusable replies per turn
    stop_reasons: dict[str, int]
    seconds: float
    tokens_per_second: float
    distinct_tasks: int = 0  # how many different tasks the episodes played
    interrupted: bool = False  # stopped by Ctrl-C: the aggregates cover the episodes finished before it
    # episodes an earlier, interrupted call finished (kept in its ``resume`` folder), and the wall and CPU seconds
    # they cost then; ``seconds`` counts those wall seconds too
    resumed_episodes: int = 0
    resumed_wall_s: float = 0.0
    resumed_cpu_s: float = 0.0

    def lines(self) -> list[str]:
        stopped = " (interrupted: the episodes finished before Ctrl-C)" if self.interrupted else ""
        if self.resumed_episodes:
            stopped += f" ({self.resumed_episodes} of them played by an earlier, interrupted call)"
        return [
            f"{self.env_id} [{self.split}]: {self.episodes} episodes ({self.distinct_tasks} distinct tasks) in "
            f"{self.seconds:.1f} s{stopped}",
            f"  success rate  {self.success_rate:.3f}",
            f"  mean score    {self.mean_score:.3f}   (mean reward {self.mean_reward:.3f})",
            f"  mean turns    {self.mean_turns:.2f}   (parse errors per turn {self.parse_error_rate:.3f})",
            f"  mean tokens   {self.mean_tokens:.1f}   ({self.tokens_per_second:.1f} generated tokens/s)",
            f"  ended by      {dict(sorted(self.stop_reasons.items()))}",
        ]


#: Policy backends of :func:`load_policy` (and of ``r3l eval --rollout-backend``): the rollout backends that name
#: one engine (``auto`` is a training run's choice between them)
BACKENDS = tuple(name for name in ROLLOUT_BACKENDS.names() if not ROLLOUT_BACKENDS[name].resolved)


class EvaluationInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`evaluate`, after the finished episodes were summarised (and written to ``out``).

    A :class:`KeyboardInterrupt`, so a caller that does not catch it stops as before; one that does (the CLI)
    gets ``summary`` (``interrupted=True``) and ``trajectories``, the episodes finished before the interrupt.
    """

    def __init__(self, summary: EvalSummary, trajectories: list[Trajectory]):
        super().__init__(f"evaluation interrupted after {len(trajectories)} finished episodes")
        self.summary, self.trajectories = summary, trajectories


def load_policy(model: str, *, dtype: str = "auto", device: str = "cpu", seed: int = 0, backend: str = "hf") -> Policy:
    """A policy for an embedded model name, a local HF folder, or ``tiny-random``, on ``backend`` (see BACKENDS)."""
    from r3l_learn.policies.hf import HFPolicy

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if ROLLOUT_BACKENDS[backend].engine:
        from r3l_learn.policies.vllm import shared_engine

        if model == TINY_RANDOM:
            raise ValueError(f"{TINY_RANDOM} lives only in memory, vLLM loads folders: use backend='hf'")
        return shared_engine(model, dtype=dtype, device=device, seed=seed)  # one engine per process, reused

    if model == TINY_RANDOM:
        from r3l_learn.policies.models import tiny_model

        net, tokenizer = tiny_model(seed=seed)
        return HFPolicy(net, tokenizer, name=TINY_RANDOM)
    return HFPolicy.from_pretrained(model, dtype=dtype, device=device)


def _summarise(
    env_id: str,
    split: str,
    trajs: list[Trajectory],
    seconds: float,
    interrupted: bool = False,
    resumed: Sequence[FinishedBatch] = (),
) -> EvalSummary:
    n = max(len(trajs), 1)
    seconds += sum(b.wall_s for b in resumed)
    turns = sum(t.num_turns for t in trajs)
    tokens = sum(t.num_tokens for t in trajs)
    return EvalSummary(
        env_id=env_id,
        split=split,
        episodes=len(trajs),
        success_rate=sum(t.won for t in trajs) / n,
        mean_score=sum(t.score for t in trajs) / n,
        mean_reward=sum(t.reward for t in trajs) / n,
        mean_turns=turns / n,
        mean_tokens=tokens / n,
        parse_error_rate=sum(t.num_parse_errors for t in trajs) / max(turns, 1),
        stop_reasons=dict(Counter(t.stop_reason for t in trajs)),
        seconds=seconds,
        tokens_per_second=tokens / seconds if seconds > 0 else 0.0,
        distinct_tasks=len({t.task_id for t in trajs}),
        interrupted=interrupted,
        resumed_episodes=sum(len(b.trajectories) for b in resumed),
        resumed_wall_s=sum(b.wall_s for b in resumed),
        resumed_cpu_s=sum(b.cpu_s for b in resumed),
    )


def evaluate(
    env_id: str,
    policy: Policy,
    *,
    episodes: int,
    split: str = "test",
    config: RolloutConfig | None = None,
    batch_size: int = 8,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    out: str | Path | None = None,
    progress: bool = True,
    desc: str | None = None,
    resume: str | Path | None = None,
    resume_key: str = "",
) -> tuple[EvalSummary, list[Trajectory]]:
    """Play ``episodes`` episodes of ``env_id`` (episode i resets with seed ``seed + i``), ``batch_size`` at
    a time with generation batched across them; optionally write the trajectories to ``out`` (JSONL).

    The episodes play distinct tasks of the split (:func:`r3l_learn.loop.prebuild.eval_task_ids`, an order fixed
    by ``seed``) while it has enough; ``EvalSummary.distinct_tasks`` says how many there were.

    With ``progress`` (see :mod:`r3l_learn.loop.progress`), content the episodes need that is not cached yet (TextWorld
    games) is built first under a bar of its own; then a bar named ``desc`` (default: the env id) counts episodes
    as they finish (after the round that ends each, not when its whole batch does), and its postfix says which turn
    of the current batch is being generated and how many tokens have been, after every round (on a terminal, also
    the tokens the model has scored or generated within the round).
    Off a terminal, each of the two writes a start and an end line instead. On Ctrl-C the episodes finished so far
    (those of the interrupted batch included) are summarised and written to ``out``, and
    :class:`EvaluationInterrupted` (a ``KeyboardInterrupt``) carries them to the caller.

    ``resume``: a folder where each finished batch is kept (:class:`r3l_learn.loop.eval_resume.FinishedBatches`),
    so that a call interrupted part-way and made again with the same arguments and ``resume_key`` (name the
    policy's weights: :func:`r3l_learn.loop.eval_resume.weights_key`) plays only the batches not finished; the
    result is the one an uninterrupted call gives. The folder is removed once the eval is complete.
    """
    from r3l_learn.loop.prebuild import eval_task_ids, has_content_to_build, prebuild

    if episodes < 1 or batch_size < 1:
        raise ValueError(f"episodes and batch_size must be >= 1, got {episodes} and {batch_size}")
    rollout = config or RolloutConfig()
    envs = [gym.make(env_id, split=split, **(env_kwargs or {})) for _ in range(min(batch_size, episodes))]
    firsts = range(0, episodes, len(envs))  # each batch's first episode
    trajs: list[Trajectory] = []
    live: list[AgentEpisode] = []  # the running batch's episodes, as of its last round
    resumed: list[FinishedBatch] = []
    kept: FinishedBatches | None = None
    start = time.perf_counter()
    try:
        tasks = eval_task_ids(envs[0], seed, episodes)
        if tasks and has_content_to_build(env_id):
            prebuild(env_id, env_kwargs, {split: tasks}, progress=progress)
        if resume is not None:
            identity = {"env_id": env_id, "split": split, "episodes": episodes, "batch_size": len(envs)}
            identity |= {"seed": seed, "env_kwargs": env_kwargs or {}, "tasks": tasks, "key": resume_key}
            identity["rollout"] = repr(rollout)
            kept = FinishedBatches(resume, identity)
            resumed = kept.load([min(len(envs), episodes - first) for first in firsts])
            trajs.extend(t for b in resumed for t in b.trajectories)
            if resumed:
                logger.info("%s: %d of %d episodes kept from an interrupted eval", resume, len(trajs), episodes)
        desc = desc or env_id
        show = _Progress(policy, trajs, live, rollout.max_turns)
        with phase(desc, total=episodes, unit="ep", enabled=progress, status=show.status) as bar:
            show.bar = bar
            if trajs:
                bar.update(len(trajs))
            for index, first in enumerate(firsts[len(resumed) :], start=len(resumed)):
                k = min(len(envs), episodes - first)
                seeds = [seed + first + i for i in range(k)]
                task_ids = tasks[first : first + k] if tasks is not None else None
                show.start_batch()
                wall, cpu = time.perf_counter(), time.process_time()
                batch = rollout_batch(
                    envs[:k], policy, config, seeds=seeds, task_ids=task_ids, seed=seed + first, on_round=show
                )
                live.clear()
                trajs.extend(batch)
                if kept is not None:
                    kept.save(index, batch, time.perf_counter() - wall, time.process_time() - cpu)
                show.end_batch(k)
            show.finish()
    except KeyboardInterrupt:
        trajs.extend(ep.trajectory for ep in live if ep.done)
        summary = _summarise(env_id, split, trajs, time.perf_counter() - start, interrupted=True, resumed=resumed)
        logger.warning("interrupted: %d of %d episodes finished", len(trajs), episodes)
        _write(out, trajs)
        raise EvaluationInterrupted(summary, trajs) from None
    finally:
        for env in envs:
            env.close()
    summary = _summarise(env_id, split, trajs, time.perf_counter() - start, resumed=resumed)
    _write(out, trajs)
    if kept is not None:
        kept.clear()
    return summary, trajs


def _write(out: str | Path | None, trajs: list[Trajectory]) -> None:
    if out is not None:
        save_jsonl(out, trajs)
        logger.info("wrote %d trajectories to %s", len(trajs), out)


class _Progress:
    """The bar's postfix, updated after every round of a batch (``rollout_batch(on_round=...)``), and its live
    status within a round: the tokens the policy has scored or generated since the round began, for a policy that
    counts them (``tokens_done``, as :class:`r3l_learn.policies.hf.HFPolicy` does)."""

    def __init__(self, policy: Policy, finished: list[Trajectory], live: list[AgentEpisode], max_turns: int | None):
        self.policy, self.finished, self.live, self.max_turns = policy, finished, live, max_turns
        self.bar: Phase | None = None
        self.rounds = 0
        self.counted = 0  # episodes of the running batch the bar has counted
        self.round_start = self._tokens_done()

    def status(self) -> str:
        done = self._tokens_done()
        return "" if done is None else f"round_tokens={done - self.round_start}"

    def _tokens_done(self) -> int | None:
        return getattr(self.policy, "tokens_done", None)

    def start_batch(self) -> None:
        self.rounds, self.counted = 0, 0
        self._show(self.rounds + 1)

    def __call__(self, episodes: Sequence[AgentEpisode]) -> None:
        self.live[:] = episodes
        self.rounds += 1
        # the bar counts episodes as they finish, not batches: a batch of 32 long episodes would otherwise show
        # 0/N until its slowest episode ends
        self._advance(sum(e.done for e in episodes))
        self._show(self.rounds + 1)

    def end_batch(self, size: int) -> None:
        """The batch of ``size`` episodes is over: count those no round reported finished."""
        self._advance(size)

    def _advance(self, finished: int) -> None:
        if finished > self.counted:
            self.bar.update(finished - self.counted)
            self.counted = finished

    def finish(self) -> None:
        """The end of the eval: the last round's numbers, without a turn that will not come."""
        self._show(None)

    def _show(self, turn: int | None) -> None:
        done = [*self.finished, *(e.trajectory for e in self.live if e.done)]
        tokens = sum(len(turn.token_ids) for t in self.finished for turn in t.turns)
        tokens += sum(len(turn.token_ids) for e in self.live for turn in e.trajectory.turns)
        fields: dict[str, Any] = {}
        # the turn budget: the rollout config's, else the episodes' own (known once a batch has played a round)
        self.max_turns = self.max_turns or max((e.max_turns for e in self.live), default=None)
        most = self.max_turns
        if turn is not None:
            fields["turn"] = turn if most is None else f"{min(turn, most)}/{most}"
        fields["tokens"] = tokens
        if done:
            fields["success"] = f"{sum(t.won for t in done) / len(done):.2f}"
        self.round_start = self._tokens_done()
        self.bar.set_postfix(**fields)
