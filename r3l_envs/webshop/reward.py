"""WebShop's purchase reward (Yao et al., 2022, and ``web_agent_site/engine/goal.py``), term by term.

    r = r_type · (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[price ≤ price_upper]) / (|U_att| + |U_opt| + 1)

* attributes: a goal attribute is met when some product attribute has ``token_set_ratio > 85`` with it, or,
  failing that, when it is a substring of the lowercased title, the joined feature bullets or the description;
* options: a goal option is met when some selected option value has ``token_set_ratio > 85`` with it, after
  both are colour-normalised;
* r_type: 1.0 when the query matches, two breadcrumb levels match, or the share of the goal name's nouns found
  in the product name is above 0.2; otherwise 0.5; then 0.1 when that share is below 0.1 and 0.0 when it is 0.

Products and goals are the plain dicts of :mod:`r3l_envs.webshop.store` (keys: ``title``, ``attributes``,
``features``, ``description``, ``query``, ``product_category``; goals: ``attributes``, ``options``,
``price_upper``, ``query``, ``product_category``, ``name``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from r3l_envs.webshop.fuzzy import normalize_color, noun_tokens, token_set_ratio

__all__ = ["FUZZY_THRESHOLD", "attribute_reward", "option_reward", "purchase_reward", "type_reward"]

#: A fuzzy match needs ``token_set_ratio`` strictly above this.
FUZZY_THRESHOLD = 85


def type_reward(product: Mapping[str, Any], goal: Mapping[str, Any], *, tagger: str = "lexicon") -> dict[str, Any]:
    """``r_type`` and its parts: query match, breadcrumb match (≥ 2 shared levels), title noun score."""
    query_match = product["query"] == goal["query"]
    product_levels = {x.strip() for x in product["product_category"].split("›")}
    goal_levels = {x.strip() for x in goal["product_category"].split("›")}
    category_match = len(product_levels & goal_levels) >= 2
    desired = set(noun_tokens(goal["name"], tagger))
    purchased = set(noun_tokens(product["title"], tagger))
    # WebShop divides by the number of noun tokens with repeats; the set keeps a repeated noun from counting twice
    # in the intersection but not in the denominator, exactly as upstream (set & set over list length).
    desired_count = len(noun_tokens(goal["name"], tagger))
    title_score = 0.2 if desired_count == 0 else len(purchased & desired) / desired_count
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def attribute_reward(product: Mapping[str, Any], goal_attributes: Iterable[str]) -> tuple[float, int]:
    """(share of goal attributes met, number met)."""
    goal_attributes = list(goal_attributes)
    title = product["title"].lower()
    features = " ".join(product["features"]).lower()
    description = product["description"].lower()
    matches = 0
    for wanted in goal_attributes:
        if any(token_set_ratio(have, wanted) > FUZZY_THRESHOLD for have in product["attributes"]) or (
            wanted in title or wanted in features or wanted in description
        ):
            matches += 1
    return (matches / len(goal_attributes) if goal_attributes else 0.0), matches


def option_reward(selected: Iterable[str], goal_options: Iterable[str]) -> tuple[float | None, int]:
    """(share of goal options met or ``None`` without goal options, number met)."""
    selected = [normalize_color(o) for o in selected]
    wanted = [normalize_color(o) for o in goal_options]
    matches = sum(1 for w in wanted if any(token_set_ratio(s, w) > FUZZY_THRESHOLD for s in selected))
    return (matches / len(wanted) if wanted else None), matches


def purchase_reward(
    product: Mapping[str, Any],
    goal: Mapping[str, Any],
    *,
    price: float,
    selected_options: Mapping[str, str],
    tagger: str = "lexicon",
) -> tuple[float, dict[str, Any]]:
    """The reward of buying ``product`` at ``price`` with ``selected_options`` for ``goal``, and its breakdown."""
    r_type = type_reward(product, goal, tagger=tagger)
    price_ok = price <= goal["price_upper"]
    r_att, n_att = attribute_reward(product, goal["attributes"])
    r_opt, n_opt = option_reward(list(selected_options.values()), goal["options"])
    denominator = len(goal["attributes"]) + len(goal["options"]) + 1
    reward = (n_att + n_opt + int(price_ok)) / denominator * r_type["r_type"]
    breakdown = {
        **r_type,
        "r_att": r_att,
        "w_att": len(goal["attributes"]) / denominator,
        "r_price": price_ok,
        "w_price": 1 / denominator,
    }
    if r_opt is not None:
        breakdown.update(r_option=r_opt, w_option=len(goal["options"]) / denominator)
    return reward, breakdown
