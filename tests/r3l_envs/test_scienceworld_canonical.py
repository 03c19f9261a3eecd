"""Canonical ScienceWorld observations: listings sorted, everything else untouched (no Java needed)."""

import random

import pytest

from r3l_envs.scienceworld.canonical import canonical_observation

ROOM = (
    "This room is called the kitchen. In it, you see: \n"
    "\tthe agent\n"
    "\ta substance called air\n"
    "\ta table. On the table is: a yellow light bulb, which is off, a battery, a black wire.\n"
    "\ta flower pot 3 (containing a apple tree in the reproducing stage. On the apple tree you see: a seed, "
    "a flower. , soil)\n"
    "\ta cupboard. The cupboard door is open. In the cupboard is: a tin cup (containing nothing), a bowl "
    "(containing a red apple, a banana).\n"
    "\ta thermometer, currently reading a temperature of 10 degrees celsius\n"
    "You also see:\n"
    "\tA door to the outside (that is open)\n"
    "\tA door to the bathroom (that is open)"
)


def _shuffle_listings(text: str, rng: random.Random) -> str:
    """The same room with every listing in another order, as another JVM could print it."""
    lines = text.split("\n")
    head, items, also, doors = lines[0], lines[1:7], lines[7], lines[8:]
    rng.shuffle(items)
    rng.shuffle(doors)
    swapped = [
        line.replace(
            "a yellow light bulb, which is off, a battery, a black wire",
            "a black wire, a battery, a yellow light bulb, which is off",
        )
        .replace("a seed, a flower", "a flower, a seed")
        .replace("a red apple, a banana", "a banana, a red apple")
        for line in items
    ]
    return "\n".join([head, *swapped, also, *doors])


def test_reordered_listings_read_identically():
    rng = random.Random(0)
    expected = canonical_observation(ROOM)
    for _ in range(20):
        assert canonical_observation(_shuffle_listings(ROOM, rng)) == expected


def test_items_keep_their_descriptions_and_nesting():
    out = canonical_observation(ROOM)
    assert "On the table is: a battery, a black wire, a yellow light bulb, which is off." in out
    assert "On the apple tree you see: a flower, a seed. , soil)" in out
    assert "a bowl (containing a banana, a red apple)" in out
    assert "\ta thermometer, currently reading a temperature of 10 degrees celsius" in out
    # top-level lines keep their place; only the tab-indented siblings under each are sorted
    lines = out.split("\n")
    assert lines[0].startswith("This room is called the kitchen")
    assert lines[7] == "You also see:"
    assert lines[8:] == ["\tA door to the bathroom (that is open)", "\tA door to the outside (that is open)"]


def test_idempotent_and_only_reorders():
    out = canonical_observation(ROOM)
    assert canonical_observation(out) == out
    assert sorted(out) == sorted(ROOM)


@pytest.mark.parametrize(
    "text",
    [
        "You move to the kitchen.",
        "No known action matches that input.",
        "That container is empty, so there are no items to mix.",
        # the engine's ambiguity prompt: the numbers refer to positions, so the order must stay
        "Ambiguous request: Please enter the number for the action you intended (or blank to cancel):\n"
        "0:\tfocus on door between kitchen and hallway\n1:\tfocus on door between kitchen and bathroom\n",
        "Unbalanced (containing b, a",
    ],
)
def test_text_without_listings_is_untouched(text):
    assert canonical_observation(text) == text
