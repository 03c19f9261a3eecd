"""Exact checkpoint/restore through the whole ``gym.make`` wrapper stack.

``checkpoint(env)`` captures the base env (natively, or as a verified action log) *and* the state of every
wrapper around it (``TimeLimit``'s elapsed steps, ``RecordEpisodeStatistics``' running episode, ...).
``restore(env, ckpt)`` validates everything first — env id, kwargs, wrapper stack, task, versions, integrity — and
only then changes the env, so a checkpoint that does not belong raises a typed error and leaves the env untouched.

Checkpoint bytes never execute what they hold: the fields and the saved state are tagged plain data
(:mod:`r3l_envs.codec`), decoded within bounds, so bytes from another machine or from a stranger decode to data or
raise :class:`~r3l_envs.errors.CorruptCheckpointError`. ``to_bytes()`` writes a magic header, the format version
(2 bytes), a 32-byte tag over the version and the body, then the body. Without a key the tag is a sha256: it
catches damage, not forgery, since anyone can recompute it over a body they wrote. With a key (``key=`` or the
``R3L_CHECKPOINT_KEY`` environment variable) the tag is an HMAC-SHA256 under that key and the header says so; a
reader with the key refuses any body whose HMAC does not verify, so only holders of the key can produce bytes it
accepts. Format 1 (a pickle) is read only with ``trusted=True``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import pickle
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit

from r3l_envs import codec
from r3l_envs._version import __version__
from r3l_envs.core import EpisodeRecord, RestoreKind, TextEnv
from r3l_envs.errors import (
    CheckpointAuthError,
    CheckpointMismatchError,
    CheckpointVersionError,
    CorruptCheckpointError,
    R3LEnvError,
)
from r3l_envs.wrapper_state import register_wrapper_state, state_handler

__all__ = ["FORMAT_VERSION", "KEY_VARIABLE", "Checkpoint", "checkpoint", "register_wrapper_state", "restore"]

#: Version of the byte layout written by :meth:`Checkpoint.to_bytes`. Readers refuse newer formats.
FORMAT_VERSION = 2
_PICKLE_FORMAT = 1  # the format before this one: a pickle, read only when the caller vouches for the bytes
_MAGIC = b"R3LCKPT\x00"
_KEYED_MAGIC = b"R3LCKPTK"  # the same frame, tagged with an HMAC-SHA256 instead of a sha256
#: The environment variable holding the checkpoint key when ``key=`` is not given (its UTF-8 bytes).
KEY_VARIABLE = "R3L_CHECKPOINT_KEY"
_MIN_KEY_BYTES = 16

logger = logging.getLogger(__name__)
_HEADER = struct.Struct(">H32s")  # format version, sha256 of the version and the body
_VERSION = struct.Struct(">H")
_RESTORE_KINDS = ("native", "replay")
_BIT_GENERATORS = frozenset({"MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64"})

codec.register_type(EpisodeRecord, former_names=("r3l_envs.core._Episode",))  # its name until 0.2

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
    #: Whether the state comes from a source that vouches for it: made by :func:`checkpoint` in this process, or
    #: read from bytes with a valid key (or ``trusted=True``). Not part of the bytes, nor of equality. Envs whose
    #: native state checks cannot make safe (``TextEnv.native_state_needs_key``) restore an unauthenticated one
    #: by replay.
    authenticated: bool = field(default=True, compare=False, repr=False)

    def to_bytes(self, *, key: bytes | str | None = None) -> bytes:
        """Serialise as plain data behind a magic header, the format version and an integrity tag.

        Args:
            key: with a key (default: ``R3L_CHECKPOINT_KEY`` if set), the tag is an HMAC-SHA256 under it, and
                only a reader holding the same key accepts the bytes. Without one, a sha256 that catches damage.
        """
        key = _resolve_key(key)
        fields = {**{name: getattr(self, name) for name in _FIELD_TYPES}, "format_version": FORMAT_VERSION}
        body = codec.encode(fields)
        version = _VERSION.pack(FORMAT_VERSION)
        if key is None:
            return _MAGIC + version + hashlib.sha256(version + body).digest() + body
        return _KEYED_MAGIC + version + hmac.digest(key, version + body, "sha256") + body

    @classmethod
    def from_bytes(
        cls, data: bytes, *, trusted: bool = False, key: bytes | str | None = None, max_bytes: int | None = None
    ) -> Checkpoint:
        """Inverse of :meth:`to_bytes`. Never executes anything the bytes hold, and reads them within bounds.

        Args:
            data: bytes from :meth:`to_bytes`.
            trusted: you vouch for these bytes (you wrote them yourself): also read format 1, which was a pickle
                (unpickling can run any code; the checkpoint comes back in the current, safe format), and mark the
                checkpoint ``authenticated`` as a valid key would.
            key: the key the bytes were written with (default: ``R3L_CHECKPOINT_KEY`` if set). With a key, only
                bytes carrying a valid HMAC under it are read; the tag is checked before anything is decoded.
            max_bytes: refuse larger input unread (default :func:`r3l_envs.codec.default_max_bytes`, 256 MiB,
                or ``R3L_CHECKPOINT_MAX_BYTES``).

        Raises:
            CheckpointAuthError: a key was given and the bytes have no valid HMAC under it, or the bytes are keyed
                and no key was given.
            CorruptCheckpointError: not checkpoint bytes, over the size ceiling, truncated, altered, or not a
                checkpoint's fields.
            CheckpointVersionError: a newer format, or format 1 without ``trusted=True``.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CorruptCheckpointError(f"expected bytes from Checkpoint.to_bytes(), got {type(data).__name__}")
        codec.check_size(len(data), max_bytes)
        data = bytes(data)
        key = _resolve_key(key)
        start = len(_MAGIC) + _HEADER.size
        keyed = data.startswith(_KEYED_MAGIC)
        if not (keyed or data.startswith(_MAGIC)) or len(data) < start:
            raise CorruptCheckpointError("these bytes are not an r3l checkpoint (bad magic header or truncated)")
        version, tag = _HEADER.unpack_from(data, len(_MAGIC))
        body = data[start:]
        signed = data[len(_MAGIC) : len(_MAGIC) + _VERSION.size] + body
        if key is not None:  # first of all: bytes the key holder did not write are not read any further
            if not keyed:
                raise CheckpointAuthError(
                    "checkpoint has no HMAC, and a checkpoint key is set: refused (write it with the same key, "
                    f"to_bytes(key=...) or {KEY_VARIABLE})"
                )
            if not hmac.compare_digest(hmac.digest(key, signed, "sha256"), tag):
                raise CheckpointAuthError(
                    "checkpoint HMAC does not verify under this key: written with another key, or altered"
                )
        elif keyed:
            raise CheckpointAuthError(
                f"checkpoint is keyed (HMAC-SHA256): pass the key it was written with, key=... or {KEY_VARIABLE}"
            )
        if version > FORMAT_VERSION:
            raise CheckpointVersionError(
                f"checkpoint format {version} is newer than this library reads ({FORMAT_VERSION}); "
                "upgrade r3l to the version that wrote it"
            )
        if version == _PICKLE_FORMAT and not keyed:
            return cls._from_pickle_format(body, tag, trusted=trusted)
        if version != FORMAT_VERSION:
            raise CorruptCheckpointError(f"checkpoint format {version} does not exist (bytes altered?)")
        if not keyed and hashlib.sha256(signed).digest() != tag:
            raise CorruptCheckpointError("checkpoint digest mismatch: the bytes were truncated or altered")
        fields = _checked_fields(codec.decode(body, max_bytes=max_bytes))
        return cls(**fields, authenticated=keyed or trusted)

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


