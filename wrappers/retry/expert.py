"""Expert demonstrations played as the agent: the env's expert plan, in the policy's own tokens and log-probs.

R³L's oracle reflector retries with hints from the env's expert plan (:func:`wrappers.retry.oracle.expert_plan`), which
no baseline sees. The control that gives a baseline the same privileged information at the same sampling budget
puts trajectories that *play the expert plan* into its groups (:class:`r3l_learn.loop.groups.PlainGroups`'s
``expert_demos``). Such a trajectory must be one any learner can train on exactly like a policy rollout, so it is
played through the same :class:`wrappers.episode.AgentEpisode` as a rollout:

- the same prompt template, history and answer format; each turn's reply is the plan's action in the answer tags
  (``<action>...</action>``, no ``<think>`` part), tokenised by the policy's tokenizer and ended as the rollout ends
  that kind of turn (constrained choices with the end-of-turn token, as their candidates are; free text at the
  action's closing tag, or with the end-of-turn token when generation does not stop at the action);
- each reply's recorded log-probs are ``policy.score`` of exactly those tokens in exactly their training context,
  so ratio objectives and KL see the policy's own probabilities (not ``Turn.guided``);
- a turn is constrained (``Turn.constrained``) only where the agent could have chosen it: in constrained mode the
  plan's action is one of the admissible actions (their spelling is used) or fills the page's one placeholder; any other
  plan action is played as the free-text reply that says it.

Every such trajectory has ``kind == "expert"`` (:data:`EXPERT_KIND`; stats that measure the policy, such as a
step's ``train/base_success``, leave it out) and its plan in ``metadata["expert_plan"]``. It ends as a rollout
does (terminated, truncated, ``max_turns``, ``context_length``) or, when the plan runs out before the episode ends
(a plan that does not win, which is rare), with ``stop_reason == "plan_end"``: it is still a trajectory, trained on
with its reward like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import gymnasium as gym

import r3l_envs
from wrappers.chat import chosen_span, end_of_turn_id
from wrappers.collectors.protocol import Collector
from wrappers.data.trajectory import Trajectory, new_id
from wrappers.episode import AgentEpisode, RolloutConfig, episode_slots
from wrappers.policy import Generation, Policy
from wrappers.retry.oracle import expert_plan
from wrappers.rollout import RoundSteps, written_around

__all__ = [
    "EXPERT_KIND",
    "PLAN_END",
    "NoExpertPlanError",
    "expert_plans",
    "expert_rollouts",
    "play_plans",
    "require_expert",
]

logger = logging.getLogger(__name__)

#: ``Trajectory.kind`` of a trajectory that plays the env's expert plan.
EXPERT_KIND = "expert"

#: ``Trajectory.stop_reason`` of an expert trajectory whose plan ran out before the episode ended.
PLAN_END = "plan_end"


class NoExpertPlanError(ValueError):
    """The env declares no expert (``r3l_envs.env_info(env).has_expert_plan`` is false), or gives no plan for a
    task: expert demonstrations cannot be played."""


def _declares_expert(env: gym.Env) -> bool:
    return r3l_envs.env_info(env).has_expert_plan


def require_expert(collector: Collector) -> None:
    """Raise :class:`NoExpertPlanError` unless the collector's env declares an expert plan (asked next to slot 0's
    env, wherever it lives)."""
    (declares,) = collector.gather([collector.call(0, _declares_expert)])
    if not declares:
        env_id = collector.made_env().env_id
        raise NoExpertPlanError(
            f"{env_id} declares no expert plan (it does not implement TextEnv.expert_actions), so expert "
            "demonstrations cannot be played: use an env that has one (TextWorld, ALFWorld, ScienceWorld, WebShop, "
            "the math envs) or set expert_demos to 0"
        )


def expert_plans(collector: Collector, task_ids: Sequence[str]) -> dict[str, list[str]]:
    """The expert plan of every distinct task of ``task_ids``, each computed next to its own idle slot
    (``0..d-1``: computing a plan may reset that env).

    Raises:
        NoExpertPlanError: the env declares no expert, or its plan for a task is missing or empty.
    """
    distinct = list(dict.fromkeys(task_ids))
    plans = collector.gather([collector.call(slot, expert_plan, task) for slot, task in enumerate(distinct)])
    out = {}
    for task, plan in zip(distinct, plans, strict=True):
        if not plan:
            why = "declares no expert" if plan is None else "gives an empty plan"
            raise NoExpertPlanError(
                f"{collector.made_env().env_id} {why} for task {task!r}: no expert demonstration can be played"
            )
        out[task] = list(plan)
    return out


def expert_rollouts(
    envs: Sequence[gym.Env] | Collector,
    policy: Policy,
    config: RolloutConfig | None = None,
    *,
    task_ids: Sequence[str],
    seeds: Sequence[int | None] | None = None,
    plans: Mapping[str, Sequence[str]] | None = None,
    seed: int | None = None,
) -> list[Trajectory]:
    """Play the expert plan of each task as the agent (see the module docstring), one episode per task id.

    Args:
        envs: env instances (one per episode), or a :class:`wrappers.collectors.protocol.Collector` whose slots
            ``0..n-1`` play the ``n`` episodes.
        policy: whose tokenizer writes the replies and whose ``score`` gives their log-probs.
        config: how episodes are played (template, turn limit, history, constrained mode); sampling settings do
            not apply (nothing is sampled).
        task_ids: the task of each episode.
        seeds: each episode's reset seed (default ``None``).
        plans: each task's plan (default: asked from the env, :func:`expert_plans`).
        seed: makes the trajectory ids reproducible, as a seeded :func:`wrappers.rollout.play` does.

    Raises:
        NoExpertPlanError: the env has no expert plan for a task.
    """
    config = config or RolloutConfig()
    task_ids = list(task_ids)
    seeds = list(seeds) if seeds is not None else [None] * len(task_ids)
    if len(seeds) != len(task_ids):
        raise ValueError(f"{len(task_ids)} task ids but {len(seeds)} seeds")
    if not task_ids:
        return []
    collector, _ = episode_slots(envs, len(task_ids), config)
    try:
        if plans is None:
            plans = expert_plans(collector, task_ids)
        missing = sorted(set(task_ids) - set(plans))
        if missing:
            raise NoExpertPlanError(f"no expert plan given for tasks {missing}")
        episodes = AgentEpisode.start_many(collector, policy, config, seeds=seeds, task_ids=task_ids)
        for i, ep in enumerate(episodes):
            ep.trajectory.kind = EXPERT_KIND
            ep.trajectory.metadata["expert_plan"] = list(plans[ep.trajectory.task_id])
            if seed is not None:
                ep.trajectory.id = new_id("expert", seed, i, *ep.origin)
        play_plans(episodes, [list(plans[t]) for t in task_ids], policy, config, collector)
        return [ep.trajectory for ep in episodes]
    finally:
        if collector is not envs:  # made here for the given envs: release its threads (the envs stay open)
            collector.close()


def play_plans(
    episodes: Sequence[AgentEpisode],
    plans: Sequence[list[str]],
    policy: Policy,
    config: RolloutConfig,
    collector: Collector,
) -> None:
    """Play started episodes to the end with each one's plan as the agent's replies (see the module docstring).

    Round after round: every running episode's next plan action as a reply, all scored in one call, their env
    steps run together (as :func:`wrappers.rollout.play` does with generations). An episode whose plan runs out
    ends with :data:`PLAN_END`.

    Args:
        episodes: started episodes (fresh or resumed), all on ``collector``.
        plans: each episode's actions, from its first turn (turn ``i`` plays ``plan[i]``).
        policy: whose tokenizer writes the replies and whose ``score`` gives their log-probs.
        config: the episodes' config (constrained mode, ``stop_at_action``).
        collector: the collector the episodes play on.
    """
    eot = end_of_turn_id(policy)
    while True:
        turns = []
        for ep, plan in zip(episodes, plans, strict=True):
            if ep.done:
                continue
            step = len(ep.trajectory.turns)
            if step >= len(plan):
                ep.end(PLAN_END)
                continue
            action, chosen = _as_agent(ep, plan[step])
            ends = chosen or config.constrained or not config.stop_at_action
            ids = policy.tokenize(ep.template.answer.wrap(action)) + ([eot] if ends and eot is not None else [])
            prompt = ep.prompt()
            if ep.fits(prompt, len(ids)):  # else the episode ends with "context_length", as a rollout's would
                turns.append((ep, prompt, action, ids, chosen))
        if not turns:  # every episode has ended (a plan's end or a full context ends it above)
            return
        scores = policy.score([prompt for _, prompt, *_ in turns], [ids for *_, ids, _ in turns])
        steps = RoundSteps(collector)
        try:
            for (ep, prompt, action, ids, chosen), logprobs in zip(turns, scores, strict=True):
                if chosen:  # written as a constrained choice is: only the action's tokens carry loss
                    sampled = chosen_span(ids, *written_around(policy, ep.template.answer, "", "", eot))
                    turn = ep.begin_choice(action, ids, logprobs, prompt, sampled=sampled)
                else:
                    turn = ep.begin_reply(Generation(policy.decode(ids), list(ids), list(logprobs), "stop"), prompt)
                    if turn.action != action:
                        logger.warning("expert action %r reads back as %r from its reply", action, turn.action)
                steps.act(ep, turn)
            steps.finish()
        except BaseException:
            steps.abandon()
            raise


def _as_agent(ep: AgentEpisode, action: str) -> tuple[str, bool]:
    """The plan's action as the agent would say it, and whether constrained mode could have chosen it: one of the
    admissible actions (in their spelling), or the page's one placeholder filled."""
    if ep.constrained:
        wanted = _normal(action)
        for admissible in ep.admissible:
            if _normal(admissible) == wanted:
                return admissible, True
        return action, False
    around = ep.placeholder
    if around is not None:
        before, after = around
        fits = action.startswith(before) and action.endswith(after) and len(action) > len(before) + len(after)
        return action, fits
    return action, False


def _normal(text: str) -> str:
    return " ".join(text.lower().split())
