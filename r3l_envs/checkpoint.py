"""Exact checkpoint/restore through the whole ``gym.make`` wrapper stack.

``checkpoint(env)`` captures the base env (natively, or as a verified action log) *and* the state of every
wrapper around it (``TimeLimit``'s elapsed steps, ``OrderEnforcing``'s reset flag, ...). ``restore(env, ckpt)``
validates everything first — env id, kwargs, wrapper stack, task, versions, integrity — and only then
changes the env, so a checkpoint that does not belong raises a typed error and leaves the env untouched.

Checkpoint bytes never execute what they hold: the fields and the saved state are tagged plain data
(:mod:`r3l_envs.codec`), so bytes from another machine or from a stranger decode to data or raise
:class:`~r3l_envs.errors.CorruptCheckpointError`. ``to_bytes()`` writes ``R3LCKPT\0``, the format version
(2 bytes) and a sha256 of the version and the body, then the body: a flipped or missing byte is refused. The
digest has no key: it catches damage, not forgery, and a forged body is only ever plain data that restore
checks for shape before it touches the env. Format 1 (a pickle) is read only with ``trusted=True``.
"""

from __future__ import annotations

import copy
import hashlib
import pickle
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

from r3l_envs import codec
from r3l_envs._version import __version__
from r3l_envs.core import RestoreKind, TextEnv, _Episode
from r3l_envs.errors import (
    CheckpointMismatchError,
    CheckpointVersionError,
    CorruptCheckpointError,
    R3LEnvError,
    UnsupportedWrapperError,
)

__all__ = ["FORMAT_VERSION", "Checkpoint", "checkpoint", "register_wrapper_state", "restore"]

#: Version of the byte layout written by :meth:`Checkpoint.to_bytes`. Readers refuse newer formats.
FORMAT_VERSION = 2
_PICKLE_FORMAT = 1  # the format before this one: a pickle, read only when the caller vouches for the bytes
_MAGIC = b"R3LCKPT\x00"
_HEADER = struct.Struct(">H32s")  # format version, sha256 of the version and the body
_VERSION = struct.Struct(">H")
_RESTORE_KINDS = ("native", "replay")
_BIT_GENERATORS = frozenset({"MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64"})

codec.register_type(_Episode)

# Kwargs that change how an env is shown, not how it behaves: a checkpoint may move across them.
_PRESENTATION_KWARGS = frozenset({"render_mode"})


