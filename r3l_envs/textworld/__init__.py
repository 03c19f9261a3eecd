"""TextWorld games generated offline and played by the real engine (``r3l/TextWorld-v0``)."""

from r3l_envs.textworld.env import SPLIT_SIZES, TextWorldEnv
from r3l_envs.textworld.games import DIFFICULTIES, GAME_TYPES, GameSpec, build_game

__all__ = ["DIFFICULTIES", "GAME_TYPES", "SPLIT_SIZES", "GameSpec", "TextWorldEnv", "build_game"]
