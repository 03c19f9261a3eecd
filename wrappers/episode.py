"""One agent episode on one env slot: prompts, parsing, the env's replies, and the recorded trajectory.

An :class:`AgentEpisode` builds each turn's prompt ids, turns a generation (or a constrained choice) into an
action, has its :class:`wrappers.collectors.protocol.Collector` step the env, and records the turn;
:func:`wrappers.rollout.play`
drives many of them in batched rounds. :class:`RolloutConfig` says how episodes are played.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import gymnasium as gym

from wrappers.chat import ChatSequence, replay
from wrappers.collectors.local import DEFAULT_ENV_WORKERS, as_collector
from wrappers.collectors.protocol import Collector, ResetResult, StepResult
from wrappers.data.trajectory import Trajectory, Turn
from wrappers.parsing import parse_reply
from wrappers.policy import FinishReason, Generation, Policy, SamplingParams, describe
from wrappers.prompts import PromptTemplate, family_template

__all__ = ["DEFAULT_MAX_TURNS", "AgentEpisode", "RolloutConfig", "episode_slots"]

logger = logging.getLogger(__name__)

# A placeholder in an admissible action that is a template, e.g. the "<query>" of "search[<query>]".
_PLACEHOLDER = re.compile(r"<[^<>\s][^<>]*>")

#: Turn limit for envs that declare none: neither a ``TimeLimit`` (``max_episode_steps``) nor a limit of their own
#: rules (:attr:`r3l_envs.EnvInfo.max_turns`, e.g. a math env's ``max_attempts``: every reply is an attempt, and one
#: the parser cannot use costs one too, as a reply without a final answer does when the env reads it).
DEFAULT_MAX_TURNS = 30


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are played (read by :class:`AgentEpisode`, and by :func:`wrappers.rollout.play` for sampling).

    Attributes:
        sampling: how replies are sampled.
        max_turns: the turn limit; ``None``: the env's own (:attr:`wrappers.collectors.protocol.MadeEnv.max_turns`),
            else :data:`DEFAULT_MAX_TURNS`.
        history: keep only the last ``history`` turns in the context; ``None`` keeps all (one sequence).
        constrained: pick among admissible actions by log-likelihood where the env lists them.
        direct: free-text turns open the reply with the action tag: the policy writes the action alone and the
            rollout closes the tag (:attr:`AgentEpisode.placeholder`), for a model too small to write the answer
            format; with ``constrained``, the turns the env lists no actions for.
        constrained_score: ``"mean"`` log-prob per candidate (a sum favours short actions) or ``"sum"``.
        keep_checkpoints: checkpoint the env before every turn (reflect-retry restores them).
        stop_at_action: end generation at the closing action tag: nothing after it is used.
        template: the prompt template; ``None``: the env family's.
        env_workers: threads for env calls between rounds; 1 = serial (same results).
    """

    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_turns: int | None = None
    history: int | None = None
    constrained: bool = False
    direct: bool = False
    constrained_score: Literal["mean", "sum"] = "mean"
    keep_checkpoints: bool = False
    stop_at_action: bool = True
    template: PromptTemplate | None = None
    env_workers: int = DEFAULT_ENV_WORKERS

    def __post_init__(self) -> None:
        if self.env_workers < 1:
            raise ValueError(
                f"env_workers must be >= 1 (1 steps envs serially on the calling thread), got {self.env_workers}"
            )
        if self.history is not None and self.history < 0:
            raise ValueError(f"history must be None (all turns) or >= 0, got {self.history}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.constrained_score not in ("mean", "sum"):
            raise ValueError(f"constrained_score must be 'mean' or 'sum', got {self.constrained_score!r}")


def _jsonable(value: Any) -> Any:
    """``value`` as JSON holds it (tuples become lists, foreign objects their repr), so what a trajectory
    stores is exactly what its JSONL round-trip gives back."""
    return json.loads(json.dumps(value, ensure_ascii=True, default=repr))


class AgentEpisode:
    """One episode of one env under a policy: builds prompts, applies generations, records the trajectory.

    The env is a slot of a :class:`wrappers.collectors.protocol.Collector` (an env passed in directly gets a one-slot
    :class:`wrappers.collectors.local.LocalCollector`): the episode asks it for resets, steps and restores and
    never touches an env object, so the env may live in another process.

    The turn API, for any driver (:func:`wrappers.rollout.play`, :func:`wrappers.retry.expert.play_plans`,
    reflect-retry): :meth:`prompt` gives the next prompt ids and :meth:`fits` checks a reply still fits;
    :meth:`apply` (a generation) or :meth:`apply_choice` (a reply written around the policy's choice) play a whole
    turn. To overlap the env calls of many episodes, a turn is played in three parts: :meth:`begin_reply` or
    :meth:`begin_choice`, :meth:`submit_step`, :meth:`record_outcome`. :meth:`end` ends an episode early.
    """

    def __init__(
        self,
        env: gym.Env,
        policy: Policy,
        config: RolloutConfig,
        *,
        seed: int | None = None,
        task_id: str | None = None,
    ):
        collector, _ = as_collector([env], workers=1)
        self._setup(collector, 0, policy, config)
        started = collector.reset(0, seed=seed, task_id=task_id, checkpoint=config.keep_checkpoints)
        self._open(collector.gather([started])[0], seed)

    @classmethod
    def start_many(
        cls,
        envs: Sequence[gym.Env] | Collector,
        policy: Policy,
        config: RolloutConfig,
        *,
        seeds: Sequence[int | None],
        task_ids: Sequence[str | None],
    ) -> list[AgentEpisode]:
        """Start one episode per env (or per collector slot ``0..len(seeds)-1``), as
        ``AgentEpisode(env, ..., seed=s, task_id=t)`` does, with the resets running (in ``config.env_workers``
        threads for env instances) while the first prompts are tokenised here."""
        collector, slots = episode_slots(envs, len(seeds), config)
        if len(task_ids) != len(slots):
            raise ValueError(f"{len(slots)} envs but {len(seeds)} seeds and {len(task_ids)} task ids")
        episodes = [cls._blank(collector, slot, policy, config) for slot in slots]
        resets = [
            collector.reset(slot, seed=s, task_id=t, checkpoint=config.keep_checkpoints)
            for slot, s, t in zip(slots, seeds, task_ids, strict=True)
        ]
        collector.gather(resets, then=lambda i, result: episodes[i]._open(result, seeds[i]))
        return episodes

    @classmethod
    def _blank(cls, collector: Collector, slot: int, policy: Policy, config: RolloutConfig) -> AgentEpisode:
        self = cls.__new__(cls)
        self._setup(collector, slot, policy, config)
        return self

    def _open(self, start: ResetResult, seed: int | None) -> None:
        """Start from a reset's result (calling thread only): the first prompt's tokens."""
        self.observation, self.info, self._checkpoint = start.observation, start.info, start.checkpoint
        self.trajectory = self._new_trajectory(seed)
        first = self.template.first_user(self.info["task"], self.observation, self.info["admissible_actions"])
        self._shown: list[str] = [first]  # the user text of every turn, as the agent saw it
        self._sequence = ChatSequence(self.policy, self._opening(first))
        self._context: ChatSequence | None = None  # a guided generation context, when it differs (resume)
        self._origin: tuple[Any, ...] = ("reset", seed, self.info["task_id"])  # what fixes the episode, for its id

    def _setup(self, collector: Collector, slot: int, policy: Policy, config: RolloutConfig) -> None:
        self.collector, self.env_slot, self.policy, self.config = collector, slot, policy, config
        self.made_env = collector.made_env()
        template = config.template or family_template(self.made_env.info.prompt_family)
        if config.direct:  # the reply starts at the action: no reasoning part to ask for
            template = replace(template, answer=replace(template.answer, think_tag=None))
        self.template = template
        self.system = self.template.system()
        self.max_turns = config.max_turns or self.made_env.max_turns or DEFAULT_MAX_TURNS
        self.done = False

    def _new_trajectory(self, seed: int | None) -> Trajectory:
        return Trajectory(
            env_id=self.made_env.env_id,
            task_id=self.info["task_id"],
            task=self.info["task"],
            metadata={
                "policy": describe(self.policy),
                "template": self.template.family,
                "seed": seed,
                "sampling": _jsonable(asdict(self.config.sampling)),
                "constrained": self.config.constrained,
                "direct": self.config.direct,
                "history": self.config.history,
            },
        )

    @classmethod
    def resume(
        cls,
        env: gym.Env,
        policy: Policy,
        config: RolloutConfig,
        base: Trajectory,
        pivot: int,
        *,
        guidance: str | None = None,
        kind: str = "retry",
    ) -> AgentEpisode:
        """Continue ``base`` from the env state just before its turn ``pivot`` (restored from the checkpoint
        the base rollout kept; never by re-asking the model).

        The new trajectory's turns before ``pivot`` are the base's, and its token sequence up to the pivot is
        token-identical to the base's; its ``base_id`` is ``base.id``. ``guidance``, if given, is put before the
        pivot turn's user message in the *generation* context only; the trajectory's training sequence never
        contains it (as R³L generates its retries), and the turns generated under it say so
        (:attr:`wrappers.data.trajectory.Turn.guided`); the guidance itself is kept in ``Trajectory.guidance``.
        """
        (episode,) = cls.resume_many([env], policy, config, [base], [pivot], guidances=[guidance], kind=kind)
        return episode

    @classmethod
    def resume_many(
        cls,
        envs: Sequence[gym.Env] | Collector,
        policy: Policy,
        config: RolloutConfig,
        bases: Sequence[Trajectory],
        pivots: Sequence[int],
        *,
        guidances: Sequence[str | None] | None = None,
        kind: str = "retry",
        slots: Sequence[int] | None = None,
    ) -> list[AgentEpisode]:
        """:meth:`resume` for several bases at once, on env instances or a collector's ``slots`` (default
        ``0..len(bases)-1``; any slot restores any checkpoint, the one that played the base fastest): the restores
        (a verified replay can take a while) run while the prefixes are rebuilt here; the episodes are the same."""
        guidances = list(guidances) if guidances is not None else [None] * len(bases)
        collector, slots = episode_slots(envs, len(bases), config, slots)
        if not len(slots) == len(bases) == len(pivots) == len(guidances):
            raise ValueError(f"{len(slots)} envs, {len(bases)} bases, {len(pivots)} pivots, {len(guidances)} guidances")
        episodes = [cls._resumable(collector, slot, policy, config, b, p) for slot, b, p in zip(slots, bases, pivots)]
        restores = [collector.restore(slot, b.turns[p].checkpoint) for slot, b, p in zip(slots, bases, pivots)]
        try:
            for ep, base, pivot, guidance in zip(episodes, bases, pivots, guidances):
                ep._rebuild(base, pivot, guidance, kind)
        finally:
            collector.gather(restores)
        return episodes

    @classmethod
    def _resumable(
        cls, collector: Collector, slot: int, policy: Policy, config: RolloutConfig, base: Trajectory, pivot: int
    ) -> AgentEpisode:
        """A blank episode for resuming ``base`` at ``pivot``, after checking that it can be (env untouched)."""
        if config.history is not None:
            raise ValueError("resume() needs full-history rollouts (history=None): windowed contexts share no prefix")
        if not 0 <= pivot < base.num_turns:
            raise ValueError(f"pivot must be a turn index in [0, {base.num_turns}), got {pivot}")
        if base.turns[pivot].checkpoint is None:
            raise ValueError("the base trajectory has no per-turn checkpoints: roll it out with keep_checkpoints=True")
        return cls._blank(collector, slot, policy, config)

    def _rebuild(self, base: Trajectory, pivot: int, guidance: str | None, kind: str) -> None:
        """The token half of resuming: the base's prefix, token-identical, and the guided context (calling thread)."""
        policy, at = self.policy, base.turns[pivot]
        self.observation = at.observation
        previous = base.turns[pivot - 1].info if pivot else {"won": False, "score": 0.0}
        self.info = {**previous, "task_id": base.task_id, "task": base.task, "admissible_actions": at.admissible}
        self.trajectory = self._new_trajectory(base.metadata.get("seed"))
        self.trajectory.kind, self.trajectory.pivot, self.trajectory.base_id = kind, pivot, base.id
        self.trajectory.guidance = guidance
        self.trajectory.turns = [copy.deepcopy(t) for t in base.turns[:pivot]]
        self._shown = [t.prompt_text for t in base.turns[: pivot + 1]]
        prefix = base.turns[:pivot]
        self._sequence = replay(policy, self.system, self._shown, prefix)
        if self._sequence.token_ids != base.token_ids[: at.span[0]]:
            raise ValueError("rebuilding the base prefix did not reproduce its tokens: was it made by another policy?")
        self._context = (
            replay(policy, self.system, self._shown, prefix, guidance=guidance, guided_at=pivot) if guidance else None
        )
        self._checkpoint = at.checkpoint if self.config.keep_checkpoints else None
        self._origin = ("resume", base.id, pivot, kind, guidance or "")

    def _opening(self, first_user: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": first_user}]

    @property
    def admissible(self) -> list[str] | None:
        """The admissible actions the env lists for the next turn (``None``: it lists none)."""
        return self.info.get("admissible_actions")

    @property
    def origin(self) -> tuple[Any, ...]:
        """What fixes this episode (its reset seed and task, or its base, pivot and guidance), as plain values:
        a seeded driver derives the trajectory's id from it (:func:`wrappers.data.trajectory.new_id`)."""
        return self._origin

    @property
    def constrained(self) -> bool:
        """This turn is a choice among admissible actions: constrained mode, the env lists some, and none is a
        template with a placeholder to fill (WebShop's ``search[<query>]``), which only free text can fill."""
        admissible = self.admissible
        if not (self.config.constrained and admissible):
            return False
        return not any(_PLACEHOLDER.search(a) for a in admissible)

    @property
    def placeholder(self) -> tuple[str, str] | None:
        """A turn whose reply the rollout writes around one placeholder the policy fills: the action text before
        and after the placeholder. In constrained mode, a turn whose one admissible action is a template with one
        placeholder (WebShop's search page: ``search[<query>]``); in direct mode, every other turn, the whole action
        being the placeholder. Either way a model too small to write the answer format still makes a well-formed
        action."""
        admissible = self.admissible
        if self.config.constrained and admissible and len(admissible) == 1:
            found = list(_PLACEHOLDER.finditer(admissible[0]))
            if len(found) == 1:
                return admissible[0][: found[0].start()], admissible[0][found[0].end() :]
        return ("", "") if self.config.direct else None

    # ------------------------------------------------------------------ prompts
    def prompt(self) -> list[int]:
        """Token ids of the context for the next turn."""
        if self._context is not None:
            return list(self._context.token_ids)
        if self.config.history is None:
            return list(self._sequence.token_ids)
        return list(self._windowed(len(self.trajectory.turns)).token_ids)

    def _windowed(self, turn: int, *, answered: bool = False) -> ChatSequence:
        """The context of turn ``turn`` with a windowed history: the last ``history`` turns before it, from their
        generated ids (never re-tokenised), and its user message; ``answered`` appends its own reply."""
        start = max(0, turn - self.config.history)
        first = (
            self._shown[start] if start == 0 else self.template.resume(self.trajectory.task, self._shown[start], start)
        )
        users = [first, *self._shown[start + 1 : turn + 1]]
        return replay(self.policy, self.system, users, self.trajectory.turns[start : turn + int(answered)])

    def fits(self, prompt: Sequence[int], new_tokens: int) -> bool:
        """Context-length guard: does a reply of ``new_tokens`` still fit after ``prompt``?"""
        if len(prompt) + new_tokens <= self.policy.max_context:
            return True
        self.end("context_length")
        logger.info(
            "%s task %s: stopped at turn %d, the context (%d tokens + %d new) exceeds max_context %d",
            self.trajectory.env_id,
            self.trajectory.task_id,
            len(self.trajectory.turns),
            len(prompt),
            new_tokens,
            self.policy.max_context,
        )
        return False

    # ------------------------------------------------------------------ playing a turn
    def apply(self, generation: Generation, prompt: Sequence[int] | None = None) -> Turn:
        """Play a free-text generation: parse it, step the env (or explain the parse failure), record it."""
        return self._complete(self.begin_reply(generation, prompt))

    def apply_choice(
        self,
        action: str,
        token_ids: Sequence[int],
        logprobs: Sequence[float],
        prompt=None,
        *,
        sampled: tuple[int, int] | None = None,
        finish_reason: FinishReason = "stop",
    ) -> Turn:
        """Play an action the rollout wrote as a reply around the policy's choice (an admissible action chosen by
        constrained mode, a filled placeholder), with the token ids that express it. ``sampled`` is ``[start, end)`` of
        the chosen tokens in ``token_ids`` (``None``: all of them; see :attr:`wrappers.data.trajectory.Turn.sampled`),
        and
        ``finish_reason`` is the generation's when the policy filled a placeholder (``"length"``: cut at the cap)."""
        return self._complete(
            self.begin_choice(action, token_ids, logprobs, prompt, sampled=sampled, finish_reason=finish_reason)
        )

    # A turn is played in three parts so that a driver (:func:`wrappers.rollout.play`) can run the env part of a
    # whole round concurrently: ``begin_reply``/``begin_choice`` (calling thread: the record and the generated
    # tokens), ``submit_step`` (the env call, submitted to the collector), ``record_outcome`` (calling thread: the
    # outcome, then the next user turn's tokens or the end). ``apply``/``apply_choice`` do all three at once.
    def _complete(self, turn: Turn) -> Turn:
        step = self.submit_step(turn)
        self.record_outcome(turn, None if step is None else self.collector.gather([step])[0])
        return turn

    def begin_reply(self, generation: Generation, prompt: Sequence[int] | None = None) -> Turn:
        """Start a turn from a free-text generation: parse its action and add its tokens to the sequence.

        Args:
            generation: the policy's reply to :meth:`prompt`.
            prompt: the prompt ids it was generated from (recorded with a windowed history; default
                :meth:`prompt`).

        Returns:
            The turn, not yet recorded: pass it to :meth:`submit_step`, then :meth:`record_outcome`.

        Raises:
            RuntimeError: the episode has ended.
        """
        parsed = parse_reply(generation.text, self.template.answer)
        return self._begin(generation, parsed.action, parsed.error, prompt, constrained=False)

    def begin_choice(
        self,
        action: str,
        token_ids: Sequence[int],
        logprobs: Sequence[float],
        prompt: Sequence[int] | None = None,
        *,
        sampled: tuple[int, int] | None = None,
        finish_reason: FinishReason = "stop",
    ) -> Turn:
        """Start a turn whose reply the rollout wrote around the policy's choice (an admissible action chosen in
        constrained mode, a filled placeholder, an expert's action), as :meth:`begin_reply` does for free text.

        Args:
            action: the action the reply says.
            token_ids: the reply's tokens.
            logprobs: the policy's log-prob of each of them, in this turn's context.
            prompt: as for :meth:`begin_reply`.
            sampled: ``[start, end)`` of the tokens the policy chose (``None``: all of them;
                :attr:`wrappers.data.trajectory.Turn.sampled`).
            finish_reason: the generation's, when the policy sampled a placeholder (``"length"``: cut at the cap).

        Returns:
            The turn, not yet recorded: pass it to :meth:`submit_step`, then :meth:`record_outcome`.

        Raises:
            RuntimeError: the episode has ended.
        """
        generation = Generation(self.policy.decode(token_ids), list(token_ids), list(logprobs), finish_reason)
        return self._begin(generation, action, None, prompt, constrained=True, sampled=sampled)

    def _begin(
        self,
        gen: Generation,
        action: str | None,
        error: str | None,
        prompt,
        *,
        constrained: bool,
        sampled: tuple[int, int] | None = None,
    ) -> Turn:
        if self.done:
            raise RuntimeError("this episode has ended; start a new AgentEpisode")
        turn = Turn(
            observation=self.observation,
            response=gen.text,
            action=action,
            prompt_text=self._shown[-1],
            admissible=_jsonable(self.admissible),
            token_ids=list(gen.token_ids),
            behavior_logprobs=list(gen.logprobs),
            finish_reason=gen.finish_reason,
            parse_error=error,
            constrained=constrained,
            sampled=sampled,
            checkpoint=self._checkpoint,
            guided=self._context is not None,
        )
        if self.config.history is None:
            turn.span = self._sequence.add_generation(gen.text, gen.token_ids, gen.logprobs, sampled)
            if self._context is not None:
                self._context.add_generation(gen.text, gen.token_ids, gen.logprobs, sampled)
        else:
            turn.prompt_ids = list(prompt) if prompt is not None else self.prompt()
        return turn

    def submit_step(self, turn: Turn) -> Future[StepResult] | None:
        """Submit the env step of a begun turn's action to the episode's collector; the collector checkpoints
        after it when checkpoints are kept and the episode can go on.

        Returns:
            The step's future, or ``None`` when the turn has no usable action (the env is not stepped).
        """
        if turn.action is None:
            return None
        keep = self.config.keep_checkpoints and len(self.trajectory.turns) + 1 < self.max_turns
        return self.collector.step(self.env_slot, turn.action, checkpoint=keep)

    def record_outcome(self, turn: Turn, result: StepResult | None) -> None:
        """Finish a begun turn on the calling thread: record the env step's outcome (or, with ``result=None``, the
        parse failure's feedback), then end the episode or add the next user message.

        Args:
            turn: the turn from :meth:`begin_reply` or :meth:`begin_choice`.
            result: its :meth:`submit_step`'s result, or ``None`` when that returned ``None``.
        """
        if result is None:
            # The env is not stepped: its state stays exactly as it was (so does its checkpoint) and the agent is
            # told what was wrong.
            turn.outcome = self.template.feedback(turn.parse_error or "no action")
            turn.info = _jsonable(self.info)
            shown = self.template.next_user(self.observation, self.admissible, feedback=turn.outcome)
        else:
            turn.outcome, turn.reward = result.observation, result.reward
            turn.terminated, turn.truncated = result.terminated, result.truncated
            turn.info = _jsonable(result.info)
            self.observation, self.info = result.observation, result.info
            shown = self.template.next_user(result.observation, result.info.get("admissible_actions"))
            self._checkpoint = result.checkpoint if self.config.keep_checkpoints else None
        self.trajectory.turns.append(turn)
        self._shown.append(shown)
        ending: str | None  # why the episode ends after this turn
        if turn.terminated:
            ending = "terminated"
        elif turn.truncated:
            ending = "truncated"
        elif len(self.trajectory.turns) >= self.max_turns:
            ending = "max_turns"
        else:
            ending = None
        if ending is not None:
            self.end(ending)
        elif self.config.history is None:
            self._sequence.add_user(self._shown[-1])
            if self._context is not None:
                self._context.add_user(self._shown[-1])

    def end(self, reason: str) -> None:
        """End the episode now: store the training sequence and the verdict, with ``reason`` as its
        ``stop_reason``. The sequence ends with the last reply: a user turn after it (added for a next turn that
        did not fit the context) is not stored, so it never exceeds max_context."""
        traj = self.trajectory
        own = 0  # where the replies generated from this very context start
        if not traj.turns:  # stopped before a first reply: nothing was generated, nothing to train
            seq, end = ChatSequence(self.policy, self._opening(self._shown[0])), 0
        elif self.config.history is None:
            seq, end = self._sequence, traj.turns[-1].span[1]
        else:  # the last turn's own context and reply; the earlier replies in it were generated from others
            seq = self._windowed(len(traj.turns) - 1, answered=True)
            end, own = len(seq), seq.spans[-1][0]
        traj.messages = seq.messages[:-1] if traj.turns and seq.messages[-1]["role"] == "user" else seq.messages
        traj.token_ids = seq.token_ids[:end]
        traj.agent_mask = [0] * own + seq.agent_mask[own:end]
        traj.loss_mask = list(traj.agent_mask)
        traj.behavior_logprobs = [0.0] * own + seq.logprobs[own:end]
        traj.reward = float(sum(t.reward for t in traj.turns))
        traj.won = bool(self.info.get("won", False))
        traj.score = float(self.info.get("score", 0.0))
        traj.stop_reason = reason
        self.done = True


def episode_slots(
    envs: Sequence[gym.Env] | Collector, n: int, config: RolloutConfig, slots: Sequence[int] | None = None
) -> tuple[Collector, list[int]]:
    """The collector and env slots that ``n`` episodes play on.

    Args:
        envs: a collector, or ``n`` env instances (they become the slots of a collector made here with
            :func:`wrappers.collectors.local.as_collector`, ``config.env_workers`` threads at most; it is the
            caller's to close, and closing it leaves the envs open).
        n: how many episodes.
        config: the episodes' config (its ``env_workers``).
        slots: with a collector, its ``n`` distinct slots (default ``0..n-1``); not allowed with env instances.

    Raises:
        ValueError: the counts disagree, a slot repeats, or ``slots`` is given with env instances.
    """
    if isinstance(envs, Collector):
        slots = list(range(n)) if slots is None else list(slots)
        if len(slots) != n or len(set(slots)) != n:
            raise ValueError(f"{n} episodes need {n} distinct slots, got {slots}")
        return envs, slots
    if slots is not None:
        raise ValueError("slots apply to a Collector; env instances are their own slots")
    envs = list(envs)
    if len(envs) != n:
        raise ValueError(f"{len(envs)} envs for {n} episodes")
    collector, _ = as_collector(envs, workers=max(1, min(config.env_workers, len(envs))))
    return collector, list(range(n))
