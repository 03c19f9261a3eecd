"""Rollouts: play env episodes with a policy, batching generation across env instances.

The loop is written once. Each env slot is driven by an :class:`wrappers.episode.AgentEpisode` (prompt building,
parsing, env stepping, bookkeeping); :func:`play` gathers the prompts of every running episode into one
``generate`` (or one ``score`` in constrained mode) call per round, on the calling thread, and hands the round's
env calls to the episodes' :class:`wrappers.collectors.protocol.Collector` (by default env instances whose calls run in
``RolloutConfig.env_workers`` threads, :mod:`wrappers.collectors.threads`; same trajectories as serial). Expected
per-episode
failures (an unparseable reply, a context that no longer fits) are recorded in the trajectory and never raise; an
env call that raises propagates.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import replace

import gymnasium as gym
import numpy as np

from wrappers.chat import chosen_span, end_of_turn_id
from wrappers.collectors.local import DEFAULT_ENV_WORKERS
from wrappers.collectors.protocol import Collector, StepResult
from wrappers.data.trajectory import Trajectory, Turn, new_id
from wrappers.episode import DEFAULT_MAX_TURNS, AgentEpisode, RolloutConfig, episode_slots
from wrappers.parsing import AnswerFormat
from wrappers.policy import Policy

__all__ = [
    "DEFAULT_ENV_WORKERS",
    "DEFAULT_MAX_TURNS",
    "AgentEpisode",
    "RolloutConfig",
    "RoundSteps",
    "play",
    "rollout",
    "rollout_batch",
    "round_seed",
]

logger = logging.getLogger(__name__)


def _collector_of(episodes: Sequence[AgentEpisode]) -> Collector:
    """The one collector the episodes' envs live in (each episode in a slot of its own)."""
    collectors = {id(e.collector): e.collector for e in episodes}
    if len(collectors) != 1:
        raise ValueError(
            "episodes played together must share one collector: start them with one start_many/resume_many call, "
            "or on slots of the same Collector"
        )
    if len({e.env_slot for e in episodes}) != len(episodes):
        raise ValueError("each episode needs its own env instance: the same env slot appears twice in one batch")
    return episodes[0].collector


class RoundSteps:
    """The env steps of one round of turns on one collector: each submitted as soon as its turn is decided,
    recorded on the calling thread as it returns (a turn without a usable action at once: its env is not stepped).

    Use: :meth:`act` for every begun turn of the round, then :meth:`finish`; after a failure, :meth:`abandon`.
    """

    def __init__(self, collector: Collector):
        self.collector = collector
        self._pending: list[tuple[AgentEpisode, Turn]] = []
        self._steps: list[Future[StepResult]] = []

    def act(self, episode: AgentEpisode, turn: Turn) -> None:
        """Submit the env step of ``episode``'s begun ``turn`` (:meth:`AgentEpisode.submit_step`)."""
        step = episode.submit_step(turn)
        if step is None:
            episode.record_outcome(turn, None)
        else:
            self._pending.append((episode, turn))
            self._steps.append(step)

    def finish(self) -> None:
        """Wait for the round's env steps, recording each outcome on this thread as it arrives."""

        def record(i: int, result: StepResult) -> None:
            episode, turn = self._pending[i]
            episode.record_outcome(turn, result)

        self.collector.gather(self._steps, then=record)

    def abandon(self) -> None:
        """After a failure mid-round: wait for the env calls in flight (no env is touched after), record nothing."""
        wait(self._steps)


