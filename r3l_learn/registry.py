"""A named registry of functions (verl's ``@register_*`` pattern) whose entries carry what the learner needs to
know about them, so that nothing about a registered function is written down anywhere else.

An entry declares two things:

- its **hyperparameters**: the function's keyword-only arguments (other than the registry's data arguments),
  each with its default. The signature is the declaration, so a default lives in exactly one place;
- its **properties**: flags given at registration (``@register_objective("ppo_clip", uses_ratio=True)``), typed by
  the registry's properties dataclass, which also holds each flag's default.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["NoProperties", "Registry", "Spec"]

F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class NoProperties:
    """The properties of a registry whose entries declare none."""


@dataclass(frozen=True)
class Spec:
    """One registered function and its declarations.

    Attributes:
        name: its registered name.
        fn: the function.
        hyper: hyperparameter name -> default, in signature order.
        properties: an instance of the registry's properties dataclass.
    """

    name: str
    fn: Callable
    hyper: Mapping[str, Any]
    properties: Any

    def kwargs(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of a call: this entry's hyperparameters, taken from ``values`` where given there,
        else their defaults (names ``values`` holds for other entries are left out)."""
        return {name: values.get(name, default) for name, default in self.hyper.items()}


class Registry(dict[str, Callable]):
    """``name -> function``, plus :meth:`spec` for what each entry declares.

    Args:
        kind: what it holds, for error messages ("advantage").
        properties: the frozen dataclass of the flags an entry may declare (field defaults are the flags' defaults).
        data_keywords: keyword-only arguments that carry data, not hyperparameters (e.g. an objective's
            ``advantages``).
    """

    def __init__(self, kind: str, properties: type = NoProperties, data_keywords: tuple[str, ...] = ()):
        super().__init__()
        self.kind = kind
        self.properties = properties
        self.data_keywords = data_keywords
        self._specs: dict[str, Spec] = {}

    def register(self, name: str, **properties: Any) -> Callable[[F], F]:
        """Decorator: add the function under ``name`` (names are unique) with the given property flags."""
        known = [f.name for f in dataclasses.fields(self.properties)]
        unknown = sorted(set(properties) - set(known))
        if unknown:
            raise ValueError(f"{self.kind} {name!r}: unknown properties {unknown}; a {self.kind} may declare {known}")

        def add(fn: F) -> F:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._specs[name] = Spec(name, fn, self._hyperparameters(name, fn), self.properties(**properties))
            self[name] = fn
            return fn

        return add

    def get_fn(self, name: str) -> Callable:
        """The function registered as ``name``; the error lists the known names."""
        return self.spec(name).fn

    def spec(self, name: str) -> Spec:
        """What ``name`` declares (its hyperparameters and properties); the error lists the known names."""
        if name not in self:
            raise KeyError(f"unknown {self.kind} {name!r}; registered: {sorted(self)}")
        spec = self._specs.get(name)
        if spec is not None and spec.fn is self[name]:
            return spec
        # set as a plain dict item (e.g. a test's monkeypatch): default properties; not cached, so that the
        # registered entry's own declarations come back with its function
        return Spec(name, self[name], self._hyperparameters(name, self[name]), self.properties())

    def _hyperparameters(self, name: str, fn: Callable) -> dict[str, Any]:
        hyper = {}
        for param in inspect.signature(fn).parameters.values():
            if param.kind is param.VAR_KEYWORD:
                raise ValueError(
                    f"{self.kind} {name!r} takes **{param.name}: declare each hyperparameter as a keyword-only "
                    "argument with its default instead, so the learner can list and check them"
                )
            if param.kind is not param.KEYWORD_ONLY or param.name in self.data_keywords:
                continue
            if param.default is param.empty:
                raise ValueError(f"{self.kind} {name!r}: hyperparameter {param.name!r} needs a default")
            hyper[param.name] = param.default
        return hyper