def _resolve_key(key: bytes | str | None) -> bytes | None:
    """``key`` as bytes, else the ``R3L_CHECKPOINT_KEY`` environment variable's, else None (no key)."""
    if key is None:
        key = os.environ.get(KEY_VARIABLE) or None
        source = KEY_VARIABLE
    else:
        source = "key"
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"a checkpoint key is bytes or str, not {type(key).__name__}")
    if len(key) < _MIN_KEY_BYTES:
        raise ValueError(
            f"{source} has {len(key)} bytes; a checkpoint key needs at least {_MIN_KEY_BYTES} random bytes, e.g. "
            "python -c 'import secrets; print(secrets.token_hex(32))'"
        )
    return bytes(key)


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
def _wrapper_chain(env: gym.Env) -> list[gym.Wrapper]:
    chain = []
    while isinstance(env, gym.Wrapper):
        chain.append(env)
        env = env.env
    return chain


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
    handlers = [state_handler(w) for w in chain]
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
        via: ``"native"`` or ``"replay"``; defaults to the env's own ``restore_kind``, except that an env whose
            native state needs a key (``TextEnv.native_state_needs_key``) restores an unauthenticated checkpoint
            by replay. Every env can also restore by verified replay of the recorded actions (slower; a
            cross-check of native restore).

    Raises:
        CheckpointMismatchError: another env id, kwargs, wrapper stack, or a task not in this env's split.
        CheckpointVersionError: written by another library version or a newer format.
        CorruptCheckpointError: the saved state is not one this env and wrapper stack can have saved. If it
            only shows while the env loads it natively, the env drops its episode (the next step asks for a
            reset) rather than continue from a half-loaded state.
        CheckpointAuthError: ``via="native"`` asked for an unauthenticated checkpoint of an env whose native state
            needs a key.
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
    handlers = [state_handler(w) for w in chain]
    base: TextEnv = env.unwrapped
    if ckpt.task_id not in base.task_ids:
        raise CheckpointMismatchError(
            f"checkpoint task {ckpt.task_id!r} is not in split {base.split!r} of this env; "
            "make the env with the kwargs in ckpt.env_kwargs"
        )
    if via is None:
        via = ckpt.restore_kind
        if via == "native" and base.native_state_needs_key and not ckpt.authenticated:
            logger.info("%s: restoring an unauthenticated checkpoint by replay (no key)", type(base).__name__)
            via = "replay"
    elif via == "native" and base.native_state_needs_key and not ckpt.authenticated:
        raise CheckpointAuthError(
            f"{type(base).__name__} loads native engine state only from an authenticated checkpoint: read the bytes "
            f"with their key (key= or {KEY_VARIABLE}), or with trusted=True if you wrote them; or restore via='replay'"
        )
    if via not in ("native", "replay"):
        raise ValueError(f"via must be 'native' or 'replay', got {via!r}")
    if via == "native" and base.restore_kind != "native":
        raise CheckpointMismatchError(f"{type(base).__name__} restores by replay only; pass via='replay'")
    _check_payload_digest(ckpt.payload, ckpt.digest)
    state = _checked_state(codec.decode(ckpt.payload), ckpt, len(chain))
    previous = [get_state(w) for w, (get_state, _) in zip(chain, handlers)]
    try:  # wrappers first, since their states are only checked as they are set: a refusal is undone
        _set_wrapper_states(chain, handlers, state["wrappers"])
    except (AttributeError, IndexError, KeyError, TypeError, ValueError, R3LEnvError) as exc:
        _set_wrapper_states(chain, handlers, previous)
        if isinstance(exc, R3LEnvError):
            raise
        raise CorruptCheckpointError(f"checkpoint holds a wrapper state that does not fit: {exc}") from exc
    try:
        base._restore_state(state["env"], via=via)
    except R3LEnvError:
        _set_wrapper_states(chain, handlers, previous)
        raise
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        _set_wrapper_states(chain, handlers, previous)
        base._episode = None  # half-loaded engine state: never continue from it
        raise CorruptCheckpointError(
            f"checkpoint state does not fit {type(base).__name__} ({type(exc).__name__}: {exc}); the env's episode "
            "was dropped: reset it, or restore a checkpoint it wrote"
        ) from exc


def _set_wrapper_states(chain: list[gym.Wrapper], handlers: list, states: list[Any]) -> None:
    for wrapper, (_, set_state), wrapper_state in zip(chain, handlers, states):
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
    require(isinstance(episode, EpisodeRecord), "no episode record")
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
