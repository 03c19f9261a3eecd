"""Prompt templates: one per env family (math, text games, web shopping), never one per algorithm.

An env declares its family (``prompt_family`` on ``r3l_envs.TextEnv``); :func:`template_for` reads that
declaration, never the env's name. A template turns the env's text into chat messages: a system prompt with the
family's rules, the action grammar and the answer format; the first observation (with the task) as the first user
turn; every later observation (or parse feedback) as a user turn. Admissible actions, where the env has them, are
listed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym

import r3l_envs
from wrappers.parsing import AnswerFormat

__all__ = ["FAMILIES", "PromptTemplate", "family_template", "template_for"]

# Long admissible lists (ScienceWorld enumerates thousands) would swamp a small context: show a prefix.
_MAX_LISTED = 60


@dataclass(frozen=True)
class PromptTemplate:
    """How one env family is shown to the agent.

    Attributes:
        family: short name (``math``, ``textgame``, ``webshop``, ``generic``).
        rules: what the agent is doing and how the env answers.
        grammar: what an action looks like.
        answer: the answer format (tags) the parser expects.
        list_actions: show ``info["admissible_actions"]`` in each user turn.
        unusable_cost: what a reply the parser cannot use costs, told with the feedback on one (the turn limit
            that enforces it is the rollout's: :data:`wrappers.rollout.DEFAULT_MAX_TURNS`).
    """

    family: str
    rules: str
    grammar: str
    answer: AnswerFormat = field(default_factory=AnswerFormat)
    list_actions: bool = True
    unusable_cost: str = ""

    def system(self) -> str:
        return f"{self.rules}\n\n{self.grammar}\n\n{self.answer.instructions()}"

    def first_user(self, task: str, observation: str, admissible: Sequence[str] | None) -> str:
        """The first user turn: the task (unless the observation already states it) and the observation."""
        head = f"Task: {task}\n\n" if task and task not in observation else ""
        return head + self._observation(observation, admissible)

    def resume(self, task: str, user_text: str, omitted: int) -> str:
        """The first user turn of a windowed context that starts at a later turn (``user_text`` as shown then)."""
        return f"Task: {task}\n\n({omitted} earlier turns omitted.)\n\n{user_text}"

    def next_user(self, observation: str, admissible: Sequence[str] | None, feedback: str | None = None) -> str:
        """A later user turn: the env's observation, or the parse feedback plus the unchanged observation."""
        if feedback is not None:
            return f"{feedback}\n\n{self._observation(observation, admissible)}"
        return self._observation(observation, admissible)

    def feedback(self, error: str) -> str:
        """What the agent is told when its reply could not be used (the env was not stepped)."""
        cost = f" {self.unusable_cost}" if self.unusable_cost else ""
        return f"Your reply could not be used: {error}.{cost} {self.answer.instructions()}"

    def _observation(self, observation: str, admissible: Sequence[str] | None) -> str:
        if not self.list_actions or not admissible:
            return observation
        listed = list(admissible[:_MAX_LISTED])
        more = f"\n(and {len(admissible) - len(listed)} more)" if len(admissible) > len(listed) else ""
        return observation + "\n\nAdmissible actions:\n" + "\n".join(f"- {a}" for a in listed) + more


FAMILIES: dict[str, PromptTemplate] = {
    "math": PromptTemplate(
        family="math",
        rules=(
            "You solve math problems. You may answer several times: after each answer you are told whether it "
            "is correct. Every reply counts as an attempt, also one without a usable action."
        ),
        # The env's own hint asks for \boxed{} (its format for users who parse replies themselves); the agent
        # answers in the action tag, so the template says which one wins.
        grammar=(
            "The action is your final answer only (a number or expression), e.g. <action>42</action>. Put it "
            "inside the action tags instead of \\boxed{} or any other format the problem mentions."
        ),
        unusable_cost="It used up one of your attempts.",
    ),
    "textgame": PromptTemplate(
        family="textgame",
        rules=(
            "You are an agent in a text-based household or adventure game. Each turn you see what happens "
            "and choose one action to reach the goal in as few steps as possible."
        ),
        grammar=(
            "An action is a short imperative command, e.g. 'go to countertop 1', 'take apple 1 from table 1', "
            "'open fridge 1', 'look'. Prefer one of the admissible actions when they are listed."
        ),
    ),
    "webshop": PromptTemplate(
        family="webshop",
        rules=(
            "You are shopping on a website for a product that matches an instruction (attributes, options, "
            "price). Each turn you see the page and choose one action; buying ends the episode."
        ),
        grammar=(
            "Actions are search[keywords] on the search page, and click[button] for a button or link shown "
            "on the page, e.g. click[Buy Now], click[< Prev], click[B078GWRC1J]."
        ),
    ),
    "generic": PromptTemplate(
        family="generic",
        rules="You are an agent in a text environment. Each turn you see an observation and choose one action.",
        grammar="An action is a short text command; prefer one of the admissible actions when they are listed.",
    ),
}


def template_for(env: gym.Env | str | None, answer: AnswerFormat | None = None) -> PromptTemplate:
    """The template of the prompt family an env declares (``r3l_envs.env_info``), from the env or its registered
    id (e.g. ``r3l/ALFWorld-v0``); ``generic`` for an env that declares none and for an id that is not registered
    (e.g. a trajectory's ``env_id`` from an env made without ``gym.make``).

    Raises:
        ValueError: the env declares a family that is not in :data:`FAMILIES`.
    """
    if env is None or (isinstance(env, str) and env not in gym.registry):
        family = "generic"
    else:
        family = r3l_envs.env_info(env).prompt_family
    template = family_template(family, declared_by=env)
    return template if answer is None else replace(template, answer=answer)


def family_template(family: str, *, declared_by: Any = None) -> PromptTemplate:
    """The template of prompt family ``family`` (a key of :data:`FAMILIES`).

    Raises:
        ValueError: ``family`` is not in :data:`FAMILIES` (``declared_by``, the env that declares it, is named).
    """
    if family not in FAMILIES:
        who = "an env" if declared_by is None else repr(declared_by)
        raise ValueError(
            f"{who} declares prompt family {family!r}, which wrappers.prompts.FAMILIES does not have "
            f"({', '.join(sorted(FAMILIES))}): declare one of those, or add a PromptTemplate for it to FAMILIES"
        )
    return FAMILIES[family]
