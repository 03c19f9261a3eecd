"""Argument forms the ``r3l`` subcommands share: env kwargs as ``key=value``, and env ids checked with a hint.

Light on purpose (no torch, no transformers): ``r3l check`` and ``r3l show`` use it too.
"""

from __future__ import annotations

import ast
import difflib

__all__ = ["env_id_problem", "key_value", "parse_kwargs"]


def key_value(pair: str) -> tuple[str, object]:
    """``"max_attempts=5"`` -> ``("max_attempts", 5)``: the value as a Python literal where it is one, else text.

    Raises ValueError (argparse reports it as a usage error) when ``pair`` has no ``=`` or no key.
    """
    key, sep, value = pair.partition("=")
    if not sep or not key:
        raise ValueError(f"expected key=value, got {pair!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


key_value.__name__ = "key=value"  # how argparse names the type in "invalid key=value value: ..."


def parse_kwargs(pairs: list[str] | dict[str, object]) -> dict[str, object]:
    """``["split=test", "max_attempts=5"]`` -> ``{"split": "test", "max_attempts": 5}`` (a dict passes through)."""
    if isinstance(pairs, dict):
        return dict(pairs)
    return dict(p if isinstance(p, tuple) else key_value(p) for p in pairs)


def env_id_problem(env_id: str) -> str | None:
    """None if ``env_id`` is registered, else a message naming the closest registered ids."""
    import gymnasium as gym

    import r3l_envs

    if env_id in gym.registry:
        return None
    known = r3l_envs.list_envs()
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.5)
    close = close or [e for e in known if env_id.lower().split("/")[-1][:4] in e.lower()]
    hint = f"did you mean {' or '.join(map(repr, close))}?" if close else f"registered: {', '.join(known)}"
    return f"env {env_id!r} is not registered; {hint} (`r3l envs` lists them)"