def round_seed(seed: int | None, round_index: int) -> int | None:
    """The sampling seed of generation round ``round_index`` of a batch seeded ``seed`` (``None``: unseeded); a
    benchmark that generates outside the rollout uses it to sample the same tokens."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, round_index]).generate_state(1)[0])


def _choose(scores: Sequence[list[float]], how: str, temperature: float, rng: np.random.Generator) -> int:
    """Index of the chosen candidate: softmax over (mean or summed) log-likelihoods at the policy temperature."""
    values = np.array([(sum(s) / max(len(s), 1)) if how == "mean" else sum(s) for s in scores], dtype=np.float64)
    if temperature == 0:
        return int(np.argmax(values))
    logits = values / temperature
    p = np.exp(logits - logits.max())
    return int(rng.choice(len(values), p=p / p.sum()))


def rollout_batch(
    envs: Sequence[gym.Env] | Collector,
    policy: Policy,
    config: RolloutConfig | None = None,
    *,
    seeds: Sequence[int | None] | None = None,
    task_ids: Sequence[str | None] | None = None,
    seed: int | None = None,
    on_round: Callable[[Sequence[AgentEpisode]], None] | None = None,
) -> list[Trajectory]:
    """Play one episode in each env, generating for all running episodes in one batched call per round.

    Args:
        envs: env instances (from ``gym.make``; one episode each, played to the end, env calls in
            ``config.env_workers`` threads), or a :class:`wrappers.collectors.protocol.Collector` whose slots
            ``0..n-1`` play the ``n`` episodes that ``seeds``/``task_ids`` ask for.
        config: how to play; defaults to :class:`RolloutConfig()`.
        seeds: per-env reset seeds (``None`` entries draw from the env's RNG).
        task_ids: per-env tasks (``None`` entries draw from the env's RNG).
        seed: seeds sampling; the same seed, envs and policy give the same trajectories.
        on_round: called with the episodes after every round (see :func:`play`).
    """
    config = config or RolloutConfig()
    if isinstance(envs, Collector):
        if seeds is None and task_ids is None:
            raise ValueError("with a Collector, say how many episodes to play: pass seeds or task_ids")
        n = len(seeds) if seeds is not None else len(task_ids)
    else:
        n = len(envs)
    seeds = list(seeds) if seeds is not None else [None] * n
    task_ids = list(task_ids) if task_ids is not None else [None] * n
    if len(seeds) != n or len(task_ids) != n:
        raise ValueError(f"{n} envs but {len(seeds)} seeds and {len(task_ids)} task ids")
    collector, _ = episode_slots(envs, n, config)
    try:
        episodes = AgentEpisode.start_many(collector, policy, config, seeds=seeds, task_ids=task_ids)
        return play(episodes, policy, config, seed=seed, on_round=on_round)
    finally:
        if collector is not envs:  # made here for the given envs: release its threads (the envs stay open)
            collector.close()


def play(
    episodes: Sequence[AgentEpisode],
    policy: Policy,
    config: RolloutConfig,
    *,
    seed: int | None = None,
    on_round: Callable[[Sequence[AgentEpisode]], None] | None = None,
) -> list[Trajectory]:
    """Play started episodes (fresh or :meth:`AgentEpisode.resume`-d) to the end, batching generation across
    them; returns their trajectories in order.

    Each round generates (or scores) for every running episode in one call on this thread, then steps their
    envs through the episodes' collector (:mod:`wrappers.collectors.protocol`; ``config.env_workers`` threads for env
    instances), tokenising each answer here as it arrives. A round waits for its slowest env; the trajectories
    do not depend on the collector or on ``env_workers``: a late
    episode never moves to another round's batch, which would change what a seeded batched sampler draws.
    ``on_round(episodes)``, if given, runs after every round: progress within episodes (turns, tokens, which
    are done), and the finished trajectories if the caller is interrupted mid-batch.
    """
    if not episodes:
        return []
    collector = _collector_of(episodes)
    if seed is not None:  # a seeded run gives the same ids again; otherwise they stay random
        for i, ep in enumerate(episodes):
            ep.trajectory.id = new_id("play", seed, i, *ep.origin)
    eot = end_of_turn_id(policy) if config.constrained or config.direct else None
    stop = config.sampling.stop + tuple(e.template.answer.stop for e in episodes if config.stop_at_action)
    round_index = 0
    while True:
        running = [e for e in episodes if not e.done]
        if not running:
            break
        rseed = round_seed(seed, round_index)
        free, chosen, filled = _sort(running, policy, config, eot)
        steps = RoundSteps(collector)
        try:
            _decide(free, chosen, filled, policy, config, rseed, eot, stop, steps)
            steps.finish()
        except BaseException:
            steps.abandon()
            raise
        round_index += 1
        if on_round is not None:
            on_round(episodes)
    return [e.trajectory for e in episodes]


def _sort(running: Sequence[AgentEpisode], policy: Policy, config: RolloutConfig, eot: int | None) -> tuple:
    """The running episodes whose next reply still fits their context, by how it is made: free text, a choice
    among admissible actions (constrained), or a placeholder to fill; each with its prompt (and candidates, or the
    text around the placeholder)."""
    free, chosen, filled = [], [], []
    for ep in running:
        prompt = ep.prompt()
        if ep.constrained:
            cands = [
                policy.tokenize(ep.template.answer.wrap(a)) + ([eot] if eot is not None else []) for a in ep.admissible
            ]
            if ep.fits(prompt, max(len(c) for c in cands)):
                chosen.append((ep, prompt, cands))
        elif (around := ep.placeholder) is not None:
            answer = ep.template.answer
            head, tail = policy.tokenize(answer.opening + around[0]), policy.tokenize(around[1] + answer.stop)
            if ep.fits(prompt, len(head) + config.sampling.max_new_tokens + len(tail) + 1):
                filled.append((ep, prompt, head, around))
        elif ep.fits(prompt, config.sampling.max_new_tokens):
            free.append((ep, prompt))
    return free, chosen, filled


def _decide(free, chosen, filled, policy, config, rseed, eot, stop, steps: RoundSteps) -> None:
    """Generate (free text), score (constrained) or fill placeholders for one round's episodes, submitting each env step
    as soon as its turn is decided, so the envs of one kind step while the next kind generates."""
    if free:
        params = replace(config.sampling, seed=rseed, stop=tuple(dict.fromkeys(stop)))
        for (ep, prompt), gen in zip(free, policy.generate([p for _, p in free], params)):
            steps.act(ep, ep.begin_reply(gen, prompt))
    if chosen:  # the free episodes' envs step meanwhile
        pairs = [(prompt, c) for _, prompt, cands in chosen for c in cands]
        scores = policy.score([p for p, _ in pairs], [c for _, c in pairs])
        offset = 0
        for k, (ep, prompt, cands) in enumerate(chosen):
            mine = scores[offset : offset + len(cands)]
            offset += len(cands)
            rng = np.random.default_rng(None if rseed is None else [rseed, k])
            i = _choose(mine, config.constrained_score, config.sampling.temperature, rng)
            # Choosing the action by its log-likelihood is the policy's choice: the action's own tokens keep
            # agent_mask 1; the tags and end-of-turn token written around it do not (Turn.sampled).
            sampled = chosen_span(cands[i], *written_around(policy, ep.template.answer, "", "", eot))
            steps.act(ep, ep.begin_choice(ep.admissible[i], cands[i], mine[i], prompt, sampled=sampled))
    if filled:
        _fill_placeholders(filled, policy, config, rseed, eot, steps)


def _fill_placeholders(
    filled: list[tuple[AgentEpisode, list[int], list[int], tuple[str, str]]],
    policy: Policy,
    config: RolloutConfig,
    seed: int | None,
    eot: int | None,
    steps: RoundSteps,
) -> None:
    """Placeholder turns (see :attr:`AgentEpisode.placeholder`): the policy continues the reply's fixed head (e.g.
    ``<action>search[``) up to the first character of what follows the placeholder (``]``); the reply is the action
    with that value in its place, re-scored whole so its log-probs are the policy's own for exactly the recorded
    tokens."""
    stops = tuple(dict.fromkeys((after + ep.template.answer.stop)[:1] for ep, _, _, (_, after) in filled))
    params = replace(config.sampling, seed=seed, stop=stops)
    gens = policy.generate([prompt + head for _, prompt, head, _ in filled], params)
    replies = []
    for (ep, prompt, _, (before, after)), gen in zip(filled, gens, strict=True):
        value = gen.text
        for stop in stops:
            value = value.split(stop)[0]
        value = " ".join(value.split())  # one line: a newline or a run of spaces is no part of a query
        action = before + value + after
        ids = policy.tokenize(ep.template.answer.wrap(action)) + ([eot] if eot is not None else [])
        # Only the value was sampled: the tag, the template's text around the placeholder and the end-of-turn token
        # are the rollout's (agent_mask 0). A value cut at max_new_tokens stays marked so ("length").
        sampled = chosen_span(ids, *written_around(policy, ep.template.answer, before, after, eot))
        replies.append((ep, prompt, action, ids, sampled, gen.finish_reason))
    scores = policy.score([r[1] for r in replies], [r[3] for r in replies])
    for (ep, prompt, action, ids, sampled, finish), lp in zip(replies, scores, strict=True):
        steps.act(ep, ep.begin_choice(action, ids, lp, prompt, sampled=sampled, finish_reason=finish))


def written_around(policy: Policy, answer: AnswerFormat, before: str, after: str, eot: int | None) -> tuple[list, list]:
    """The tokens the rollout writes before and after the policy's choice in a reply: the action tag's opening
    and ``before``; ``after``, the closing tag and the end-of-turn token (see :func:`wrappers.chat.chosen_span`)."""
    return policy.tokenize(answer.opening + before), policy.tokenize(after + answer.stop) + (
        [eot] if eot is not None else []
    )


def rollout(
    env: gym.Env,
    policy: Policy,
    config: RolloutConfig | None = None,
    *,
    seed: int | None = None,
    task_id: str | None = None,
    sample_seed: int | None = None,
) -> Trajectory:
    """Play one episode of ``env`` with ``policy`` (reset with ``seed``/``task_id``; ``sample_seed`` seeds
    sampling). See :func:`rollout_batch`."""
    return rollout_batch([env], policy, config, seeds=[seed], task_ids=[task_id], seed=sample_seed)[0]
