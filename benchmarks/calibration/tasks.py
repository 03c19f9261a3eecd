"""The test tasks of a configuration and how many of them are distinct by content."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from r3l_envs.splits import content_digest


def make_env(env_id: str, env_kwargs: dict[str, Any], split: str) -> gym.Env:
    """``gym.make(env_id, split=split, **env_kwargs)``; the configuration's kwargs never choose the split."""
    kwargs = {k: v for k, v in env_kwargs.items() if k != "split"}
    return gym.make(env_id, split=split, **kwargs)


def task_ids(env: gym.Env, count: int) -> list[str]:
    """The first ``count`` task ids of ``env``'s split (fewer when the split has fewer: the JSON says so)."""
    ids = env.unwrapped.task_ids
    return list(ids[: min(count, len(ids))])


def content_key(env: gym.Env, task_id: str) -> str:
    """A digest of what the agent faces in ``task_id``: the TextWorld game's content (the key its split is drawn
    by: texts, map, objects, goal), else the task text and first observation after a reset."""
    unwrapped = env.unwrapped
    if type(unwrapped).__name__ == "TextWorldEnv":
        import textworld

        from r3l_envs.textworld.games import GameSpec, build_game, game_content

        index = unwrapped.task_ids.index_of(task_id)
        spec = GameSpec(unwrapped.game_type, unwrapped.difficulty, unwrapped.split, index)
        game = textworld.Game.load(str(build_game(spec).with_suffix(".json")))
        return content_digest(game_content(game))
    observation, info = env.reset(options={"task_id": task_id})
    return content_digest([info.get("task"), observation])


def distinct_tasks(env: gym.Env, ids: list[str]) -> int:
    """How many of ``ids`` differ by content (two ids of one split may draw the same content)."""
    return len({content_key(env, task) for task in ids})