@dataclass(frozen=True)
class Checkpoint:
    """A restorable snapshot of an env and its wrappers at one step of one episode.

    The metadata is readable without decoding the state; ``payload`` holds the state itself, encoded once at
    capture (:mod:`r3l_envs.codec`) so that every restore starts from a fresh copy.
    """

    env_id: str
    env_kwargs: dict[str, Any]
    wrappers: tuple[str, ...]
    task_id: str
    step: int
    restore_kind: RestoreKind
    library_version: str
    format_version: int
    payload: bytes
    #: sha256 (hex) of ``payload``, taken at capture: equal digests mean identical saved states, and restore
    #: refuses a payload that no longer matches it (altered after capture).
    digest: str

    def to_bytes(self) -> bytes:
        """Serialise as plain data behind a magic header, the format version and an integrity digest."""
        fields = {**self.__dict__, "format_version": FORMAT_VERSION}
        body = codec.encode(fields)
        version = _VERSION.pack(FORMAT_VERSION)
        return _MAGIC + version + hashlib.sha256(version + body).digest() + body

    @classmethod
    def from_bytes(cls, data: bytes, *, trusted: bool = False) -> Checkpoint:
        """Inverse of :meth:`to_bytes`. Never executes anything the bytes hold.

        Args:
            data: bytes from :meth:`to_bytes`.
            trusted: also read format 1, which was a pickle: only for bytes you wrote yourself, since
                unpickling can run any code. The checkpoint comes back in the current, safe format.

        Raises:
            CorruptCheckpointError: not checkpoint bytes, truncated, altered, or not a checkpoint's fields.
            CheckpointVersionError: a newer format, or format 1 without ``trusted=True``.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CorruptCheckpointError(f"expected bytes from Checkpoint.to_bytes(), got {type(data).__name__}")
        data = bytes(data)
        start = len(_MAGIC) + _HEADER.size
        if not data.startswith(_MAGIC) or len(data) < start:
            raise CorruptCheckpointError("these bytes are not an r3l checkpoint (bad magic header or truncated)")
        version, digest = _HEADER.unpack_from(data, len(_MAGIC))
        body = data[start:]
        if version > FORMAT_VERSION:
            raise CheckpointVersionError(
                f"checkpoint format {version} is newer than this library reads ({FORMAT_VERSION}); "
                "upgrade r3l to the version that wrote it"
            )
        if version == _PICKLE_FORMAT:
            return cls._from_pickle_format(body, digest, trusted=trusted)
        if version != FORMAT_VERSION:
            raise CorruptCheckpointError(f"checkpoint format {version} does not exist (bytes altered?)")
        if hashlib.sha256(data[len(_MAGIC) : len(_MAGIC) + _VERSION.size] + body).digest() != digest:
            raise CorruptCheckpointError("checkpoint digest mismatch: the bytes were truncated or altered")
        return cls(**_checked_fields(codec.decode(body)))

    @classmethod
    def _from_pickle_format(cls, body: bytes, digest: bytes, *, trusted: bool) -> Checkpoint:
        if not trusted:
            raise CheckpointVersionError(
                f"checkpoint format {_PICKLE_FORMAT} is a pickle, which can run code when read; this library "
                f"writes format {FORMAT_VERSION}. If you wrote these bytes yourself, read them once with "
                "Checkpoint.from_bytes(data, trusted=True) and save ckpt.to_bytes() again"
            )
        if hashlib.sha256(body).digest() != digest:
            raise CorruptCheckpointError("checkpoint digest mismatch: the bytes were truncated or altered")
        try:
            fields = pickle.loads(body)  # the caller vouched for these bytes (trusted=True)
            payload = codec.encode(pickle.loads(fields["payload"]))
        except R3LEnvError:
            raise
        except Exception as exc:  # any unpickling failure means the same thing to the caller
            raise CorruptCheckpointError(f"format {_PICKLE_FORMAT} checkpoint does not decode: {exc}") from exc
        digest_hex = hashlib.sha256(payload).hexdigest()
        return cls(
            **_checked_fields({**fields, "payload": payload, "format_version": FORMAT_VERSION, "digest": digest_hex})
        )


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "env_id": str,
    "env_kwargs": dict,
    "wrappers": tuple,
    "task_id": str,
    "step": int,
    "restore_kind": str,
    "library_version": str,
    "format_version": int,
    "payload": bytes,
    "digest": str,
}


def _checked_fields(fields: Any) -> dict[str, Any]:
    """The decoded fields of a :class:`Checkpoint`, or :class:`CorruptCheckpointError` naming what is wrong."""
    if not isinstance(fields, Mapping) or set(fields) != set(_FIELD_TYPES):
        found = sorted(map(repr, fields)) if isinstance(fields, Mapping) else type(fields).__name__
        raise CorruptCheckpointError(f"checkpoint body holds {found}, not the fields {sorted(_FIELD_TYPES)}")
    for name, kind in _FIELD_TYPES.items():
        value = fields[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise CorruptCheckpointError(f"checkpoint field {name!r} is a {type(value).__name__}, not {kind}")
    if not all(isinstance(key, str) for key in fields["env_kwargs"]):
        raise CorruptCheckpointError("checkpoint env_kwargs has a key that is not a str")
    if not all(isinstance(w, str) for w in fields["wrappers"]):
        raise CorruptCheckpointError("checkpoint wrappers are not all str")
    if fields["restore_kind"] not in _RESTORE_KINDS or fields["step"] < 0:
        raise CorruptCheckpointError(
            f"checkpoint restore_kind {fields['restore_kind']!r} / step {fields['step']} is not possible"
        )
    _check_payload_digest(fields["payload"], fields["digest"])
    return dict(fields)


def _check_payload_digest(payload: Any, digest: Any) -> None:
    if not isinstance(payload, bytes) or hashlib.sha256(payload).hexdigest() != digest:
        raise CorruptCheckpointError(
            "checkpoint payload does not match its digest: the saved state was altered after capture"
        )


# ---------------------------------------------------------------------- wrapper state
_StateGetter = Callable[[gym.Wrapper], Any]
_StateSetter = Callable[[gym.Wrapper, Any], None]
_WRAPPER_STATE: dict[type, tuple[_StateGetter, _StateSetter]] = {}


def register_wrapper_state(wrapper_type: type, get_state: _StateGetter, set_state: _StateSetter) -> None:
    """Teach checkpoint/restore how to save a wrapper's state (for wrappers you cannot edit).

    Your own wrappers can instead define ``checkpoint_state(self)`` and ``restore_state(self, state)``.
    """
    _WRAPPER_STATE[wrapper_type] = (get_state, set_state)


def _attributes(*names: str) -> tuple[_StateGetter, _StateSetter]:
    """A handler that saves and restores the named instance attributes (those the wrapper has)."""

    def get_state(wrapper: gym.Wrapper) -> dict[str, Any]:
        return {name: copy.deepcopy(getattr(wrapper, name)) for name in names if hasattr(wrapper, name)}

    def set_state(wrapper: gym.Wrapper, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(wrapper, name, copy.deepcopy(value))

    return get_state, set_state


register_wrapper_state(TimeLimit, *_attributes("_elapsed_steps"))
register_wrapper_state(OrderEnforcing, *_attributes("_has_reset"))
# Its one-off checks compare a step with the data of the reset before it, so its flags travel too.
register_wrapper_state(
    PassiveEnvChecker,
    *_attributes("checked_reset", "checked_step", "checked_render", "checked_data_reuse", "_previous_data"),
)


def _wrapper_chain(env: gym.Env) -> list[gym.Wrapper]:
    chain = []
    while isinstance(env, gym.Wrapper):
        chain.append(env)
        env = env.env
    return chain


def _handler(wrapper: gym.Wrapper) -> tuple[_StateGetter, _StateSetter]:
    if hasattr(wrapper, "checkpoint_state") and hasattr(wrapper, "restore_state"):
        return type(wrapper).checkpoint_state, type(wrapper).restore_state
    for cls in type(wrapper).__mro__:
        if cls in _WRAPPER_STATE:
            return _WRAPPER_STATE[cls]
    raise UnsupportedWrapperError(
        f"cannot checkpoint through {type(wrapper).__qualname__}: its state is unknown. Give it "
        "checkpoint_state()/restore_state(state) methods, or call r3l_envs.register_wrapper_state("
        f"{type(wrapper).__qualname__}, get_state, set_state) (with a getter returning None if it is stateless)."
    )


def _signature(wrapper: gym.Wrapper) -> str:
    name = f"{type(wrapper).__module__}.{type(wrapper).__qualname__}"
    if isinstance(wrapper, TimeLimit):  # the limit decides when truncation happens: part of the identity
        name += f"(max_episode_steps={wrapper._max_episode_steps})"
    return name


def _identity(env: gym.Env) -> tuple[str, dict[str, Any]]:
    base = env.unwrapped
    if not isinstance(base, TextEnv):
        raise TypeError(f"r3l_envs checkpoints work on r3l TextEnv environments, not {type(base).__qualname__}")
    spec = base.spec
    if spec is None:  # constructed directly, not with gym.make
        return f"{type(base).__module__}:{type(base).__qualname__}", {}
    kwargs = {k: v for k, v in spec.kwargs.items() if k not in _PRESENTATION_KWARGS}
    return spec.id, kwargs


# ---------------------------------------------------------------------- public functions
def checkpoint(env: gym.Env) -> Checkpoint:
    """Snapshot ``env`` (as returned by ``gym.make``, wrappers included) at the current step."""
    env_id, kwargs = _identity(env)
    chain = _wrapper_chain(env)
    handlers = [_handler(w) for w in chain]
    base: TextEnv = env.unwrapped
    state = {
        "env": base._checkpoint_state(),
        "wrappers": [get(w) for w, (get, _) in zip(chain, handlers)],
    }
    episode = state["env"]["episode"]
    payload = codec.encode(state)
    return Checkpoint(
        env_id=env_id,
        env_kwargs=kwargs,
        wrappers=tuple(_signature(w) for w in chain),
        task_id=episode.task_id,
        step=episode.step,
        restore_kind=base.restore_kind,
        library_version=__version__,
        format_version=FORMAT_VERSION,
        payload=payload,
        digest=hashlib.sha256(payload).hexdigest(),
    )


def restore(env: gym.Env, ckpt: Checkpoint, *, via: RestoreKind | None = None) -> None:
    """Put ``env`` (the same env or a fresh ``gym.make`` of the same id and kwargs) back to ``ckpt``.

    Args:
        env: the env to restore into.
        ckpt: a checkpoint from :func:`checkpoint` or :meth:`Checkpoint.from_bytes`.
        via: ``"native"`` or ``"replay"``; defaults to the env's own ``restore_kind``. Every env can also
            restore by verified replay of the recorded actions (slower; a cross-check of native restore).

    Raises:
        CheckpointMismatchError: another env id, kwargs, wrapper stack, or a task not in this env's split.
        CheckpointVersionError: written by another library version or a newer format.
        CorruptCheckpointError: the saved state is not one this env and wrapper stack can have saved. If it
            only shows while the env loads it natively, the env drops its episode (the next step asks for a
            reset) rather than continue from a half-loaded state.
        ReplayDivergenceError: verified replay saw a different observation than the one recorded.
        UnsupportedWrapperError: a wrapper whose state cannot be restored.
    """
    if not isinstance(ckpt, Checkpoint):
        raise TypeError(f"restore() takes a Checkpoint, got {type(ckpt).__name__}; use Checkpoint.from_bytes()")
    if ckpt.format_version > FORMAT_VERSION:
        raise CheckpointVersionError(f"checkpoint format {ckpt.format_version} is newer than {FORMAT_VERSION}")
    if ckpt.library_version != __version__:
        raise CheckpointVersionError(
            f"checkpoint written by r3l {ckpt.library_version}, this is r3l {__version__}: engines and task "
            "generators may differ across versions, so restore it with the version that wrote it"
        )
    env_id, kwargs = _identity(env)
    if env_id != ckpt.env_id:
        raise CheckpointMismatchError(f"checkpoint is for {ckpt.env_id!r}, not {env_id!r}")
    if kwargs != ckpt.env_kwargs:
        diff = sorted(k for k in kwargs.keys() | ckpt.env_kwargs.keys() if kwargs.get(k) != ckpt.env_kwargs.get(k))
        raise CheckpointMismatchError(
            f"checkpoint for {env_id!r} was taken with other kwargs (differing: {diff}); make the env with "
            f"gym.make({env_id!r}, **ckpt.env_kwargs)"
        )
    chain = _wrapper_chain(env)
    signatures = tuple(_signature(w) for w in chain)
    if signatures != ckpt.wrappers:
        raise CheckpointMismatchError(
            f"wrapper stack differs: checkpoint has {list(ckpt.wrappers)}, env has {list(signatures)}"
        )
    handlers = [_handler(w) for w in chain]
    base: TextEnv = env.unwrapped
    if ckpt.task_id not in base.task_ids:
        raise CheckpointMismatchError(
            f"checkpoint task {ckpt.task_id!r} is not in split {base.split!r} of this env; "
            "make the env with the kwargs in ckpt.env_kwargs"
        )
    via = via or ckpt.restore_kind
    if via not in ("native", "replay"):
        raise ValueError(f"via must be 'native' or 'replay', got {via!r}")
    if via == "native" and base.restore_kind != "native":
        raise CheckpointMismatchError(f"{type(base).__name__} restores by replay only; pass via='replay'")
    _check_payload_digest(ckpt.payload, ckpt.digest)
    state = _checked_state(codec.decode(ckpt.payload), ckpt, len(chain))
    try:
        base._restore_state(state["env"], via=via)
    except R3LEnvError:
        raise
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        base._episode = None  # half-loaded engine state: never continue from it
        raise CorruptCheckpointError(
            f"checkpoint state does not fit {type(base).__name__} ({type(exc).__name__}: {exc}); the env's episode "
            "was dropped: reset it, or restore a checkpoint it wrote"
        ) from exc
    for wrapper, (_, set_state), wrapper_state in zip(chain, handlers, state["wrappers"]):
        set_state(wrapper, wrapper_state)


def _checked_state(state: Any, ckpt: Checkpoint, n_wrappers: int) -> dict[str, Any]:
    """``state`` if it has the shape :func:`checkpoint` saves for ``ckpt``; else :class:`CorruptCheckpointError`.

    Checked before anything changes: the env-independent parts (the episode record, RNG states, one state per
    wrapper). What an env saves natively is the env's to load.
    """

    def require(ok: bool, what: str) -> None:
        if not ok:
            raise CorruptCheckpointError(f"checkpoint state is malformed: {what}")

    require(isinstance(state, dict) and set(state) == {"env", "wrappers"}, "not {'env', 'wrappers'}")
    env, wrappers = state["env"], state["wrappers"]
    require(isinstance(env, dict) and set(env) == {"episode", "native", "rng", "rng_seed"}, "env state keys")
    require(isinstance(wrappers, list) and len(wrappers) == n_wrappers, "one state per wrapper")
    episode = env["episode"]
    require(isinstance(episode, _Episode), "no episode record")
    require(isinstance(episode.task_id, str) and episode.task_id == ckpt.task_id, "episode of another task")
    require(isinstance(episode.task, str) and isinstance(episode.observation, str), "episode texts")
    require(isinstance(episode.info, dict) and type(episode.done) is bool, "episode info")
    require(type(episode.step) is int and episode.step == ckpt.step, "episode step differs from the checkpoint's")
    require(isinstance(episode.actions, list) and all(isinstance(a, str) for a in episode.actions), "actions")
    require(len(episode.actions) == episode.step, "one action per step")
    require(isinstance(episode.digests, list) and len(episode.digests) == episode.step + 1, "one digest per step")
    require(all(isinstance(d, str) for d in episode.digests), "digests")
    require(env["rng_seed"] is None or type(env["rng_seed"]) is int, "rng seed")
    for rng in (env["rng"], episode.rng_at_start):
        require(rng is None or _valid_rng_state(rng), f"RNG state {rng!r:.120}")
    return state


def _valid_rng_state(state: Any) -> bool:
    """Whether numpy accepts ``state`` as a bit generator's state (of a numpy bit generator, by name)."""
    if not (isinstance(state, dict) and state.get("bit_generator") in _BIT_GENERATORS):
        return False
    try:
        getattr(np.random, state["bit_generator"])().state = state
    except (TypeError, ValueError, KeyError, OverflowError):
        return False
    return True
