"""Compiling many TextWorld games ahead of play: one tick per game built, and the parallel build writes the same
cache files, byte for byte, as the serial one."""

from pathlib import Path

import pytest

pytest.importorskip("textworld")

from r3l_envs.textworld.games import GameSpec, build_games, missing_games

pytestmark = pytest.mark.slow  # four real game builds (a few seconds each on a quiet machine)

SPECS = [GameSpec("coin_collector", 1, "test", 0), GameSpec("coin_collector", 1, "train", 1)]


def _files(root: Path) -> dict[str, bytes]:
    """Every cache entry's files (not the builders' lock files), by path under ``root``."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def test_parallel_build_ticks_once_per_game_and_writes_the_serial_builds_files(tmp_path, monkeypatch):
    built = {}
    for jobs in (1, 2):
        root = tmp_path / f"jobs{jobs}"
        monkeypatch.setenv("R3L_CACHE_DIR", str(root))
        assert missing_games([*SPECS, SPECS[0]]) == SPECS  # distinct, in order
        ticks = []
        paths = build_games([*SPECS, SPECS[0]], jobs=jobs, on_built=ticks.append)  # a repeat is built once
        assert sorted(ticks, key=SPECS.index) == SPECS
        assert list(paths) == SPECS and all(paths[s].is_file() for s in SPECS)
        assert missing_games(SPECS) == []
        again = []
        assert build_games(SPECS, jobs=jobs, on_built=again.append) == paths and again == []  # cached: no ticks
        built[jobs] = _files(root)
    assert len(built[1]) >= 2 * 3 and any(name.endswith("game.z8") for name in built[1])
    assert built[1].keys() == built[2].keys()
    for name in built[1]:
        assert built[1][name] == built[2][name], name
