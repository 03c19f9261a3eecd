"""ScienceWorld task names, task ids and splits.

A task id is ``"<task name>/var<variation>"`` (e.g. ``"boil/var12"``): stable across processes and versions of
this library as long as ScienceWorld keeps its task names and variation numbering.

Splits:

* ``"train"``, ``"dev"`` (alias ``"valid"``), ``"test"``: ScienceWorld's own variation split of every task
  (50 % / 25 % / 25 % of each task's variations, in order). :func:`variation_split` mirrors
  ``PythonInterface.getSets`` of the engine; a test checks it against the engine.
* ``"r3l_train"`` / ``"r3l_test"``: the task-type split of the R³L paper (arXiv 2601.03715): 17 task types for
  training, the other 13 held out, each with the first half of its variations (as the R³L data script does).
* ``"all"``: every variation of every selected task.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Mapping, Sequence

from r3l_envs.errors import UnknownTaskError

__all__ = [
    "R3L_TRAIN_TASKS",
    "SPLITS",
    "TaskIds",
    "format_task_id",
    "parse_task_id",
    "resolve_tasks",
    "split_variations",
    "task_names",
    "variation_split",
]

#: The 17 task types the R³L paper trains on (its ScienceWorld data script); the other 13 are held out.
R3L_TRAIN_TASKS = (
    "boil",
    "melt",
    "change-the-state-of-matter-of",
    "use-thermometer",
    "measure-melting-point-known-substance",
    "power-component",
    "test-conductivity",
    "find-living-thing",
    "find-plant",
    "grow-plant",
    "chemistry-mix",
    "chemistry-mix-paint-secondary-color",
    "lifespan-shortest-lived",
    "identify-life-stages-2",
    "inclined-plane-determine-angle",
    "inclined-plane-friction-named-surfaces",
    "mendelian-genetics-known-plant",
)

_ALIASES = {"valid": "dev", "validation": "dev"}
SPLITS = ("train", "dev", "valid", "test", "r3l_train", "r3l_test", "all")


def task_names() -> tuple[str, ...]:
    """The 30 ScienceWorld task names, in the engine's task-number order (1-1 boil, 1-2 melt, ...)."""
    from scienceworld.constants import ID2TASK

    return tuple(ID2TASK.values())


def resolve_tasks(tasks: str | Iterable[str] | None) -> tuple[str, ...]:
    """Task names from a name, a task number (``"1-1"``), a paper name, or a list of those (``None``: all)."""
    names = task_names()
    if tasks is None:
        return names
    from scienceworld.utils import infer_task

    requested = [tasks] if isinstance(tasks, str) else list(tasks)
    out = []
    for task in requested:
        name = infer_task(task) if isinstance(task, str) else task
        if name not in names:
            close = difflib.get_close_matches(str(name), names, n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise UnknownTaskError(
                f"unknown ScienceWorld task {task!r}; tasks are the 30 names in "
                f"r3l_envs.scienceworld.task_names() (or numbers like '1-1').{hint}"
            )
        if name not in out:
            out.append(name)
    return tuple(out)


def variation_split(max_variations: int) -> dict[str, list[int]]:
    """ScienceWorld's own train/dev/test variations for a task with ``max_variations`` variations."""
    n = int(max_variations)
    small = {0: ([], [], []), 1: ([0], [], [0]), 2: ([0], [], [1]), 3: ([0], [1], [2]), 4: ([0, 1], [2], [3])}
    if n in small:
        train, dev, test = small[n]
    else:  # consecutive groups of n // 4; the remainder (a fifth, short group) joins test
        size = n // 4
        groups = [list(range(i, min(i + size, n))) for i in range(0, n, size)]
        train, dev, test = groups[0] + groups[1], groups[2], groups[3] + (groups[4] if len(groups) > 4 else [])
    return {"train": train, "dev": dev, "test": test}


def split_variations(task: str, max_variations: int, split: str) -> list[int]:
    """The variations of ``task`` in ``split`` (see the module docstring)."""
    split = _ALIASES.get(split, split)
    if split in ("train", "dev", "test"):
        return variation_split(max_variations)[split]
    if split == "all":
        return list(range(max_variations))
    if split in ("r3l_train", "r3l_test"):
        in_train = task in R3L_TRAIN_TASKS
        if in_train != (split == "r3l_train"):
            return []
        return list(range(max_variations // 2))
    raise ValueError(f"unknown ScienceWorld split {split!r}; choose one of {', '.join(SPLITS)}")


def format_task_id(task: str, variation: int) -> str:
    return f"{task}/var{variation}"


def parse_task_id(task_id: str) -> tuple[str, int]:
    """``"boil/var12"`` -> ``("boil", 12)``; raises :class:`UnknownTaskError` for anything else."""
    name, sep, var = task_id.rpartition("/var") if isinstance(task_id, str) else ("", "", "")
    if not sep or not var.isdigit():
        raise UnknownTaskError(f"{task_id!r} is not a ScienceWorld task id like 'boil/var0'")
    return name, int(var)


class TaskIds(Sequence[str]):
    """The task ids of a split, in task order then variation order, with O(1) membership."""

    def __init__(self, tasks: Sequence[str], max_variations: Mapping[str, int], split: str):
        self._ids = tuple(
            format_task_id(task, v) for task in tasks for v in split_variations(task, max_variations[task], split)
        )
        self._set = frozenset(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, index):  # type: ignore[override]
        return self._ids[index]

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._set

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __repr__(self) -> str:
        return f"TaskIds({len(self)} ids)"
