"""The data model of agent experience: ``Turn``, ``Trajectory``, ``TrajectoryGroup`` and auxiliary ``Sample``.

A trajectory keeps both views a learner may want: the turns as the env saw them (observation, action,
reward, info) and the exact token sequence to train on, with per-token arrays aligned to ``token_ids``:

- ``agent_mask``: 1 on the tokens the policy chose (sampled, or the admissible action it picked by
  log-likelihood), 0 on the chat template's, the env's, and the reply tokens the rollout wrote around the policy's
  choice (a forced ``<action>`` opening, an appended closer, a template's text around a placeholder, an appended
  end-of-turn token; see ``Turn.sampled``). Never changed after the rollout.
- ``loss_mask``: 1 on the tokens a learner trains: ``agent_mask``, minus what the group builder chose not to
  train (R³L's pivotal credit zeroes the turns before a retry's pivot, in the retry and its base).
- ``behavior_logprobs``: each agent token's log-prob under the policy that generated it, in the context it was
  generated in (0.0 outside the replies). Each turn says which context that was (``Turn.guided``): this very
  sequence (so they are the behaviour policy's log-probs for it), or, for a retry's turns from its pivot on, the
  same sequence with the retry's guidance (``Trajectory.guidance``, the one place it is kept; never in the tokens)
  inserted before the pivot's user message. On the reply tokens the rollout wrote
  (``agent_mask`` 0) they hold the policy's log-prob of that token as well, which nothing may use: no loss, ratio
  or KL term covers a token outside ``agent_mask``. :meth:`Trajectory.guided_mask` gives the context per token,
  and :meth:`Trajectory.sequences` gives every training sequence with all of these aligned.

A reply that hit the generation cap (``max_new_tokens``) has ``Turn.finish_reason == "length"``
(:attr:`Turn.reply_cut`); :meth:`Trajectory.cut_reply_masks` marks their tokens per training sequence, so a
learner can leave cut replies out of the loss (TRL's ``mask_truncated_completions``). ``Turn.truncated`` is
another thing: the env's time limit.

The sequence ends with the agent's last reply: the env's answer to it is in ``turns[-1].outcome``, and a user
turn that would have followed (the prompt that no longer fit, when ``stop_reason == "context_length"``) is not
part of it, so a stored sequence never exceeds the policy's ``max_context``.

Every trajectory has a stable ``id``; a retry names its base by ``base_id`` (not by position, so filtering or
reordering a group keeps the link). Everything round-trips losslessly through JSON (checkpoints as base64 of
``Checkpoint.to_bytes()``); every record carries the format ``version`` (:data:`FORMAT_VERSION`) and files of
older versions are upgraded as they are read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from r3l_envs.checkpoint import Checkpoint
from r3l_envs.errors import CheckpointError
from wrappers.data.atomic import write_atomically
from wrappers.data.jsonl import MAX_DEPTH, MAX_LINE_BYTES, DataFormatError, check_record, parse_record, read_lines
from wrappers.data.safe_text import quote

__all__ = [
    "FORMAT_VERSION",
    "DataFormatError",
    "Sample",
    "TrainingSequence",
    "Trajectory",
    "TrajectoryGroup",
    "Turn",
    "load_jsonl",
    "new_id",
    "save_jsonl",
]

#: The version of the records this code writes (each record's ``version`` field). 1: the first release (no
#: version field; ``logprobs``, ``loss_mask`` overwritten by pivotal credit, ``metadata["base_index"]``).
#: 2: ``id``/``base_id``, ``agent_mask`` beside ``loss_mask``, ``behavior_logprobs`` with each turn's
#: ``logprob_context``, sequences that end with the last reply. 3: ``agent_mask`` 0 on the reply tokens the rollout
#: wrote around the policy's choice, which each turn's ``sampled`` locates (``None`` in older records: the whole
#: reply, as their masks say). 4: behaviour log-probs have one name end to end (a turn's ``logprobs`` became
#: ``behavior_logprobs``), and guidance one representation: a turn's ``guided`` flag (was ``logprob_context``) and
#: the trajectory's ``guidance`` (was ``metadata["guidance"]``). Older records are upgraded on reading.
FORMAT_VERSION = 4


def new_id(*parts: Any) -> str:
    """A trajectory id (32 hex digits): a digest of ``parts`` when they determine the trajectory (a seeded run
    gives the same ids again), a random one when they do not (any part is ``None``, or none are given)."""
    if not parts or any(p is None for p in parts):
        return uuid.uuid4().hex
    text = json.dumps(parts, ensure_ascii=True, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:32]


@dataclass
class Turn:
    """One agent turn: what it was shown, what it generated, and what the env answered.

    Attributes:
        observation: the env text the agent answered.
        prompt_text: the user message of this turn as the agent saw it (observation, admissible actions, and
            parse feedback where the previous reply was unusable).
        admissible: the admissible actions at this turn (``None`` where the env has no finite list).
        response: the model's full reply text (decoded from ``token_ids``).
        action: the action sent to the env, or ``None`` when the reply could not be parsed (then the env was
            not stepped and ``outcome`` explains the problem to the agent instead).
        parse_error: why parsing failed, or ``None``.
        outcome: the env's observation after the action, or the feedback text when the env was not stepped.
        reward, terminated, truncated, info: the env's answer (``info`` unchanged when not stepped).
        token_ids, behavior_logprobs: the generated ids and their log-probs under the policy's raw distribution
            that generated them, in the context ``guided`` says.
        guided: the turn was generated with its trajectory's ``guidance`` in the context (a retry's turns from its
            pivot on; the training sequence never holds it); ``False``: from exactly its training context (the
            trajectory's tokens before ``span``, or ``prompt_ids``).
        finish_reason: ``"stop"`` (end of turn or stop string) or ``"length"``: the reply was cut at the
            generation cap (``max_new_tokens``), whatever the rollout then wrote to close it (see :attr:`reply_cut`).
        span: ``[start, end)`` of ``token_ids`` inside the trajectory's ``token_ids`` (``None`` when the turn
            had its own prompt, see ``prompt_ids``).
        prompt_ids: the full prompt this turn saw, only when it is not a prefix of the trajectory's sequence
            (history windowing); ``None`` otherwise.
        constrained: the rollout wrote the reply around the policy's choice: an admissible action chosen by
            log-likelihood, or a placeholder the policy filled (constrained and direct modes).
        sampled: ``[start, end)`` inside ``token_ids`` of the tokens the policy chose: what it sampled into a
            placeholder (direct mode, a WebShop-style template), or the chosen admissible action's own tokens
            (constrained mode: choosing by log-likelihood is the policy's choice). The tokens before and after it
            the rollout wrote (the action tag's opening and closer, the template's text, the chat template's
            end-of-turn token): the policy did not sample them, so their ``agent_mask`` is 0. A token that holds
            characters of both counts as chosen. ``None``: every token of the reply was sampled (free text).
        checkpoint: the env state just before this turn, when the rollout was asked to keep checkpoints.
    """

    observation: str
    response: str
    action: str | None
    prompt_text: str = ""
    admissible: list[str] | None = None
    outcome: str = ""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    token_ids: list[int] = field(default_factory=list)
    behavior_logprobs: list[float] = field(default_factory=list)
    guided: bool = False
    finish_reason: str = "stop"
    parse_error: str | None = None
    span: tuple[int, int] | None = None
    prompt_ids: list[int] | None = None
    constrained: bool = False
    sampled: tuple[int, int] | None = None
    checkpoint: Checkpoint | None = None

    @property
    def reply_cut(self) -> bool:
        """The reply was cut at the generation cap (``finish_reason == "length"``); not the env's time limit
        (``truncated``)."""
        return self.finish_reason == "length"

    def sampled_mask(self) -> list[int]:
        """Per token of ``token_ids``: 1 on the tokens the policy chose, 0 on those the rollout wrote (``sampled``)."""
        if self.sampled is None:
            return [1] * len(self.token_ids)
        start, end = self.sampled
        return [int(start <= i < end) for i in range(len(self.token_ids))]

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["span"] = list(self.span) if self.span is not None else None
        data["sampled"] = list(self.sampled) if self.sampled is not None else None
        data["checkpoint"] = _encode_checkpoint(self.checkpoint)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        data = dict(data)
        data["span"] = tuple(data["span"]) if data.get("span") is not None else None
        data["sampled"] = tuple(data["sampled"]) if data.get("sampled") is not None else None
        data["checkpoint"] = _decode_checkpoint(data.get("checkpoint"))
        return cls(**data)


class TrainingSequence(NamedTuple):
    """One training sequence of a trajectory, every per-token array aligned with ``token_ids`` (see the module
    docstring for what each means)."""

    token_ids: list[int]
    agent_mask: list[int]
    loss_mask: list[int]
    behavior_logprobs: list[float]
    guided_mask: list[int]  # 1 on agent tokens whose behaviour log-probs were taken with guidance in context


@dataclass
class Trajectory:
    """One episode of one task, with its training sequence.

    Attributes:
        env_id, task_id, task: where it was played.
        id: a stable id (32 hex digits; derived from the seeds in a seeded run, random otherwise).
        kind: ``"base"`` for a plain policy rollout; the reflect-retry wrapper adds ``"retry"`` and others.
        pivot: the 0-based turn index a retry restarted from (``None`` for a base).
        base_id: the ``id`` of the trajectory a retry restarted from (``None`` for a base).
        guidance: the text a retry saw in its generation context before its pivot's user message (``None``: none;
            never in the training sequence); its turns generated under it are ``Turn.guided``.
        turns: the agent turns in order.
        messages: the chat of the training sequence (system, user, assistant, ..., ending with the last
            assistant reply; a trajectory stopped before its first reply keeps its system and first user message
            and has no tokens).
        token_ids, agent_mask, loss_mask, behavior_logprobs: the training sequence (the policy's generated ids
            plus the chat template's tokens for every other role) and its per-token arrays (module docstring).
            With a windowed history each turn had its own prompt: these hold the last turn's (its
            ``prompt_ids`` and reply); train on :meth:`sequences`, one per turn.
        reward: the episode's summed reward; won/score: the env's final verdict.
        stop_reason: ``"terminated"``, ``"truncated"`` (env time limit), ``"max_turns"`` or ``"context_length"``
            (the next prompt plus a reply would not fit the policy's context: that prompt is not stored); an
            expert demonstration whose plan ran out first: ``"plan_end"`` (:mod:`wrappers.retry.expert`).
        metadata: free-form (policy name, sampling settings, seed, template, a base's ``reflection``...).
    """

    env_id: str
    task_id: str
    task: str
    id: str = field(default_factory=new_id)
    kind: str = "base"
    pivot: int | None = None
    base_id: str | None = None
    guidance: str | None = None
    turns: list[Turn] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    agent_mask: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    behavior_logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    won: bool = False
    score: float = 0.0
    stop_reason: str = "terminated"
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_tokens(self) -> int:
        """Generated tokens over all turns (what the agent produced, not the context)."""
        return sum(len(t.token_ids) for t in self.turns)

    @property
    def num_parse_errors(self) -> int:
        return sum(t.parse_error is not None for t in self.turns)

    @property
    def windowed(self) -> bool:
        """Each turn had its own prompt (``history=k``): one training sequence per turn."""
        return any(t.prompt_ids is not None for t in self.turns)

    def guided_mask(self) -> list[int]:
        """Per token of ``token_ids``: 1 where the behaviour log-prob was taken with guidance in the context
        (the tokens of :attr:`Turn.guided` turns), 0 elsewhere; derived from the turns, never stored."""
        mask = [0] * len(self.token_ids)
        for turn in self.turns:
            if turn.guided and turn.span is not None:
                start, end = turn.span
                mask[start:end] = [1] * (end - start)
        return mask

    def sequences(self) -> list[TrainingSequence]:
        """The training sequences: one for a full-history trajectory (none if it has no tokens), or one per turn
        (its own prompt + its reply) when the history was windowed."""
        if not self.windowed:
            if not self.token_ids:
                return []
            return [
                TrainingSequence(
                    self.token_ids, self.agent_mask, self.loss_mask, self.behavior_logprobs, self.guided_mask()
                )
            ]
        out = []
        for t in self.turns:
            prompt, n = t.prompt_ids or [], len(t.token_ids)
            mask = [0] * len(prompt) + t.sampled_mask()
            guided = [0] * len(prompt) + [int(t.guided)] * n
            logprobs = [0.0] * len(prompt) + t.behavior_logprobs
            out.append(TrainingSequence([*prompt, *t.token_ids], mask, list(mask), logprobs, guided))
        return out

    def cut_reply_masks(self) -> list[list[int]]:
        """Per training sequence (aligned with :meth:`sequences`: same order, one value per token): 1 on the agent
        tokens (``agent_mask`` 1) of the turns whose reply was cut at the generation cap (:attr:`Turn.reply_cut`),
        0 elsewhere. A learner multiplies it out of ``loss_mask`` to leave cut replies out of the loss."""
        if self.windowed:  # sequence i is turn i's own prompt and reply
            return [[a * t.reply_cut for a in seq.agent_mask] for t, seq in zip(self.turns, self.sequences())]
        if not self.token_ids:
            return []
        mask = [0] * len(self.token_ids)
        for turn in self.turns:
            if turn.reply_cut and turn.span is not None:
                start, end = turn.span
                mask[start:end] = self.agent_mask[start:end]
        return [mask]

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "turns"}
        data["turns"] = [t.to_dict() for t in self.turns]
        data["num_turns"] = self.num_turns
        data["num_tokens"] = self.num_tokens
        return {"type": "trajectory", "version": FORMAT_VERSION, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """Rebuild from :meth:`to_dict` output of this or an older format version."""
        data = _upgraded("trajectory", data)
        data = {k: v for k, v in data.items() if k not in ("type", "version", "num_turns", "num_tokens")}
        data["turns"] = [Turn.from_dict(t) for t in data.get("turns", [])]
        return cls(**data)


@dataclass
class Sample:
    """An auxiliary supervised sample (e.g. R³L's ``reflection`` and ``guided_retry``): a token sequence whose
    ``loss_mask`` marks the target tokens."""

    kind: str
    token_ids: list[int]
    loss_mask: list[int]
    messages: list[dict[str, str]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "sample", "version": FORMAT_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        data = _upgraded("sample", data)  # the sample's fields are the same in every version so far
        return cls(**{k: v for k, v in data.items() if k not in ("type", "version")})


@dataclass
class TrajectoryGroup:
    """The trajectories sampled for one task (bases, retries, ...) and the auxiliary samples they yielded."""

    env_id: str
    task_id: str
    trajectories: list[Trajectory] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]

    def by_id(self) -> dict[str, Trajectory]:
        """The group's trajectories by ``id`` (a retry's base is ``group.by_id()[retry.base_id]``)."""
        return {t.id: t for t in self.trajectories}

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "group",
            "version": FORMAT_VERSION,
            "env_id": self.env_id,
            "task_id": self.task_id,
            "trajectories": [t.to_dict() for t in self.trajectories],
            "samples": [s.to_dict() for s in self.samples],
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrajectoryGroup:
        """Rebuild from :meth:`to_dict` output of this or an older format version."""
        data = _upgraded("group", data)
        return cls(
            env_id=data["env_id"],
            task_id=data["task_id"],
            trajectories=[Trajectory.from_dict(t) for t in data["trajectories"]],
            samples=[Sample.from_dict(s) for s in data["samples"]],
            metadata=data["metadata"],
        )


_TYPES: dict[str, type[Trajectory] | type[TrajectoryGroup] | type[Sample]] = {
    "trajectory": Trajectory,
    "group": TrajectoryGroup,
    "sample": Sample,
}


def _encode_checkpoint(ckpt: Checkpoint | None) -> str | None:
    return None if ckpt is None else base64.b64encode(ckpt.to_bytes()).decode("ascii")


def _decode_checkpoint(text: str | None) -> Checkpoint | None:
    if text is None:
        return None
    try:
        data = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise DataFormatError(f"a turn's checkpoint is not base64 ({exc})") from None
    return Checkpoint.from_bytes(data)


# ---------------------------------------------------------------------------------------------- old versions
def _version(data: dict[str, Any]) -> int:
    """A record's format version (1 when it has none), refusing versions newer than this code."""
    version = data.get("version", 1)
    if type(version) is not int or not 1 <= version <= FORMAT_VERSION:
        kind = data.get("type")
        shown = version if type(version) is int else quote(version)
        raise DataFormatError(
            f"{kind if kind in _TYPES else 'record'} of format version {shown}: this r3l reads versions 1 to "
            f"{FORMAT_VERSION}; a newer r3l wrote it, upgrade to read it"
        )
    return version


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, ensure_ascii=True, sort_keys=True).encode("ascii")).hexdigest()


