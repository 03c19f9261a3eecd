"""The text-env contract: one multi-turn API for every r3l environment.

A :class:`TextEnv` is a ``gymnasium.Env[str, str]``. Subclasses implement the game (``_start``, ``_act``,
and for native restore ``_save_state``/``_load_state``); this base class owns what every env must do the
same way: task selection from a split, the ``info`` keys, bad-action hygiene, step counting, the episode
record that checkpoint/restore and verified replay rely on (see :mod:`r3l_envs.checkpoint`), and how an env
is pickled or deep-copied (one rule for every env; see :meth:`TextEnv.__reduce__`).
"""

from __future__ import annotations

import copy
import hashlib
import pickle
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded

from r3l_envs._version import __version__
from r3l_envs.errors import (
    CheckpointVersionError,
    EnvClosedError,
    EnvPicklingError,
    ReplayDivergenceError,
    UnknownTaskError,
)
from r3l_envs.text_space import MAX_TEXT, TextSpace

__all__ = ["INFO_KEYS", "MAX_TEXT", "EnvInfo", "EpisodeRecord", "TextEnv", "TextSpace", "observation_digest"]

#: Keys every ``info`` dict has (the public contract of every r3l env).
INFO_KEYS = ("task_id", "task", "admissible_actions", "won", "score", "step")

RestoreKind = Literal["native", "replay"]


def observation_digest(observation: str, reward: float = 0.0, terminated: bool = False) -> str:
    """Short digest of one step's outcome, used by verified replay to detect divergence."""
    text = f"{observation}\x00{reward!r}\x00{bool(terminated)}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class EnvInfo:
    """What an env declares about itself, for the layers above it (prompts, the oracle, the learner).

    Read it with :func:`r3l_envs.env_info` (from a registered id, without making the env, or from an env); an env
    declares it with the class attributes and the method of the same names on :class:`TextEnv`.

    Attributes:
        prompt_family: the prompt family the agent-side wrappers show this env with (a key of
            ``wrappers.prompts.FAMILIES``: ``"math"``, ``"textgame"``, ``"webshop"``, ``"generic"``).
        is_math: one problem per episode, every reply a graded attempt, ``info["correct"]`` per attempt; the
            learner reports first-attempt success, and the oracle diagnoses attempts, not plan deviations.
        has_expert_plan: the env overrides :meth:`TextEnv.expert_actions` (privileged plans for an oracle).
        max_turns: the most turns an episode can take by the env's own rules (a math env's ``max_attempts``), or
            ``None`` where no rule of the env ends it (a ``TimeLimit`` or the caller's turn budget may); declared
            with :meth:`TextEnv.turn_limit` and, for a made env, :attr:`TextEnv.max_turns`.
    """

    prompt_family: str = "generic"
    is_math: bool = False
    has_expert_plan: bool = False
    max_turns: int | None = None


@dataclass
class EpisodeRecord:
    """What the base class remembers about the running episode (all of it goes into checkpoints)."""

    task_id: str
    task: str
    observation: str
    info: dict[str, Any]
    rng_at_start: dict[str, Any] | None = None  # the env RNG as _start saw it: replay needs it
    step: int = 0
    done: bool = False
    actions: list[str] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)


