"""Offline generator of ALFWorld games (``source="generated"``): not the official ALFWorld data set.

A household is one of the THOR floor plans that ship in the ``alfworld`` wheel (its receptacles and the
object classes it contains), filled with object instances placed in receptacles that may hold them
(``alfworld.gen.constants``). The task is one of ALFWorld's six task types, with the PDDL goal and the goal
phrasing of ``alfworld.gen.goal_library``. The game is written as a ``.tw-pddl`` file in ALFWorld's own
domain and grammar, in the layout ``alfworld-download`` produces, and is only kept if the planner's plan wins.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TASK_TYPES", "GeneratedTask", "generate_task", "task_content"]

logger = logging.getLogger(__name__)

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
_SCENE_RANGES = {
    "Kitchen": range(1, 31),
    "LivingRoom": range(201, 231),
    "Bedroom": range(301, 331),
    "Bathroom": range(401, 431),
}
_TOOL = {  # receptacle type a task needs, and which objects it applies to
    "pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable"),
    "pick_heat_then_place_in_recep": ("Microwave", "Heatable"),
    "pick_cool_then_place_in_recep": ("Fridge", "Coolable"),
}
_LAMPS = ("DeskLamp", "FloorLamp")
_MAX_CLASSES = 10  # object classes per household: enough distractors, small enough for a fast planner
_ATTEMPTS = 40


@dataclass(frozen=True)
class GeneratedTask:
    """One generated game: the files to write and what it is about."""

    task_type: str
    goal: str
    scene: int
    pddl_params: dict[str, Any]
    pddl_problem: str
    placements: tuple[tuple[str, str], ...] = ()  # (object class, receptacle THOR id) per object instance, sorted


def task_content(task: GeneratedTask) -> dict[str, Any]:
    """What the agent can see of a generated task: its content key for splits (:mod:`r3l_envs.splits`).

    The floor plan (its receptacles), the task's type and targets, and which receptacle holds how many objects
    of each class. Left out, so that games differing only there share a key (and a split): the goal's wording
    (one of the task type's templates), the objects' THOR coordinates and the agent's start location, which
    the text game does not show.
    """
    return {
        "task_type": task.task_type,
        "scene": task.scene,
        "params": task.pddl_params,
        "placements": [list(p) for p in task.placements],
    }


def _constants() -> Any:
    from alfworld.gen import constants

    return constants


def _layouts_dir() -> Path:
    import alfworld.gen

    return Path(alfworld.gen.__file__).parent / "layouts"


def _mangle(text: str) -> str:
    """ALFWorld's PDDL spelling of a THOR id (``Cabinet|+00.68|...`` -> ``Cabinet_bar__plus_00_dot_68...``)."""
    for a, b in (("|", "_bar_"), ("-", "_minus_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        text = text.replace(a, b)
    return text


def _scene(number: int) -> tuple[dict[str, list[float]], list[str]] | None:
    folder = _layouts_dir()
    receptacles, objects = folder / f"FloorPlan{number}-openable.json", folder / f"FloorPlan{number}-objects.json"
    if not receptacles.is_file() or not objects.is_file():
        return None
    return json.loads(receptacles.read_text()), json.loads(objects.read_text())


def _rtype(thor_id: str) -> str:
    parts = thor_id.split("|")
    return parts[-1] if parts[-1].endswith("Basin") else parts[0]


def generate_task(task_type: str, seed: int) -> GeneratedTask:
    """Generate a task of ``task_type``, deterministically from ``seed`` (not yet verified by the planner)."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"task_type must be one of {TASK_TYPES}, got {task_type!r}")
    rng = random.Random(f"{task_type}:{seed}")
    c = _constants()
    scenes = [n for kind in c.GOALS_VALID[task_type] for n in _SCENE_RANGES[kind]]
    for _ in range(_ATTEMPTS):
        task = _try_scene(task_type, rng.choice(sorted(scenes)), rng)
        if task is not None:
            return task
    raise RuntimeError(f"no floor plan supports {task_type} for seed {seed} after {_ATTEMPTS} attempts")


def _try_scene(task_type: str, number: int, rng: random.Random) -> GeneratedTask | None:
    c = _constants()
    scene = _scene(number)
    if scene is None:
        return None
    poses, classes = scene
    receps = {thor_id: _rtype(thor_id) for thor_id in sorted(poses)}
    rtypes = set(receps.values())
    holders = {r: c.VAL_RECEPTACLE_OBJECTS.get(r, set()) for r in rtypes}
    placeable = sorted({o for o in classes if any(o in h for h in holders.values())} - set(_LAMPS) - c.RECEPTACLES)
    placeable += sorted({o for o in classes if o in c.MOVABLE_RECEPTACLES and any(o in h for h in holders.values())})
    placeable = sorted(set(placeable))
    if not placeable:
        return None

    # Choose the task's parameters.
    params = {
        "object_target": "",
        "parent_target": "",
        "toggle_target": "",
        "object_sliced": False,
        "mrecep_target": "",
    }
    candidates = placeable
    if task_type in _TOOL:
        tool, ability = _TOOL[task_type]
        if tool not in rtypes:
            return None
        candidates = [o for o in placeable if o in c.VAL_ACTION_OBJECTS[ability]]
    if task_type == "look_at_obj_in_light":
        lamps = [lamp for lamp in _LAMPS if lamp in classes]
        if not lamps:
            return None
        params["toggle_target"] = rng.choice(lamps)
    if not candidates:
        return None
    target = rng.choice(candidates)
    params["object_target"] = target
    excluded = {"SinkBasin", "BathtubBasin", "Microwave"} | ({"Fridge"} if task_type in _TOOL else set())
    if task_type != "look_at_obj_in_light":
        parents = sorted(r for r in rtypes if target in holders[r] and r not in excluded)
        if not parents:
            return None
        params["parent_target"] = rng.choice(parents)

    # Place object instances: the target (twice or more for pick_two), distractors, lamps.
    others = [o for o in placeable if o != target]
    rng.shuffle(others)
    chosen = [target, *others[: _MAX_CLASSES - 1]]
    instances: list[tuple[str, str]] = []  # (thor id, receptacle thor id)
    for cls in chosen + ([params["toggle_target"]] if params["toggle_target"] else []):
        spots = [r for r, t in receps.items() if cls in holders[t] and t != params["parent_target"]]
        if cls in _LAMPS:  # lamps stand on a surface; any non-openable receptacle will do
            spots = [r for r, t in receps.items() if t in ("Desk", "SideTable", "Dresser", "Shelf", "DiningTable")]
        if not spots:
            if cls == target or cls in _LAMPS:
                return None
            continue
        count = rng.randint(2, 3) if (cls == target and task_type == "pick_two_obj_and_place") else rng.randint(1, 2)
        if cls in _LAMPS:
            count = 1
        for _ in range(count):
            xyz = "|".join(f"{rng.uniform(-3, 3):+06.2f}" for _ in range(3))
            instances.append((f"{cls}|{xyz}", rng.choice(spots)))
    problem = _problem(task_type, params, receps, poses, instances, rng)
    goal = _goal_text(task_type, params, rng)
    placements = tuple(sorted((thor_id.split("|")[0], recep) for thor_id, recep in instances))
    return GeneratedTask(task_type, goal, number, params, problem, placements)


def _location(pose: list[float]) -> str:
    x, z, rotation, horizon = (round(v) for v in (pose[0] * 4, pose[1] * 4, pose[2], pose[3]))
    return _mangle(f"loc|{x}|{z}|{rotation}|{horizon}")


def _problem(task_type, params, receps, poses, instances, rng) -> str:
    from alfworld.gen import goal_library

    c = _constants()
    rtypes = sorted(set(receps.values()) | {"SinkBasin", "Microwave", "Fridge"})
    otypes = sorted({i.split("|")[0] for i, _ in instances} | {"Knife", "ButterKnife"})
    locations = {r: _location(poses[r]) for r in receps}
    start = _mangle(f"loc|{rng.randint(-20, 20)}|{rng.randint(-20, 20)}|{rng.choice([0, 90, 180, 270])}|30")
    decl = ["agent1 - agent"]
    decl += [f"{t}Type - rtype" for t in rtypes] + [f"{t}Type - otype" for t in otypes]
    decl += [f"{_mangle(i)} - object" for i, _ in instances] + [f"{_mangle(r)} - receptacle" for r in receps]
    decl += sorted({f"{loc} - location" for loc in [*locations.values(), start]})
    init = [f"(atLocation agent1 {start})", "(= (total-cost) 0)"]
    for r, t in receps.items():
        init += [f"(receptacleType {_mangle(r)} {t}Type)", f"(receptacleAtLocation {_mangle(r)} {locations[r]})"]
        if t in c.OPENABLE_CLASS_SET:
            init.append(f"(openable {_mangle(r)})")
    for thor_id, r in instances:
        o, cls = _mangle(thor_id), thor_id.split("|")[0]
        init += [
            f"(objectType {o} {cls}Type)",
            f"(inReceptacle {o} {_mangle(r)})",
            f"(objectAtLocation {o} {locations[r]})",
        ]
        if cls in _LAMPS:
            init.append(f"(toggleable {o})")
            continue
        init.append(f"(pickupable {o})")
        for ability, predicate in (("Cleanable", "cleanable"), ("Heatable", "heatable"), ("Coolable", "coolable"),
                                   ("Sliceable", "sliceable")):  # fmt: skip
            if cls in c.VAL_ACTION_OBJECTS[ability]:
                init.append(f"({predicate} {o})")
    for r in rtypes:
        for o in otypes:
            if o in c.VAL_RECEPTACLE_OBJECTS.get(r, set()):
                init.append(f"(canContain {r}Type {o}Type)")
    goal = goal_library.gdict[task_type]["pddl"].replace("#", "-")
    goal = goal.format(obj=params["object_target"], recep=params["parent_target"], toggle=params["toggle_target"])
    return (
        f"(define (problem r3l_{task_type})\n(:domain alfred)\n(:objects\n  " + "\n  ".join(decl) + "\n)\n"
        "(:init\n  " + "\n  ".join(init) + "\n)\n" + goal.strip() + "\n"
    )


def _goal_text(task_type: str, params: dict[str, Any], rng: random.Random) -> str:
    from alfworld.gen import goal_library

    template = rng.choice(goal_library.gdict[task_type]["templates"])
    return template.format(
        obj=params["object_target"].lower(),
        recep=params["parent_target"].lower(),
        toggle=params["toggle_target"].lower(),
    )
