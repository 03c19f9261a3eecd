"""Speed-ups for the work ALFWorld's engine repeats, in memory only (no file is patched).

0. One parse at a time. TextWorld parses with module-level tatsu parsers that keep their parse state on the
   parser object, shared by every env in the process: two threads parsing at once corrupt each other. Every
   parse takes one lock (always, even with the speed-ups off), so envs may run in threads, one per env.

Every one of them returns exactly what the code it wraps would return; transcripts with and without them are
compared in the tests and the benchmark. They are on by default; :func:`set_enabled` switches them for the
process (``set_enabled(False)``: the engine as shipped, for a baseline), :func:`disabled` for one block.

1. Grammar parsing. TextWorld's PDDL env re-parses the same grammar templates with tatsu for every command
   of every step. The parsers are pure functions of their text, so their results are cached (the parsed
   symbol list is deep-copied per call because ``derive`` mutates it).
2. ``textgen.copy_context`` deep-copies the ``variables`` and ``mapping`` dicts for every grammar symbol.
   Derivation only ever adds keys to those dicts; their values (entity infos, placeholders, variables) are
   never mutated after loading, so copying the dicts themselves is equivalent and much cheaper.
3. Derivations. A step derives the text of every admissible command (30-40 in a kitchen) and the feedback
   from the grammar, and most of them come out the same as in an earlier step. A derivation reads the game
   state only through ``State.facts_with_signature`` and ``State.variables_of_type`` (its eval expressions
   read entity attributes only, as everywhere in ALFWorld's grammar); so each derivation is
   cached with the exact sets it read, and reused when the same start symbol, mapping and variables meet a
   state whose sets are equal to those. Equal inputs give equal text (derivation has no other input: no
   randomness, no clock); the cache lives on the grammar, i.e. per loaded game.
4. PDDL to SAS translation. Every ``reset`` translates the same domain and problem twice (about a second
   for a kitchen); the translation is a pure function of the texts and its outputs are only read, so the
   last few are kept. The translator also overwrites ``sys.argv``; the wrapper puts it back.
5. Fact lists. ``_gather_infos`` lists every fact of the state once per admissible command; the list (in
   the same order) is kept until the next ``add_fact``/``remove_fact`` (or :func:`facts_changed`).
6. Game logic. Every engine that loads a game parses the game's grammar and action templates with tatsu
   (about half a second; generated games all share one grammar), so a new env instance paid it on its first
   reset or restore. The parse is a pure function of its text: the last few are kept, and each load gets a
   deep copy (the engine keeps what it gets in its own GameLogic).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

__all__ = ["disabled", "enabled", "facts_changed", "install", "set_enabled"]

_lock = threading.Lock()
_translating = threading.Lock()
_installed = False
_active = True  # set_enabled() / disabled() switch it; the parser lock holds either way

_DERIVATIONS_PER_KEY = 16  # variants kept per (start symbol, mapping): states differ in what a text reads
_SAS_CACHE_SIZE = 12  # translations kept (two per game): ~1.5 MB each for a kitchen
_LOGIC_CACHE_SIZE = 4  # game logic parses kept: generated games share one grammar, official ones a few
_EMPTY: frozenset = frozenset()


def enabled() -> bool:
    """Whether the speed-ups are in effect now."""
    return _active


def set_enabled(on: bool) -> None:
    """Switch the speed-ups on or off for every ALFWorld env in this process (on by default).

    Off runs the engine as shipped, e.g. for a speed baseline; transcripts are the same either way. The
    switch is process-wide because the speed-ups wrap TextWorld's module-level functions; the parser lock
    (item 0) stays on, since envs in threads need it. Set it before envs run, not while they step."""
    global _active
    _active = bool(on)


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the engine without the speed-ups inside the block (for equivalence checks; not thread-safe)."""
    global _active
    previous, _active = _active, False
    try:
        yield
    finally:
        _active = previous


