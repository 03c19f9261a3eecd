"""The offline catalogue: products and goals generated deterministically from a seed (``source="generated"``).

Products span WebShop's five categories (:mod:`r3l_envs.webshop.vocab`) with brand-led, keyword-rich titles,
attributes, option groups, prices (some as ranges, as in WebShop), ratings, descriptions, feature bullets and
reviews. Goal ``g`` targets product ``g``: a few of its attributes, one value of each of its option groups, and
a budget drawn by WebShop's rule (two of the next four multiples of $10 above the price, the larger one), in
WebShop's instruction phrasing. Every goal is achievable: its product has all of it.

Goal splits are disjoint by content (:mod:`r3l_envs.splits`): the agent sees a goal's instruction only, so an
instruction text belongs to one split, and goal ``g`` is the first of its product's candidate goals whose
instruction belongs to the split that holds index ``g``. Candidate 0 is version 1's goal (most goals keep it);
further candidates re-draw attributes, options, phrasing and budget for the same product.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator, Mapping
from typing import Any

from r3l_envs.splits import pick_in_split
from r3l_envs.webshop.vocab import BRAND_HEADS, BRAND_TAILS, OPTION_POOLS, TITLE_TAILS, ProductType, product_types

__all__ = [
    "GENERATOR_VERSION",
    "generate_goals",
    "generate_products",
    "goal_content",
    "make_asin",
    "price_upper_for",
]

#: Bump when generated content changes: it is part of the cache key and of every checkpoint's identity.
#: 2: goal splits disjoint by instruction text (version 1 had 6 of 500 test instructions among train's).
GENERATOR_VERSION = 2

#: WebShop's budgets: multiples of $10 up to $990.
PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))

_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def make_asin(index: int, seed: int) -> str:
    """A unique 10-character ASIN-like id: ``B0`` + a bijective base-36 scramble of ``index``."""
    value = (index * 2654435761 + seed * 40503 + 1_234_567_891) % 36**8  # the multiplier is prime to 36: a bijection
    digits = []
    for _ in range(8):
        value, r = divmod(value, 36)
        digits.append(_ALNUM[r])
    return "B0" + "".join(reversed(digits))


def price_upper_for(price: float, rng: random.Random) -> float | None:
    """WebShop's budget rule; ``None`` when fewer than two budgets lie above the price (no price constraint)."""
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return None
    return sorted(rng.sample(above, 2))[1]


def _title_case(words: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in words.split())


def _product(index: int, seed: int, kind: ProductType, rng: random.Random) -> dict[str, Any]:
    brand = _title_case(rng.choice(BRAND_HEADS) + rng.choice(BRAND_TAILS))
    attributes = rng.sample(kind.attributes, rng.randint(3, min(5, len(kind.attributes))))
    shown = attributes[:2]
    tail = rng.choice(TITLE_TAILS[kind.category])
    title = f"{brand} {_title_case(kind.name)} with {' and '.join(_title_case(a) for a in shown)} {_title_case(tail)}"
    options: dict[str, list[str]] = {}
    if rng.random() < 0.85:  # some WebShop products have no option groups at all
        for group in kind.options:
            pool = OPTION_POOLS[group]
            chosen = set(rng.sample(pool, rng.randint(2, min(6, len(pool)))))
            options[group] = [v for v in pool if v in chosen]
    lo, hi = kind.price
    low_price = round(rng.uniform(lo, hi), 2)
    if rng.random() < 0.1:  # a price range: the shopper pays a fixed point inside it, as WebShop samples one
        high_price = round(low_price * rng.uniform(1.1, 1.5), 2)
        price = round(rng.uniform(low_price, high_price), 2)
        price_tag = f"${low_price} to ${high_price}"
    else:
        price, price_tag = low_price, f"${low_price}"
    rated = rng.random() < 0.7
    rating = f"{rng.uniform(3.0, 5.0):.1f}" if rated else "N.A."
    description = (
        f"The {brand} {kind.name} is made for everyday use. "
        f"It is {' and '.join(attributes[:3])}, and comes {tail}. "
        f"Our {kind.query} is tested for quality and backed by a 30-day return policy."
    )
    features = [f"{_title_case(a)}: designed to be {a} for lasting satisfaction." for a in attributes]
    features.append(f"What you get: one {kind.name} from {brand}, with friendly customer service.")
    reviews = [
        {
            "title": rng.choice(("Great value", "Just as described", "Works well", "Not bad", "Love it")),
            "score": rng.randint(3, 5),
            "body": f"I bought this {kind.name} and it is really {rng.choice(attributes)}.",
        }
        for _ in range(rng.randint(0, 3) if rated else 0)
    ]
    return {
        "asin": make_asin(index, seed),
        "title": title,
        "price": price,
        "price_tag": price_tag,
        "rating": rating,
        "options": options,
        "description": description,
        "features": features,
        "reviews": reviews,
        "attributes": attributes,
        "category": kind.category,
        "query": kind.query,
        "product_category": kind.path,
    }


