"""WebShop's reward, term by term, on crafted purchases with hand-computed values."""

import pytest

from r3l_envs.webshop.fuzzy import normalize_color, noun_tokens, token_set_ratio
from r3l_envs.webshop.reward import attribute_reward, option_reward, purchase_reward, type_reward

SHAMPOO_PATH = "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos"


@pytest.mark.parametrize(
    ("a", "b", "score"),
    [
        ("essential oil", "essential oils", 96),  # 2·13/27 between the full token sets
        ("cool powder snow", "powder snow", 100),  # one side's tokens inside the other's
        ("fuzzy wuzzy was a bear", "wuzzy fuzzy was a bear", 100),
        ("16 fl oz", "8 fl oz", 83),  # "fl oz" vs "fl oz 8": 2·5/12
        ("tea bag", "tea tree", 60),  # "tea" vs "tea bag": 2·3/10
        ("Black!", "black", 100),  # punctuation and case are processed away
        ("", "black", 0),
    ],
)
def test_token_set_ratio_matches_thefuzz(a, b, score):
    assert token_set_ratio(a, b) == score


def test_normalize_color_takes_first_colour_of_webshop_list():
    assert normalize_color("navy blue") == "blue"  # "blue" precedes "navy" in WebShop's list
    assert normalize_color("rose gold") == "gold"
    assert normalize_color("8 fl oz") == "8 fl oz"


def test_lexicon_nouns_drop_function_words_and_adjectives():
    assert noun_tokens("Zenora Sulfate Free Shampoo with Tea Tree, 2 Pack for Women") == (
        "zenora",
        "sulfate",
        "shampoo",
        "tea",
        "tree",
        "pack",
        "women",
    )
    with pytest.raises(ValueError, match="lexicon"):
        noun_tokens("x", "nltk")


def _goal(**kw):
    goal = {
        "attributes": ["sulfate free", "essential oils", "natural ingredients"],
        "options": ["navy blue", "16 fl oz"],
        "price_upper": 30.0,
        "query": "shampoo",
        "product_category": SHAMPOO_PATH,
        "name": "Zenora Shampoo with Tea Tree",
    }
    goal.update(kw)
    return goal


def _product(**kw):
    product = {
        "title": "Velix Shampoo Tea Tree",
        "attributes": ["sulfate free", "essential oil"],
        "features": ["Gentle cleansing"],
        "description": "A shampoo for every day.",
        "query": "shampoo",
        "product_category": SHAMPOO_PATH,
    }
    product.update(kw)
    return product


def test_attribute_reward_fuzzy_then_text_fallback():
    # "sulfate free" exact, "essential oils" fuzzy (96), "natural ingredients" nowhere -> 2/3
    assert attribute_reward(_product(), _goal()["attributes"]) == (2 / 3, 2)
    # the third is found in the description text (substring of the lowercased description)
    product = _product(description="Made with Natural Ingredients.")
    assert attribute_reward(product, _goal()["attributes"]) == (1.0, 3)
    # ... or in the feature bullets, or the title
    assert attribute_reward(_product(features=["natural ingredients only"]), ["natural ingredients"]) == (1.0, 1)
    assert attribute_reward(_product(title="Natural Ingredients Shampoo"), ["natural ingredients"]) == (1.0, 1)


def test_option_reward_normalises_colours_and_thresholds():
    # "sky blue" ~ "navy blue" after normalisation (both "blue"); "8 fl oz" vs "16 fl oz" scores 83 <= 85
    assert option_reward(["sky blue", "8 fl oz"], ["navy blue", "16 fl oz"]) == (0.5, 1)
    assert option_reward(["16 fl oz", "navy blue"], ["navy blue", "16 fl oz"]) == (1.0, 2)
    assert option_reward(["anything"], []) == (None, 0)


def test_type_reward_rules():
    full = type_reward(_product(), _goal())
    assert full == {"r_type": 1.0, "query_match": True, "category_match": True, "title_score": 0.75}
    other = {"query": "lotion", "product_category": "Beauty & Personal Care › Skin Care › Body"}
    # one shared breadcrumb level is not a category match; 3 of 4 goal nouns -> 0.75 > 0.2: r_type 1
    assert type_reward(_product(**other), _goal())["r_type"] == 1.0
    # 1 of 5 goal nouns -> 0.2, not above 0.2, no query/category match: 0.5
    goal = _goal(name="Zenora Shampoo Bottle Refill Pack")
    result = type_reward(_product(title="Velix Lotion Pack", **other), goal)
    assert (result["title_score"], result["r_type"]) == (0.2, 0.5)
    # 1 of 11 goal nouns (< 0.1): 0.1 even though the query matches
    goal = _goal(name="alpha beta gamma delta epsilon zeta theta iota kappa lambda shampoo")
    assert type_reward(_product(title="Velix Shampoo"), goal)["r_type"] == 0.1
    # no shared noun: 0.0 whatever else matches
    assert type_reward(_product(title="Velix Lotion"), _goal(name="Zenora Shampoo"))["r_type"] == 0.0
    # a goal name without nouns scores 0.2 and leans on query/category
    assert type_reward(_product(), _goal(name="the best"))["title_score"] == 0.2


def test_purchase_reward_every_term():
    goal = _goal()  # 3 attributes + 2 options + price: denominator 6
    # 2 attributes, 2 options (sky blue ~ navy blue), price 25 <= 30, r_type 1: 5/6
    reward, info = purchase_reward(
        _product(), goal, price=25.0, selected_options={"color": "sky blue", "size": "16 fl oz"}
    )
    assert reward == pytest.approx(5 / 6)
    assert info["r_att"] == pytest.approx(2 / 3) and info["r_option"] == 1.0 and info["r_price"] is True
    assert info["w_att"] == pytest.approx(3 / 6) and info["w_option"] == pytest.approx(2 / 6)
    # over budget and one option wrong: (2 + 1 + 0) / 6
    reward, _ = purchase_reward(
        _product(), goal, price=31.0, selected_options={"color": "navy blue", "size": "8 fl oz"}
    )
    assert reward == pytest.approx(3 / 6)
    # no options selected at all: (2 + 0 + 1) / 6
    assert purchase_reward(_product(), goal, price=30.0, selected_options={})[0] == pytest.approx(3 / 6)
    # everything met: exactly 1.0
    perfect = _product(description="natural ingredients")
    reward, _ = purchase_reward(perfect, goal, price=30.0, selected_options={"c": "navy blue", "s": "16 fl oz"})
    assert reward == 1.0
    # r_type scales everything: same purchase, but a product of another type with 1/5 title nouns -> x 0.5
    goal5 = _goal(name="Zenora Shampoo Bottle Refill Pack")
    lotion = _product(
        title="Velix Lotion Pack", query="lotion", product_category="A › B", description="natural ingredients"
    )
    reward, info = purchase_reward(lotion, goal5, price=30.0, selected_options={"c": "navy blue", "s": "16 fl oz"})
    assert info["r_type"] == 0.5 and reward == pytest.approx(0.5)
    # a goal without options: denominator is attributes + 1, and no option weight is reported
    reward, info = purchase_reward(perfect, _goal(options=[]), price=99.0, selected_options={})
    assert reward == pytest.approx(3 / 4) and "r_option" not in info
