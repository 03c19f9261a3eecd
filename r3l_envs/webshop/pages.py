"""WebShop's pages as the agent sees them: flattened text (``[SEP]``-joined, WebShop's ``text`` observation mode)
and the clickable elements of each page.

A :class:`Page` is the rendered text plus ``clickables``: lowercased element text → :class:`Clickable` (what the
click does and the element as displayed). WebShop lowercases the argument of ``click[...]`` before looking it
up, so ``click[Buy Now]`` and ``click[buy now]`` are the same click.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BACK_TO_SEARCH",
    "BUY_NOW",
    "NEXT_PAGE",
    "PRODUCT_WINDOW",
    "PREV_PAGE",
    "SEARCH_ACTION",
    "SEP",
    "SUB_PAGES",
    "Clickable",
    "Page",
    "done_page",
    "item_page",
    "results_page",
    "search_page",
    "sub_page",
]

SEP = " [SEP] "
BUY_NOW = "Buy Now"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BACK_TO_SEARCH = "Back to Search"
SUB_PAGES = ("Description", "Features", "Reviews")
#: Products per results page.
PRODUCT_WINDOW = 10
#: How the search box appears among the admissible actions.
SEARCH_ACTION = "search[<query>]"


@dataclass(frozen=True)
class Clickable:
    """One clickable element: ``kind`` (button, product, option, sub_page), its displayed text, and a payload."""

    kind: str
    text: str
    payload: Any = None


@dataclass
class Page:
    """A rendered page: its observation text, clickables, and whether it has a search box."""

    text: str
    clickables: dict[str, Clickable] = field(default_factory=dict)
    has_search_bar: bool = False

    def add(self, clickable: Clickable) -> None:
        self.clickables[clickable.text.lower()] = clickable

    def admissible_actions(self) -> list[str]:
        """The exact action strings this page accepts, in page order."""
        actions = [SEARCH_ACTION] if self.has_search_bar else []
        return actions + [f"click[{c.text}]" for c in self.clickables.values()]


def _instruction(instruction: str) -> list[str]:
    return ["Instruction:", instruction]


def search_page(instruction: str) -> Page:
    """The start page: the instruction and a search box."""
    return Page(SEP.join(["WebShop", *_instruction(instruction), "Search"]), has_search_bar=True)


def results_page(
    instruction: str, products: Sequence[Mapping[str, Any]], indices: Sequence[int], page: int, total: int
) -> Page:
    """A page of search results; ``products`` are the records shown, ``indices`` their catalogue indices."""
    out = Page("")
    parts = [*_instruction(instruction), BACK_TO_SEARCH, f"Page {page} (Total results: {total})"]
    out.add(Clickable("button", BACK_TO_SEARCH))
    if page > 1:
        parts.append(PREV_PAGE)
        out.add(Clickable("button", PREV_PAGE))
    parts.append(NEXT_PAGE)  # WebShop always offers Next >, even past the last result
    out.add(Clickable("button", NEXT_PAGE))
    for product, index in zip(products, indices):
        parts += [product["asin"], product["title"], product["price_tag"]]
        out.add(Clickable("product", product["asin"], index))
    out.text = SEP.join(parts)
    return out


def item_page(instruction: str, product: Mapping[str, Any]) -> Page:
    """A product page: option groups, title, price, rating, sub-page buttons and Buy Now."""
    out = Page("")
    parts = [*_instruction(instruction), BACK_TO_SEARCH, PREV_PAGE]
    out.add(Clickable("button", BACK_TO_SEARCH))
    out.add(Clickable("button", PREV_PAGE))
    for group, values in product["options"].items():
        parts.append(group)
        for value in values:
            parts.append(value)
            out.add(Clickable("option", value, group))
    parts += [product["title"], f"Price: {product['price_tag']}", f"Rating: {product['rating']}"]
    for name in SUB_PAGES:
        parts.append(name)
        out.add(Clickable("sub_page", name))
    parts.append(BUY_NOW)
    out.add(Clickable("button", BUY_NOW))
    out.text = SEP.join(parts)
    return out


def sub_page(instruction: str, product: Mapping[str, Any], name: str) -> Page:
    """The Description, Features or Reviews page of a product."""
    out = Page("")
    parts = [*_instruction(instruction), BACK_TO_SEARCH, PREV_PAGE]
    out.add(Clickable("button", BACK_TO_SEARCH))
    out.add(Clickable("button", PREV_PAGE))
    if name == "Description":
        parts.append(product["description"])
    elif name == "Features":
        parts += product["features"]
    else:
        for review in product["reviews"]:
            parts += [f'"{review["title"]}"', str(review["score"]), review["body"]]
    out.text = SEP.join(p for p in parts if p)
    return out


def done_page(reward: float) -> Page:
    """The page after Buy Now (the episode is over: nothing is clickable)."""
    return Page(SEP.join(["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", f"{reward}"]))
