"""Product search: BM25 (``bm25s`` + the Snowball English stemmer) over WebShop's indexed product text.

WebShop indexes ``title + description + first feature bullet + "option: v1, v2, and option: ..."`` lowercased,
and retrieves the top 50 documents for a query (Lucene BM25). Here the index is saved once into the catalogue
folder and memory-mapped; ties are broken by catalogue order, so results are the same on every machine, and
only documents that share at least one term with the query are returned (as Lucene does).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SEARCH_RETURN_N", "SearchIndex", "build_index", "product_text", "tokenize"]

#: WebShop's number of retrieved products per search.
SEARCH_RETURN_N = 50
#: Pyserini's ``LuceneSearcher`` defaults, which WebShop's search engine runs with.
BM25_K1, BM25_B = 0.9, 0.4


@functools.lru_cache(maxsize=1)
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


def tokenize(texts: list[str], *, return_ids: bool):
    """``texts`` as the index reads them (bm25s tokens: English stopwords out, Snowball-stemmed): token ids to
    build an index (``return_ids=True``), token strings to query one."""
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", stemmer=_stemmer(), return_ids=return_ids, show_progress=False)


def product_text(product: Mapping[str, Any]) -> str:
    """The text WebShop indexes for a product."""
    options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    first_feature = product["features"][0] if product["features"] else ""
    return " ".join([product["title"], product["description"], first_feature, options]).lower()


def build_index(texts: Sequence[str], folder: Path) -> None:
    """Index ``texts`` (one per product, in catalogue order) and save the index into ``folder``."""
    import bm25s

    retriever = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
    retriever.index(tokenize(list(texts), return_ids=True), show_progress=False)
    retriever.save(str(folder))


class SearchIndex:
    """A saved BM25 index, memory-mapped read-only; :meth:`search` returns product indices, best first."""

    def __init__(self, folder: Path):
        import bm25s

        self._retriever = bm25s.BM25.load(str(folder), mmap=True, show_progress=False)
        self.num_docs = int(self._retriever.scores["num_docs"])

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """The ``k`` best-scoring products for ``query`` (score > 0), ties in catalogue order."""
        tokens = tokenize([query], return_ids=False)[0]
        ids = self._retriever.get_tokens_ids(tokens)
        if not ids:
            return []
        scores = self._retriever.get_scores_from_ids(ids)
        candidates = np.flatnonzero(scores > 0)
        if candidates.size > k:
            # Keep every candidate scoring at least the k-th best, then order by (-score, index) exactly.
            kth = np.partition(scores[candidates], candidates.size - k)[candidates.size - k]
            candidates = candidates[scores[candidates] >= kth]
        order = np.lexsort((candidates, -scores[candidates]))
        return [int(i) for i in candidates[order[:k]]]
