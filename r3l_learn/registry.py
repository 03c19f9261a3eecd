"""A named registry of functions (verl's ``@register_*`` pattern): a dict with a decorator and a lookup whose
error lists what is registered."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["Registry"]

F = TypeVar("F", bound=Callable)


class Registry(dict[str, Callable]):
    """``name -> function``; ``kind`` names what it holds in error messages."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[F], F]:
        """Decorator: add the function under ``name`` (names are unique)."""

        def add(fn: F) -> F:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self[name] = fn
            return fn

        return add

    def get_fn(self, name: str) -> Callable:
        """The function registered as ``name``; the error lists the known names."""
        if name not in self:
            raise KeyError(f"unknown {self.kind} {name!r}; registered: {sorted(self)}")
        return self[name]
