"""Typed errors of ``r3l_learn``; messages say how to fix the problem."""

from __future__ import annotations

__all__ = ["ModelNotFoundError", "R3LLearnError"]


class R3LLearnError(Exception):
    """Base class of every error raised by ``r3l_learn`` for a violated contract."""


class ModelNotFoundError(R3LLearnError, FileNotFoundError):
    """A model name that is neither an embedded model nor a local HF model folder."""
