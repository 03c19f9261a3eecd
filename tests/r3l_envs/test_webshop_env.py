"""r3l/WebShop-v0 on a small generated catalogue: contract, page flow, bad actions, checkpoints, the oracle."""

import gymnasium as gym
import numpy as np
import pytest

import r3l_envs
from r3l_envs.webshop import WebShopEnv, oracle_actions
from r3l_envs.webshop.env import MAX_QUERY_CHARS
from r3l_envs.webshop.pages import SEP
from r3l_envs.webshop.search import SearchIndex, build_index

N = 300  # products: builds in well under a second


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("R3L_CACHE_DIR", str(tmp_path_factory.mktemp("r3l-cache")))
        yield


@pytest.fixture
def env():
    return WebShopEnv(num_products=N, split="train")


def test_splits_follow_webshop_layout_scaled_down():
    sizes = {split: len(WebShopEnv(num_products=N, split=split).task_ids) for split in ("test", "valid", "train")}
    assert sizes == {"test": 30, "valid": 30, "train": 240}
    with pytest.raises(ValueError, match="split must be one of"):
        WebShopEnv(num_products=N, split="dev")
    with pytest.raises(ValueError, match="source must be one of"):
        WebShopEnv(source="amazon")


def test_page_flow_and_observations(env):
    obs, info = env.reset(seed=1)
    instruction = info["task"]
    assert obs == SEP.join(["WebShop", "Instruction:", instruction, "Search"])
    assert info["admissible_actions"] == ["search[<query>]"] and instruction.startswith(("i ", "find"))
    goal = env.goal
    obs, reward, done, _, info = env.step(f"search[{goal['query']}]")
    assert (reward, done, info["page"]) == (0.0, False, "results")
    assert obs.startswith(SEP.join(["Instruction:", instruction, "Back to Search", "Page 1 (Total results: "]))
    actions = info["admissible_actions"]
    assert actions[:2] == ["click[Back to Search]", "click[Next >]"] and "click[< Prev]" not in actions
    products = [a for a in actions if a.startswith("click[B0")]
    assert len(products) == 10
    obs, *_, info = env.step("click[Next >]")
    assert "Page 2 (Total results:" in obs and "click[< Prev]" in info["admissible_actions"]
    first = next(a for a in info["admissible_actions"] if a.startswith("click[B0"))
    obs, *_, info = env.step(first.lower())  # WebShop lowercases click arguments: case does not matter
    assert info["page"] == "item" and obs.endswith("Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    product = env.catalogue.products[env._session.item]
    assert f"Price: {product['price_tag']}" in obs and product["title"] in obs
    for group, values in product["options"].items():
        obs, *_, info = env.step(f"click[{values[-1]}]")
        assert info["selected_options"][group] == values[-1]
    selected = info["selected_options"]
    obs, *_, info = env.step("click[Features]")
    assert info["page"] == "Features" and product["features"][0] in obs
    assert info["admissible_actions"] == ["click[Back to Search]", "click[< Prev]"]
    *_, info = env.step("click[< Prev]")
    assert info["page"] == "item" and info["selected_options"] == selected  # sub-pages keep the options
    obs, *_, info = env.step("click[< Prev]")
    assert "Page 2 (Total results:" in obs and info["selected_options"] == {}  # results forget them
    obs, *_, info = env.step("click[Back to Search]")
    assert info["page"] == "search" and obs.startswith("WebShop [SEP]")


def test_buy_now_ends_with_webshop_reward(env):
    env.reset(seed=2)
    reward, actions = oracle_actions(env)
    assert reward == 1.0 and actions[-1] == "click[Buy Now]"
    _, r, done, _, info = env.step("click[Buy Now]")  # after the end: no change, no reward
    assert (r, done, info["won"], info["score"]) == (0.0, True, True, 1.0)


def test_partial_purchase_scores_below_one(env):
    env.reset(seed=3)
    goal = env.goal
    env.step(f"search[{goal['name']}]")
    env.step(f"click[{goal['asin']}]")
    *_, info = env.step("click[Buy Now]")  # no option chosen
    assert info["score"] == pytest.approx(
        info["reward_info"]["r_type"]
        * (len(goal["attributes"]) + 1)
        / (len(goal["attributes"]) + len(goal["options"]) + 1)
    )
    assert info["won"] is (not goal["options"])


BAD = [
    ("click[]", "needs an argument"),
    ("search[red shoes", "closing ']'"),
    ("click[B0NOTONPAGE]", "not clickable"),
    ("click[Buy Now]", "not clickable"),
    ("search[" + "x" * (MAX_QUERY_CHARS + 1) + "]", "longer than"),
    ("x" * 100_000, "not an action"),
    ("", "empty"),
    ("\x00\x1b[31m", "not an action"),
    ("go \ud800 north", "not an action"),
]


@pytest.mark.parametrize(("action", "why"), BAD)
def test_bad_actions_explain_and_change_nothing(env, action, why):
    env.reset(seed=4)
    env.step(f"search[{env.goal['query']}]") if "search[" not in action else None
    before_state, before_info = env._save_state(), env._info()
    obs, reward, done, truncated, info = env.step(action)
    assert obs.startswith("Invalid action:") and why in info["invalid_action"]
    assert (reward, done, truncated) == (0.0, False, False)
    assert env._save_state() == before_state and info["admissible_actions"] == before_info["admissible_actions"]


def test_search_needs_a_search_box(env):
    env.reset(seed=5)
    env.step("search[shampoo]")
    *_, info = env.step("search[shampoo]")
    assert "no search box" in info["invalid_action"]


def test_native_checkpoint_is_exact():
    env = gym.make("r3l/WebShop-v0", num_products=N)
    env.reset(seed=6)
    goal = env.unwrapped.goal
    env.step(f"search[{goal['name']}]")
    env.step(f"click[{goal['asin']}]")
    ckpt = r3l_envs.checkpoint(env)
    rest = [f"click[{v}]" for v in goal["options"]] + ["click[Description]", "click[< Prev]", "click[Buy Now]"]
    expected = [env.step(a) for a in rest]
    fresh = gym.make("r3l/WebShop-v0", num_products=N)
    r3l_envs.restore(fresh, r3l_envs.Checkpoint.from_bytes(ckpt.to_bytes()))
    assert [fresh.step(a) for a in rest] == expected
    r3l_envs.restore(env, ckpt, via="replay")
    assert [env.step(a) for a in rest] == expected


def test_envs_share_one_catalogue():
    a, b = WebShopEnv(num_products=N), WebShopEnv(num_products=N, split="test")
    assert a.catalogue is b.catalogue
    with pytest.raises(TypeError):  # the memory map is read-only
        a.catalogue.products._blob[0:1] = b"x"


def test_oracle_reaches_reward_one_on_95_percent_of_goals():
    env = WebShopEnv(num_products=1000, split="train")
    rewards = []
    for task_id in env.task_ids[::4]:  # 200 goals
        env.reset(options={"task_id": task_id})
        rewards.append(oracle_actions(env)[0])
    assert np.mean(np.array(rewards) == 1.0) >= 0.95


def test_random_play_never_crashes(env):
    rng = np.random.default_rng(0)
    words = ["shampoo", "black", "gluten free", "size 8", "chair", "zzz"]
    for episode in range(30):
        obs, info = env.reset(seed=episode)
        for _ in range(25):
            actions = info["admissible_actions"]
            if not actions:
                break
            action = actions[rng.integers(len(actions))]
            if action == "search[<query>]":
                action = f"search[{' '.join(rng.choice(words, size=2))}]"
            obs, reward, done, _, info = env.step(action)
            assert isinstance(obs, str) and 0.0 <= reward <= 1.0
            if done:
                assert info["score"] == reward
                break


def test_search_results_are_deterministic_and_capped_at_50(env):
    first = env.catalogue.search("black free")
    assert first == env.catalogue.search("black free") and len(first) == 50
    assert env.catalogue.search("qqqq zzzz") == []


def test_search_breaks_ties_by_catalogue_order(tmp_path):
    texts = ["blue pillow"] * 120 + ["red pillow", "blue pillow blue"]
    build_index(texts, tmp_path)
    hits = SearchIndex(tmp_path).search("blue pillow")
    assert hits[0] == 121 and hits[1:] == list(range(49))  # the best first, then equal scores in order
