"""ALFWorld's engine: TextWorld's PDDL env (fast-downward) with ALFWorld's name demangler.

Not thread-safe: a PddlEnv and its private copy of ``libdownward.so`` must be used by one thread at a time.
Each PddlEnv loads its own copy of the library, so several envs in one process (or in several processes)
do not share planner state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["core", "demangled", "replan", "start"]


def demangled(env: Any) -> Any:
    """Wrap a PddlEnv with ALFWorld's demangler ("Cabinet_bar__plus_00..." -> "cabinet 1")."""
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler

    return AlfredDemangler()(env)


def start(path: Path, *, policy_commands: bool = False) -> Any:
    """A demangled PddlEnv with ``path`` loaded, asking for admissible commands and ``won``."""
    import textworld
    from textworld.envs.pddl import PddlEnv

    from r3l_envs.alfworld import speedups

    speedups.install()
    infos = textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=policy_commands)
    env = demangled(PddlEnv(infos))
    env.load(str(path))
    return env


def replan(path: Path, actions: list[str]) -> list[str]:
    """The planner's plan from the state that ``actions`` lead to in the game at ``path`` (a private engine)."""
    helper = start(path)
    try:
        helper.reset()
        for action in actions:
            helper.step(action)
        pddl = core(helper)
        return list(pddl._pddl_state.replan(pddl._entity_infos))
    finally:
        helper.close()


def core(env: Any) -> Any:
    """The PddlEnv under the wrappers."""
    from textworld.envs.pddl import PddlEnv

    while not isinstance(env, PddlEnv):
        env = env._wrapped_env
    return env