def generate_products(num_products: int, seed: int) -> Iterator[dict[str, Any]]:
    """Yield ``num_products`` product records, deterministic in ``seed``."""
    rng = random.Random(f"webshop-products-{seed}")
    kinds = product_types()
    for index in range(num_products):
        yield _product(index, seed, kinds[rng.randrange(len(kinds))], rng)


_OPTION_PHRASES = {
    "color": "in {} color",
    "size": "in size {}",
    "bed size": "in {} size",
    "dimensions": "of size {}",
    "scent": "with {} scent",
    "size volume": "in the {} size",
    "flavor name": "in {} flavor",
    "item package quantity": "in a pack of {}",
    "pack size": "{}",
    "cable length": "{} long",
    "capacity": "with {} capacity",
    "style": "in {} style",
    "material": "made of {}",
    "pattern name": "with a {} pattern",
    "connectivity": "with {} connectivity",
}

_TEMPLATES = (
    "i need {type} that is {attrs}",
    "i am looking for {attrs} {type}",
    "i'm looking for a {type} which is {attrs}",
    "find me {attrs} {type}",
    "i want to buy {attrs} {type}",
    "i would like a {type} that is {attrs}",
)


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _goal(product: dict[str, Any], kind_name: str, rng: random.Random) -> dict[str, Any]:
    attributes = rng.sample(product["attributes"], rng.randint(1, min(3, len(product["attributes"]))))
    chosen = {group: rng.choice(values) for group, values in product["options"].items()}
    text = rng.choice(_TEMPLATES).format(type=kind_name, attrs=_join(attributes))
    if chosen:
        text += " " + _join([_OPTION_PHRASES[g].format(v) for g, v in chosen.items()])
    upper = price_upper_for(product["price"], rng)
    if upper is not None:
        text += f", and price lower than {upper:.2f} dollars"
    return {
        "asin": product["asin"],
        "instruction": text,
        "attributes": attributes,
        "options": list(chosen.values()),
        "price_upper": upper if upper is not None else 1_000_000.0,
        "query": product["query"],
        "product_category": product["product_category"],
        "name": product["title"],
        "category": product["category"],
    }


def goal_content(goal: Mapping[str, Any]) -> str:
    """A goal's content key for splits: its instruction, all the agent is told of it."""
    return goal["instruction"]


def generate_goals(
    products: Iterator[dict[str, Any]], seed: int, splits: Mapping[str, tuple[int, int]]
) -> Iterator[dict[str, Any]]:
    """Yield one goal per product (goal ``g`` targets product ``g``), deterministic in ``seed``.

    Args:
        products: the catalogue's products, in order.
        seed: the catalogue's seed.
        splits: split name -> ``(first, end)`` goal indices; every goal index must lie in one of them.

    Raises:
        SplitExhaustedError: a product has no candidate goal whose instruction lies in its goal's split.
    """
    rng = random.Random(f"webshop-goals-{seed}")
    names = {kind.query: kind.name for kind in product_types()}
    for index, product in enumerate(products):
        name = names[product["query"]]
        first = _goal(product, name, rng)  # drawn from the stream for every goal, so candidate 0 stays version 1's
        split = next((s for s, (lo, hi) in splits.items() if lo <= index < hi), None)
        if split is None:
            raise ValueError(f"goal {index} lies in none of the splits {dict(splits)}")
        draw = functools.partial(_candidate_goal, product=product, name=name, first=first, stem=f"{seed}/{index}")
        yield pick_in_split(split, draw, goal_content, what=f"WebShop goal {index} (seed {seed}, {split})")[1]


def _candidate_goal(attempt: int, *, product: dict[str, Any], name: str, first: dict[str, Any], stem: str) -> Any:
    """Candidate ``attempt`` of a product's goal: ``first`` (the stream's draw), then draws of their own."""
    return first if attempt == 0 else _goal(product, name, random.Random(f"webshop-goals-{stem}/{attempt}"))
