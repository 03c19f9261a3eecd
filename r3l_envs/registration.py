"""Every r3l environment id, registered with gymnasium when ``r3l_envs`` is imported.

Entry points are strings, so an engine (Java, jericho, ...) is imported only when its env is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

from r3l_envs.core import EnvInfo, TextEnv

__all__ = ["NAMESPACE", "env_info", "list_envs", "register_envs"]

NAMESPACE = "r3l"

# id -> (entry point, default kwargs, max_episode_steps). One line per env; nothing else to edit to add one: what the
# env is (prompt family, math or not, expert plan) is declared by its class (``TextEnv``, ``EnvInfo``).
# max_episode_steps is the env's own episode limit (gymnasium's TimeLimit), kept as the engines set it for anyone who
# makes the env: ALFWorld 50 (its base config's max_nb_steps_per_episode), ScienceWorld 100 (its envStepLimit).
# A training budget is the learner's: the ``paper-*`` presets (r3l_learn/loop/presets.py) stop episodes at the R³L
# paper's 25 (ALFWorld) / 15 (WebShop) / 30 (ScienceWorld) turns with ``max_turns``.
_ENVS: dict[str, tuple[str, dict[str, Any], int | None]] = {
    "Countdown-v0": ("r3l_envs.math.envs:CountdownEnv", {}, None),
    "GSMSymbolic-v0": ("r3l_envs.math.envs:GSMSymbolicEnv", {}, None),
    "ReasoningGym-v0": ("r3l_envs.math.envs:ReasoningGymEnv", {}, None),
    "CHAMP-v0": ("r3l_envs.math.envs:ChampEnv", {}, None),
    "GSM8K-v0": ("r3l_envs.math.envs:GSM8KEnv", {}, None),
    "MATH500-v0": ("r3l_envs.math.envs:MATH500Env", {}, None),
    "OlympiadBench-v0": ("r3l_envs.math.envs:OlympiadBenchEnv", {}, None),
    "ALFWorld-v0": ("r3l_envs.alfworld:ALFWorldEnv", {"split": "train"}, 50),
    "TextWorld-v0": ("r3l_envs.textworld:TextWorldEnv", {"game_type": "cooking", "difficulty": 1}, 100),
    "WebShop-v0": ("r3l_envs.webshop.env:WebShopEnv", {"source": "generated", "num_products": 10_000}, 15),
    "ScienceWorld-v0": ("r3l_envs.scienceworld.env:ScienceWorldEnv", {"split": "train", "simplification": "easy"}, 100),
}


def register_envs() -> None:
    """Register every id under the ``r3l/`` namespace (idempotent)."""
    for name, (entry_point, kwargs, max_steps) in _ENVS.items():
        env_id = f"{NAMESPACE}/{name}"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, kwargs=kwargs, max_episode_steps=max_steps)


def list_envs() -> list[str]:
    """The registered r3l ids, sorted, e.g. ``["r3l/CHAMP-v0", "r3l/Countdown-v0", ...]``."""
    return sorted(env_id for env_id in gym.registry if env_id.startswith(f"{NAMESPACE}/"))


def env_info(env: str | gym.Env, kwargs: Mapping[str, Any] | None = None) -> EnvInfo:
    """What an env declares (:class:`~r3l_envs.core.EnvInfo`): by registered id, without making the env (its
    class is imported, no engine is started), or from an env made with ``gym.make`` or directly.

    Envs that are not :class:`~r3l_envs.core.TextEnv` (or ids registered with a factory function rather than a
    class) declare nothing: they get ``EnvInfo()`` (the generic prompt family, not math, no expert plan, no turn
    limit).

    Args:
        env: a registered id, or an env.
        kwargs: with an id, the keyword arguments the env would be made with beyond the registered ones (they
            can change what it declares, e.g. a math env's ``max_attempts``); an env made already knows its own.

    Raises:
        gymnasium.error.Error: ``env`` is an id that is not registered (with gymnasium's "did you mean").
    """
    if isinstance(env, str):
        spec = gym.spec(env)
        cls = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
        if isinstance(cls, type) and issubclass(cls, TextEnv):
            return cls.declaration({**spec.kwargs, **(kwargs or {})})
        return EnvInfo()
    unwrapped = env.unwrapped
    if isinstance(unwrapped, TextEnv):
        return replace(type(unwrapped).declaration(), max_turns=unwrapped.max_turns)
    return EnvInfo()
