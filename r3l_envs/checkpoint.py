"""Exact checkpoint/restore through the whole ``gym.make`` wrapper stack.

``checkpoint(env)`` captures the base env (natively, or as a verified action log) *and* the state of every
wrapper around it (``TimeLimit``'s elapsed steps, ``OrderEnforcing``'s reset flag, ...). ``restore(env, ckpt)``
validates everything first — env id, kwargs, wrapper stack, task, versions, integrity — and only then
changes the env, so a checkpoint that does not belong raises a typed error and leaves the env untouched.

Checkpoints are pickles: restore only checkpoints you wrote (as with ``torch.load``).
"""

from __future__ import annotations

import copy
import hashlib
import pickle
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker, TimeLimit

from r3l_envs._version import __version__
from r3l_envs.core import RestoreKind, TextEnv
from r3l_envs.errors import (
    CheckpointMismatchError,
    CheckpointVersionError,
    CorruptCheckpointError,
    UnsupportedWrapperError,
)

__all__ = ["FORMAT_VERSION", "Checkpoint", "checkpoint", "register_wrapper_state", "restore"]

#: Version of the byte layout written by :meth:`Checkpoint.to_bytes`. Readers refuse newer formats.
FORMAT_VERSION = 1
_MAGIC = b"R3LCKPT\x00"
_HEADER = struct.Struct(">H32s")  # format version, sha256 of the body

# Kwargs that change how an env is shown, not how it behaves: a checkpoint may move across them.
_PRESENTATION_KWARGS = frozenset({"render_mode"})


@dataclass(frozen=True)
class Checkpoint:
    """A restorable snapshot of an env and its wrappers at one step of one episode.

    The metadata is readable without unpickling the state; ``payload`` holds the state itself, pickled once
    at capture so that every restore starts from a fresh copy.
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

    @property
    def digest(self) -> str:
        """sha256 of the saved state: equal digests mean identical saved states."""
        return hashlib.sha256(self.payload).hexdigest()

    def to_bytes(self) -> bytes:
        """Serialise with a magic header, the format version and an integrity digest."""
        body = pickle.dumps(self.__dict__, protocol=pickle.HIGHEST_PROTOCOL)
        return _MAGIC + _HEADER.pack(FORMAT_VERSION, hashlib.sha256(body).digest()) + body

    @classmethod
    def from_bytes(cls, data: bytes) -> Checkpoint:
        """Inverse of :meth:`to_bytes`; raises :class:`CorruptCheckpointError` or :class:`CheckpointVersionError`."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CorruptCheckpointError(f"expected bytes from Checkpoint.to_bytes(), got {type(data).__name__}")
        data = bytes(data)
        start = len(_MAGIC) + _HEADER.size
        if not data.startswith(_MAGIC) or len(data) < start:
            raise CorruptCheckpointError("these bytes are not an r3l checkpoint (bad magic header or truncated)")
        version, digest = _HEADER.unpack_from(data, len(_MAGIC))
        if version > FORMAT_VERSION:
            raise CheckpointVersionError(
                f"checkpoint format {version} is newer than this library reads ({FORMAT_VERSION}); "
                "upgrade r3l to the version that wrote it"
            )
        body = data[start:]
        if hashlib.sha256(body).digest() != digest:
            raise CorruptCheckpointError("checkpoint digest mismatch: the bytes were truncated or altered")
        try:
            fields = pickle.loads(body)
            return cls(**fields)
        except Exception as exc:  # any unpickling failure means the same thing to the caller
            raise CorruptCheckpointError(f"checkpoint body does not decode: {exc}") from exc


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
    return Checkpoint(
        env_id=env_id,
        env_kwargs=kwargs,
        wrappers=tuple(_signature(w) for w in chain),
        task_id=episode.task_id,
        step=episode.step,
        restore_kind=base.restore_kind,
        library_version=__version__,
        format_version=FORMAT_VERSION,
        payload=pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL),
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
    try:
        state = pickle.loads(ckpt.payload)
    except Exception as exc:
        raise CorruptCheckpointError(f"checkpoint state does not decode: {exc}") from exc
    base._restore_state(state["env"], via=via)
    for wrapper, (_, set_state), wrapper_state in zip(chain, handlers, state["wrappers"]):
        set_state(wrapper, wrapper_state)
