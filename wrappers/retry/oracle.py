"""An oracle reflector: privileged env knowledge names the pivot and the fix, in the reflection schema.

It makes small models useful and isolates the learning algorithm from reflection quality (R³L, arXiv 2601.03715).
What it knows, per env (read from the env itself, never hard-coded):

- Every env that declares an expert (``r3l_envs.env_info(env).has_expert_plan``) gives its plan with
  ``env.unwrapped.expert_actions(task_id)``, on the idle env instance of the request (TextWorld's walkthrough,
  ALFWorld's planner, ScienceWorld's gold path, WebShop's scripted shopper, a math env's reference answer).
- Math envs (``env_info(env).is_math``): the plan is the reference answer; each turn's ``info["correct"]`` says
  which attempts failed. Which failed attempt is the pivot is ``math_pivot``: ``"last_wrong"`` (the default)
  keeps the earlier failed attempts and their feedback as the retry's shared prefix and retries the last one,
  so pivotal credit applies; ``"first_wrong"`` (the rule before) restarts at the first wrong attempt, which on
  math is always attempt 0 (only an episode's last attempt can be correct), so nothing is shared.
- Other envs: the pivot is the first turn whose action leaves the expert plan (an unusable reply counts as
  leaving it). Deviating is not always wrong — another path may also work — so a trajectory that won is judged
  only on length: ``success`` when it took no more steps than the plan, else ``success_but_inefficient`` with
  the first deviation as pivot.

Each reflection records the rule that chose its pivot in ``Reflection.pivot_rule`` (``"first_deviation"``,
``"last_wrong"`` or ``"first_wrong"``), which the reflect-retry wrapper keeps in the base's
``metadata["reflection"]`` and in the retry's ``metadata["pivot_rule"]``.

What the guidance may contain (the oracle uses privileged knowledge to *diagnose*; how much of it reaches the
retry's context is a choice): by default the guidance names **the expert's next action(s)** at the pivot
(``plan="step"`` with ``reveal_steps=1``; ``0`` only says that the step left the plan), or, with ``plan="rest"``,
**the whole rest of the plan** from the pivot to the goal (a model that follows one named step and is lost again
after it can follow a route it is given in full), and **never the math answer**
(``reveal_answer=False``: it says which attempt was wrong and, for numeric answers, whether the correct
value is larger or smaller). ``reveal_answer=True`` puts the reference answer in the guidance, which makes a
retry succeed for sure but teaches the auxiliary guided-retry sample to copy; the distilled trajectory never
contains guidance either way.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from typing import Literal

import gymnasium as gym

import r3l_envs
from wrappers.collectors.threads import EnvOps
from wrappers.data.trajectory import Trajectory
from wrappers.retry.reflection import Reflection, ReflectionRequest, reflection_messages
from wrappers.rollout import DEFAULT_ENV_WORKERS

__all__ = ["GUIDANCE_PLANS", "MATH_PIVOT_RULES", "OracleReflector", "expert_plan"]

logger = logging.getLogger(__name__)


#: How the math oracle picks the pivot among the failed attempts (see the module docstring).
MATH_PIVOT_RULES = ("last_wrong", "first_wrong")

#: How much of the expert plan a plan env's guidance names: ``"step"`` (``reveal_steps`` actions from the pivot)
#: or ``"rest"`` (every action from the pivot to the goal).
GUIDANCE_PLANS = ("step", "rest")


def expert_plan(env: gym.Env, task_id: str) -> list[str] | None:
    """The expert's actions that win ``task_id`` from its start, or ``None`` if the env declares no expert.

    Reads ``env.unwrapped.expert_actions`` (the env contract); it may reset ``env``, so pass an idle instance."""
    if not r3l_envs.env_info(env).has_expert_plan:
        return None
    plan = env.unwrapped.expert_actions(task_id)
    return None if plan is None else list(plan)


def _task_key(req: ReflectionRequest) -> tuple[str, str]:
    """Which plan a request needs: its env's id and kwargs (they decide the tasks), and the task."""
    if req.env is None:  # consulted through ``call``: one collector, one env id and kwargs
        return req.trajectory.env_id, req.trajectory.task_id
    spec = req.env.spec
    made = (
        f"{spec.id} {json.dumps(spec.kwargs, sort_keys=True, default=repr)}" if spec else repr(type(req.env.unwrapped))
    )
    return made, req.trajectory.task_id


