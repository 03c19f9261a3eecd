"""The data model of agent experience: ``Turn``, ``Trajectory``, ``TrajectoryGroup`` and auxiliary ``Sample``.

A trajectory keeps both views a learner may want: the turns as the env saw them (observation, action,
reward, info) and the exact token sequence the model was trained on (``token_ids`` with a per-token
``loss_mask`` that is 1 only on tokens the agent generated, and the generation ``logprobs`` aligned with it).
Everything round-trips losslessly through JSON (checkpoints as base64 of ``Checkpoint.to_bytes()``).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from r3l_envs.checkpoint import Checkpoint

__all__ = [
    "Sample",
    "Trajectory",
    "TrajectoryGroup",
    "Turn",
    "load_jsonl",
    "save_jsonl",
    "to_dataset",
]


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
        token_ids, logprobs: the generated ids and their log-probs under the policy's raw distribution.
        finish_reason: ``"stop"`` (end of turn or stop string) or ``"length"``.
        span: ``[start, end)`` of ``token_ids`` inside the trajectory's ``token_ids`` (``None`` when the turn
            had its own prompt, see ``prompt_ids``).
        prompt_ids: the full prompt this turn saw, only when it is not a prefix of the trajectory's sequence
            (history windowing); ``None`` otherwise.
        constrained: the action was chosen among the admissible actions by log-likelihood.
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
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"
    parse_error: str | None = None
    span: tuple[int, int] | None = None
    prompt_ids: list[int] | None = None
    constrained: bool = False
    checkpoint: Checkpoint | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["span"] = list(self.span) if self.span is not None else None
        data["checkpoint"] = _encode_checkpoint(self.checkpoint)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Turn:
        data = dict(data)
        data["span"] = tuple(data["span"]) if data.get("span") is not None else None
        data["checkpoint"] = _decode_checkpoint(data.get("checkpoint"))
        return cls(**data)


@dataclass
class Trajectory:
    """One episode of one task, with its training sequence.

    Attributes:
        env_id, task_id, task: where it was played.
        kind: ``"base"`` for a plain policy rollout; the reflect-retry wrapper adds ``"retry"`` and others.
        pivot: the 0-based turn index a retry restarted from (``None`` for a base).
        turns: the agent turns in order.
        messages: the chat as rendered for the model (system, user, assistant, ...) in the final context.
        token_ids, loss_mask, logprobs: the training sequence (the policy's generated ids plus the chat
            template's tokens for every other role), 1/0 per token, and generation log-probs (0.0 where the
            mask is 0). For windowed histories this holds only the last context; use :meth:`sequences`.
        reward: the episode's summed reward; won/score: the env's final verdict.
        stop_reason: ``"terminated"``, ``"truncated"`` (env time limit), ``"max_turns"`` or ``"context_length"``.
        metadata: free-form (policy name, sampling settings, seed, template...).
    """

    env_id: str
    task_id: str
    task: str
    kind: str = "base"
    pivot: int | None = None
    turns: list[Turn] = field(default_factory=list)
    messages: list[dict[str, str]] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
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

    def sequences(self) -> list[tuple[list[int], list[int], list[float]]]:
        """Training sequences ``(token_ids, loss_mask, logprobs)``: one for a full-history trajectory, or one
        per turn (its own prompt + its completion) when the history was windowed."""
        if not any(t.prompt_ids is not None for t in self.turns):
            return [(self.token_ids, self.loss_mask, self.logprobs)]
        out = []
        for t in self.turns:
            prompt = t.prompt_ids or []
            ids = list(prompt) + list(t.token_ids)
            out.append((ids, [0] * len(prompt) + [1] * len(t.token_ids), [0.0] * len(prompt) + list(t.logprobs)))
        return out

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "turns"}
        data["turns"] = [t.to_dict() for t in self.turns]
        data["num_turns"] = self.num_turns
        data["num_tokens"] = self.num_tokens
        return {"type": "trajectory", **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = {k: v for k, v in data.items() if k not in ("type", "num_turns", "num_tokens")}
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
        return {"type": "sample", **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        return cls(**{k: v for k, v in data.items() if k != "type"})


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "group",
            "env_id": self.env_id,
            "task_id": self.task_id,
            "trajectories": [t.to_dict() for t in self.trajectories],
            "samples": [s.to_dict() for s in self.samples],
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrajectoryGroup:
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
    return None if text is None else Checkpoint.from_bytes(base64.b64decode(text))


def save_jsonl(path: str | os.PathLike[str], items: Iterable[Trajectory | TrajectoryGroup | Sample]) -> int:
    """Write one JSON object per line (atomically: a temp file renamed into place). Returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    count = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for item in items:
                # ensure_ascii keeps lone surrogates from the env (e.g. bad-action echoes) writable and exact
                f.write(json.dumps(item.to_dict(), ensure_ascii=True) + "\n")
                count += 1
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return count


def load_jsonl(path: str | os.PathLike[str]) -> Iterator[Trajectory | TrajectoryGroup | Sample]:
    """Read what :func:`save_jsonl` wrote, rebuilding each object by its ``type`` field."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            data = json.loads(line)
            kind = data.get("type")
            if kind not in _TYPES:
                raise ValueError(f"{path}:{lineno}: unknown record type {kind!r}; expected one of {sorted(_TYPES)}")
            yield _TYPES[kind].from_dict(data)


def to_dataset(trajectories: Iterable[Trajectory | TrajectoryGroup]) -> Any:
    """A HF ``datasets.Dataset`` with one row per trajectory (groups are flattened, ``group`` indexes them).

    Columns: env_id, task_id, kind, pivot, group, reward, won, score, num_turns, num_tokens, stop_reason,
    token_ids, loss_mask, logprobs, messages (JSON text), turns (JSON text).
    """
    try:
        import datasets
    except ImportError as exc:
        raise ImportError("to_dataset needs the `datasets` package: pip install datasets") from exc
    rows: dict[str, list[Any]] = {}
    for g, item in enumerate(trajectories):
        trajs = item.trajectories if isinstance(item, TrajectoryGroup) else [item]
        for t in trajs:
            row = {
                "env_id": t.env_id,
                "task_id": t.task_id,
                "kind": t.kind,
                "pivot": -1 if t.pivot is None else t.pivot,
                "group": g,
                "reward": t.reward,
                "won": t.won,
                "score": t.score,
                "num_turns": t.num_turns,
                "num_tokens": t.num_tokens,
                "stop_reason": t.stop_reason,
                "token_ids": t.token_ids,
                "loss_mask": t.loss_mask,
                "logprobs": t.logprobs,
                "messages": json.dumps(t.messages, ensure_ascii=True),
                "turns": json.dumps([turn.to_dict() for turn in t.turns], ensure_ascii=True),
            }
            for key, value in row.items():
                rows.setdefault(key, []).append(value)
    return datasets.Dataset.from_dict(rows)
