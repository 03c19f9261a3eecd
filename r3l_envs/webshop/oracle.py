"""A scripted shopper that knows the goal: search with its attributes, open the target, pick its options, buy.

It is the reachability check of the catalogue (a goal it cannot finish with reward 1.0 is a broken goal) and a
source of expert demonstrations. It plays through the public ``step`` API only, reading the goal record.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from r3l_envs.webshop.fuzzy import token_set_ratio
from r3l_envs.webshop.pages import BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE

__all__ = ["oracle_actions", "oracle_query"]

_MAX_RESULT_PAGES = 5


def oracle_query(goal: dict[str, Any]) -> str:
    """The first query the oracle tries: the goal's attributes, its product query and its option values."""
    return " ".join([*goal["attributes"], goal["query"], *goal["options"]])


def _find(env: gym.Env, asin: str, query: str, actions: list[str]) -> bool:
    """Search ``query`` and page through the results until ``asin`` is listed; click it if so."""
    for action in (f"search[{query}]",):
        env.step(action)
        actions.append(action)
    for _ in range(_MAX_RESULT_PAGES):
        admissible = env.unwrapped._page.admissible_actions()
        if f"click[{asin}]" in admissible:
            env.step(f"click[{asin}]")
            actions.append(f"click[{asin}]")
            return True
        env.step(f"click[{NEXT_PAGE}]")
        actions.append(f"click[{NEXT_PAGE}]")
    env.step(f"click[{BACK_TO_SEARCH}]")
    actions.append(f"click[{BACK_TO_SEARCH}]")
    return False


def oracle_actions(env: gym.Env) -> tuple[float, list[str]]:
    """Play the current episode of a freshly reset WebShop ``env`` to the purchase; return (reward, actions)."""
    base = env.unwrapped
    goal = base.goal
    actions: list[str] = []
    if not _find(env, goal["asin"], oracle_query(goal), actions) and not _find(
        env, goal["asin"], goal["name"].lower()[:400], actions
    ):
        return 0.0, actions
    product = base.catalogue.products[base._session.item]
    values = [v for group in product["options"].values() for v in group]
    for wanted in goal["options"]:
        if values:  # real goals name options loosely: pick the product's closest value
            best = max(values, key=lambda v: (token_set_ratio(v, wanted), v == wanted))
            env.step(f"click[{best}]")
            actions.append(f"click[{best}]")
    _, reward, _, _, _ = env.step(f"click[{BUY_NOW}]")
    actions.append(f"click[{BUY_NOW}]")
    return reward, actions
