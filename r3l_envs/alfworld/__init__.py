"""ALFWorld on its real engine (``r3l/ALFWorld-v0``): official games, or offline generated ones."""

from r3l_envs.alfworld.env import ALFWorldEnv
from r3l_envs.alfworld.generator import TASK_TYPES

__all__ = ["TASK_TYPES", "ALFWorldEnv"]
