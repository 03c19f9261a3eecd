"""One catalogue (products, goals, search index) per source, built once on disk and shared read-only.

:func:`open_catalogue` returns the process-wide :class:`Catalogue` for a source, building its folder under
``cache_root()/webshop/`` first if no process has (see :func:`r3l_envs.cache.build_dir_once`). Every env
instance of a process holds the same object, and every process maps the same files, so an extra env costs
only its session state.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path
from typing import Any

from r3l_envs.cache import build_dir_once, cache_root
from r3l_envs.errors import MalformedDataError
from r3l_envs.webshop import generate, realdata
from r3l_envs.webshop.search import SearchIndex, build_index, product_text
from r3l_envs.webshop.store import RecordFile, write_records

__all__ = ["Catalogue", "generated_splits", "open_catalogue"]

logger = logging.getLogger(__name__)

SOURCES = ("generated", "webshop")
_OPEN: dict[Path, Catalogue] = {}
_OPEN_LOCK = threading.Lock()


def generated_splits(num_goals: int) -> dict[str, tuple[int, int]]:
    """WebShop's layout (test, then valid, then train) scaled down for small catalogues."""
    test = min(500, num_goals // 10)
    valid = min(1000, num_goals // 10)
    return {"test": (0, test), "valid": (test, test + valid), "train": (test + valid, num_goals)}


class Catalogue:
    """The read-only products, goals and BM25 index of one built catalogue folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.meta: dict[str, Any] = json.loads((folder / "meta.json").read_text())
        self.products = RecordFile(folder, "products")
        self.goals = RecordFile(folder, "goals")
        self.index = SearchIndex(folder / "bm25")
        self.splits: dict[str, tuple[int, int]] = {k: tuple(v) for k, v in self.meta["splits"].items()}

    @property
    def source(self) -> str:
        return self.meta["source"]

    def search(self, query: str) -> list[int]:
        """Indices of the top-50 products for ``query`` (see :class:`r3l_envs.webshop.search.SearchIndex`)."""
        return self.index.search(query)

    def __repr__(self) -> str:
        return f"Catalogue({self.source!r}, {len(self.products)} products, {len(self.goals)} goals, {self.folder})"


def _build_generated(num_products: int, seed: int):
    def build(tmp: Path) -> None:
        texts: list[str] = []
        goal_rng_products: list[dict[str, Any]] = []

        def products():
            for product in generate.generate_products(num_products, seed):
                texts.append(product_text(product))
                goal_rng_products.append(product)
                yield product

        def goals():
            for index, goal in enumerate(
                generate.generate_goals(iter(goal_rng_products), seed, generated_splits(num_products))
            ):
                goal_rng_products[index] = None  # type: ignore[call-overload]  # free as we go
                yield {**goal, "product_index": index}

        write_records(tmp, "products", products())
        write_records(tmp, "goals", goals())
        (tmp / "bm25").mkdir()
        build_index(texts, tmp / "bm25")
        meta = {
            "source": "generated",
            "num_products": num_products,
            "seed": seed,
            "generator_version": generate.GENERATOR_VERSION,
            "splits": generated_splits(num_products),
        }
        (tmp / "meta.json").write_text(json.dumps(meta))

    return build


def _build_webshop(files: dict[str, Path]):
    def build(tmp: Path) -> None:
        products = realdata.load_products(files)
        if not products:
            raise MalformedDataError(f"{files['products']} has no usable product (asin of at most 10 characters)")
        goals = realdata.load_goals(files, products)
        write_records(tmp, "products", products)
        write_records(tmp, "goals", goals)
        (tmp / "bm25").mkdir()
        build_index([product_text(p) for p in products], tmp / "bm25")
        splits = {
            name: (min(lo, len(goals)), len(goals) if hi is None else min(hi, len(goals)))
            for name, (lo, hi) in realdata.WEBSHOP_SPLITS.items()
        }
        meta = {
            "source": "webshop",
            "files": {k: str(v) for k, v in files.items()},
            "loader_version": realdata.LOADER_VERSION,
            "splits": splits,
        }
        (tmp / "meta.json").write_text(json.dumps(meta))

    return build


def catalogue_folder(source: str, *, num_products: int, seed: int, data_path: str | None) -> tuple[Path, Any]:
    """The cache folder of a source and the function that builds it."""
    root = cache_root() / "webshop"
    if source == "generated":
        name = f"generated-v{generate.GENERATOR_VERSION}-n{num_products}-s{seed}"
        return root / name, _build_generated(num_products, seed)
    if source == "webshop":
        files = realdata.find_data_files(data_path or "")
        stamp = json.dumps(
            [realdata.LOADER_VERSION]
            + [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files.values()]
        )
        return root / f"webshop-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}", _build_webshop(files)
    raise ValueError(f"source must be one of {SOURCES}, got {source!r}")


def open_catalogue(
    source: str = "generated", *, num_products: int = 10_000, seed: int = 0, data_path=None
) -> Catalogue:
    """The shared :class:`Catalogue` of a source, built into the cache folder on first use."""
    folder, build = catalogue_folder(source, num_products=num_products, seed=seed, data_path=data_path)
    with _OPEN_LOCK:
        catalogue = _OPEN.get(folder)
        if catalogue is None:
            build_dir_once(folder, build)
            catalogue = _OPEN[folder] = Catalogue(folder)
        return catalogue
