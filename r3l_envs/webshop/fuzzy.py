"""The string matching WebShop's reward relies on, re-implemented with the standard library.

* :func:`token_set_ratio` — the ``token_set_ratio`` score of ``thefuzz``/``rapidfuzz`` (0–100, rounded), which
  WebShop thresholds at ``> 85`` for attributes and options. The underlying ratio is the normalised Indel
  similarity ``2·LCS / (len(a) + len(b))``; the strings are short, so an exact LCS table is cheap.
* :func:`normalize_color` — WebShop's first-colour-in-the-string normalisation of option values.
* :func:`noun_tokens` — the nouns of a product name, for the product-type reward. WebShop asks spaCy's
  ``en_core_web_sm`` tagger; ``tagger="lexicon"`` (the default, always available and identical on every machine)
  keeps the words that are not function words, adjectives, numbers or common verbs, and ``tagger="spacy"``
  uses spaCy's model when it is installed.
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = ["COLOR_SET", "indel_ratio", "normalize_color", "noun_tokens", "process", "token_set_ratio"]

#: WebShop's colour vocabulary, in its order: the first one found in a value is the normalised colour.
_COLORS = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy camel "
    "camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral cranberry "
    "cream crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass gray green grey "
    "heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon mauve merlot midnight "
    "mint mocha multicolor mushroom mustard natural navy nude olive orange peach pewter pink plum purple rainbow "
    "red rose royal rust sand sapphire seashell silver skull slate steel stone stonewash sunflower tan taupe teal "
    "tiger turquoise violet walnut wheat white wine yellow"
)
COLOR_SET = tuple(_COLORS.split())

_NON_WORD = re.compile(r"\W+", re.UNICODE)


def process(text: str) -> str:
    """thefuzz's ``full_process``: drop non-ASCII, turn non-word characters into spaces, lowercase, strip."""
    text = text.encode("ascii", "ignore").decode("ascii")
    return _NON_WORD.sub(" ", text).lower().strip()


def _lcs_length(a: str, b: str) -> int:
    if len(a) < len(b):
        a, b = b, a
    previous = [0] * (len(b) + 1)
    for ch in a:
        current = [0]
        for j, other in enumerate(b, start=1):
            current.append(previous[j - 1] + 1 if ch == other else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def indel_ratio(a: str, b: str) -> float:
    """Normalised Indel similarity in [0, 100] (``fuzz.ratio`` without rounding)."""
    total = len(a) + len(b)
    return 100.0 if total == 0 else 100.0 * 2 * _lcs_length(a, b) / total


@functools.lru_cache(maxsize=65536)
def token_set_ratio(a: str, b: str) -> int:
    """``fuzz.token_set_ratio(a, b)``: the best ratio between the shared tokens and each side's full token set."""
    a, b = process(a), process(b)
    tokens_a, tokens_b = set(a.split()), set(b.split())
    if not tokens_a or not tokens_b:
        return 0
    shared = " ".join(sorted(tokens_a & tokens_b))
    only_a = " ".join(sorted(tokens_a - tokens_b))
    only_b = " ".join(sorted(tokens_b - tokens_a))
    with_a = f"{shared} {only_a}".strip()
    with_b = f"{shared} {only_b}".strip()
    best = max(indel_ratio(shared, with_a), indel_ratio(shared, with_b), indel_ratio(with_a, with_b))
    return round(best)


def normalize_color(value: str) -> str:
    """The first :data:`COLOR_SET` colour contained in ``value`` (a substring test, as WebShop does), else ``value``."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


# Words that spaCy does not tag NOUN/PROPN in product names: function words, adjectives and descriptors that
# product titles use, common verbs. Everything else alphabetic counts as a noun.
_NOT_NOUN_WORDS = """
    a an the and or nor but if of for to in on at by with without from into onto over under up down out off as
    is are be was were been being am do does did has have had can could will would should may might must this
    that these those it its it's he she they we you your our their his her my me i him them us what which who
    whom whose all any both each every few more most other some such no not only own same so than too very just
    also about above after again against before below between during through while per via plus x vs new
    best great good high low long short big small large mini extra super ultra premium professional pro classic
    modern vintage soft hard light heavy dark bright natural organic pure fresh clean easy quick fast slow strong
    portable compact lightweight durable waterproof wireless rechargeable adjustable comfortable breathable
    stretchy warm cool casual formal elegant cute pretty beautiful sexy slim loose regular full half double single
    multi non anti free resistant proof friendly safe healthy gluten sugar dairy fat low-fat vegan kosher keto
    red blue black white green pink grey gray yellow purple orange brown beige navy gold silver ivory tan khaki
    men's women's mens womens girls boys kids adult unisex baby toddler ladies
    wide narrow tall round square flat thick thin deep hot cold smart digital electric manual automatic
    stainless solid sturdy foldable stackable removable washable reusable disposable
    get make use fit fits made includes including set keep holds hold perfect ideal suitable
    """
_NOT_NOUNS = frozenset(_NOT_NOUN_WORDS.split())

_WORD = re.compile(r"[a-z][a-z'&]*")


def _lexicon_nouns(text: str) -> tuple[str, ...]:
    words = _WORD.findall(unicodedata.normalize("NFKC", text).lower())
    return tuple(w for w in words if len(w) > 1 and w not in _NOT_NOUNS)


@functools.lru_cache(maxsize=1)
def _spacy_model():
    try:
        import spacy

        return spacy.load("en_core_web_sm")
    except (ImportError, OSError) as exc:
        from r3l_envs.errors import DataNotFoundError

        raise DataNotFoundError(
            "noun_tagger='spacy' needs spaCy's English model: `pip install spacy` and an `en_core_web_sm` "
            "package (the one WebShop uses); or use noun_tagger='lexicon'"
        ) from exc


@functools.lru_cache(maxsize=65536)
def noun_tokens(text: str, tagger: str = "lexicon") -> tuple[str, ...]:
    """The lowercased noun (and proper-noun) tokens of a product name, by the chosen tagger."""
    if tagger == "lexicon":
        return _lexicon_nouns(text)
    if tagger == "spacy":
        return tuple(t.text.lower() for t in _spacy_model()(text) if t.pos_ in ("NOUN", "PROPN"))
    raise ValueError(f"noun tagger must be 'lexicon' or 'spacy', got {tagger!r}")
