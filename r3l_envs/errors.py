"""The one error hierarchy of ``r3l_envs``.

Every error raised for a violated contract derives from :class:`R3LEnvError`, so callers can catch the
family without catching programming errors. Messages say what went wrong *and* how to fix it.
"""

from __future__ import annotations

__all__ = [
    "CheckpointAuthError",
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointVersionError",
    "CorruptCheckpointError",
    "DataNotFoundError",
    "EngineError",
    "EnvCheckError",
    "EnvClosedError",
    "EnvPicklingError",
    "MalformedDataError",
    "R3LEnvError",
    "ReplayDivergenceError",
    "UnencodableStateError",
    "UnknownTaskError",
    "UnsupportedWrapperError",
]


class R3LEnvError(Exception):
    """Base class of every error raised by ``r3l_envs``."""


class UnknownTaskError(R3LEnvError, KeyError):
    """A ``task_id`` that the env's split does not contain."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0]) if self.args else ""


class DataNotFoundError(R3LEnvError, FileNotFoundError):
    """An env needs data that is not on this machine; the message says what to download and where."""


class MalformedDataError(R3LEnvError, ValueError):
    """A data file exists but does not have the expected schema; the message names the file and the fix."""


class EngineError(R3LEnvError, RuntimeError):
    """An env's engine failed to start, died, halted on a runtime error or overran its time budget (the
    ScienceWorld JVM; the TextWorld interpreter, whose every call runs under a watchdog).

    The env stays usable: ``reset()`` or ``r3l_envs.restore(env, ckpt)`` starts a new engine process.
    """


class EnvClosedError(R3LEnvError, RuntimeError):
    """The env was used after ``close()``."""


class EnvPicklingError(R3LEnvError, TypeError):
    """An env cannot be pickled or deep-copied (see ``TextEnv.__reduce__``).

    Envs pickle as their constructor arguments plus checkpoint state; when that is impossible, move the
    episode with ``r3l_envs.checkpoint(env).to_bytes()`` and ``r3l_envs.restore()`` instead.
    """


class CheckpointError(R3LEnvError):
    """Base class of checkpoint/restore errors. A failed restore leaves the env as it was."""


class CheckpointMismatchError(CheckpointError, ValueError):
    """The checkpoint belongs to another env id, other kwargs, another wrapper stack or an unknown task."""


class CheckpointVersionError(CheckpointError):
    """The checkpoint was written by another library version or a newer checkpoint format."""


class CorruptCheckpointError(CheckpointError, ValueError):
    """The bytes are not a checkpoint, are truncated, fail their digest, or decode to something that is not
    the state of a checkpoint. Decoding never runs code from the bytes (see :mod:`r3l_envs.codec`)."""


class CheckpointAuthError(CorruptCheckpointError):
    """A checkpoint failed its keyed check: its HMAC does not verify under the key given, it has none although a
    key was given, or it has one and no key was given to verify it (see :meth:`r3l_envs.Checkpoint.from_bytes`)."""


class UnencodableStateError(CheckpointError, TypeError):
    """An env's or wrapper's checkpoint state holds a type that checkpoints cannot carry (see
    :mod:`r3l_envs.codec`): return plain data, or register the record type."""


class UnsupportedWrapperError(CheckpointError, TypeError):
    """A wrapper in the stack holds state that ``r3l_envs`` does not know how to save."""


class ReplayDivergenceError(CheckpointError, RuntimeError):
    """Replaying the recorded actions produced a different observation than the one recorded."""


class EnvCheckError(R3LEnvError, AssertionError):
    """``r3l_envs.check_env`` found a contract violation; the message names the fix."""
