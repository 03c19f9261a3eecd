"""Held-out tasks never equal training tasks in what the agent sees (a test task the agent could have trained on
would measure memory, not skill).

Each generated env's test split is checked against its train split by content key, on a sizeable sample.
The shared rule (:mod:`r3l_envs.splits`) is tested on its own first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from r3l_envs.splits import (
    MAX_DRAWS,
    SPLIT_SHARES,
    SplitExhaustedError,
    candidate_seed,
    content_digest,
    pick_in_split,
    split_of,
)


# ---------------------------------------------------------------------- the rule
def test_split_of_partitions_content_by_the_shares():
    contents = [["puzzle", i] for i in range(20_000)]
    splits = [split_of(c) for c in contents]
    assert splits == [split_of(c) for c in contents]  # a function of the content alone
    for split, share in SPLIT_SHARES.items():
        assert abs(splits.count(split) / len(splits) - share) < 0.015  # ~5 standard deviations
    assert content_digest({"b": 1, "a": [1, 2]}) == content_digest({"a": [1, 2], "b": 1})


def test_pick_in_split_takes_the_first_candidate_of_the_split():
    attempt, value = pick_in_split("test", lambda a: a, lambda a: ["n", a], what="numbers")
    assert split_of(["n", value]) == "test"
    assert all(split_of(["n", a]) != "test" for a in range(attempt))
    assert candidate_seed("x", "test", 3, 1) == candidate_seed("x", "test", 3, 1) != candidate_seed("x", "test", 3, 2)


def test_pick_in_split_runs_the_validity_check_only_on_candidates_of_the_split():
    checked: list[int] = []

    def valid(a: int) -> bool:  # refuses the first candidate of the split, like an unsolvable game
        checked.append(a)
        return len(checked) > 1

    attempt, value = pick_in_split("train", lambda a: a, lambda a: ["v", a], what="v", valid=valid)
    assert value == attempt == checked[-1] and len(checked) == 2
    assert all(split_of(["v", a]) == "train" for a in checked)


def test_a_split_without_content_is_a_clear_error_not_a_repeat():
    in_train = [c for c in (["tiny", i] for i in range(50)) if split_of(c) == "train"][:3]
    with pytest.raises(
        SplitExhaustedError, match=r"tiny config test task 0: none of 40 candidates .*\(3 distinct contents"
    ):
        pick_in_split("test", lambda a: in_train[a % 3], lambda c: c, what="tiny config test task 0", max_draws=40)
    with pytest.raises(SplitExhaustedError, match="2 failed candidates"):
        pick_in_split("test", lambda a: None if a < 2 else in_train[0], lambda c: c, what="x", max_draws=5)
    assert MAX_DRAWS >= 300  # 0.9**300 ~ 2e-14: a held-out task of a large config never gives up by chance


# ---------------------------------------------------------------------- TextWorld
_TW_DIGESTS = textwrap.dedent(
    """
    import json, sys
    from r3l_envs.splits import content_digest
    from r3l_envs.textworld.games import GameSpec, choose_candidate, game_content

    game_type, difficulty, counts = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    out = {}
    for split, count in counts.items():
        picks = [choose_candidate(GameSpec(game_type, difficulty, split, i)) for i in range(count)]
        out[split] = [[attempt, content_digest(game_content(game))] for attempt, game in picks]
    print(json.dumps(out))
    """
)


def _textworld_choices(game_type: str, difficulty: int, counts: dict[str, int]) -> dict[str, list]:
    """Each task's (candidate, content digest), chosen as build_game's child chooses (PYTHONHASHSEED=0)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    args = [sys.executable, "-c", _TW_DIGESTS, game_type, str(difficulty), json.dumps(counts)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("difficulty", [1, 2])
def test_textworld_coin_collector_test_games_are_never_train_games(difficulty):
    """Level 1 had 24 % of its 500 test games among its 10,000 train games by content, level 2 4 %."""
    pytest.importorskip("textworld")
    choices = _textworld_choices("coin_collector", difficulty, {"train": 150, "test": 50})
    train = {digest for _, digest in choices["train"]}
    test = {digest for _, digest in choices["test"]}
    assert len(train) > 120 and len(test) > 40  # a real sample, not a few repeated games
    assert not train & test
    assert any(attempt > 0 for attempt, _ in choices["test"])  # candidates in train's share were passed over


@pytest.mark.slow
def test_textworld_every_test_game_of_level_1_is_never_a_train_game():
    """All 500 test games of the leakiest level (24 % of them were train games before) against 2,000 train games."""
    pytest.importorskip("textworld")
    choices = _textworld_choices("coin_collector", 1, {"train": 2_000, "test": 500})
    train = {digest for _, digest in choices["train"]}
    assert not train & {digest for _, digest in choices["test"]}


@pytest.mark.slow
def test_textworld_built_games_lie_in_their_split(tmp_path, monkeypatch):
    """The compiled game (its game.json, read back) is the one chosen: its content hashes into its split."""
    pytest.importorskip("textworld")
    from textworld.generator.game import Game

    from r3l_envs.textworld.games import GameSpec, build_game, game_content

    monkeypatch.setenv("R3L_CACHE_DIR", str(tmp_path))
    for split in ("train", "valid", "test"):
        path = build_game(GameSpec("coin_collector", 2, split, 0))
        assert split_of(game_content(Game.load(str(path.with_suffix(".json"))))) == split


# ---------------------------------------------------------------------- Countdown and GSM-Symbolic
def _countdown_keys(split: str, count: int, **config) -> set[tuple]:
    """Each task's puzzle as the agent sees it: its numbers (in any order) and its target."""
    from r3l_envs.math.sources import CountdownSource

    source = CountdownSource(split, num_tasks=count, **config)
    puzzles = [source.task(task_id).payload for task_id in source.task_ids]
    return {(tuple(sorted(p.numbers)), p.target) for p in puzzles}


def test_countdown_test_puzzles_are_never_train_puzzles():
    """With 3 numbers <= 10, every one of the 1,000 test puzzles was a train puzzle before (by content)."""
    config = {"num_numbers": 3, "max_number": 10}
    train, valid, test = (
        _countdown_keys(s, n, **config) for s, n in (("train", 20_000), ("valid", 1_000), ("test", 1_000))
    )
    assert len(train) > 1_500 and len(test) > 150  # ~2,200 and ~270 distinct puzzles exist in these shares
    assert not train & test and not train & valid and not valid & test


def test_countdown_default_config_splits_are_disjoint_and_mostly_unchanged():
    from r3l_envs.math.countdown import generate_puzzle
    from r3l_envs.math.sources import CountdownSource

    assert not _countdown_keys("train", 2_000) & _countdown_keys("test", 500)
    train = CountdownSource("train")
    kept = sum(train.puzzle(i) == generate_puzzle(f"r3l-countdown/train/{i}") for i in range(300))
    assert 200 < kept < 280  # ~80 %: a train task keeps its 0.1 puzzle when that puzzle is in train's share


def test_gsm_symbolic_test_questions_are_never_train_questions():
    """Before, 10 of the 500 test questions (and 11 valid ones) were also train questions."""
    pytest.importorskip("reasoning_gym")
    from r3l_envs.math.sources import GSMSymbolicSource

    def questions(split: str) -> set[str]:
        source = GSMSymbolicSource(split)
        return {source.task(task_id).problem for task_id in source.task_ids}

    train, valid, test = questions("train"), questions("valid"), questions("test")
    assert len(train) > 9_000 and len(test) > 450
    assert not train & test and not train & valid and not valid & test


def test_reasoning_gym_test_questions_are_never_train_questions():
    """Short sums have few distinct questions (4,200 with 2-3 one-digit terms): many seeds draw a train one."""
    pytest.importorskip("reasoning_gym")
    from r3l_envs.math.sources import ReasoningGymSource

    config = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1}

    def questions(split: str, count: int) -> set[str]:
        source = ReasoningGymSource("chain_sum", split, count, config)
        return {source.task(task_id).problem for task_id in source.task_ids}

    train, test = questions("train", 2_000), questions("test", 300)
    assert len(train) > 1_000 and len(test) > 100
    assert not train & test


