"""Memoise the grammar parsing that ALFWorld repeats every step (in memory; no file is patched).

TextWorld's PDDL env re-parses the same text-grammar templates with tatsu on every step and every admissible
command (~65 % of a step on small games). Both parsers are pure functions of their text arguments, so caching
them changes nothing but speed: the parsed symbol list is deep-copied per call because ``derive`` mutates it.

On households of ALFWorld's real size (30-40 receptacles) the next cost is ``textgen.copy_context``, which
deep-copies the ``variables`` and ``mapping`` dicts for every grammar symbol. Derivation only ever adds keys
to those dicts (``query`` updates its copy); the values (entity infos, placeholders, variables) are never
mutated after loading. So a copy of the dicts themselves is equivalent, and much cheaper. Equivalence is
checked by comparing full transcripts with and without these speed-ups (tests and the benchmark).
"""

from __future__ import annotations

import copy
import os
import threading
from typing import Any

__all__ = ["install"]

_lock = threading.Lock()
_installed = False


def install() -> None:
    """Install the three speed-ups in this process (idempotent). ``R3L_ALFWORLD_SPEEDUPS=0`` disables them."""
    global _installed
    with _lock:
        if _installed or os.environ.get("R3L_ALFWORLD_SPEEDUPS", "1") == "0":
            return
        import textworld.envs.pddl.textgen as textgen
        from textworld.logic import Rule

        parse = textgen._parse_and_convert
        parsed: dict[Any, Any] = {}

        def cached_parse_and_convert(*args: Any, **kwargs: Any) -> Any:
            key = (args, tuple(sorted((k, v) for k, v in kwargs.items() if k != "trace")))
            if key not in parsed:
                parsed[key] = parse(*args, **kwargs)
            return copy.deepcopy(parsed[key])

        query = Rule.parse_conjunctive_query.__func__
        queries: dict[str, Any] = {}

        def cached_parse_conjunctive_query(cls: type, expr: str) -> Any:
            if expr not in queries:
                queries[expr] = query(cls, expr)
            return queries[expr]

        def shallow_copy_context(context: dict[str, Any]) -> dict[str, Any]:
            return {
                "state": context["state"],
                "facts": context["facts"],
                "variables": dict(context["variables"]),
                "mapping": dict(context["mapping"]),
                "entity_infos": context["entity_infos"],
            }

        textgen._parse_and_convert = cached_parse_and_convert
        textgen.copy_context = shallow_copy_context
        Rule.parse_conjunctive_query = classmethod(cached_parse_conjunctive_query)
        _installed = True
