"""Argument forms the ``r3l`` subcommands share: env kwargs as ``key=value``, env ids checked with a hint, and
flags listed under one spelling (``--out-dir``, ``--fill, --no-fill``) while older spellings still parse.

Light on purpose (no torch, no transformers): ``r3l check`` and ``r3l show`` use it too.
"""

from __future__ import annotations

import argparse
import ast
import difflib

__all__ = ["BooleanFlag", "env_id_problem", "key_value", "list_one_spelling", "parse_kwargs"]


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


class BooleanFlag(argparse.BooleanOptionalAction):
    """``--x`` sets True and ``--no-x`` False (argparse's ``BooleanOptionalAction``), and the spellings that
    ``transformers.HfArgumentParser`` gave the same flag, ``--x_y`` and ``--no_x_y`` (``--no_x``), still parse.

    Use it with :func:`list_one_spelling`, which lists just ``--x, --no-x``.
    """

    def __init__(self, option_strings: list[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, **kwargs)
        longs = [o[2:] for o in option_strings if o.startswith("--")]
        older = [f"--no_{name}" for name in longs if "-" not in name]
        self.option_strings += older
        self.negatives = frozenset([f"--no-{name}" for name in longs] + older)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, option_string not in self.negatives)


def list_one_spelling(parser: argparse.ArgumentParser) -> None:
    """List each of ``parser``'s flags in its help and usage under one spelling: its short option (``-v``), if any,
    and its first long option without an underscore (``--out-dir``, not ``--out_dir`` or the alias ``--out``),
    with that option's ``--no-`` twin for a boolean flag (:class:`BooleanFlag`, ``argparse.BooleanOptionalAction``).

    The other spellings still parse, unlisted: argparse finds a flag by the table of option strings that the
    parser filled when the flag was added, and lists a flag by its ``option_strings``, which this trims.
    """
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs:
            continue
        first = next((o for o in longs if "_" not in o), longs[0])
        # argparse's own boolean flag reads ``--no-x`` only while it is among ``option_strings``: keep it there
        negative = isinstance(action, argparse.BooleanOptionalAction)
        listed = {first, f"--no-{first[2:]}"} if negative else {first}
        action.option_strings = [o for o in action.option_strings if not o.startswith("--") or o in listed]
