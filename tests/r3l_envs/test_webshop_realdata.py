"""WebShop's own data files (fixtures in WebShop's formats): cleaning, human goals, splits, errors."""

import json
import shutil
from pathlib import Path

import gymnasium as gym
import pytest

import r3l_envs
from r3l_envs.errors import DataNotFoundError, MalformedDataError, UnknownTaskError
from r3l_envs.webshop import WebShopEnv, oracle_actions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "webshop"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("R3L_CACHE_DIR", str(tmp_path / "cache"))


def make(split="test", data_path=FIXTURES):
    return WebShopEnv(source="webshop", data_path=str(data_path), split=split)


def test_products_are_cleaned_as_webshop_does():
    catalogue = make().catalogue
    products = [catalogue.products[i] for i in range(len(catalogue.products))]
    # "nan", an 11+ character asin and a repeated asin are dropped
    assert [p["asin"] for p in products] == ["B09QQP3356", "B07XYZ1234", "B08BACON01", "B01OTTOMAN", "B02SHAMPOO"]
    hair, mic, bacon, ottoman, shampoo = products
    assert hair["options"] == {"color": ["natural black", "light brown | blonde"], "size": ["22 inch", "18 inch"]}
    assert bacon["options"] == {"size": ["4 ounce (pack of 2)", "4 ounce (pack of 4)"]}  # null groups skipped
    assert mic["price_tag"] == "$29.99 to $39.99" and 29.99 <= mic["price"] <= 39.99
    assert (ottoman["price"], ottoman["price_tag"]) == (100.0, "$100.0")  # no pricing: WebShop's $100
    assert mic["features"] == ["Noise cancelling cardioid capsule"]  # a string bullet becomes a list
    assert shampoo["attributes"] == ["DUMMY_ATTR"] and hair["attributes"][0] == "natural looking"


def test_human_goals_and_splits():
    env = make()
    catalogue = env.catalogue
    goals = [catalogue.goals[i] for i in range(len(catalogue.goals))]
    # the goal without attributes and the one whose product is not in the catalogue are skipped
    assert sorted(g["asin"] for g in goals) == ["B01OTTOMAN", "B02SHAMPOO", "B07XYZ1234", "B08BACON01", "B09QQP3356"]
    hair = next(g for g in goals if g["asin"] == "B09QQP3356")
    assert hair[
        "instruction"
    ] == "i need a long clip-in hair extension which is natural looking, and price lower than " + (
        f"{hair['price_upper']:.2f} dollars"
    )
    assert hair["price_upper"] in (40.0, 50.0, 60.0) and hair["options"] == ["natural black", "22 inch"]
    # WebShop's split: the first 500 shuffled goals are the test set
    assert len(env.task_ids) == 5 and len(make("train").task_ids) == 0
    with pytest.raises(UnknownTaskError, match="no tasks"):
        make("train").reset(seed=0)


def test_real_goals_are_playable_to_full_reward():
    env = make()
    rewards = {}
    for task_id in env.task_ids:
        env.reset(options={"task_id": task_id})
        rewards[env.goal["asin"]] = oracle_actions(env)[0]
    assert rewards["B09QQP3356"] == 1.0 and rewards["B08BACON01"] == 1.0


def test_check_env_on_real_data():
    r3l_envs.check_env(gym.make("r3l/WebShop-v0", source="webshop", data_path=str(FIXTURES), split="test"))


def test_missing_and_malformed_files_raise_with_the_format(tmp_path):
    with pytest.raises(DataNotFoundError, match="not a folder"):
        make(data_path=tmp_path / "nowhere")
    with pytest.raises(DataNotFoundError, match=r"items_shuffle\*\.json"):
        make(data_path=tmp_path)
    data = tmp_path / "data"
    shutil.copytree(FIXTURES, data)
    (data / "items_ins_v2_1000.json").write_text("[1, 2]")
    with pytest.raises(MalformedDataError, match="items_ins_v2"):
        make(data_path=data)
    (data / "items_ins_v2_1000.json").write_text("{}")
    (data / "items_shuffle_1000.json").write_text(json.dumps([{"asin": "B1", "name": "no other keys"}]))
    with pytest.raises(MalformedDataError, match="full_description"):
        make(data_path=data)
    with pytest.raises(ValueError, match="data_path"):
        WebShopEnv(source="webshop")