def _same(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    cleaned = text.strip().removeprefix("\\boxed{").removesuffix("}").replace(",", "").strip()
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class OracleReflector:
    """Reflections from privileged env knowledge (see the module docstring for what the guidance reveals).

    Args:
        reveal_answer: math only: put the reference answer in the guidance (default ``False``).
        reveal_steps: plan envs with ``plan="step"``: how many expert actions from the pivot on the guidance names
            (default 1).
        plan: plan envs: ``"step"`` (the default: ``reveal_steps`` actions) or ``"rest"`` (the rest of the plan,
            from the pivot to the goal); see :data:`GUIDANCE_PLANS`.
        math_pivot: math only: ``"last_wrong"`` (retry the last failed attempt, the earlier ones shared) or
            ``"first_wrong"`` (restart at the first failed attempt); see :data:`MATH_PIVOT_RULES`.
        workers: expert plans are computed once per task of a batch, in this many threads (one per idle env;
            ScienceWorld's gold path takes about a second of JVM time); 1 computes them serially.
    """

    name = "oracle"

    def __init__(
        self,
        *,
        reveal_answer: bool = False,
        reveal_steps: int = 1,
        plan: Literal["step", "rest"] = "step",
        math_pivot: Literal["last_wrong", "first_wrong"] = "last_wrong",
        workers: int = DEFAULT_ENV_WORKERS,
    ):
        if reveal_steps < 0:
            raise ValueError(f"reveal_steps must be >= 0, got {reveal_steps}")
        if plan not in GUIDANCE_PLANS:
            raise ValueError(f"plan must be one of {GUIDANCE_PLANS}, got {plan!r}")
        if math_pivot not in MATH_PIVOT_RULES:
            raise ValueError(f"math_pivot must be one of {MATH_PIVOT_RULES}, got {math_pivot!r}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1 (1 computes plans serially), got {workers}")
        self.reveal_answer = reveal_answer
        self.reveal_steps = reveal_steps
        self.plan = plan
        self.math_pivot = math_pivot
        self.workers = workers

    def reflect(self, requests: Sequence[ReflectionRequest]) -> list[Reflection]:
        plans = self._plans([r for r in requests if r.env is not None or r.call is not None])
        out = []
        for req in requests:
            if req.env is None and req.call is None:
                refl = Reflection(None, None, error="no_plan")
            elif r3l_envs.env_info(req.env if req.env is not None else req.trajectory.env_id).is_math:
                refl = self._math(req.trajectory, plans[_task_key(req)])
            else:
                refl = self._plan(req.trajectory, plans[_task_key(req)])
            refl.source = self.name
            refl.text = refl.text or refl.as_json()
            # The prompt a model reflector would have seen: the auxiliary reflection sample teaches the policy
            # to diagnose like the oracle from what it can see (R³L's auxiliary SFT samples).
            refl.prompt = reflection_messages(req.trajectory)
            out.append(refl)
        return out

    # ------------------------------------------------------------------ math
    def _math(self, traj: Trajectory, plan: list[str] | None) -> Reflection:
        if not plan:
            return Reflection(None, None, error="no_plan")
        reference = plan[0]
        wrong = [i for i, t in enumerate(traj.turns) if not t.info.get("correct", False)]
        summary = f"The agent made {traj.num_turns} attempt(s); {len(wrong)} were not correct."
        if not wrong:
            return Reflection("success", None, summary=summary)
        pivot = wrong[-1] if self.math_pivot == "last_wrong" else wrong[0]
        outcome = "success_but_inefficient" if traj.won else "failure"
        turn = traj.turns[pivot]
        if turn.action is None:
            cause = f"Attempt {pivot} gave no usable answer ({turn.parse_error})."
        else:
            cause = f"Attempt {pivot} answered {turn.action!r}, which is wrong."
        if self.reveal_answer:
            fix = f"The correct answer is {reference}."
        else:
            fix = "Re-derive the answer step by step and check it against every condition of the problem."
            given, gold = _number(turn.action), _number(reference)
            if given is not None and gold is not None and given != gold:
                fix += f" The correct value is {'larger' if gold > given else 'smaller'} than {turn.action.strip()}."
        return Reflection(outcome, pivot, summary=summary, root_cause=cause, suggestion=fix, pivot_rule=self.math_pivot)

    # ------------------------------------------------------------------ expert plans
    def _plans(self, requests: Sequence[ReflectionRequest]) -> dict[tuple[str, str], list[str] | None]:
        """The expert plan of every distinct task among ``requests``, each on one of its requests' idle envs."""
        first: dict[tuple[str, str], ReflectionRequest] = {}
        for req in requests:
            first.setdefault(_task_key(req), req)
        with EnvOps(self.workers) as ops:  # an env held here runs in a thread; one held elsewhere, where it lives
            plans = ops.gather(
                [
                    ops.submit(expert_plan, req.env, task) if req.env is not None else req.call(expert_plan, task)
                    for (_, task), req in first.items()
                ]
            )
        return dict(zip(first, plans, strict=True))

    def _plan(self, traj: Trajectory, plan: list[str] | None) -> Reflection:
        if not plan:
            return Reflection(None, None, error="no_plan")
        done, pivot = 0, None
        for i, turn in enumerate(traj.turns):
            if turn.action is None or done >= len(plan) or not _same(turn.action, plan[done]):
                pivot = i
                break
            done += 1
        summary = f"The agent took {traj.num_turns} step(s); the expert plan takes {len(plan)}."
        if traj.won:
            if pivot is None or traj.num_turns <= len(plan):
                return Reflection("success", None, summary=summary)
            outcome = "success_but_inefficient"
        else:
            outcome = "failure"
        if pivot is None:  # followed the plan throughout and still did not win: nothing to correct
            return Reflection(outcome, None, summary=summary, error="no_deviation")
        turn = traj.turns[pivot]
        did = f"gave no usable action ({turn.parse_error})" if turn.action is None else f"did {turn.action!r}"
        cause = f"At step {pivot} the agent {did}, which leaves the plan that solves the task."
        ahead = plan[done:] if self.plan == "rest" else plan[done : done + self.reveal_steps]
        if ahead and self.plan == "rest":
            fix = "From here, do in order: " + ", then ".join(repr(a) for a in ahead) + ". That reaches the goal."
        elif ahead:
            fix = "From here, do: " + ", then ".join(repr(a) for a in ahead) + "."
        else:
            fix = "Reconsider this step: it does not bring you closer to the goal."
        return Reflection(
            outcome, pivot, summary=summary, root_cause=cause, suggestion=fix, pivot_rule="first_deviation"
        )