class TextEnv(gym.Env[str, str]):
    """Base class of every r3l environment.

    Subclasses set ``restore_kind`` and implement:

    * ``task_ids`` — the stable task ids of the selected split (a ``Sequence[str]``, may be lazy);
    * ``_start(task_id) -> (observation, goal_text, info)`` — begin an episode on that task;
    * ``_act(action) -> (observation, reward, terminated, info)`` — play one (already sanitised) action;
    * ``_save_state() / _load_state(state)`` — only for ``restore_kind = "native"``: a snapshot of everything
      ``_act`` depends on, as plain data that checkpoints carry (:mod:`r3l_envs.codec`; a record type is
      registered with ``register_type``), and its exact reinstatement, which checks what reaches native code;
    * optionally ``canonical_observation(obs)`` when the engine's text is not byte-stable;
    * what the env is, for the layers above (:class:`EnvInfo`): ``prompt_family``, ``is_math``, and
      ``expert_actions(task_id)`` where the env knows a winning plan.

    The ``info`` dicts a subclass returns must contain ``admissible_actions``, ``won`` and ``score``; the base
    class adds ``task_id``, ``task`` and ``step``.

    Pickling and ``copy.deepcopy`` work on every env, before reset and mid-episode, with one rule: the copy is
    a new env built from the same constructor arguments, put where the original is by the checkpoint
    machinery (see :meth:`__reduce__`). Engines (interpreters, planners, JVMs) are never copied.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"]}
    restore_kind: ClassVar[RestoreKind] = "native"
    #: True where checks cannot make forged native state safe: the engine runs native code that trusts values a
    #: game may legitimately change (addresses it does not bounds-check), so a forgery that passes every check can
    #: still crash the process. ``restore`` then loads native state only from checkpoints made in this process or
    #: read with a valid key (or ``trusted=True``), and restores the others by verified replay of their actions.
    native_state_needs_key: ClassVar[bool] = False
    #: What the env declares for the layers above (see :class:`EnvInfo`): set these in a subclass, and override
    #: :meth:`expert_actions` where the env knows a winning plan. Nothing above ``r3l_envs`` asks an env's name.
    prompt_family: ClassVar[str] = "generic"
    is_math: ClassVar[bool] = False

    def __new__(cls, *args: Any, **kwargs: Any) -> TextEnv:
        env = super().__new__(cls)
        env._init_args = (args, kwargs)  # the outermost constructor's arguments: what a copy is rebuilt from
        return env

    def __init__(self, *, split: str = "train", render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.split = split
        self.render_mode = render_mode
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self._episode: EpisodeRecord | None = None
        self._closed = False

    # ------------------------------------------------------------------ subclass hooks
    @property
    def task_ids(self) -> Sequence[str]:
        """Stable ids of the tasks in this env's split."""
        raise NotImplementedError

    def _start(self, task_id: str) -> tuple[str, str, dict[str, Any]]:
        raise NotImplementedError

    def _act(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        raise NotImplementedError

    def _save_state(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} declares native restore but has no _save_state")

    def _load_state(self, state: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} declares native restore but has no _load_state")

    def expert_actions(self, task_id: str) -> list[str] | None:
        """Privileged: actions that win ``task_id`` from its start (for a math env, one: the reference answer),
        or ``None`` where the env has no expert. May reset this env to ``task_id``: call it on an idle instance.
        """
        return None

    @classmethod
    def declaration(cls, kwargs: Mapping[str, Any] | None = None) -> EnvInfo:
        """What this env class declares (:class:`EnvInfo`) for an env made with ``kwargs``; read without making
        an env."""
        return EnvInfo(
            prompt_family=cls.prompt_family,
            is_math=cls.is_math,
            has_expert_plan=cls.expert_actions is not TextEnv.expert_actions,
            max_turns=cls.turn_limit(kwargs or {}),
        )

    @classmethod
    def turn_limit(cls, kwargs: Mapping[str, Any]) -> int | None:
        """The most turns an episode of this env, made with ``kwargs``, can take by the env's own rules, or
        ``None`` (the default) where none of its rules ends an episode. An env with such a rule overrides this
        and :attr:`max_turns` together."""
        return None

    @property
    def max_turns(self) -> int | None:
        """:meth:`turn_limit` of this instance (:attr:`EnvInfo.max_turns`)."""
        return type(self).turn_limit({})

    def canonical_observation(self, observation: str) -> str:
        """The form of an observation that identical states share (identity unless the engine is unstable)."""
        return observation

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on ``options["task_id"]``, or on a task drawn from the split with the env's RNG."""
        super().reset(seed=seed)
        self._check_open()
        task_id = (options or {}).get("task_id")
        if task_id is None:
            ids = self.task_ids
            if len(ids) == 0:
                raise UnknownTaskError(f"split {self.split!r} of {type(self).__name__} has no tasks")
            task_id = ids[int(self.np_random.integers(len(ids)))]
        else:
            self.validate_task_id(task_id)
        rng_at_start = self.np_random.bit_generator.state
        observation, task, info = self._start(task_id)
        self._episode = EpisodeRecord(
            task_id=task_id, task=task, observation=observation, info={}, rng_at_start=rng_at_start
        )
        self._episode.info = self._full_info(info)
        self._episode.digests.append(observation_digest(self.canonical_observation(observation)))
        self._render_human()
        return observation, copy.deepcopy(self._episode.info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Play one action. Any string is a legal call: bad actions are ordinary steps that explain themselves."""
        self._check_open()
        episode = self._episode
        if episode is None:
            raise ResetNeeded("Call reset() before step().")
        action = sanitize_action(action)
        if episode.done:
            # Gymnasium leaves this undefined; we answer without touching the game, so state stays intact.
            info = copy.deepcopy(episode.info)
            return "The episode has ended. Call reset() to start a new one.", 0.0, True, False, info
        observation, reward, terminated, info = self._act(action)
        episode.step += 1
        episode.actions.append(action)
        episode.digests.append(observation_digest(self.canonical_observation(observation), reward, terminated))
        episode.observation = observation
        episode.info = self._full_info(info)
        episode.done = bool(terminated)
        self._render_human()
        return observation, float(reward), bool(terminated), False, copy.deepcopy(episode.info)

    def render(self) -> str | None:
        """``ansi`` returns the last observation; ``human`` writes it to stdout after every step."""
        if self.render_mode == "ansi":
            return self._episode.observation if self._episode else ""
        return None

    def close(self) -> None:
        self._closed = True
        super().close()

    # ------------------------------------------------------------------ helpers for users and subclasses
    def validate_task_id(self, task_id: Any) -> None:
        """Raise :class:`UnknownTaskError` (with close matches) unless ``task_id`` is in this split."""
        if isinstance(task_id, str) and task_id in self.task_ids:
            return
        hint = ""
        if isinstance(task_id, str) and len(self.task_ids) <= 100_000:
            import difflib

            close = difflib.get_close_matches(task_id, list(self.task_ids), n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UnknownTaskError(
            f"task_id {task_id!r} is not in split {self.split!r} of {type(self).__name__} "
            f"({len(self.task_ids)} tasks; see env.unwrapped.task_ids).{hint}"
        )

    def _full_info(self, info: dict[str, Any]) -> dict[str, Any]:
        missing = {"admissible_actions", "won", "score"} - info.keys()
        if missing:
            raise TypeError(f"{type(self).__name__} returned an info without {sorted(missing)}")
        assert self._episode is not None
        return {
            "task_id": self._episode.task_id,
            "task": self._episode.task,
            "step": self._episode.step,
            **info,
        }

    def _check_open(self) -> None:
        if self._closed:
            raise EnvClosedError(f"{type(self).__name__} is closed; make a new env with gym.make().")

    def _render_human(self) -> None:
        if self.render_mode == "human" and self._episode is not None:
            sys.stdout.write(self._episode.observation + "\n")

    # ------------------------------------------------------------------ pickle and deepcopy
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle (and ``copy.deepcopy``) as *constructor arguments + checkpoint state*, for every env alike.

        Engines hold native handles (ctypes libraries, planner state, a JVM) that cannot be copied, and copying
        their Python wrappers would share, then free, the same native memory. So the copy is a fresh env built
        with the original's constructor arguments (``gym.make``'s kwargs) and its spec, then restored from
        what :func:`r3l_envs.checkpoint` saves for the base env (natively, or by verified replay, as the env
        declares); wrappers around it pickle their own state as usual. The copy continues exactly as the
        original would, or unpickling raises (e.g. :class:`~r3l_envs.errors.ReplayDivergenceError`). Only
        unpickle envs you pickled yourself (as with any pickle); to move an episode across a trust boundary,
        send ``r3l_envs.checkpoint(env).to_bytes()`` instead.

        Raises:
            EnvPicklingError: a constructor argument cannot be pickled (e.g. a generator).
        """
        args, kwargs = self._init_args
        try:
            pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # any failure to pickle the arguments means the same thing to the caller
            raise EnvPicklingError(
                f"{type(self).__name__} cannot be pickled or copied: a constructor argument does not pickle "
                f"({type(exc).__name__}: {exc}). Make the env from picklable kwargs, or move its episode with "
                "r3l_envs.checkpoint(env).to_bytes() and r3l_envs.restore() into an env made where it is needed."
            ) from exc
        rng = self._np_random
        state = {
            "episode": self._checkpoint_state() if self._episode is not None and not self._closed else None,
            "rng": None if rng is None else rng.bit_generator.state,
            "rng_seed": self._np_random_seed,
            "closed": self._closed,
        }
        return _rebuild, (type(self), args, kwargs, self.spec, __version__, state)

    # ------------------------------------------------------------------ checkpoint support
    def _checkpoint_state(self) -> dict[str, Any]:
        """Everything needed to put this env back where it is now (used by ``r3l_envs.checkpoint``)."""
        if self._episode is None:
            raise ResetNeeded("Call reset() before taking a checkpoint: there is no episode to save.")
        rng = self._np_random
        return {
            "episode": copy.deepcopy(self._episode),
            "native": self._save_state() if self.restore_kind == "native" else None,
            "rng": None if rng is None else rng.bit_generator.state,
            "rng_seed": self._np_random_seed,
        }

    def _restore_state(self, state: dict[str, Any], *, via: RestoreKind, rollback: bool = True) -> None:
        """Reinstate a ``_checkpoint_state()`` natively or by verified replay.

        If replay diverges, the env is put back where it was (by one more restore); if even that fails, the
        engine itself is not reproducible, the episode is dropped and the next step asks for a reset.
        """
        self._check_open()
        episode: EpisodeRecord = state["episode"]
        if via == "native":
            self._load_state(state["native"])
        else:
            previous = self._checkpoint_state() if rollback and self._episode is not None else None
            try:
                self._replay(episode)
            except ReplayDivergenceError:
                if previous is None:
                    self._episode = None
                    raise
                try:
                    self._restore_state(previous, via=self.restore_kind, rollback=False)
                except ReplayDivergenceError:
                    self._episode = None
                raise
        self._episode = copy.deepcopy(episode)
        if state["rng"] is not None:
            self._set_rng(state["rng"])
        self._np_random_seed = state["rng_seed"]

    def _set_rng(self, bit_generator_state: dict[str, Any]) -> None:
        rng = np.random.Generator(getattr(np.random, bit_generator_state["bit_generator"])())
        rng.bit_generator.state = bit_generator_state
        self._np_random = rng

    def _replay(self, episode: EpisodeRecord) -> None:
        if episode.rng_at_start is not None:  # envs that draw from np_random in _start/_act replay the same draws
            self._set_rng(episode.rng_at_start)
        observation, _, _ = self._start(episode.task_id)
        self._verify(episode, 0, observation_digest(self.canonical_observation(observation)))
        for i, action in enumerate(episode.actions, start=1):
            observation, reward, terminated, _ = self._act(action)
            self._verify(episode, i, observation_digest(self.canonical_observation(observation), reward, terminated))

    def _verify(self, episode: EpisodeRecord, step: int, digest: str) -> None:
        if episode.digests[step] != digest:
            raise ReplayDivergenceError(
                f"{type(self).__name__}: replaying task {episode.task_id!r} diverged at step {step} "
                f"(digest {digest} != recorded {episode.digests[step]}). The engine is not deterministic for "
                "this action sequence; restore natively, or fix canonical_observation() to hide the noise."
            )


def _rebuild(
    cls: type[TextEnv],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    spec: Any,
    version: str,
    state: dict[str, Any],
) -> TextEnv:
    """Inverse of :meth:`TextEnv.__reduce__`: a new env from the constructor arguments, put back to ``state``."""
    if version != __version__:
        raise CheckpointVersionError(
            f"this {cls.__name__} was pickled by r3l {version}, this is r3l {__version__}: engines and task "
            "generators may differ across versions, so unpickle it with the version that pickled it"
        )
    env = cls(*args, **kwargs)
    env.spec = spec
    if state["episode"] is not None:
        env._restore_state(state["episode"], via=env.restore_kind)
    if state["rng"] is not None:
        env._set_rng(state["rng"])
    env._np_random_seed = state["rng_seed"]
    if state["closed"]:
        env.close()
    return env


def sanitize_action(action: Any) -> str:
    """Make any str-like action safe to hand to an engine: bytes are decoded, lone surrogates replaced."""
    if isinstance(action, (bytes, bytearray)):
        return bytes(action).decode("utf-8", "replace")
    if not isinstance(action, str):
        raise TypeError(f"actions are str, got {type(action).__name__}: {action!r:.80}")
    try:
        action.encode("utf-8")
    except UnicodeEncodeError:
        action = action.encode("utf-8", "replace").decode("utf-8")
    return action
