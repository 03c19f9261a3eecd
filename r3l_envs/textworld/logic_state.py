"""Checks that the TextWorld logic state in a checkpoint (facts, valid actions, tracker) is the game's own.

TextWorld tracks a game twice: the Z-machine plays it, and a logic state (facts such as ``at(P, r_0)``)
follows it, from which the valid actions and the agent's admissible commands are derived. A checkpoint
carries the logic state as plain data; restoring it unchecked let a forged one through silently (and its
admissible commands skip the filter that keeps interpreter escapes from the engine). So each fact must
be a predicate of the game's logic over the game's own entities with their declared types, the facts must
break none of the logic's constraints, and the valid actions and admissible commands must be exactly those
the game derives from the facts. The derivation costs about as much as a step; a small cache keeps
repeated restores of one checkpoint cheap.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["check_logic_state"]

_SEP = "\x1f"
_CACHE_SIZE = 256
_derived: OrderedDict[tuple[int, tuple[str, ...]], tuple[list[tuple], list[str]]] = OrderedDict()
_derived_lock = threading.Lock()
_games: dict[int, tuple[Any, frozenset, dict[str, str]]] = {}  # id(game) -> (game, signatures, entity types)


def _vocabulary(game: Any) -> tuple[frozenset, dict[str, str]]:
    """The game's fact signatures and its entities' types (kept while the game object lives).

    Predicates are declared on general types (``at(t, r)``) and facts name their arguments' own types
    (``at(c_0: c, r_0: r)``): a signature of the game is a predicate's with each type narrowed to a subtype.
    """
    with _derived_lock:
        known = _games.get(id(game))
        if known is not None and known[0] is game:
            return known[1], known[2]
    logic = game.kb.logic
    subtypes = {t.name: [s.name for s in t.subtypes] for t in logic.types}
    signatures = frozenset(
        (s.name, kinds)
        for s in (*logic.predicates, *logic.aliases)  # aliases: east_of(r, r) is west_of with the rooms swapped
        for kinds in itertools.product(*(subtypes[t] for t in s.types))
    )
    types = {v.name: v.type for v in game.world.state.variables}
    types.update({name: info.type for name, info in game.infos.items() if info.type is not None})
    types.update({v.name: v.type for v in game.kb.types.constants_mapping.values()})
    with _derived_lock:
        if len(_games) >= 32:
            _games.clear()
            _derived.clear()  # its keys hold the ids of the games just dropped, which new games may reuse
        _games[id(game)] = (game, signatures, types)
    return signatures, types


def check_logic_state(
    game: Any,
    facts: Any,
    valid_actions: Any,
    last_action: Any,
    admissible: Any,
    unpack_fact: Callable[[str], Any],
    pack_action: Callable[[Any], tuple],
    commands_of: Callable[[Sequence[Any]], list[str]],
) -> None:
    """Raise ``ValueError`` unless the logic state is one ``game`` produces.

    Args:
        game: TextWorld's ``Game`` of the checkpoint's task.
        facts: the packed propositions (``name``, then each argument's name and type, joined by ``\\x1f``).
        valid_actions: the packed valid actions (see ``env._pack_action``).
        last_action: the packed last action, or ``None``.
        admissible: the admissible commands shown to the agent.
        unpack_fact: packed proposition -> TextWorld ``Proposition``.
        pack_action: TextWorld ``Action`` -> its packed form.
        commands_of: the admissible commands of a list of actions (TextWorld's Inform 7 command generator).
    """
    if not (isinstance(facts, list) and all(isinstance(f, str) for f in facts)) or len(set(facts)) != len(facts):
        raise ValueError("facts are not a list of distinct packed propositions")
    signatures, types = _vocabulary(game)
    for fact in facts:
        _check_fact(fact, signatures, types)
    key = (id(game), tuple(facts))
    with _derived_lock:
        derived = _derived.get(key)
        if derived is not None:
            _derived.move_to_end(key)
    if derived is None:
        derived = _derive(game, [unpack_fact(f) for f in facts], pack_action, commands_of)
        with _derived_lock:
            _derived[key] = derived
            while len(_derived) > _CACHE_SIZE:
                _derived.popitem(last=False)
    actions, commands = derived
    if valid_actions != actions:
        raise ValueError("valid actions are not those the game's rules derive from the facts")
    if admissible != commands:
        raise ValueError("admissible commands are not those of the valid actions")
    if last_action is not None:
        _check_action(last_action, game, signatures, types)


def _check_fact(fact: str, signatures: frozenset, types: dict[str, str]) -> None:
    name, *parts = fact.split(_SEP)
    names, kinds = parts[::2], parts[1::2]
    if len(parts) % 2 or (name, tuple(kinds)) not in signatures:
        raise ValueError(f"fact {fact.replace(_SEP, ' ')!r:.120} is not a predicate of the game's logic")
    for var, kind in zip(names, kinds):
        if types.get(var) != kind:
            raise ValueError(f"fact {fact.replace(_SEP, ' ')!r:.120} names {var!r:.40}, not an entity of type {kind}")


def _derive(game: Any, facts: list, pack_action: Callable, commands_of: Callable) -> tuple[list[tuple], list[str]]:
    """The packed valid actions and admissible commands ``game`` derives from ``facts`` (as StateTracking does)."""
    from textworld.generator.maker import get_failing_constraints
    from textworld.logic import State

    state = State(game.kb.logic, facts)
    failing = get_failing_constraints(state, game.kb)
    if failing:
        raise ValueError(f"facts break the game's constraints ({failing[0].name}): no play reaches them")
    actions = list(state.all_applicable_actions(game.kb.rules.values(), game.kb.types.constants_mapping))
    return [pack_action(a) for a in actions], sorted(set(commands_of(actions)))


def _check_action(packed: Any, game: Any, signatures: frozenset, types: dict[str, str]) -> None:
    if not (isinstance(packed, tuple) and len(packed) == 6 and packed[0] in game.kb.rules):
        raise ValueError(f"last action {packed!r:.80} is not an action of the game's rules")
    _, pre, post, *templates = packed
    if not all(isinstance(p, tuple) and all(isinstance(f, str) for f in p) for p in (pre, post)):
        raise ValueError("last action's conditions are not packed propositions")
    if not all(t is None or isinstance(t, str) for t in templates):
        raise ValueError("last action's command templates are not text")
    for fact in (*pre, *post):
        _check_fact(fact, signatures, types)
