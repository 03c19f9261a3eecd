"""r3l environments: text-agent envs with one multi-turn API and exact checkpoint/restore.

Importing the package registers every ``r3l/*`` id with gymnasium::

    import gymnasium as gym
    import r3l_envs

    env = gym.make("r3l/Countdown-v0")
    obs, info = env.reset(seed=0)
    ckpt = r3l_envs.checkpoint(env)
"""

from r3l_envs import errors
from r3l_envs._version import __version__
from r3l_envs.checker import check_env
from r3l_envs.checkpoint import Checkpoint, checkpoint, register_wrapper_state, restore
from r3l_envs.core import INFO_KEYS, EnvInfo, TextEnv, TextSpace
from r3l_envs.registration import env_info, list_envs, register_envs

register_envs()

__all__ = [
    # the contract
    "INFO_KEYS",
    "EnvInfo",
    "TextEnv",
    "TextSpace",
    # checkpoint / restore
    "Checkpoint",
    "checkpoint",
    "register_wrapper_state",
    "restore",
    # registry and checker
    "check_env",
    "env_info",
    "list_envs",
    "register_envs",
    # errors and version
    "__version__",
    "errors",
]
