"""``r3l/WebShop-v0``: WebShop's text shopping environment (Yao et al., 2022) on a shared, memory-mapped catalogue.

The agent reads an instruction ("i need ..., and price lower than 40.00 dollars"), searches
(``search[query]``), browses results (10 per page, top 50), opens products (``click[B0...]``), selects options
(``click[value]``), reads sub-pages (``click[Description]``...), and buys (``click[Buy Now]``), which ends the
episode with WebShop's reward (:mod:`r3l_envs.webshop.reward`). The session is a small immutable tuple, so a
native checkpoint is a reference copy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from r3l_envs.codec import register_type
from r3l_envs.core import TextEnv
from r3l_envs.splits import NumberedIds
from r3l_envs.webshop import pages
from r3l_envs.webshop.catalogue import SOURCES, Catalogue, open_catalogue
from r3l_envs.webshop.oracle import oracle_actions
from r3l_envs.webshop.reward import purchase_reward

__all__ = ["MAX_QUERY_CHARS", "Session", "WebShopEnv"]

#: Longer search queries are refused as invalid actions (WebShop has no limit; a 100 KB query helps nobody).
MAX_QUERY_CHARS = 500

_ACTION = re.compile(r"(search|click)\[(.*)\]", re.IGNORECASE | re.DOTALL)


@register_type
class Session(NamedTuple):
    """Everything a step depends on besides the catalogue (immutable: checkpoints share it)."""

    goal_index: int
    location: str  # "search", "results", "item", one of pages.SUB_PAGES, or "done"
    keywords: str = ""
    page: int = 1
    results: tuple[int, ...] = ()
    item: int = -1
    options: tuple[tuple[str, str], ...] = ()
    reward: float = 0.0


class WebShopEnv(TextEnv):
    """WebShop's text environment; see the module docstring.

    Args:
        split: ``"train"``, ``"valid"`` or ``"test"`` (WebShop's goal splits).
        source: ``"generated"`` (offline catalogue from ``seed``) or ``"webshop"`` (WebShop's files in
            ``data_path``).
        num_products: size of the generated catalogue.
        seed: seed of the generated catalogue.
        data_path: folder with WebShop's ``items_shuffle*.json``, ``items_ins_v2*.json``, ``items_human_ins.json``.
        noun_tagger: how the product-type reward finds nouns: ``"lexicon"`` (built in) or ``"spacy"``
            (WebShop's ``en_core_web_sm``, when installed).
        render_mode: ``"ansi"``, ``"human"`` or ``None``.
    """

    restore_kind = "native"
    prompt_family = "webshop"

    def __init__(
        self,
        split: str = "train",
        source: str = "generated",
        num_products: int = 10_000,
        seed: int = 0,
        data_path: str | None = None,
        noun_tagger: str = "lexicon",
        render_mode: str | None = None,
    ):
        super().__init__(split=split, render_mode=render_mode)
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        if source == "generated" and not (isinstance(num_products, int) and num_products >= 10):
            raise ValueError(f"num_products must be an int >= 10, got {num_products!r}")
        if source == "webshop" and data_path is None:
            raise ValueError("source='webshop' needs data_path=<folder with WebShop's items_*.json files>")
        if noun_tagger not in ("lexicon", "spacy"):
            raise ValueError(f"noun_tagger must be 'lexicon' or 'spacy', got {noun_tagger!r}")
        self.catalogue: Catalogue = open_catalogue(source, num_products=num_products, seed=seed, data_path=data_path)
        if split not in self.catalogue.splits:
            raise ValueError(f"split must be one of {sorted(self.catalogue.splits)}, got {split!r}")
        self.noun_tagger = noun_tagger
        self._first, last = self.catalogue.splits[split]
        count = last - self._first
        self._task_ids = NumberedIds(f"{split}-", count, width=max(6, len(str(count))))
        self._session: Session | None = None
        self._goal: dict[str, Any] = {}
        self._page: pages.Page | None = None

    # ------------------------------------------------------------------ contract hooks
    @property
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    @property
    def goal(self) -> dict[str, Any]:
        """The current goal record (instruction, attributes, options, price_upper, target asin, ...)."""
        return dict(self._goal)

    def expert_actions(self, task_id: str) -> list[str]:
        """The scripted shopper's actions for ``task_id`` (:func:`r3l_envs.webshop.oracle.oracle_actions`): it
        resets this env to the task and plays them to the purchase."""
        self.reset(options={"task_id": task_id})
        _, actions = oracle_actions(self)
        return actions

    def _start(self, task_id: str) -> tuple[str, str, dict[str, Any]]:
        goal_index = self._first + self._task_ids.index_of(task_id)
        self._goal = self.catalogue.goals[goal_index]
        self._enter(Session(goal_index=goal_index, location="search"))
        return self._page.text, self._goal["instruction"], self._info()

    def _act(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        session, page = self._session, self._page
        match = _ACTION.fullmatch(action.strip())
        if match is None:
            return self._invalid(_explain(action))
        verb, argument = match.group(1).lower(), match.group(2).strip()
        if not argument:
            return self._invalid(
                f"{verb}[] needs an argument, e.g. {verb}[{'red shoes' if verb == 'search' else 'Buy Now'}]"
            )
        if verb == "search":
            if not page.has_search_bar:
                return self._invalid("this page has no search box; click[Back to Search] first")
            if len(argument) > MAX_QUERY_CHARS:
                return self._invalid(f"the search query is longer than {MAX_QUERY_CHARS} characters")
            keywords = argument.lower()
            self._enter(
                session._replace(
                    location="results",
                    keywords=keywords,
                    page=1,
                    results=tuple(self.catalogue.search(keywords)),
                    item=-1,
                    options=(),
                )
            )
            return self._page.text, 0.0, False, self._info()
        clickable = page.clickables.get(argument.lower())
        if clickable is None:
            return self._invalid(f"{argument[:80]!r} is not clickable on this page")
        return self._click(clickable)

    def _save_state(self) -> Session:
        return self._session

    def _load_state(self, state: Session) -> None:
        if self._session is None or state.goal_index != self._session.goal_index:
            self._goal = self.catalogue.goals[state.goal_index]
        self._enter(state)

    # ------------------------------------------------------------------ the shop
    def _click(self, clickable: pages.Clickable) -> tuple[str, float, bool, dict[str, Any]]:
        s = self._session
        text = clickable.text
        if clickable.kind == "product":
            self._enter(s._replace(location="item", item=clickable.payload))
        elif clickable.kind == "option":
            options = dict(s.options)
            options[clickable.payload] = text
            self._enter(s._replace(options=tuple(options.items())))
        elif clickable.kind == "sub_page":
            self._enter(s._replace(location=text))
        elif text == pages.BACK_TO_SEARCH:
            self._enter(Session(goal_index=s.goal_index, location="search"))
        elif text == pages.NEXT_PAGE:
            self._enter(s._replace(page=s.page + 1))
        elif text == pages.PREV_PAGE and s.location == "results":
            self._enter(s._replace(page=s.page - 1))
        elif text == pages.PREV_PAGE and s.location == "item":  # back to the results: options are forgotten
            self._enter(s._replace(location="results", item=-1, options=()))
        elif text == pages.PREV_PAGE:
            self._enter(s._replace(location="item"))
        elif text == pages.BUY_NOW:
            return self._buy()
        return self._page.text, 0.0, False, self._info()

    def _buy(self) -> tuple[str, float, bool, dict[str, Any]]:
        s = self._session
        product = self.catalogue.products[s.item]
        reward, breakdown = purchase_reward(
            product, self._goal, price=product["price"], selected_options=dict(s.options), tagger=self.noun_tagger
        )
        self._enter(s._replace(location="done", reward=reward))
        info = self._info()
        info.update(purchased=product["asin"], reward_info=breakdown)
        return self._page.text, reward, True, info

    def _enter(self, session: Session) -> None:
        """Make ``session`` current and render its page."""
        self._session = session
        instruction = self._goal["instruction"]
        location = session.location
        if location == "search":
            self._page = pages.search_page(instruction)
        elif location == "results":
            start = (session.page - 1) * pages.PRODUCT_WINDOW
            shown = session.results[start : start + pages.PRODUCT_WINDOW]
            products = [self.catalogue.products[i] for i in shown]
            self._page = pages.results_page(instruction, products, shown, session.page, len(session.results))
        elif location == "item":
            self._page = pages.item_page(instruction, self.catalogue.products[session.item])
        elif location == "done":
            self._page = pages.done_page(session.reward)
        else:
            self._page = pages.sub_page(instruction, self.catalogue.products[session.item], location)

    def _info(self) -> dict[str, Any]:
        s = self._session
        done = s.location == "done"
        return {
            "admissible_actions": self._page.admissible_actions(),
            "won": done and s.reward == 1.0,
            "score": float(s.reward),
            "page": s.location,
            "selected_options": dict(s.options),
        }

    def _invalid(self, why: str) -> tuple[str, float, bool, dict[str, Any]]:
        info = self._info()
        info["invalid_action"] = why
        return f"Invalid action: {why}. Nothing changed.{pages.SEP}{self._page.text}", 0.0, False, info


def _explain(action: str) -> str:
    stripped = action.strip()
    if not stripped:
        return "the action is empty; use search[query] or click[element]"
    lowered = stripped.lower()
    if lowered.startswith(("search[", "click[")) and not lowered.endswith("]"):
        return "the action is missing its closing ']'"
    return f"{stripped[:60]!r} is not an action; use search[query] or click[element] (see admissible_actions)"