def _group_from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A format-1 group as format 2: ids derived from the record (the same file gives the same ids), and each
    retry's ``metadata["base_index"]`` (its base's position) turned into ``base_id``."""
    digest = _digest(data)
    ids = [new_id("v1", digest, i) for i in range(len(data["trajectories"]))]
    trajectories = []
    for i, old in enumerate(data["trajectories"]):
        traj = _trajectory_from_v1(old, ids[i])
        index = old.get("metadata", {}).get("base_index")
        if isinstance(index, int) and 0 <= index < len(ids):
            traj["base_id"] = ids[index]
        trajectories.append(traj)
    samples = [{**s, "version": 3} for s in data["samples"]]
    return {**data, "version": 3, "trajectories": trajectories, "samples": samples}


def _trajectory_from_v1(data: dict[str, Any], traj_id: str) -> dict[str, Any]:
    """A format-1 trajectory as format 3 (a new dict; ``data`` is not changed).

    - ``logprobs`` becomes ``behavior_logprobs``; a retry flagged ``metadata["guided_logprobs"]`` (with a
      guidance) marks its turns from the pivot on ``logprob_context="guided"``, as formats 2 and 3 record them.
    - ``agent_mask`` is rebuilt from the turns' spans (``loss_mask`` stays: it was the training mask).
    - The sequence ends with the last reply: a trailing unanswered user turn is dropped, as format 2 does.
    - ``metadata["base_index"]`` is dropped here (:func:`_group_from_v1` turns it into ``base_id``).
    - A windowed-history trajectory keeps format 1's view of its last window (tokens and messages agree); its
      training sequences (:meth:`Trajectory.sequences`, built from the turns) are the same in both formats.
    """
    out = {k: v for k, v in data.items() if k not in ("logprobs", "type", "num_turns", "num_tokens")}
    meta = dict(data.get("metadata", {}))
    guided = bool(meta.pop("guided_logprobs", False) and meta.get("guidance")) and data.get("pivot") is not None
    meta.pop("base_index", None)
    turns = [dict(t) for t in data.get("turns", [])]
    for i, turn in enumerate(turns):
        turn["logprob_context"] = "guided" if guided and i >= data["pivot"] else "sequence"
    token_ids, loss_mask, logprobs = data["token_ids"], data["loss_mask"], data["logprobs"]
    messages = list(data.get("messages", []))
    if any(t.get("prompt_ids") is not None for t in turns):
        agent_mask = list(loss_mask)  # windowed: no pivotal credit applied, the mask was the agent mask
    else:
        for turn in turns:  # checked before the masks below are sized by them
            _check_v1_span(turn.get("span"), len(token_ids))
        end = turns[-1]["span"][1] if turns else 0
        token_ids, loss_mask, logprobs = token_ids[:end], loss_mask[:end], logprobs[:end]
        agent_mask = [0] * end
        for turn in turns:
            start, stop = turn["span"]
            agent_mask[start:stop] = [1] * (stop - start)
        if turns and messages and messages[-1].get("role") == "user":
            messages = messages[:-1]
    out.update(
        id=traj_id,
        base_id=None,
        turns=turns,
        messages=messages,
        token_ids=token_ids,
        agent_mask=agent_mask,
        loss_mask=loss_mask,
        behavior_logprobs=logprobs,
        metadata=meta,
    )
    return {"type": "trajectory", "version": 3, **out}


def _from_v2(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """A format-2 record as format 3 (a new dict): the fields are the same; its turns have no ``sampled``, which
    reads as the whole reply, as its ``agent_mask`` says (format 2 masked no reply token)."""
    if kind == "group" and isinstance(data.get("trajectories"), list) and isinstance(data.get("samples"), list):
        return {
            **data,
            "version": 3,
            "trajectories": [_as_v3(t) for t in data["trajectories"]],
            "samples": [_as_v3(s) for s in data["samples"]],
        }
    return _as_v3(data)


def _as_v3(record: Any) -> Any:
    return {**record, "version": 3} if isinstance(record, dict) else record


def _from_v3(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """A format-3 record as format 4 (a new dict): each turn's ``logprobs`` becomes ``behavior_logprobs`` and its
    ``logprob_context`` the ``guided`` flag; a trajectory's ``metadata["guidance"]`` becomes its ``guidance``. A
    sample's fields are the same. Values are moved as they are: the check that follows judges them."""
    if kind == "group" and isinstance(data.get("trajectories"), list) and isinstance(data.get("samples"), list):
        return {
            **data,
            "version": FORMAT_VERSION,
            "trajectories": [_trajectory_from_v3(t) for t in data["trajectories"]],
            "samples": [{**s, "version": FORMAT_VERSION} if isinstance(s, dict) else s for s in data["samples"]],
        }
    if kind == "trajectory":
        return _trajectory_from_v3(data)
    return {**data, "version": FORMAT_VERSION}


