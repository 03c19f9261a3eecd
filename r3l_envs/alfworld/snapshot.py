"""Native save/load of a running ALFWorld engine (a demangled TextWorld ``PddlEnv``), for checkpoints.

A snapshot holds the planner's state id, the PDDL facts and their variable index, the move counter and the
engine's GameState: what it derived for the state (the commands it accepts and the actions they map to), so
loading re-derives nothing from the grammar. Logic objects travel as single strings (kind, name and types
joined by the ASCII unit separator), keyed by name in dicts: a checkpoint encodes each container in Python
(:mod:`r3l_envs.codec`), and strings pass through its JSON as they are, so a state of some thousand facts
and variables costs a few dozen containers rather than a thousand tuples. Unpacking goes through TextWorld's
own constructors, which intern them, so a load gives back the very objects the engine uses.

A state id is only meaningful to the engine (and episode) that produced it: see ``ALFWorldEnv``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load", "save", "unpack_proposition"]

# GameState keys that are views of the engine's own data: rebuilt on load rather than saved.
_VIEWS = frozenset({"_entity_infos", "_facts", "_last_action", "facts", "_valid_actions"})
# What all_applicable_actions sets on the actions it builds; other actions stay objects (which a checkpoint
# refuses to carry: UnencodableStateError).
_ACTION_FIELDS = frozenset(
    {"name", "mapping", "feedback_rule", "command_template", "reverse_name", "reverse_command_template",
     "preconditions", "postconditions", "_pre_set", "_post_set", "id"}
)  # fmt: skip
_INTERNED: dict[str, Any] = {}  # packed form -> interned logic object (bounded: cleared when large)
_MAX_INTERNED = 200_000


def save(pddl: Any) -> dict[str, Any]:
    """Everything the engine's next ``step`` depends on, as plain data (:mod:`r3l_envs.codec`)."""
    state = pddl._pddl_state
    return {
        "state_id": pddl.downward_lib.get_state_id(),
        "facts": {_pack_signature(sig): [_pack_proposition(p) for p in props] for sig, props in state._facts.items()},
        "vars_by_name": {name: _pack_variable(var) for name, var in state._vars_by_name.items()},
        "vars_by_type": {name: [_pack_variable(v) for v in found] for name, found in state._vars_by_type.items()},
        "var_counts": dict(state._var_counts),
        "moves": pddl._moves,
        "last_action": _pack_action(pddl._last_action),
        "valid_actions": [_pack_action(action) for action in pddl.state["_valid_actions"]],
        "game_state": {key: value for key, value in pddl.state.items() if key not in _VIEWS},
    }


def load(pddl: Any, saved: dict[str, Any]) -> None:
    """Put the engine back into a state :func:`save` captured in the same episode."""
    import fast_downward
    from textworld.core import GameState

    from r3l_envs.alfworld import speedups

    pddl.downward_lib.set_state_id(saved["state_id"])
    state = pddl._pddl_state
    state._facts.clear()
    for sig, props in saved["facts"].items():
        state._facts[_unpack_signature(sig)] = {unpack_proposition(p) for p in props}
    state._vars_by_name = {name: _unpack_variable(var) for name, var in saved["vars_by_name"].items()}
    state._vars_by_type.clear()
    for name, found in saved["vars_by_type"].items():
        state._vars_by_type[name] = {_unpack_variable(v) for v in found}
    state._var_counts.clear()
    state._var_counts.update(saved["var_counts"])
    speedups.facts_changed(state)
    pddl._moves = saved["moves"]
    pddl._last_action = _unpack_action(saved["last_action"])

    game = GameState(saved["game_state"])
    game["_entity_infos"] = dict(pddl._entity_infos)
    game["_facts"] = list(state.facts)
    game["_last_action"] = pddl._last_action
    game["_valid_actions"] = [_unpack_action(action) for action in saved["valid_actions"]]
    if pddl.request_infos.facts:
        game["facts"] = list(map(pddl._get_human_readable_fact, game["_facts"]))
    pddl.state = game
    # ``PddlState.apply`` looks actions up in the operator table of the last ``all_applicable_actions``;
    # the planner lists the same operators for the same state id, so reading them again is enough.
    lib = pddl.downward_lib
    operators = (fast_downward.Operator * lib.get_applicable_operators_count())()
    lib.get_applicable_operators(operators)
    state._operators = {op.id: op for op in operators}


# ---------------------------------------------------------------------- logic objects <-> strings
_SEP = "\x1f"  # the ASCII unit separator: in no PDDL name or type (checked when packing)


def _pack(kind: str, *parts: str) -> str:
    packed = _SEP.join((kind, *parts))
    if packed.count(_SEP) != len(parts):
        raise ValueError(f"a PDDL name or type contains the separator \\x1f: {parts!r:.200}")
    return packed


def _intern(packed: str, build: Any) -> Any:
    found = _INTERNED.get(packed)
    if found is None:
        if len(_INTERNED) >= _MAX_INTERNED:
            _INTERNED.clear()
        found = _INTERNED[packed] = build()
    return found


def _pack_variable(var: Any) -> str:
    return _pack("v", var.name, var.type)


def _unpack_variable(packed: str) -> Any:
    from textworld.logic import Variable

    return _intern(packed, lambda: Variable(*packed.split(_SEP)[1:]))


def _pack_placeholder(ph: Any) -> str:
    return _pack("p", ph.name, ph.type)


def _unpack_placeholder(packed: str) -> Any:
    from textworld.logic import Placeholder

    return _intern(packed, lambda: Placeholder(*packed.split(_SEP)[1:]))


def _pack_signature(sig: Any) -> str:
    return _pack("s", sig.name, *sig.types)


def _unpack_signature(packed: str) -> Any:
    from textworld.logic import Signature

    def build() -> Any:
        _, name, *types = packed.split(_SEP)
        return Signature(name, types)

    return _intern(packed, build)


def _pack_proposition(prop: Any) -> str:
    return _pack("f", prop.name, *[part for var in prop.arguments for part in (var.name, var.type)])


def unpack_proposition(packed: str) -> Any:
    """The TextWorld ``Proposition`` that a snapshot stores as ``packed`` (the planner reads snapshots too)."""
    from textworld.logic import Proposition, Variable

    def build() -> Any:
        _, name, *parts = packed.split(_SEP)
        return Proposition(name, [Variable(n, t) for n, t in zip(parts[::2], parts[1::2])])

    return _intern(packed, build)


def _pack_action(action: Any) -> Any:
    """An action of ``PddlState.all_applicable_actions`` as a tuple; any other action stays an object."""
    if action is None or set(vars(action)) != _ACTION_FIELDS or action.preconditions or action.postconditions:
        return action
    if action.reverse_name is not None or action.reverse_command_template is not None:
        return action
    mapping = [packed for ph, var in action.mapping.items() for packed in (_pack_placeholder(ph), _pack_variable(var))]
    return ("a", action.name, action.id, tuple(mapping), action.command_template, action.feedback_rule)


def _unpack_action(packed: Any) -> Any:
    if not (isinstance(packed, tuple) and packed[:1] == ("a",)):
        return packed
    from textworld.logic import Action

    _, name, op_id, mapping, command_template, feedback_rule = packed
    action = Action(name=name, preconditions=[], postconditions=[])
    action.id = op_id
    action.mapping = {_unpack_placeholder(ph): _unpack_variable(var) for ph, var in zip(mapping[::2], mapping[1::2])}
    action.command_template = command_template
    action.feedback_rule = feedback_rule
    return action
