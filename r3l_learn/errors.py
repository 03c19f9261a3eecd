"""Typed errors of ``r3l_learn``; messages say how to fix the problem."""

from __future__ import annotations

__all__ = ["ModelNotFoundError", "R3LLearnError", "ResumeError"]


class R3LLearnError(Exception):
    """Base class of every error raised by ``r3l_learn`` for a violated contract."""


class ModelNotFoundError(R3LLearnError, FileNotFoundError):
    """A model name that is neither an embedded model nor a local HF model folder."""


class ResumeError(R3LLearnError):
    """A run that ``--resume`` cannot continue: no checkpoint, an unreadable or malformed one, one that does not fit
    the model, optimiser or configuration, or malformed run files beside it (metrics, evals, config)."""