def install() -> None:
    """Install the speed-ups in this process (idempotent; they stay dormant while :func:`enabled` is False)."""
    global _installed
    with _lock:
        if _installed:
            return
        _install_parser_lock()
        _install_logic_cache()
        _install_parse_caches()
        _install_derivation_cache()
        _install_sas_cache()
        _install_fact_list_cache()
        _installed = True


# ---------------------------------------------------------------------- 0: one parse at a time
_parsing = threading.RLock()


def _install_parser_lock() -> None:
    import textworld.envs.pddl.logic as pddl_logic
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic as logic

    for module in (logic, pddl_logic, textgen):
        module._parse_and_convert = _one_at_a_time(module._parse_and_convert)


def _one_at_a_time(parse: Any) -> Any:
    @functools.wraps(parse)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _parsing:
            return parse(*args, **kwargs)

    return locked


# ---------------------------------------------------------------------- 6: game logic
def _install_logic_cache() -> None:
    import textworld.envs.pddl.logic as pddl_logic

    parse = pddl_logic._parse_and_convert  # already one at a time (0)
    parsed: OrderedDict[Any, Any] = OrderedDict()
    guard = threading.Lock()

    def cached_parse_and_convert(*args: Any, **kwargs: Any) -> Any:
        if not _active:
            return parse(*args, **kwargs)
        key = (args, tuple(sorted(kwargs.items())))
        with guard:
            found = parsed.get(key)
            if found is not None:
                parsed.move_to_end(key)
        if found is None:
            found = parse(*args, **kwargs)
            with guard:
                parsed[key] = found
                while len(parsed) > _LOGIC_CACHE_SIZE:
                    parsed.popitem(last=False)
        return copy.deepcopy(found)

    pddl_logic._parse_and_convert = cached_parse_and_convert


# ---------------------------------------------------------------------- 1 and 2: parsing, contexts
def _install_parse_caches() -> None:
    import textworld.envs.pddl.textgen as textgen
    from textworld.logic import Rule

    parse = textgen._parse_and_convert
    parsed: dict[Any, Any] = {}

    def cached_parse_and_convert(*args: Any, **kwargs: Any) -> Any:
        if not _active:
            return parse(*args, **kwargs)
        key = (args, tuple(sorted((k, v) for k, v in kwargs.items() if k != "trace")))
        if key not in parsed:
            parsed[key] = parse(*args, **kwargs)
        return copy.deepcopy(parsed[key])

    query = Rule.parse_conjunctive_query.__func__
    queries: dict[str, Any] = {}

    def cached_parse_conjunctive_query(cls: type, expr: str) -> Any:
        if not _active:
            return query(cls, expr)
        if expr not in queries:
            queries[expr] = query(cls, expr)
        return queries[expr]

    deep_copy_context = textgen.copy_context

    def shallow_copy_context(context: dict[str, Any]) -> dict[str, Any]:
        if not _active:
            return deep_copy_context(context)
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


# ---------------------------------------------------------------------- 3: derivations
class _Reads:
    """What one derivation read from the game state: the sets it saw, by signature and by type."""

    __slots__ = ("facts", "state", "types", "usable")

    def __init__(self, state: Any):
        self.state = state
        self.facts: dict[Any, frozenset] = {}
        self.types: dict[str, frozenset] = {}
        self.usable = True

    def matches(self, state: Any) -> bool:
        """Whether ``state`` holds the same sets this derivation read (so it would read the same again)."""
        facts, types = state._facts, state._vars_by_type
        if any(facts.get(sig, _EMPTY) != seen for sig, seen in self.facts.items()):
            return False
        return all(types.get(name, _EMPTY) == seen for name, seen in self.types.items())


# The derivations in progress, per thread (one env per thread is allowed: see engine.py).
_local = threading.local()


def _reading() -> list[_Reads]:
    try:
        return _local.reading
    except AttributeError:
        _local.reading = []
        return _local.reading


