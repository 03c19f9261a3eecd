"""Put fast-downward's planner into a given state of a loaded game, in any engine of that game.

The planner's state ids are indexes into a registry that lives in one engine and dies at the next reset, so a
checkpoint's state id means nothing to another engine (another env instance, episode or process). What does
travel is the checkpoint's PDDL facts. Fast-downward's C interface has no "set state", but its task format has an
initial-state section: :func:`task_at` writes the game's SAS task with the facts' values there, and loading that
task (``load_sas``, ~2 ms for a kitchen) gives a fresh registry whose initial state is the checkpoint's state.
The operators, and so the operator ids the saved admissible actions refer to, are those of the game's own task.

SAS variables are read from the task text: each has an axiom layer and a list of values, ``Atom p(a, b)``,
``NegatedAtom p(a, b)`` or ``<none of those>``. A non-derived variable takes the value of its true atom, else
``<none of those>`` or the negated atom; derived variables (axioms) keep the task's initial value, which the
planner recomputes from the others.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from r3l_envs.alfworld.snapshot import unpack_proposition

__all__ = ["rebase", "task_at"]

_CACHED_TASKS = 12  # parsed tasks kept (one per game in play; the translations are cached the same way)
_tasks: OrderedDict[str, _Task] = OrderedDict()
_tasks_lock = threading.Lock()

Fact = tuple[str, tuple[str, ...]]  # predicate, argument names


@dataclass(frozen=True)
class _Task:
    """A SAS task cut around its initial state, with what each variable's values mean."""

    head: str  # the text up to and including "begin_state\n"
    tail: str  # the text from "end_state" on
    initial: tuple[int, ...]  # the task's own initial value of each variable
    derived: frozenset[int]  # variables set by axioms (axiom layer >= 0)
    unset: tuple[int | None, ...]  # each variable's value when none of its atoms holds
    atoms: dict[Fact, tuple[int, int]]  # positive atom -> (variable, value)

    def values(self, facts: Iterable[Fact]) -> list[int]:
        """The value of every variable in the state where exactly ``facts`` hold (static facts are ignored)."""
        values = list(self.unset)
        chosen: dict[int, Fact] = {}
        for fact in facts:
            found = self.atoms.get(fact)
            if found is None:
                continue
            var, value = found
            if var in chosen:
                raise ValueError(f"facts {chosen[var]} and {fact} cannot both hold: one planner variable")
            chosen[var] = fact
            values[var] = value
        for var in self.derived:
            values[var] = self.initial[var]
        for var, value in enumerate(values):
            if value is None:
                raise ValueError(f"planner variable {var} has no value: none of its atoms holds in the facts")
        return values  # type: ignore[return-value]


def rebase(pddl: Any, saved: dict[str, Any]) -> int:
    """Restart ``pddl``'s planner (an engine with the snapshot's game loaded) at the state ``saved`` holds.

    ``saved`` is a :func:`r3l_envs.alfworld.snapshot.save` of this game, from any engine. Returns the state's id
    in the new registry (pass ``{**saved, "state_id": that}`` to ``snapshot.load``); every earlier state id of this
    engine is void afterwards.

    Raises:
        ValueError: the snapshot's facts are no state of this game (nothing was changed).
    """
    props = (unpack_proposition(p) for found in dict(saved["facts"]).values() for p in found)
    task = task_at(pddl._pddl_state.sas, ((p.name, tuple(v.name for v in p.arguments)) for p in props))
    lib = pddl.downward_lib
    lib.load_sas(task.encode("utf-8"))
    return lib.get_state_id()


def task_at(sas: str, facts: Iterable[Fact]) -> str:
    """The SAS task ``sas`` with its initial state replaced by the state where ``facts`` hold.

    Raises:
        ValueError: the facts are not a state of this task (two values for one variable, or none).
    """
    task = _parsed(sas)
    values = task.values(facts)
    return task.head + "\n".join(map(str, values)) + "\n" + task.tail


def _parsed(sas: str) -> _Task:
    with _tasks_lock:  # envs may run in threads (one per thread): the cache is shared
        task = _tasks.get(sas)
        if task is not None:
            _tasks.move_to_end(sas)
            return task
    task = _parse(sas)
    with _tasks_lock:
        _tasks[sas] = task
        while len(_tasks) > _CACHED_TASKS:
            _tasks.popitem(last=False)
    return task


def _parse(sas: str) -> _Task:
    lines = sas.split("\n")
    derived: set[int] = set()
    unset: list[int | None] = []
    atoms: dict[Fact, tuple[int, int]] = {}
    i = 0
    while lines[i] != "begin_state":
        if lines[i] != "begin_variable":
            i += 1
            continue
        var = len(unset)
        layer, size = int(lines[i + 2]), int(lines[i + 3])
        values = lines[i + 4 : i + 4 + size]
        if lines[i + 4 + size] != "end_variable":
            raise ValueError(f"SAS variable {var} does not end after its {size} values")
        if layer >= 0:
            derived.add(var)
        default = None
        for value, text in enumerate(values):
            kind, _, atom = text.partition(" ")
            if kind == "Atom":
                atoms[_fact(atom)] = (var, value)
            elif kind == "NegatedAtom" or text == "<none of those>":
                default = value
        unset.append(default)
        i += 5 + size
    end = lines.index("end_state", i)
    initial = tuple(int(v) for v in lines[i + 1 : end])
    if len(initial) != len(unset):
        raise ValueError(f"SAS initial state has {len(initial)} values for {len(unset)} variables")
    return _Task(
        head="\n".join(lines[: i + 1]) + "\n",
        tail="\n".join(lines[end:]),
        initial=initial,
        derived=frozenset(derived),
        unset=tuple(unset),
        atoms=atoms,
    )


def _fact(atom: str) -> Fact:
    """``"atlocation(agent1, loc_1)"`` -> ``("atlocation", ("agent1", "loc_1"))``."""
    name, _, args = atom.partition("(")
    return name, tuple(arg for arg in args.rstrip(")").split(", ") if arg)
