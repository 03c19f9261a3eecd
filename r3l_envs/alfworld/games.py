"""Where ALFWorld games come from: the offline generator (cached) or the official data (user-supplied).

Both are laid out as ``alfworld-download`` lays out the official data: ``json_2.1.1/<split>/<task>/<trial>/``
holding ``game.tw-pddl`` (domain, grammar with the goal text, problem, ``solvable``) and ``traj_data.json``
(``task_type``, ``pddl_params``, ``turk_annotations``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r3l_envs.cache import build_dir_once, cache_root
from r3l_envs.errors import DataNotFoundError, MalformedDataError
from r3l_envs.splits import NumberedIds, pick_in_split

__all__ = [
    "GENERATED_SPLITS",
    "OFFICIAL_SPLITS",
    "choose_task",
    "generated_game",
    "generated_ids",
    "official_games",
    "official_root",
]

logger = logging.getLogger(__name__)

#: Task ids per generated split; games are generated (and planner-verified) lazily, one per task id.
GENERATED_SPLITS = {"train": 10_000, "valid": 500, "test": 500}
_SPLIT_SEED_OFFSET = {"train": 0, "valid": 1_000_000, "test": 2_000_000}
#: Official split name -> folder under json_2.1.1 and its size in the official release.
OFFICIAL_SPLITS = {"train": ("train", 3553), "valid_seen": ("valid_seen", 140), "valid_unseen": ("valid_unseen", 134)}
# 2: splits disjoint by content (version 1 chose tasks by seed alone: 1 of 500 test tasks was a train task).
_GENERATOR_VERSION = 2
_VERIFY_ATTEMPTS = 8  # unsolvable candidates (in the split) before giving up on a task


def generated_ids(split: str) -> NumberedIds:
    """Task ids of a generated split; task ``i`` has task type ``TASK_TYPES[i % 6]``."""
    if split not in GENERATED_SPLITS:
        raise ValueError(f"generated ALFWorld splits are {tuple(GENERATED_SPLITS)}, got {split!r}")
    return NumberedIds(f"alfgen-{split}-", GENERATED_SPLITS[split], width=5)


def generated_game(split: str, index: int) -> Path:
    """The ``game.tw-pddl`` of generated task ``index`` of ``split``, generating and verifying it if needed."""
    from importlib.metadata import version

    task_id = generated_ids(split)[index]
    root = cache_root() / "alfworld" / f"generated-alfworld{version('alfworld')}-g{_GENERATOR_VERSION}"
    folder = build_dir_once(root / "json_2.1.1" / split / task_id, lambda tmp: _write_verified(split, index, tmp))
    return folder / "trial_00000" / "game.tw-pddl"


def choose_task(split: str, index: int, valid: Callable[[Any], bool] | None = None) -> Any:
    """The :class:`~r3l_envs.alfworld.generator.GeneratedTask` of generated task ``index`` of ``split``: the first
    candidate whose content lies in the split (:mod:`r3l_envs.splits`) and passes ``valid`` (for the build: the
    planner's plan wins), so the planner only meets candidates of the split."""
    from r3l_envs.alfworld.generator import TASK_TYPES, generate_task, task_content

    task_type = TASK_TYPES[index % len(TASK_TYPES)]
    return pick_in_split(
        split,
        lambda attempt: generate_task(task_type, _SPLIT_SEED_OFFSET[split] + index + 10_000_000 * attempt),
        task_content,
        what=f"generated ALFWorld {split} task {index} ({task_type})",
        valid=valid,
    )[1]


def _write_verified(split: str, index: int, out: Path) -> None:
    unsolvable, plan = 0, None

    def solvable(task: Any) -> bool:
        nonlocal unsolvable, plan
        plan = _planner_wins(_game(task))
        if plan is None:
            unsolvable += 1
            logger.info("generated %s task %s/%d: a candidate is not solvable; next one", task.task_type, split, index)
            if unsolvable >= _VERIFY_ATTEMPTS:
                raise RuntimeError(f"could not generate a solvable {task.task_type} game for {split}/{index}")
        return plan is not None

    task = choose_task(split, index, valid=solvable)
    traj = {
        "task_type": task.task_type,
        "pddl_params": task.pddl_params,
        "scene": {"floor_plan": f"FloorPlan{task.scene}"},
        "turk_annotations": {"anns": [{"task_desc": task.goal}]},
        "source": "generated",
    }
    trial = out / "trial_00000"
    trial.mkdir()
    (trial / "game.tw-pddl").write_text(json.dumps({**_game(task), "walkthrough": plan}))
    (trial / "traj_data.json").write_text(json.dumps(traj, indent=1))


def _game(task: Any) -> dict[str, Any]:
    """The ``.tw-pddl`` content of a generated task (without its walkthrough)."""
    return {
        "pddl_domain": _logic_file("alfred.pddl"),
        "grammar": _logic_file("alfred.twl2").replace("UNKNOWN GOAL", task.goal),
        "pddl_problem": task.pddl_problem,
        "solvable": True,
    }


def _planner_wins(game: dict) -> list[str] | None:
    """The planner's plan if playing it wins the game, else None."""
    import textworld
    from textworld.envs.pddl import PddlEnv

    from r3l_envs.alfworld import speedups
    from r3l_envs.alfworld.engine import demangled

    speedups.install()  # its parser lock: games are generated from env resets that run in threads
    env = demangled(PddlEnv(textworld.EnvInfos(won=True, policy_commands=True)))
    try:
        env.load(game)
        state = env.reset()
        plan = list(state.get("policy_commands") or [])
        for command in plan:
            state, _, _ = env.step(command)
        return plan if plan and state["won"] else None
    finally:
        env.close()


def _logic_file(name: str) -> str:
    import alfworld

    return (Path(alfworld.__file__).parent / "data" / name).read_text()


# ---------------------------------------------------------------------- official data
def official_root(data_path: str | os.PathLike[str] | None) -> Path | None:
    """The official data folder, or None to use generated games.

    An explicit ``data_path`` is always used (a missing folder is an error). ``$ALFWORLD_DATA`` is used only
    if it holds ``json_2.1.1``: importing ``alfworld`` sets it to ``~/.cache/alfworld`` even when empty.
    """
    if data_path is not None:
        return Path(data_path).expanduser()
    root = os.environ.get("ALFWORLD_DATA")
    if root and (Path(root).expanduser() / "json_2.1.1").is_dir():
        return Path(root).expanduser()
    return None


def official_games(root: Path, split: str) -> dict[str, Path]:
    """Task id (``<task>/<trial>``) -> ``game.tw-pddl`` for every solvable game of an official split."""
    if split not in OFFICIAL_SPLITS:
        raise ValueError(f"official ALFWorld splits are {tuple(OFFICIAL_SPLITS)}, got {split!r}")
    folder = root / "json_2.1.1" / OFFICIAL_SPLITS[split][0]
    if not folder.is_dir():
        raise DataNotFoundError(
            f"no ALFWorld data at {folder}. Run `alfworld-download` (it needs github.com) and point ALFWORLD_DATA "
            "or data_path= at the folder it fills, or omit both to play offline generated games."
        )
    games: dict[str, Path] = {}
    for traj in sorted(folder.glob("*/*/traj_data.json")):
        game = traj.with_name("game.tw-pddl")
        if not game.is_file():
            continue  # the official release has trials without a TextWorld game; ALFWorld skips them too
        try:
            solvable = json.loads(game.read_text()).get("solvable")
        except (OSError, ValueError) as exc:
            raise MalformedDataError(f"{game} is not valid JSON ({exc}); re-run alfworld-download") from exc
        if solvable is None:
            raise MalformedDataError(f"{game} has no 'solvable' key; it is not an ALFWorld .tw-pddl game")
        if solvable:
            games[f"{traj.parent.parent.name}/{traj.parent.name}"] = game
    if not games:
        raise DataNotFoundError(f"{folder} holds no solvable game.tw-pddl; re-run alfworld-download")
    expected = OFFICIAL_SPLITS[split][1]
    if len(games) != expected:
        logger.info("ALFWorld %s at %s has %d games (the official release has %d)", split, folder, len(games), expected)
    return games
