"""Offline, deterministic TextWorld games: (game type, difficulty, split, index) -> a compiled ``.z8`` in the cache.

Games are made by TextWorld's own generator (the code behind ``tw-make``) and compiled by the Inform 7 tools
that ship in the textworld wheel; nothing is downloaded. A game is built the first time a task asks for it
and reused afterwards (a few seconds per build: ~8 s for coin_collector at load 4 on 2 cores).

Splits are disjoint by content (:mod:`r3l_envs.splits`): a game belongs to the split that the hash of
:func:`game_content` (its texts, map, objects and goal, what the agent can see) falls in. Task ``index`` of a
split plays the first candidate seed of its own stream whose game lies in the split. Candidates are judged
without compiling them (see :func:`_quick_generation`); only the chosen game is generated in full and compiled,
and its full content is checked to lie in the split before it is written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from r3l_envs.cache import build_dir_once, cache_root
from r3l_envs.splits import SPLIT_SHARES, SplitExhaustedError, candidate_seed, pick_in_split, split_of

__all__ = [
    "DIFFICULTIES",
    "GAME_TYPES",
    "SPLIT_SEED_OFFSET",
    "GameSpec",
    "build_game",
    "build_games",
    "choose_candidate",
    "game_content",
    "missing_games",
]

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

#: The first candidate seed of task ``index`` of split ``s`` is ``SPLIT_SEED_OFFSET[s] + index`` (most train
#: games stay those of generator version 1); further candidates use :func:`r3l_envs.splits.candidate_seed`.
SPLIT_SEED_OFFSET = {"train": 0, "valid": 1_000_000, "test": 2_000_000}

# Bump when the way specs map to games changes, so caches built by older code are not reused.
# 2: splits disjoint by content (version 1 chose games by seed alone; test games could equal train games).
_GENERATOR_VERSION = 2

# The child process's exit status for SplitExhaustedError, so that the parent raises the same typed error.
_EXHAUSTED_STATUS = 3


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

    def seed(self, attempt: int = 0) -> int:
        """The TextWorld seed of candidate ``attempt`` of this task."""
        if attempt == 0:
            return SPLIT_SEED_OFFSET[self.split] + self.index
        return candidate_seed(f"textworld/{self.game_type}/{self.difficulty}", self.split, self.index, attempt)

    def folder(self) -> Path:
        """Where the compiled game lives: keyed by the textworld version, since another generator differs."""
        import textworld

        name = f"{self.game_type}-d{self.difficulty}-{self.split}-{self.index:05d}"
        return cache_root() / "textworld" / f"tw{textworld.__version__}-g{_GENERATOR_VERSION}" / name


def build_game(spec: GameSpec) -> Path:
    """The path of the compiled ``game.z8`` (with its ``game.json``) for ``spec``, building it if needed.

    Raises:
        SplitExhaustedError: the game type and difficulty have no game with content in ``spec.split``.
    """
    folder = build_dir_once(spec.folder(), lambda tmp: _compile_in_subprocess(spec, tmp))
    return folder / "game.z8"


def build_games(
    specs: Iterable[GameSpec], *, jobs: int | None = None, on_built: Callable[[GameSpec], None] | None = None
) -> dict[GameSpec, Path]:
    """Build every game of ``specs`` that the cache lacks, ``jobs`` at a time; the ``game.z8`` path of each spec.

    Each build is a child process (see :func:`build_game`), so threads here run them in parallel; the games are
    the same as built one by one (a game is a function of its spec, and each entry is written by one builder).
    ``on_built(spec)`` runs on the calling thread once per distinct spec that was missing, as it is finished.

    Args:
        jobs: builds at a time; ``None``: one per CPU core (compiling is CPU-bound).

    Raises:
        SplitExhaustedError, RuntimeError: as :func:`build_game`; the builds already started are finished first.
    """
    unique = list(dict.fromkeys(specs))
    missing = missing_games(unique)
    paths = {spec: spec.folder() / "game.z8" for spec in unique if spec not in missing}
    if not missing:
        return paths
    workers = max(1, min(jobs or os.cpu_count() or 1, len(missing)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="textworld-build") as pool:
        futures = {pool.submit(build_game, spec): spec for spec in missing}
        try:
            for future in as_completed(futures):
                paths[futures[future]] = future.result()
                if on_built is not None:
                    on_built(futures[future])
        except BaseException:
            for future in futures:
                future.cancel()  # the builds under way finish (and stay cached); the queued ones do not start
            raise
    return {spec: paths[spec] for spec in unique}


def missing_games(specs: Iterable[GameSpec]) -> list[GameSpec]:
    """The distinct specs of ``specs`` whose game is not in the cache yet (what :func:`build_games` would build)."""
    return [spec for spec in dict.fromkeys(specs) if not spec.folder().is_dir()]


def game_content(game: Any) -> dict[str, list[str]]:
    """What the agent can see of a TextWorld ``Game``: its content key for splits (JSON-able).

    Every entity's type and texts, the facts of the world (map, placements, open/locked states) and the
    win and fail conditions, with TextWorld's internal ids (``r_0``, ``o_3``) replaced by the names the
    player reads, so two games that differ only in id numbering have one key. The objective's wording is
    left out: it paraphrases the goal with random phrasing (and needs the walkthrough check to be written);
    a coarser key only ever puts more games in one split, never the same game in two.
    """

    def name(variable: Any) -> str:
        info = game.infos.get(variable.name)
        return info.name if info is not None and info.name else variable.name

    def fact(prop: Any) -> str:
        return f"{prop.name}({','.join(name(arg) for arg in prop.arguments)})"

    def conditions(events: Any) -> str:
        return json.dumps(sorted(sorted(fact(p) for p in event.condition.preconditions) for event in events))

    return {
        "entities": sorted(
            json.dumps([i.type, i.name, i.adj, i.noun, i.desc, i.indefinite, i.definite]) for i in game.infos.values()
        ),
        "facts": sorted(fact(p) for p in game.world.facts),
        "wins": sorted(conditions(quest.win_events) for quest in game.quests),
        "fails": sorted(conditions(quest.fail_events) for quest in game.quests),
    }


def _compile_in_subprocess(spec: GameSpec, out: Path) -> None:
    """Run the generator in a child process with a fixed string-hash seed.

    TextWorld's generator iterates over sets of strings, whose order depends on ``PYTHONHASHSEED``: in a
    normal process the same seed gives a different game on every run. A child with ``PYTHONHASHSEED=0``
    makes a game a function of its spec alone (and keeps TextWorld's global RNG out of the caller's process).
    """
    args = [sys.executable, "-m", __name__, json.dumps(asdict(spec)), str(out)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode == _EXHAUSTED_STATUS:
        raise SplitExhaustedError(done.stderr.strip().splitlines()[-1])
    if done.returncode != 0:
        raise RuntimeError(f"generating TextWorld game {spec} failed:\n{done.stderr[-4000:]}")


def choose_candidate(spec: GameSpec) -> tuple[int, Any]:
    """The first candidate ``(attempt, Game)`` of ``spec``'s stream whose :func:`game_content` lies in its split,
    from quick generations (call in a process with ``PYTHONHASHSEED=0``, as :func:`build_game`'s child is).

    Raises:
        SplitExhaustedError: no candidate among :data:`~r3l_envs.splits.MAX_DRAWS` lies in ``spec.split``.
    """
    what = f"TextWorld {spec.game_type} difficulty {spec.difficulty}, {spec.split} task {spec.index}"
    with _quick_generation():
        return pick_in_split(spec.split, lambda attempt: _generate(spec, attempt), game_content, what=what)


def _compile(spec: GameSpec, out: Path) -> None:
    from textworld.generator import compile_game

    attempt, _ = choose_candidate(spec)
    game = _generate(spec, attempt)  # in full this time, walkthrough check included
    if game is None or split_of(game_content(game)) != spec.split:
        raise RuntimeError(f"{spec}: the full generation of candidate {attempt} differs from the quick one")
    logger.info(
        "generating TextWorld game %s (seed %d, candidate %d) into the cache", spec, spec.seed(attempt), attempt
    )
    compile_game(game, _options(spec, attempt, out))
    record = {"seed": spec.seed(attempt), "candidate": attempt, "split_shares": dict(SPLIT_SHARES)}
    (out / "split.json").write_text(json.dumps(record))


def _options(spec: GameSpec, attempt: int, out: Path | None = None) -> Any:
    import textworld

    options = textworld.GameOptions()
    options.seeds = spec.seed(attempt)
    if out is not None:
        options.path = str(out / "game.z8")
    options.file_ext = ".z8"
    options.force_recompile = True
    return options


def _generate(spec: GameSpec, attempt: int) -> Any:
    """TextWorld's game for candidate ``attempt``, or ``None`` if it cannot make a quest for that seed."""
    from textworld.generator import QuestGenerationError

    try:
        return _make(spec, _options(spec, attempt))
    except QuestGenerationError:  # custom worlds, rarely: the candidate simply fails
        logger.debug("no quest for %s at candidate %d", spec, attempt)
        return None


_PARSED_KBS: dict[Any, Any] = {}  # knowledge bases parsed by quick generations, by load() arguments


@contextlib.contextmanager
def _quick_generation() -> Iterator[None]:
    """Generate candidates fast (in this child process only): skip the walkthrough check, parse each
    knowledge base once.

    ``GameMaker.set_walkthrough`` compiles and plays the game to attach the winning actions to its quest (the
    objective's wording comes from them), ~0.8 s of a coin_collector's ~1 s; the challenges also re-parse their
    knowledge base for every game (~0.4 s). Neither changes :func:`game_content`, and :func:`_compile` checks
    the chosen candidate again with a full generation.
    """
    from textworld.generator.data import KnowledgeBase
    from textworld.generator.maker import GameMaker

    set_walkthrough, load = GameMaker.__dict__["set_walkthrough"], KnowledgeBase.__dict__["load"]

    def load_once(cls: type, *args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        if key not in _PARSED_KBS:
            _PARSED_KBS[key] = load.__func__(cls, *args, **kwargs)
        return _PARSED_KBS[key]

    GameMaker.set_walkthrough = lambda self, commands: None
    KnowledgeBase.load = classmethod(load_once)
    try:
        yield
    finally:
        GameMaker.set_walkthrough, KnowledgeBase.load = set_walkthrough, load


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
    try:
        _compile(GameSpec(**json.loads(sys.argv[1])), Path(sys.argv[2]))
    except SplitExhaustedError as error:
        print(str(error).replace("\n", " "), file=sys.stderr)
        sys.exit(_EXHAUSTED_STATUS)
