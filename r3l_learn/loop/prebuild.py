"""Build a run's cached content before its first episode, in parallel and with a progress bar.

TextWorld games are generated and compiled the first time a task is played (several seconds each). Left to the
episodes, an eval's resets compile them one env thread at a time with nothing on screen: a fresh cache made
``make demo``'s first eval look hung for a quarter of an hour. :func:`prebuild` compiles the games a run will
play (its evals' and its training steps') up front, one child process per core, under a bar that says it is a
one-time cost and where the cache is. Envs without such content cost nothing here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

from r3l_learn.loop.progress import phase

__all__ = ["eval_task_ids", "has_content_to_build", "prebuild", "reset_task_ids"]

logger = logging.getLogger(__name__)


def reset_task_ids(env: gym.Env, seeds: Iterable[int]) -> list[str] | None:
    """The task each ``env.reset(seed=s)`` of ``seeds`` plays, without resetting (nothing is built); ``None`` for
    an env that does not draw its tasks as :meth:`r3l_envs.core.TextEnv.reset` does.

    That reset seeds the env's RNG (gymnasium's ``np_random(seed)``) and draws the task's index with
    ``integers(len(task_ids))``: the same draw here gives the same task.
    """
    from r3l_envs.core import TextEnv

    base = env.unwrapped
    if not isinstance(base, TextEnv):
        return None
    ids = base.task_ids
    if len(ids) == 0:
        return []
    return [ids[int(seeding.np_random(seed)[0].integers(len(ids)))] for seed in seeds]


def eval_task_ids(env: gym.Env, seed: int, episodes: int) -> list[str] | None:
    """The tasks an eval of ``episodes`` episodes plays: distinct tasks of ``env``'s split, in an order fixed by
    ``seed``, each once before any repeats (a split with fewer tasks than episodes is cycled, reshuffled per pass);
    ``None`` for an env whose tasks are not listed (it draws them from the reset seed).

    Held-out success is then a mean over distinct tasks: drawing each episode's task with its reset seed, as
    training does, repeats tasks (64 draws from 500 repeat about 4) and counts those twice.
    """
    from r3l_envs.core import TextEnv

    base = env.unwrapped
    if not isinstance(base, TextEnv) or episodes < 1:
        return None
    ids = base.task_ids
    if len(ids) == 0:
        return []
    rng = np.random.default_rng([seed, episodes])
    order: list[int] = []
    while len(order) < episodes:  # sampling without replacement: no permutation of a huge split is built
        order += [int(i) for i in rng.choice(len(ids), size=min(len(ids), episodes - len(order)), replace=False)]
    return [ids[i] for i in order]


def has_content_to_build(env_id: str) -> bool:
    """Whether ``env_id``'s tasks have content that is built into the cache when first played (TextWorld's
    games); judged from its registration, without making the env (some envs are slow to make)."""
    entry = gym.spec(env_id).entry_point
    module = entry if isinstance(entry, str) else getattr(entry, "__module__", "")
    return module.startswith("r3l_envs.textworld")


def prebuild(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None,
    tasks: Mapping[str, Sequence[str]],
    *,
    progress: bool = True,
    jobs: int | None = None,
) -> int:
    """Build the cached content of ``tasks`` (split -> task ids) of ``env_id`` that is missing; the number built.

    Only TextWorld has such content today (its games); for other envs this returns 0 at once.

    Args:
        progress: show a bar (a terminal) or a start and an end line (elsewhere); ``False``: silent.
        jobs: games compiled at a time; ``None``: one per CPU core.
    """
    if not has_content_to_build(env_id):
        return 0
    specs = []
    for split, task_ids in tasks.items():
        if task_ids:
            specs += _game_specs(env_id, split, dict(env_kwargs or {}), task_ids)
    if not specs:
        return 0
    from r3l_envs.textworld.games import build_games, missing_games

    missing = missing_games(specs)
    if not missing:
        return 0
    where = missing[0].folder().parent
    games = f"{len(missing)} TextWorld game" + ("s" if len(missing) > 1 else "")
    desc = f"compiling {games} (one-time; cached in {where})"
    logger.info("%s", desc)
    with phase(desc, total=len(missing), unit="game", enabled=progress) as bar:
        build_games(missing, jobs=jobs, on_built=lambda _: bar.update())
    return len(missing)


def _game_specs(env_id: str, split: str, env_kwargs: dict[str, Any], task_ids: Sequence[str]) -> list[Any]:
    """The TextWorld game specs of ``task_ids`` of ``split`` (making the env builds nothing)."""
    from r3l_envs.textworld.games import GameSpec

    env = gym.make(env_id, split=split, **env_kwargs)
    try:
        base = env.unwrapped
        indices = [base.task_ids.index_of(t) for t in dict.fromkeys(task_ids)]
        # an unknown id is left to the reset that plays it, which raises the env's own error
        return [GameSpec(base.game_type, base.difficulty, split, i) for i in indices if i is not None]
    finally:
        env.close()
