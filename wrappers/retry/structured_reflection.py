"""Structured self-reflection: the policy's own judgement, read off its log-likelihoods instead of its prose.

A small policy rarely writes a reflection that parses (SmolLM2-135M: about 1 % of free-text JSON replies), so
free-text self-reflection yields almost no retries. :class:`StructuredReflector` asks the same policy the same
two questions, but as choices it can always answer:

1. **Which step was the mistake?** The policy reads the trajectory with its final feedback and the opening
   ``The mistake was at step``; each candidate turn ``k`` is the continuation `` k:`` and the pivot is the one
   it finds most likely (``pivot="judged"``, the default). Only the step number is scored, not the action
   after it: scoring ``k: <action>`` would mostly measure how easy that action's text is to copy (its length,
   its words), not which step the model blames. ``pivot="least_likely"`` needs no extra forward pass: the
   turn whose recorded reply had the lowest mean log-prob when the policy played it, the choice it was least
   sure of (a sampled slip, at temperature 1).
2. **What to do instead?** Where the pivot turn lists admissible actions, the opening is completed by each
   admissible action other than the one taken (``... Instead, it should have done "<action>".``), scored as
   constrained mode scores actions (mean log-prob by default), and the best becomes the suggestion. So
   every such reflection parses by construction: a valid pivot and an admissible, different suggestion.
   Where the turn lists none (math), a short free generation after the same opening is the suggestion; it
   can be empty (``no_guidance``), and ``free_tokens=0`` turns it off (``no_admissible``). A turn whose only
   admissible action is the one taken offers no alternative and is never the pivot (``no_alternative`` when
   no turn does).

Turns that list actions are chosen greedily (``temperature=0``, the default) or sampled at ``temperature``
with a generator seeded by ``seed``, so reflections are reproducible. A trajectory that won gets ``success``
(no retry): the env's verdict is in the prompt, and this reflector does not judge efficiency. The guidance is
worded as the oracle's (``At step k the agent did ...``, ``From here, do: ...``), and the reflection's text is
the whole statement the scores chose, which the auxiliary reflection sample teaches.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Literal

import numpy as np

from wrappers.data.trajectory import Trajectory, Turn
from wrappers.policy import Policy, SamplingParams, describe
from wrappers.prompts import template_for
from wrappers.retry.reflection import Reflection, ReflectionRequest, format_trajectory

__all__ = ["PIVOT_RULES", "StructuredReflector"]

logger = logging.getLogger(__name__)

#: How the pivot is chosen (see the module docstring).
PIVOT_RULES = ("judged", "least_likely")

_SLOT = re.compile(r"<[^<>\s][^<>]*>")  # a template action such as search[<query>]: only free text fills it
#: Why the root cause names the pivot, per pivot rule.
_BLAME = {
    "judged": "which the policy judged to be the mistake",
    "least_likely": "the choice the policy was least sure of",
}
_OPENING = "The mistake was at step"
_QUESTION = (
    "The attempt did not succeed. Which step was the mistake, and what should the agent have done instead at that step?"
)


def _did(turn: Turn) -> str:
    return "(an unusable reply)" if turn.action is None else turn.action


def _alternatives(turn: Turn) -> list[str] | None:
    """The admissible actions at ``turn`` other than the one taken (``None``: the env listed none to choose
    from, or only templates with a slot)."""
    listed = [a for a in (turn.admissible or []) if isinstance(a, str) and not _SLOT.search(a)]
    if not listed:
        return None
    taken = " ".join((turn.action or "").lower().split())
    return list(dict.fromkeys(a for a in listed if " ".join(a.lower().split()) != taken))


class StructuredReflector:
    """Self-reflection as scored choices (module docstring): always a pivot and an admissible suggestion where
    the env lists actions.

    Args:
        policy: the policy that reflects (the trained one, for self-reflection); it must implement
            :meth:`wrappers.Policy.score`.
        pivot: ``"judged"`` (the policy scores ``The mistake was at step k:``) or ``"least_likely"`` (the turn
            it played with the lowest mean log-prob).
        score: how a suggested action's token log-probs combine: ``"mean"`` (as constrained mode, so long
            actions are not penalised) or ``"sum"``.
        temperature: ``0`` picks the most likely pivot and suggestion; above it, they are sampled from the
            softmax of the scores over this temperature.
        seed: seeds that sampling (and the free suggestions' generation).
        free_tokens: new tokens of a free suggestion where the pivot turn lists no admissible action; ``0``
            gives those reflections the error ``no_admissible`` instead.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        pivot: Literal["judged", "least_likely"] = "judged",
        score: Literal["mean", "sum"] = "mean",
        temperature: float = 0.0,
        seed: int | None = 0,
        free_tokens: int = 48,
    ):
        if not callable(getattr(policy, "score", None)):
            raise TypeError(f"structured reflection scores choices with Policy.score; {describe(policy)} has none")
        if pivot not in PIVOT_RULES:
            raise ValueError(f"pivot must be one of {PIVOT_RULES}, got {pivot!r}")
        if score not in ("mean", "sum"):
            raise ValueError(f"score must be 'mean' or 'sum', got {score!r}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 picks the most likely), got {temperature}")
        if free_tokens < 0:
            raise ValueError(f"free_tokens must be >= 0 (0: no free suggestions), got {free_tokens}")
        self.policy, self.pivot_rule, self.score = policy, pivot, score
        self.temperature, self.free_tokens = temperature, free_tokens
        self.prefill = None  # the reflection text is the policy's own statement (ReflectRetry's aux sample reads it)
        self._rng = np.random.default_rng(seed)
        self._seed = seed

    # ------------------------------------------------------------------ the protocol
    def reflect(self, requests: Sequence[ReflectionRequest]) -> list[Reflection]:
        out: list[Reflection | None] = [None] * len(requests)
        asked: dict[int, tuple[list[dict[str, str]], list[int], list[int]]] = {}  # i -> messages, ids, turns
        for i, req in enumerate(requests):
            traj = req.trajectory
            if traj.won:
                out[i] = self._made(Reflection("success", None, summary=_summary(traj)), [])
                continue
            turns = [k for k, t in enumerate(traj.turns) if _alternatives(t) != []]  # [] : nothing else to do
            if not traj.turns:
                out[i] = self._made(Reflection("failure", None, error="no_turns"), [])
            elif not turns:
                out[i] = self._made(Reflection("failure", None, error="no_alternative"), [])
            elif (fitted := self._fit(traj)) is None:
                out[i] = self._made(Reflection("failure", None, error="prompt_too_long"), [])
            else:
                asked[i] = (*fitted, turns)
        pivots = self._pivots(requests, asked)
        self._suggest(requests, asked, pivots, out)
        done = [r for r in out if r is not None]
        logger.debug(
            "structured reflection: %d of %d reflections name a retry", sum(r.wants_retry for r in done), len(done)
        )
        return done

    # ------------------------------------------------------------------ the pivot
    def _pivots(self, requests, asked) -> dict[int, int]:
        if self.pivot_rule == "least_likely":
            return {
                i: min(turns, key=lambda k: _mean(requests[i].trajectory.turns[k].behavior_logprobs))
                for i, (*_, turns) in asked.items()
            }
        opening = self.policy.tokenize(_OPENING)
        pairs = [(i, k) for i, (*_, turns) in asked.items() for k in turns]
        scores = self.policy.score(
            [asked[i][1] + opening for i, _ in pairs], [self.policy.tokenize(f" {k}:") for _, k in pairs]
        )
        by_request: dict[int, list[tuple[int, float]]] = {}
        for (i, k), lp in zip(pairs, scores, strict=True):
            by_request.setdefault(i, []).append((k, float(sum(lp))))  # the step's own tokens: their joint prob
        return {i: self._pick(cands) for i, cands in by_request.items()}

    # ------------------------------------------------------------------ the suggestion
    def _suggest(self, requests, asked, pivots, out) -> None:
        chosen, free = [], []
        for i, k in pivots.items():
            turn = requests[i].trajectory.turns[k]
            lead = f'{_OPENING} {k}: the agent did "{_did(turn)}". Instead, it should have done'
            alternatives = _alternatives(turn)
            if alternatives is not None:
                chosen.append((i, k, lead, alternatives))
            elif self.free_tokens:
                free.append((i, k, lead))
            else:
                out[i] = self._made(Reflection("failure", None, error="no_admissible"), asked[i][0])
        if chosen:
            self._choose_actions(requests, asked, chosen, out)
        if free:
            self._generate(requests, asked, free, out)

    def _choose_actions(self, requests, asked, chosen, out) -> None:
        prompts, conts, owners = [], [], []
        for n, (i, _, lead, alternatives) in enumerate(chosen):
            head = asked[i][1] + self.policy.tokenize(f'{lead} "')
            for a in alternatives:
                prompts.append(head)
                conts.append(self.policy.tokenize(f'{a}".'))
                owners.append(n)
        scores = self.policy.score(prompts, conts)
        per: list[list[tuple[int, float]]] = [[] for _ in chosen]
        for n, lp in zip(owners, scores, strict=True):
            values = list(lp)
            value = sum(values) / max(len(values), 1) if self.score == "mean" else sum(values)
            per[n].append((len(per[n]), float(value)))
        for (i, k, lead, alternatives), cands in zip(chosen, per, strict=True):
            best = alternatives[self._pick(cands)]
            statement, fix = f'{lead} "{best}".', f"From here, do: {best!r}."
            out[i] = self._finish(requests[i].trajectory, k, statement, fix, asked[i][0])

    def _generate(self, requests, asked, free, out) -> None:
        params = SamplingParams(
            temperature=self.temperature, max_new_tokens=self.free_tokens, stop=("\n",), seed=self._seed
        )
        prompts = [asked[i][1] + self.policy.tokenize(lead) for i, _, lead in free]
        for (i, k, lead), gen in zip(free, self.policy.generate(prompts, params), strict=True):
            said = " ".join(gen.text.split()).strip()
            fix = f"Instead, it should have {said}"
            refl = self._finish(requests[i].trajectory, k, f"{lead} {said}", fix, asked[i][0])
            if not said:
                refl.error, refl.pivot, refl.suggestion = "no_guidance", None, ""
            out[i] = refl

    # ------------------------------------------------------------------ helpers
    def _pick(self, cands: list[tuple[int, float]]) -> int:
        """The candidate with the best score (ties: the earliest), or one sampled at the temperature."""
        values = np.array([v for _, v in cands], dtype=np.float64)
        if self.temperature == 0:
            return cands[int(np.argmax(values))][0]
        p = np.exp((values - values.max()) / self.temperature)
        return cands[int(self._rng.choice(len(cands), p=p / p.sum()))][0]

    def _finish(self, traj: Trajectory, k: int, statement: str, fix: str, messages) -> Reflection:
        turn = traj.turns[k]
        did = f"gave no usable action ({turn.parse_error})" if turn.action is None else f"did {turn.action!r}"
        refl = Reflection(
            "failure",
            k,
            summary=_summary(traj),
            root_cause=f"At step {k} the agent {did}, {_BLAME[self.pivot_rule]}.",
            suggestion=fix,
            text=statement,
            pivot_rule=self.pivot_rule,
        )
        refl = self._made(refl, messages)
        refl.token_ids = [*self.policy.tokenize(statement), self.policy.eos_token_ids[0]]
        return refl

    def _made(self, refl: Reflection, messages: list[dict[str, str]]) -> Reflection:
        refl.source, refl.prompt = f"{describe(self.policy)} (structured)", list(messages)
        return refl

    def _fit(self, traj: Trajectory) -> tuple[list[dict[str, str]], list[int]] | None:
        """The prompt and its ids, with step texts shortened until the longest choice still fits the context."""
        room = 64 + max(self.free_tokens, max((len(a) for t in traj.turns for a in (t.admissible or [])), default=0))
        for max_chars in (600, 200, 60):
            messages = structured_messages(traj, max_chars=max_chars)
            ids = self.policy.tokenize(self.policy.render(messages, add_generation_prompt=True))
            if len(ids) + room <= self.policy.max_context:
                return messages, ids
        return None


def structured_messages(traj: Trajectory, *, max_chars: int = 600) -> list[dict[str, str]]:
    """The structured reflection prompt: the env family's rules, the numbered trajectory with its final feedback,
    and the question the scored openings answer."""
    template = template_for(traj.env_id)
    system = (
        "You review an agent's attempt at a task and find its mistake so that a retry can do better.\n\n"
        f"The agent's setting: {template.rules}\n{template.grammar}"
    )
    user = f"{format_trajectory(traj, max_chars=max_chars)}\n\n{_QUESTION}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _summary(traj: Trajectory) -> str:
    verdict = "won" if traj.won else f"ended ({traj.stop_reason}) without success"
    return f"The agent took {traj.num_turns} step(s) and {verdict}."


def _mean(values: Sequence[float] | None) -> float:
    return sum(values) / len(values) if values else 0.0
