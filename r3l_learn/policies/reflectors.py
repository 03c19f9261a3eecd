"""Who reflects for reflect-retry groups: the rows of :data:`REFLECTORS`, and :func:`make_reflector`.

A run names its reflector in one word (``TrainConfig.reflector``, ``r3l train --reflector``): a row's name
(``self``, ``self-structured``, ``oracle``), ``openai:MODEL`` (the ``openai`` row with a model), or else a model
name or folder (the ``model`` row). :func:`parse_reflector` reads that word, the config validates it once
(:func:`reflector_problem`), and :func:`make_reflector` builds the reflector. A new reflector is one function and
one ``@register_reflector`` line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from r3l_learn.algorithms.registry import Registry
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflection import PolicyReflector, Reflector
from wrappers.retry.structured_reflection import StructuredReflector

__all__ = [
    "REFLECTORS",
    "ReflectorProperties",
    "make_reflector",
    "parse_reflector",
    "reflector_help",
    "reflector_problem",
    "register_reflector",
]

#: the row of a reflector written ``openai:MODEL``, and the row of any other word (a model name or folder)
OPENAI, MODEL = "openai", "model"


@dataclass(frozen=True)
class ReflectorProperties:
    """What a run must know about a reflector.

    Attributes:
        uses_policy: it reflects with the policy being trained (the TRL bridge hands it the trainer's).
        privileged: it reads env knowledge the agent does not have (the oracle).
        takes_model: it is written with a model (``openai:MODEL``, or a model name or folder itself).
        takes_base_url: it talks to a server, whose address ``reflector_base_url`` gives.
    """

    uses_policy: bool = False
    privileged: bool = False
    takes_model: bool = False
    takes_base_url: bool = False


#: name -> ``fn(policy, model, *, base_url, device, seed) -> Reflector``
REFLECTORS = Registry("reflector", ReflectorProperties, data_keywords=("base_url", "device", "seed"))
register_reflector = REFLECTORS.register


@register_reflector("self", uses_policy=True)
def self_reflector(policy: Any, model: str, *, base_url: str | None = None, device: str = "cpu", seed: int = 0):
    """The trained policy reflects (the paper's setting)."""
    return PolicyReflector(policy)


@register_reflector("self-structured", uses_policy=True)
def self_structured_reflector(
    policy: Any, model: str, *, base_url: str | None = None, device: str = "cpu", seed: int = 0
):
    """The policy's own judgement as scored choices (always parses)."""
    return StructuredReflector(policy)


@register_reflector("oracle", privileged=True)
def oracle_reflector(policy: Any, model: str, *, base_url: str | None = None, device: str = "cpu", seed: int = 0):
    """Privileged env knowledge."""
    return OracleReflector()


@register_reflector(OPENAI, takes_model=True, takes_base_url=True)
def openai_reflector(policy: Any, model: str, *, base_url: str | None = None, device: str = "cpu", seed: int = 0):
    """openai:MODEL, a model behind an OpenAI-compatible server (see --reflector-base-url)."""
    from r3l_learn.policies.openai import OpenAIReflector

    return OpenAIReflector(model, base_url=base_url)


@register_reflector(MODEL, takes_model=True)
def model_reflector(policy: Any, model: str, *, base_url: str | None = None, device: str = "cpu", seed: int = 0):
    """Any other word: a model name or folder, loaded here, reflects."""
    from r3l_learn.loop.evaluate import load_policy

    return PolicyReflector(load_policy(model, device=device, seed=seed))


def parse_reflector(word: str) -> tuple[str, str]:
    """``(row, model)`` of a reflector's word: ``"openai:gpt-x"`` -> ``("openai", "gpt-x")``, ``"oracle"`` ->
    ``("oracle", "")``, another word -> ``("model", word)``."""
    prefix, sep, rest = word.partition(":")
    if sep and prefix == OPENAI:
        return OPENAI, rest
    if word in REFLECTORS and not REFLECTORS.spec(word).properties.takes_model:
        return word, ""
    return MODEL, word


def reflector_problem(word: str, base_url: str | None = None) -> str | None:
    """None if ``word`` (with ``base_url``) names a reflector, else what is wrong (the config's one check)."""
    if not isinstance(word, str) or not word:
        return f"reflector must be a non-empty word, got {word!r}; {reflector_help()}"
    row, model = parse_reflector(word)
    if REFLECTORS.spec(row).properties.takes_model and not model:
        return f"reflector {word!r} names no model"
    if base_url is not None and not REFLECTORS.spec(row).properties.takes_base_url:
        return "reflector_base_url applies to an openai:MODEL reflector only"
    return None


def make_reflector(
    word: str, policy: Any, *, base_url: str | None = None, device: str = "cpu", seed: int = 0
) -> Reflector:
    """The reflector ``word`` names (:func:`parse_reflector`), reflecting with ``policy`` where its row uses it.

    Raises:
        ValueError: ``word`` and ``base_url`` name no reflector (:func:`reflector_problem`).
    """
    problem = reflector_problem(word, base_url)
    if problem is not None:
        raise ValueError(problem)
    row, model = parse_reflector(word)
    build: Callable[..., Reflector] = REFLECTORS.get_fn(row)
    return build(policy, model, base_url=base_url, device=device, seed=seed)


def reflector_help() -> str:
    """Who may reflect, for ``--reflector``'s help: every row's word and what it is."""
    return "; ".join(
        REFLECTORS.summary(name)
        if REFLECTORS.spec(name).properties.takes_model
        else f"{name}: {REFLECTORS.summary(name)}"
        for name in REFLECTORS.names()
    )
