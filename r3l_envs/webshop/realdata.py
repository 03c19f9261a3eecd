"""Loading WebShop's own data files (``source="webshop"``), with WebShop's product cleaning and human goals.

Expected in ``data_path`` (WebShop's ``data/`` folder, from the WebShop repository's setup script):

* ``items_shuffle*.json`` — a JSON list of products: ``asin``, ``name``, ``full_description``,
  ``small_description`` (list or str), ``pricing`` ("$12.99" or "$10.99$15.99"), ``customization_options``
  ({name: [{"value": ..., "image": ...}]} or null), ``category``, ``query``, ``product_category``;
* ``items_ins_v2*.json`` — {asin: {"attributes": [...], ...}}: the product attributes;
* ``items_human_ins.json`` — {asin: [{"instruction", "instruction_attributes", "instruction_options"}, ...]}: the
  human goals.

As in WebShop: asins that are ``"nan"`` or longer than 10 characters and repeated asins are dropped; option
values are stripped, lowercased and ``/`` becomes ``" | "``; a product without attributes gets ``DUMMY_ATTR``;
a price range is paid at a uniform draw inside it; goals without attributes are skipped; budgets follow
WebShop's rule; goals are shuffled with ``random.seed(233)`` and split test = [0, 500), valid = [500, 1500),
train = the rest. WebShop draws prices and budgets from the unseeded global RNG; here each draw is seeded by
the asin (and goal number), so every machine sees the same catalogue.
"""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from r3l_envs.errors import DataNotFoundError, MalformedDataError
from r3l_envs.webshop.generate import price_upper_for

__all__ = ["LOADER_VERSION", "WEBSHOP_SPLITS", "find_data_files", "load_goals", "load_products"]

#: Bump when the loader's output changes: it is part of the cache key.
LOADER_VERSION = 1

#: WebShop's human-goal splits (``baseline_models/env.py``), as goal-index ranges after the seed-233 shuffle.
WEBSHOP_SPLITS = {"test": (0, 500), "valid": (500, 1500), "train": (1500, None)}

_FILES = {
    "products": "items_shuffle*.json",
    "attributes": "items_ins_v2*.json",
    "human": "items_human_ins.json",
}
_HELP = (
    "Put WebShop's data files there (from the WebShop repository's setup.sh: items_shuffle.json, "
    "items_ins_v2.json and items_human_ins.json, or their _1000 variants), or use source='generated'."
)


def _pick(folder: Path, pattern: str) -> Path:
    matches = sorted(folder.glob(pattern))
    if not matches:
        raise DataNotFoundError(f"no {pattern} in {folder}. {_HELP}")
    exact = folder / pattern.replace("*", "")
    return exact if exact in matches else matches[-1]


def find_data_files(data_path: str | Path) -> dict[str, Path]:
    """The three WebShop files in ``data_path``; raises :class:`DataNotFoundError` naming what is missing."""
    folder = Path(data_path).expanduser()
    if not folder.is_dir():
        raise DataNotFoundError(f"WebShop data_path {str(folder)!r} is not a folder. {_HELP}")
    return {key: _pick(folder, pattern) for key, pattern in _FILES.items()}


def _read_json(path: Path, kind: type, shape: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise MalformedDataError(f"{path} is not valid JSON ({exc}); expected {shape}") from exc
    if not isinstance(data, kind):
        raise MalformedDataError(f"{path} holds a {type(data).__name__}; expected {shape}")
    return data


def _pricing(raw: Any, asin: str) -> tuple[float, str]:
    """(price paid, price tag shown) from WebShop's pricing string."""
    if not raw:
        return 100.0, "$100.0"
    try:
        values = [float(Decimal(re.sub(r"[^\d.]", "", part))) for part in str(raw).split("$")[1:]]
    except InvalidOperation:
        values = []
    if not values:
        return 100.0, "$100.0"
    if len(values) == 1:
        return values[0], f"${values[0]}"
    lo, hi = values[:2]
    return random.Random(f"webshop-price-{asin}").uniform(lo, hi), f"${lo} to ${hi}"


def _clean(raw: dict[str, Any], attributes: dict[str, Any], path: Path) -> dict[str, Any]:
    try:
        asin = raw["asin"]
        options: dict[str, list[str]] = {}
        for name, contents in (raw.get("customization_options") or {}).items():
            if contents is None:
                continue
            options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
        bullets = raw["small_description"]
        price, price_tag = _pricing(raw.get("pricing"), asin)
        info = attributes.get(asin)
        return {
            "asin": asin,
            "title": raw["name"],
            "price": price,
            "price_tag": price_tag,
            "rating": "N.A.",
            "options": options,
            "description": raw["full_description"] or "",
            "features": [b for b in (bullets if isinstance(bullets, list) else [bullets]) if isinstance(b, str)],
            "reviews": [],
            "attributes": list(info["attributes"])
            if isinstance(info, dict) and "attributes" in info
            else ["DUMMY_ATTR"],
            "category": raw["category"],
            "query": raw["query"].lower().strip(),
            "product_category": raw["product_category"],
        }
    except (KeyError, TypeError, AttributeError) as exc:
        raise MalformedDataError(
            f"product {raw.get('asin', '?') if isinstance(raw, dict) else raw!r:.40} in {path} lacks or mistypes "
            f"{exc}; each product needs asin, name, full_description, small_description, pricing, "
            "customization_options, category, query and product_category, as in WebShop's items_shuffle.json"
        ) from exc


def load_products(files: dict[str, Path]) -> list[dict[str, Any]]:
    """WebShop's cleaned product records, in file order."""
    raw_products = _read_json(files["products"], list, "a JSON list of product objects (items_shuffle.json)")
    attributes = _read_json(files["attributes"], dict, "a JSON object {asin: {attributes: [...]}} (items_ins_v2)")
    seen: set[str] = set()
    products = []
    for raw in raw_products:
        if not isinstance(raw, dict) or "asin" not in raw:
            raise MalformedDataError(f"{files['products']} has an entry without 'asin': {raw!r:.80}")
        asin = raw["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(_clean(raw, attributes, files["products"]))
    return products


def load_goals(files: dict[str, Path], products: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """WebShop's human goals over ``products``, shuffled as WebShop does (seed 233), each with its product index."""
    human = _read_json(files["human"], dict, "a JSON object {asin: [{instruction, instruction_attributes, ...}]}")
    goals = []
    for index, product in enumerate(products):
        for number, entry in enumerate(human.get(product["asin"], [])):
            try:
                attributes = list(entry["instruction_attributes"])
                text = entry["instruction"].strip(".")
                options = list(entry.get("instruction_options") or [])
            except (KeyError, TypeError, AttributeError) as exc:
                raise MalformedDataError(
                    f"goal {number} of {product['asin']} in {files['human']} lacks or mistypes {exc}; each needs "
                    "instruction, instruction_attributes and instruction_options"
                ) from exc
            if not attributes:
                continue
            upper = price_upper_for(product["price"], random.Random(f"webshop-goal-{product['asin']}-{number}"))
            goals.append(
                {
                    "asin": product["asin"],
                    "product_index": index,
                    "instruction": text + (f", and price lower than {upper:.2f} dollars" if upper else ""),
                    "attributes": attributes,
                    "options": options,
                    "price_upper": upper if upper is not None else 1_000_000.0,
                    "query": product["query"],
                    "product_category": product["product_category"],
                    "name": product["title"],
                    "category": product["category"],
                }
            )
    random.Random(233).shuffle(goals)
    return goals
