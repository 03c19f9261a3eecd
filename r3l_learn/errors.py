"""Typed errors of ``r3l_learn``; messages say how to fix the problem."""

from __future__ import annotations

from typing import Any

__all__ = ["ModelNotFoundError", "R3LLearnError", "ResumeError", "brief"]


class R3LLearnError(Exception):
    """Base class of every error raised by ``r3l_learn`` for a violated contract."""


class ModelNotFoundError(R3LLearnError, FileNotFoundError):
    """A model name that is neither an embedded model nor a local HF model folder."""


class ResumeError(R3LLearnError):
    """A run that ``--resume`` cannot continue: no checkpoint, an unreadable or malformed one, one that does not fit
    the model, optimiser or configuration, or malformed run files beside it (metrics, evals, config)."""


def brief(value: Any, limit: int = 60) -> str:
    """How a value read from an untrusted file is shown in an error message: short, and never itself the cause of
    another error (``repr`` of an integer of more than 4300 digits raises) or of a copy of a huge string."""
    if isinstance(value, str):
        text = repr(value[:limit])
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        text = f"a {value.bit_length()}-bit integer"
    elif value is None or isinstance(value, bool | int | float):
        text = repr(value)
    else:
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