def _install_derivation_cache() -> None:
    from textworld.envs.pddl.textgen import ContextSensitiveGrammar
    from textworld.logic import State

    facts_with_signature = State.facts_with_signature
    variables_of_type = State.variables_of_type
    derive = ContextSensitiveGrammar.derive

    def tracked(read: Any, store: str) -> Any:
        """``read`` (a State query) that also records its answer in every open derivation's ``store``."""

        def tracked_read(self: Any, key: Any) -> Any:
            found = read(self, key)
            for reads in _reading():
                if self is not reads.state:
                    reads.usable = False
                getattr(reads, store).setdefault(key, frozenset(found))
            return found

        return tracked_read

    tracked_facts_with_signature = tracked(facts_with_signature, "facts")
    tracked_variables_of_type = tracked(variables_of_type, "types")

    def cached_derive(self: Any, start: str, context: dict[str, Any] = {}) -> str:  # noqa: B006 - as upstream
        state = context.get("state") if context else None
        if not _active or state is None:
            return derive(self, start, context)
        variables = tuple(context["variables"].items())
        key = (start, tuple(context["mapping"].items()), tuple((name, id(info)) for name, info in variables))
        memo: dict[Any, list] = self.__dict__.setdefault("_r3l_derivations", {})
        variants = memo.get(key)
        if variants:
            for i, (reads, text, _) in enumerate(variants):
                if reads.matches(state):
                    if i:
                        variants.insert(0, variants.pop(i))
                    return text
        reads = _Reads(state)
        reading = _reading()
        reading.append(reads)
        try:
            text = derive(self, start, context)
        finally:
            reading.pop()
        if reads.usable:
            reads.state = None  # keep the sets read, not the state they came from
            # The entity infos are keyed by id(): holding them keeps those ids from being reused.
            memo.setdefault(key, []).insert(0, (reads, text, variables))
            del memo[key][_DERIVATIONS_PER_KEY:]
        return text

    State.facts_with_signature = tracked_facts_with_signature
    State.variables_of_type = tracked_variables_of_type
    ContextSensitiveGrammar.derive = cached_derive


# ---------------------------------------------------------------------- 4: PDDL -> SAS
def _install_sas_cache() -> None:
    import fast_downward

    translate = fast_downward.pddl2sas
    translated: OrderedDict[Any, Any] = OrderedDict()

    def cached_pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        # The translator keeps its options in module globals and swaps sys.argv (and sys.stdout) while it runs:
        # one translation at a time, whatever the thread, and argv read under the lock (read outside it, a
        # thread could save the translator's argv while another translates, and "restore" that).
        with _translating:
            argv = sys.argv
            try:
                if not _active:
                    return translate(domain, problem, verbose=verbose, optimize=optimize)
                key = (domain, problem, bool(verbose), bool(optimize))
                if key in translated:
                    translated.move_to_end(key)
                else:
                    translated[key] = translate(domain, problem, verbose=verbose, optimize=optimize)
                    while len(translated) > _SAS_CACHE_SIZE:
                        translated.popitem(last=False)
                return translated[key]
            finally:
                sys.argv = argv

    fast_downward.pddl2sas = cached_pddl2sas


# ---------------------------------------------------------------------- 5: fact lists
_FACTS = "_r3l_fact_list"


def facts_changed(state: Any) -> None:
    """Tell the fact-list cache that ``state._facts`` was changed directly (not through add/remove_fact)."""
    state.__dict__.pop(_FACTS, None)


def _install_fact_list_cache() -> None:
    from textworld.envs.pddl.logic import PddlState
    from textworld.logic import State

    all_facts = State.facts.fget
    add_fact, remove_fact = State.add_fact, State.remove_fact

    def facts(self: Any) -> Any:
        if not _active:
            return all_facts(self)
        listed = self.__dict__.get(_FACTS)
        if listed is None:
            listed = self.__dict__[_FACTS] = tuple(all_facts(self))
        return iter(listed)

    def add(self: Any, prop: Any) -> None:
        self.__dict__.pop(_FACTS, None)
        add_fact(self, prop)

    def remove(self: Any, prop: Any) -> None:
        self.__dict__.pop(_FACTS, None)
        remove_fact(self, prop)

    PddlState.facts = property(facts, doc=State.facts.__doc__)
    PddlState.add_fact, PddlState.remove_fact = add, remove