def _trajectory_from_v3(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    out = {**data, "version": FORMAT_VERSION}
    meta = data.get("metadata")
    if isinstance(meta, dict) and "guidance" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "guidance"}
        out["guidance"] = meta["guidance"]
    if isinstance(data.get("turns"), list):
        out["turns"] = [_turn_from_v3(t) for t in data["turns"]]
    return out


def _turn_from_v3(turn: Any) -> Any:
    if not isinstance(turn, dict):
        return turn
    out = {k: v for k, v in turn.items() if k not in ("logprobs", "logprob_context")}
    if "logprobs" in turn:
        out["behavior_logprobs"] = turn["logprobs"]
    context = turn.get("logprob_context", "sequence")
    if context not in ("sequence", "guided"):
        raise DataFormatError(f"a format-3 turn's logprob_context is {quote(context)}, not 'sequence' or 'guided'")
    out["guided"] = context == "guided"
    return out


def _check_v1_span(span: Any, n: int) -> None:
    if not (
        isinstance(span, list) and len(span) == 2 and all(type(v) is int for v in span) and 0 <= span[0] <= span[1] <= n
    ):
        raise DataFormatError(f"a format-1 turn's span is {quote(span)}, not [start, end] within its {n} token_ids")


def _upgraded(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """A record of any format version this code reads, as the current version (the same dict if it is one)."""
    version = _version(data)
    if version == FORMAT_VERSION:
        return data
    if version == 2:
        data = _from_v2(kind, data)
    elif version == 1:
        try:
            if kind == "group":
                data = _group_from_v1(data)
            elif kind == "trajectory":
                data = _trajectory_from_v1(data, new_id("v1", _digest(data)))
            else:
                data = {**data, "version": 3}  # a sample's fields are the same in every version so far
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as exc:
            if isinstance(exc, DataFormatError):
                raise
            raise DataFormatError(f"a format-1 {kind} record that cannot be upgraded ({repr(exc)[:200]})") from None
    return _from_v3(kind, data)


def _read_record(text: str, max_depth: int, checkpoints: bool) -> Trajectory | TrajectoryGroup | Sample:
    """One line's object: parsed, upgraded, checked (:func:`wrappers.data.jsonl.check_record`), then built."""
    data = parse_record(text, max_depth)
    kind = data.get("type") if isinstance(data, dict) else None
    if not isinstance(kind, str) or kind not in _TYPES:
        shown = repr(kind) if kind is None or (isinstance(kind, str) and len(kind) <= 60) else quote(kind)
        raise DataFormatError(f"unknown record type {shown}; expected one of {sorted(_TYPES)}")
    data = _upgraded(kind, data)
    check_record(data, max_depth)
    if not checkpoints:
        data = _without_checkpoints(data)
    try:
        return _TYPES[kind].from_dict(data)
    except CheckpointError as exc:
        raise DataFormatError(f"a turn's checkpoint cannot be read ({exc})") from None
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        if isinstance(exc, DataFormatError):
            raise
        raise DataFormatError(f"a {kind} record with missing or unknown fields ({repr(exc)[:200]})") from None


def _without_checkpoints(data: dict[str, Any]) -> dict[str, Any]:
    """The record with every turn's checkpoint left out (a new dict; ``data`` is not changed)."""

    def trajectory(traj: dict[str, Any]) -> dict[str, Any]:
        turns = [{**t, "checkpoint": None} if t.get("checkpoint") is not None else t for t in traj.get("turns", [])]
        return {**traj, "turns": turns} if "turns" in traj else traj

    if data.get("type") == "group" and "trajectories" in data:
        return {**data, "trajectories": [trajectory(t) for t in data["trajectories"]]}
    return trajectory(data) if data.get("type") == "trajectory" else data


# ---------------------------------------------------------------------------------------------- files
def save_jsonl(path: str | os.PathLike[str], items: Iterable[Trajectory | TrajectoryGroup | Sample]) -> int:
    """Write one JSON object per line (atomically: a temp file renamed into place). Returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> int:
        count = 0
        with open(tmp, "w", encoding="utf-8") as f:
            for item in items:
                # ensure_ascii keeps lone surrogates from the env (e.g. bad-action echoes) writable and exact
                f.write(json.dumps(item.to_dict(), ensure_ascii=True) + "\n")
                count += 1
        return count

    return write_atomically(path, write)


def load_jsonl(
    path: str | os.PathLike[str],
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_depth: int = MAX_DEPTH,
    checkpoints: bool = True,
) -> Iterator[Trajectory | TrajectoryGroup | Sample]:
    """Read what :func:`save_jsonl` wrote (this format version or an older one, upgraded), rebuilding each
    object by its ``type`` field, one line at a time. The file may come from anyone: every record is checked
    (:func:`wrappers.data.jsonl.check_record`) before an object is built from it.

    Args:
        path: the JSONL file.
        max_line_bytes: the longest line read (:data:`wrappers.data.jsonl.MAX_LINE_BYTES` by default).
        max_depth: the deepest nesting a record may have (:data:`wrappers.data.jsonl.MAX_DEPTH` by default).
        checkpoints: rebuild the turns' env checkpoints; off, every ``Turn.checkpoint`` is ``None`` and their
            bytes are never decoded (what a viewer wants).

    Raises:
        OSError: the file cannot be opened (FileNotFoundError where it does not exist).
        DataFormatError: at the first line that cannot be read, ``cannot read FILE line N: what``.
    """
    for lineno, text in read_lines(path, max_line_bytes):
        try:
            item = _read_record(text, max_depth, checkpoints)
        except DataFormatError as exc:
            raise DataFormatError(exc.reason, path=path, line=lineno) from None
        yield item
