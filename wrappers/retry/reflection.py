"""Reflections: the structured diagnosis of a trajectory (R³L, arXiv 2601.03715), how to ask for one, how to parse it.

A reflector looks at a finished trajectory and returns a :class:`Reflection`: a summary, the root cause,
the outcome (``success``, ``success_but_inefficient`` or ``failure``), a suggestion, and the pivot — the
0-based agent turn where the problem first appeared, from which a retry restarts.

Parsing is robust and never raises on model output: JSON may be fenced or surrounded by text,
the pivot may be written as a string (``"3"``) or a float (``3.0``), optional fields may be missing. Every
failure has a short reason key (see :data:`FAILURE_REASONS`) that the reflect-retry statistics count.

The pivot rule, documented once: a pivot ``p`` with ``0 <= p < num_turns`` is used as is; ``p >= num_turns``
is **clamped** to the last turn (models often count the final feedback as a step; the note
``pivot_clamped`` is recorded, the reflection stays valid); ``p < 0`` is **rejected** (``pivot_negative``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

from wrappers.data.trajectory import Trajectory
from wrappers.policy import Policy, SamplingParams, describe
from wrappers.prompts import template_for

__all__ = [
    "FAILURE_REASONS",
    "OUTCOMES",
    "PolicyReflector",
    "Reflection",
    "ReflectionRequest",
    "Reflector",
    "format_trajectory",
    "parse_reflection",
    "reflection_messages",
]

OUTCOMES = ("success", "success_but_inefficient", "failure")

#: Why a reflection could not be used (keys counted in the statistics).
FAILURE_REASONS = {
    "no_json": "no JSON object in the reply",
    "invalid_json": "a JSON-looking object that does not decode",
    "bad_outcome": "trajectory_outcome missing or not one of " + ", ".join(OUTCOMES),
    "missing_pivot": "retry_from_step missing although the outcome is not success",
    "bad_pivot": "retry_from_step is not an integer",
    "pivot_negative": "retry_from_step is negative",
    "no_guidance": "neither root_cause_analysis nor improvement_suggestion has text to guide a retry",
    "prompt_too_long": "the trajectory does not fit the reflector's context even with shortened steps",
    "no_plan": "the oracle has no expert knowledge for this env or task",
    "no_turns": "the trajectory has no turns to restart from",
    "no_deviation": "the oracle found no step that left the expert plan (the episode ran out of turns)",
    "no_admissible": "the pivot turn lists no admissible actions to choose a suggestion from, and free suggestions "
    "are off (structured reflection)",
    "no_alternative": "no turn offers an admissible action other than the one taken (structured reflection)",
}

_FENCE = re.compile(r"```[\w-]*")
_INT = re.compile(r"[+-]?\d+")
_PLACEHOLDER = re.compile(r"<\w+>")


@dataclass
class Reflection:
    """One diagnosis of one trajectory.

    Attributes:
        outcome: one of :data:`OUTCOMES`, or ``None`` when unparseable.
        pivot: the 0-based turn a retry restarts from (``None`` for a success or a failed parse).
        summary, root_cause, suggestion: the free-text fields (empty when missing).
        error: a :data:`FAILURE_REASONS` key when the reflection is unusable, else ``None``.
        notes: non-fatal repairs made while parsing (``pivot_clamped``).
        text: the reflector's raw reply.
        source: who reflected (policy name or ``oracle``).
        prompt: the chat messages the reflector was given (empty for an oracle that reads the env instead).
        token_ids, logprobs: the ids a model reflector generated and their log-probs (after any prefill, so they
            are exactly ``text`` only without one).
        pivot_rule: the rule that chose ``pivot`` when a reflector applied one (the oracle's
            ``first_deviation``, ``last_wrong``, ``first_wrong``); ``None``: the reflector's own judgement.
    """

    outcome: str | None
    pivot: int | None
    summary: str = ""
    root_cause: str = ""
    suggestion: str = ""
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    text: str = ""
    source: str = ""
    prompt: list[dict[str, str]] = field(default_factory=list)
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    pivot_rule: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def wants_retry(self) -> bool:
        """Usable, not a success, and with a pivot: the wrapper retries from it."""
        return self.ok and self.outcome != "success" and self.pivot is not None

    def guidance(self) -> str:
        """The text put into the retry's generation context (never into its training sequence)."""
        parts = ["Feedback on an earlier attempt at this task, which went wrong from this step on."]
        if self.root_cause:
            parts.append(f"What went wrong: {self.root_cause}")
        if self.suggestion:
            parts.append(f"What to do instead: {self.suggestion}")
        return "\n".join(parts)

    def as_json(self) -> str:
        """The diagnosis in the reflection schema (the target of the auxiliary reflection sample)."""
        return json.dumps(
            {
                "trajectory_summary": self.summary,
                "root_cause_analysis": self.root_cause,
                "trajectory_outcome": self.outcome,
                "improvement_suggestion": self.suggestion,
                "retry_from_step": self.pivot,
            },
            ensure_ascii=False,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReflectionRequest:
    """What a reflector gets: the finished trajectory and an idle env instance of the same id and kwargs
    (an oracle may reset and step it to consult privileged knowledge; a model reflector ignores it).

    Where the envs live in other processes (a remote :class:`wrappers.collectors.protocol.Collector`), ``env`` is
    ``None``
    and ``call(fn, *args)`` runs ``fn(env, *args)`` on that idle env where it lives, returning a
    :class:`concurrent.futures.Future` (``fn`` must be importable by name, its arguments and result plain data).
    """

    trajectory: Trajectory
    env: gym.Env | None = None
    call: Callable[..., Future[Any]] | None = None


@runtime_checkable
class Reflector(Protocol):
    """Diagnoses finished trajectories, batched: one :class:`Reflection` per request, in order. Must not raise
    on bad model output (return a Reflection with ``error`` set instead)."""

    def reflect(self, requests: Sequence[ReflectionRequest]) -> list[Reflection]: ...


# ---------------------------------------------------------------------------------------------- parsing
def _find_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The first JSON object in ``text`` (fences and surrounding prose ignored), or a failure reason."""
    body = _FENCE.sub("", text)
    decoder = json.JSONDecoder()
    saw_brace = False
    for match in re.finditer(r"\{", body):
        saw_brace = True
        try:
            value, _ = decoder.raw_decode(body, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value, None
    return None, "invalid_json" if saw_brace else "no_json"


def _text(value: Any) -> str:
    """A field as text; ``None`` and a copied schema placeholder (``"<text>"``) count as missing."""
    if value is None:
        return ""
    text = value.strip() if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return "" if _PLACEHOLDER.fullmatch(text) else text


def _as_int(value: Any) -> int | None:
    """An integer pivot from an int, an integral float, or a string holding one integer (``"3"``, ``"step 3"``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        found = _INT.findall(value)
        if len(found) == 1:
            return int(found[0])
    return None


def parse_reflection(text: str, num_turns: int) -> Reflection:
    """Parse a reflector's reply for a trajectory of ``num_turns`` turns; never raises.

    Pivot rule: ``p >= num_turns`` is clamped to ``num_turns - 1`` (note ``pivot_clamped``); ``p < 0`` is
    rejected (``pivot_negative``). A ``success`` outcome needs no pivot (any given one is dropped).
    """
    data, error = _find_object(text)
    if data is None:
        return Reflection(None, None, text=text, error=error)
    outcome = _text(data.get("trajectory_outcome")).lower().replace(" ", "_").replace("-", "_")
    refl = Reflection(
        outcome=outcome if outcome in OUTCOMES else None,
        pivot=None,
        summary=_text(data.get("trajectory_summary")),
        root_cause=_text(data.get("root_cause_analysis")),
        suggestion=_text(data.get("improvement_suggestion")),
        text=text,
    )
    if refl.outcome is None:
        refl.error = "bad_outcome"
        return refl
    if refl.outcome == "success":
        return refl
    raw = data.get("retry_from_step")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        refl.error = "missing_pivot"
        return refl
    pivot = _as_int(raw)
    if pivot is None:
        refl.error = "bad_pivot"
    elif pivot < 0:
        refl.error = "pivot_negative"
    elif not (refl.root_cause or refl.suggestion):
        refl.error = "no_guidance"
    elif num_turns < 1:
        refl.error = "no_turns"
    else:
        if pivot >= num_turns:
            pivot = max(num_turns - 1, 0)
            refl.notes.append("pivot_clamped")
        refl.pivot = pivot
    return refl


# ---------------------------------------------------------------------------------------------- prompting
_SCHEMA = """Fields:
- trajectory_summary: what the agent did, in one or two sentences.
- root_cause_analysis: why it did not succeed (or was inefficient); empty if it succeeded efficiently.
- trajectory_outcome: "success", "success_but_inefficient" or "failure" (judge by the final feedback).
- improvement_suggestion: what the agent should do differently, concretely.
- retry_from_step: the step number (0 to LAST) where the problem first appeared.

Answer with one JSON object with exactly these fields and nothing else:
{"trajectory_summary": "<text>", "root_cause_analysis": "<text>", "trajectory_outcome": "<outcome>", \
"improvement_suggestion": "<text>", "retry_from_step": <number>}"""


def format_trajectory(traj: Trajectory, *, max_chars: int = 600) -> str:
    """The trajectory as numbered steps (observation, reply, env answer) plus the final feedback."""
    lines = [f"Task: {traj.task}"]
    for i, turn in enumerate(traj.turns):
        said = turn.action if turn.action is not None else f"(unusable reply: {turn.parse_error})"
        lines.append(
            f"\nStep {i}:\nObservation: {turn.observation[:max_chars]}\nAction: {said[:max_chars]}\n"
            f"Result: {turn.outcome[:max_chars]}"
        )
    verdict = "succeeded" if traj.won else "did not succeed"
    lines.append(
        f"\nFinal feedback: the episode ended ({traj.stop_reason}) after {traj.num_turns} steps; the agent "
        f"{verdict}, with total reward {traj.reward:g} (maximum 1) and score {traj.score:g}."
    )
    return "\n".join(lines)


def reflection_messages(traj: Trajectory, *, max_chars: int = 600) -> list[dict[str, str]]:
    """The reflection prompt: the env family's own rules (never another env's name), the trajectory with its
    final feedback, and the JSON schema."""
    template = template_for(traj.env_id)
    system = (
        "You review an agent's attempt at a task and diagnose it so that a retry can do better.\n\n"
        f"The agent's setting: {template.rules}\n{template.grammar}"
    )
    last = max(traj.num_turns - 1, 0)
    user = f"{format_trajectory(traj, max_chars=max_chars)}\n\n{_SCHEMA.replace('LAST', str(last))}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class PolicyReflector:
    """A model reflecting on trajectories: the policy itself (R³L's self-reflection) or another model.

    Args:
        policy: any :class:`wrappers.Policy`; pass the trained policy for self-reflection.
        sampling: how reflections are sampled (default: temperature 1.0, 512 new tokens, the paper's settings).
        prefill: text that starts the reflector's answer (e.g. ``'{"trajectory_summary": "'``), so small models
            begin with the JSON object; the parsed text is ``prefill`` + the generation. ``None``: no prefill.
    """

    def __init__(self, policy: Policy, sampling: SamplingParams | None = None, *, prefill: str | None = None):
        self.policy = policy
        self.sampling = sampling or SamplingParams(temperature=1.0, max_new_tokens=512)
        self.prefill = prefill or None

    def reflect(self, requests: Sequence[ReflectionRequest]) -> list[Reflection]:
        out: list[Reflection | None] = [None] * len(requests)
        batch: list[tuple[int, list[dict[str, str]], list[int]]] = []
        for i, req in enumerate(requests):
            fitted = self._fit(req.trajectory)
            if fitted is None:  # even with shortened steps the prompt leaves no room for an answer
                out[i] = Reflection(None, None, error="prompt_too_long", source=describe(self.policy))
            else:
                batch.append((i, *fitted))
        if batch:
            generations = self.policy.generate([ids for _, _, ids in batch], self.sampling)
            for (i, messages, _), gen in zip(batch, generations, strict=True):
                refl = parse_reflection((self.prefill or "") + gen.text, requests[i].trajectory.num_turns)
                refl.source, refl.prompt = describe(self.policy), messages
                refl.token_ids, refl.logprobs = list(gen.token_ids), list(gen.logprobs)
                out[i] = refl
        return [r for r in out if r is not None]

    def _fit(self, traj: Trajectory) -> tuple[list[dict[str, str]], list[int]] | None:
        """The reflection prompt and its ids, with step texts shortened until it fits the context."""
        for max_chars in (600, 200, 60):
            messages = reflection_messages(traj, max_chars=max_chars)
            ids = self.policy.tokenize(self.policy.render(messages, add_generation_prompt=True))
            if self.prefill:
                ids += self.policy.tokenize(self.prefill)
            if len(ids) + self.sampling.max_new_tokens <= self.policy.max_context:
                return messages, ids
        return None
