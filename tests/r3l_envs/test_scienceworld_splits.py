"""ScienceWorld task ids and splits: ScienceWorld's own variation split and the R³L task-type split."""

import pytest

from r3l_envs.errors import UnknownTaskError
from r3l_envs.scienceworld.splits import (
    R3L_TRAIN_TASKS,
    TaskIds,
    parse_task_id,
    resolve_tasks,
    split_variations,
    task_names,
    variation_split,
)


def test_thirty_tasks_and_the_r3l_split_is_17_to_13():
    names = task_names()
    assert len(names) == 30 and names[0] == "boil"
    assert len(R3L_TRAIN_TASKS) == 17 and set(R3L_TRAIN_TASKS) <= set(names)
    held_out = [t for t in names if split_variations(t, 10, "r3l_test") != []]
    assert len(held_out) == 13 and not set(held_out) & set(R3L_TRAIN_TASKS)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 6, 7, 10, 14, 30, 32, 126, 1386])
def test_variation_split_is_disjoint_ordered_and_covers_what_the_engine_covers(n):
    split = variation_split(n)
    train, dev, test = split["train"], split["dev"], split["test"]
    if n >= 5:
        assert not set(train) & set(dev) and not set(dev) & set(test) and not set(train) & set(test)
        assert train == list(range(len(train))) and len(train) >= n // 2 - 1
    assert all(0 <= v < max(n, 1) for v in train + dev + test)


def test_task_ids_round_trip_and_reject_junk():
    ids = TaskIds(["boil", "melt"], {"boil": 30, "melt": 30}, "dev")
    assert list(ids) == [f"boil/var{v}" for v in range(14, 21)] + [f"melt/var{v}" for v in range(14, 21)]
    assert "boil/var14" in ids and "boil/var0" not in ids and ids[0] == "boil/var14"
    assert parse_task_id("boil/var14") == ("boil", 14)
    for junk in ["boil", "boil/varx", "", "boil/14"]:
        with pytest.raises(UnknownTaskError):
            parse_task_id(junk)
    assert TaskIds(["boil"], {"boil": 30}, "valid")._ids == TaskIds(["boil"], {"boil": 30}, "dev")._ids


def test_resolve_tasks_accepts_numbers_and_suggests_names():
    assert resolve_tasks("1-1") == ("boil",)
    assert resolve_tasks(["boil", "boil", "melt"]) == ("boil", "melt")
    with pytest.raises(UnknownTaskError, match="Did you mean 'boil'"):
        resolve_tasks("boill")
    with pytest.raises(ValueError, match="unknown ScienceWorld split"):
        split_variations("boil", 30, "training")


@pytest.mark.java
def test_variation_split_matches_the_engine():
    from r3l_envs.scienceworld.jvm import ScienceWorldJVM

    jvm = ScienceWorldJVM()
    jvm.start()
    try:
        for task in ["identify-life-stages-2", "identify-life-stages-1", "boil", "chemistry-mix", "grow-plant"]:
            jvm.call("load", task, 0, "", False)
            engine = {
                "train": list(jvm.call("getVariationsTrain")),
                "dev": list(jvm.call("getVariationsDev")),
                "test": list(jvm.call("getVariationsTest")),
            }
            assert variation_split(jvm.call("getTaskMaxVariations", task)) == engine, task
    finally:
        jvm.close()
