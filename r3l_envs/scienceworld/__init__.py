"""ScienceWorld on the real engine: ``gym.make("r3l/ScienceWorld-v0")`` (needs Java; see :mod:`.env`)."""

from r3l_envs.scienceworld.canonical import canonical_observation
from r3l_envs.scienceworld.env import ScienceWorldEnv
from r3l_envs.scienceworld.jvm import ScienceWorldJVM
from r3l_envs.scienceworld.splits import R3L_TRAIN_TASKS, SPLITS, task_names, variation_split

__all__ = [
    "R3L_TRAIN_TASKS",
    "SPLITS",
    "ScienceWorldEnv",
    "ScienceWorldJVM",
    "canonical_observation",
    "task_names",
    "variation_split",
]
