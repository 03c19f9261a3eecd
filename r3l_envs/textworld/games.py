"""Offline, deterministic TextWorld games: (game type, difficulty, split, index) -> a compiled ``.z8`` in the cache.

Games are made by TextWorld's own generator (the code behind ``tw-make``) and compiled by the Inform 7 tools
that ship in the textworld wheel; nothing is downloaded. A game is built the first time a task asks for it
and reused afterwards (2-4 s per build).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from r3l_envs.cache import build_dir_once, cache_root

__all__ = ["DIFFICULTIES", "GAME_TYPES", "SPLIT_SEED_OFFSET", "GameSpec", "build_game"]

logger = logging.getLogger(__name__)

GAME_TYPES = ("coin_collector", "treasure_hunter", "cooking", "custom")

#: Valid difficulty range per game type (inclusive). coin_collector and treasure_hunter use TextWorld's
#: own ``--level``; cooking and custom use the tables below.
DIFFICULTIES = {"coin_collector": (1, 300), "treasure_hunter": (1, 30), "cooking": (1, 4), "custom": (1, 10)}

# Cooking levels, easiest first: the skills of TextWorld's cooking challenge switched on step by step.
_COOKING = {
    1: {"recipe": 1, "take": 1, "go": 1, "open": True},
    2: {"recipe": 1, "take": 1, "go": 1, "open": True, "cook": True, "cut": True},
    3: {"recipe": 2, "take": 2, "go": 6, "open": True, "cook": True, "cut": True},
    4: {"recipe": 3, "take": 3, "go": 9, "open": True, "cook": True, "cut": True, "drop": True},
}

#: Seeds of split ``s`` are ``SPLIT_SEED_OFFSET[s] + index``: disjoint across splits.
SPLIT_SEED_OFFSET = {"train": 0, "valid": 1_000_000, "test": 2_000_000}

# Bump when the way specs map to games changes, so caches built by older code are not reused.
_GENERATOR_VERSION = 1

# How many derived seeds to try when TextWorld cannot make a quest for a custom world (rare, deterministic).
_CUSTOM_ATTEMPTS = 8


@dataclass(frozen=True)
class GameSpec:
    """Everything that determines one generated game."""

    game_type: str
    difficulty: int
    split: str
    index: int

    def __post_init__(self) -> None:
        if self.game_type not in GAME_TYPES:
            raise ValueError(f"game_type must be one of {GAME_TYPES}, got {self.game_type!r}")
        low, high = DIFFICULTIES[self.game_type]
        if not (isinstance(self.difficulty, int) and low <= self.difficulty <= high):
            raise ValueError(
                f"difficulty for {self.game_type} must be an int in [{low}, {high}], got {self.difficulty!r}"
            )
        if self.split not in SPLIT_SEED_OFFSET:
            raise ValueError(f"split must be one of {tuple(SPLIT_SEED_OFFSET)}, got {self.split!r}")

    @property
    def seed(self) -> int:
        return SPLIT_SEED_OFFSET[self.split] + self.index

    def folder(self) -> Path:
        """Where the compiled game lives: keyed by the textworld version, since another generator differs."""
        import textworld

        name = f"{self.game_type}-d{self.difficulty}-{self.split}-{self.index:05d}"
        return cache_root() / "textworld" / f"tw{textworld.__version__}-g{_GENERATOR_VERSION}" / name


def build_game(spec: GameSpec) -> Path:
    """The path of the compiled ``game.z8`` (with its ``game.json``) for ``spec``, building it if needed."""
    folder = build_dir_once(spec.folder(), lambda tmp: _compile_in_subprocess(spec, tmp))
    return folder / "game.z8"


def _compile_in_subprocess(spec: GameSpec, out: Path) -> None:
    """Run the generator in a child process with a fixed string-hash seed.

    TextWorld's generator iterates over sets of strings, whose order depends on ``PYTHONHASHSEED``: in a
    normal process the same seed gives a different game on every run. A child with ``PYTHONHASHSEED=0``
    makes a game a function of its spec alone (and keeps TextWorld's global RNG out of the caller's process).
    """
    args = [sys.executable, "-m", __name__, json.dumps(asdict(spec)), str(out)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"generating TextWorld game {spec} failed:\n{done.stderr[-4000:]}")


def _compile(spec: GameSpec, out: Path) -> None:
    import textworld
    import textworld.challenges
    from textworld.generator import QuestGenerationError, compile_game

    logger.info("generating TextWorld game %s (seed %d) into the cache", spec, spec.seed)
    for attempt in range(_CUSTOM_ATTEMPTS if spec.game_type == "custom" else 1):
        options = textworld.GameOptions()
        options.seeds = spec.seed if attempt == 0 else spec.seed * 1000 + attempt
        options.path = str(out / "game.z8")
        options.file_ext = ".z8"
        options.force_recompile = True
        try:
            game = _make(spec, options)
        except QuestGenerationError:
            logger.debug("no quest for %s at attempt %d; trying the next derived seed", spec, attempt)
            continue
        compile_game(game, options)
        return
    raise RuntimeError(f"TextWorld could not generate a quest for {spec} in {_CUSTOM_ATTEMPTS} attempts")


def _make(spec: GameSpec, options: Any) -> Any:
    import textworld
    import textworld.challenges

    if spec.game_type == "custom":
        d = spec.difficulty
        options.nb_rooms = d + 1
        options.nb_objects = 2 * d + 4
        options.chaining.min_length = options.chaining.max_length = options.chaining.max_depth = d
        return textworld.generator.make_game(options)
    if spec.game_type == "cooking":
        settings = {"recipe_seed": 0, "split": spec.split, **_COOKING[spec.difficulty]}
    else:
        settings = {"level": spec.difficulty}
    _, make, _ = textworld.challenges.CHALLENGES[f"tw-{spec.game_type}"]
    return make(settings=settings, options=options)


if __name__ == "__main__":  # the child process of _compile_in_subprocess
    _compile(GameSpec(**json.loads(sys.argv[1])), Path(sys.argv[2]))
