"""A named registry of functions (verl's ``@register_*`` pattern) whose entries carry what the learner needs to
know about them, so that nothing about a registered function is written down anywhere else.

An entry declares two things:

- its **hyperparameters**: the function's keyword-only arguments (other than the registry's data arguments),
  each with its default. The signature is the declaration, so a default lives in exactly one place;
- its **properties**: flags given at registration (``@register_objective("ppo_clip", uses_ratio=True)``), typed by
  the registry's properties dataclass, which also holds each flag's default.

A choice that names no function of its own (where a retry restarts, how the TRL bridge builds groups) is a
:class:`Choices`: rows of properties with a help line. Both validate their own names (:meth:`Registry.check`,
:meth:`Registry.problem`, one error that lists the known names) and give a flag its ``choices`` and help
(:meth:`Registry.names`, :meth:`Registry.describe`), so no other module lists them.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["Choices", "NoProperties", "Registry", "Spec", "UnknownChoiceError"]

F = TypeVar("F", bound=Callable)


class UnknownChoiceError(KeyError, ValueError):
    """A name that is not registered in a registry of choices; the message lists the known names.

    A :class:`KeyError` (a registry is a mapping) and a :class:`ValueError` (a bad configuration value).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class _Named:
    """What a registry of choices answers about its names (mixed into :class:`Registry` and :class:`Choices`)."""

    kind: str

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order (a flag's ``choices``)."""
        return tuple(self)  # type: ignore[call-overload]

    def problem(self, name: Any) -> str | None:
        """None if ``name`` is registered, else the error message (for a config that collects its problems)."""
        if isinstance(name, str) and name in self:  # type: ignore[operator]
            return None
        return f"unknown {self.kind} {name!r}; registered: {', '.join(self.names())}"

    def check(self, name: Any) -> str:
        """``name`` itself, if registered.

        Raises:
            UnknownChoiceError: it is not; the message lists the known names.
        """
        problem = self.problem(name)
        if problem is not None:
            raise UnknownChoiceError(problem)
        return name

    def summary(self, name: str) -> str:
        """One line about the entry ``name`` (for help texts)."""
        raise NotImplementedError

    def describe(self) -> str:
        """``name: what it is`` for every entry, ``;``-separated (a flag's help)."""
        return "; ".join(f"{name}: {self.summary(name)}" for name in self.names())


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


class Registry(_Named, dict[str, Callable]):
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
        """What ``name`` declares (its hyperparameters and properties).

        Raises:
            UnknownChoiceError: ``name`` is not registered (the message lists the known names).
        """
        self.check(name)
        spec = self._specs.get(name)
        if spec is not None and spec.fn is self[name]:
            return spec
        # set as a plain dict item (e.g. a test's monkeypatch): default properties; not cached, so that the
        # registered entry's own declarations come back with its function
        return Spec(name, self[name], self._hyperparameters(name, self[name]), self.properties())

    def summary(self, name: str) -> str:
        """The first line of the entry's docstring, as a phrase (no capital for a plain word, no full stop)."""
        doc = (self[name].__doc__ or "").strip()
        if not doc:
            return name
        line = doc.splitlines()[0].rstrip(".")
        first = line.split()[0]
        return line[0].lower() + line[1:] if first.isalpha() and first[1:].islower() else line

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


class Choices(_Named, dict[str, Any]):
    """``name -> properties`` for a choice whose entries name no function: each row is an instance of the
    properties dataclass, with a help line.

    Args:
        kind: what it holds, for error messages ("restart point").
        properties: the frozen dataclass of each row's properties (field defaults are their defaults).
    """

    def __init__(self, kind: str, properties: type = NoProperties):
        super().__init__()
        self.kind = kind
        self.properties = properties
        self._help: dict[str, str] = {}

    def add(self, name: str, help: str, **properties: Any) -> None:
        """Add the row ``name`` (names are unique) with its help line and properties."""
        if name in self:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        try:
            self[name] = self.properties(**properties)
        except TypeError as exc:
            known = [f.name for f in dataclasses.fields(self.properties)]
            raise ValueError(f"{self.kind} {name!r}: {exc}; a {self.kind} may declare {known}") from None
        self._help[name] = help

    def spec(self, name: str) -> Any:
        """The properties of ``name``.

        Raises:
            UnknownChoiceError: ``name`` is not registered (the message lists the known names).
        """
        return self[self.check(name)]

    def summary(self, name: str) -> str:
        """The row's help line."""
        return self._help[name]