def test_reasoning_gym_names_a_missing_dataset():
    pytest.importorskip("reasoning_gym")
    from r3l_envs.math.sources import ReasoningGymSource

    with pytest.raises(ValueError, match=r"no dataset 'chain_summ'.*chain_sum"):
        ReasoningGymSource("chain_summ", "train")


# ---------------------------------------------------------------------- WebShop goals
def test_webshop_test_goals_are_never_train_goals(tmp_path, monkeypatch):
    """The default generated catalogue had 6 of its 500 test instructions among its train instructions."""
    from r3l_envs.webshop.catalogue import open_catalogue

    monkeypatch.setenv("R3L_CACHE_DIR", str(tmp_path))
    catalogue = open_catalogue("generated", num_products=10_000, seed=0)

    def instructions(split: str) -> set[str]:
        first, end = catalogue.splits[split]
        return {catalogue.goals[g]["instruction"] for g in range(first, end)}

    train, valid, test = instructions("train"), instructions("valid"), instructions("test")
    assert len(test) > 490 and len(valid) > 980 and len(train) > 8_000  # a few repeats within a split are allowed
    assert not train & test and not train & valid and not valid & test


# ---------------------------------------------------------------------- ALFWorld (generated)
def test_alfworld_generated_test_tasks_are_never_train_tasks():
    """Before, 1 of the 500 test tasks had the layout, type and targets of one of the 10,000 train tasks."""
    pytest.importorskip("alfworld")
    from r3l_envs.alfworld.games import choose_task
    from r3l_envs.alfworld.generator import task_content

    def contents(split: str, count: int) -> set[str]:
        return {content_digest(task_content(choose_task(split, i))) for i in range(count)}

    train, test = contents("train", 1_500), contents("test", 300)
    assert len(train) == 1_500 and len(test) == 300
    assert not train & test
