"""``r3l show`` on files from anyone: nothing in a record acts on the terminal (escapes, bidi overrides, NULs are
shown, not sent), every malformed record ends in one typed error naming its line and field, reading stays within
its line and depth bounds, and wrapping grows linearly with the text."""

from __future__ import annotations

import base64
import copy
import json
import time
import tracemalloc
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wrappers import Sample, Trajectory, TrajectoryGroup, Turn, save_jsonl
from wrappers.data.jsonl import nesting
from wrappers.data.safe_text import UNSAFE, printable, wrap
from wrappers.data.trajectory import DataFormatError, load_jsonl
from wrappers.view.show import load_viewable, pairs, render_text
from wrappers.view.show_html import render_html

#: Terminal attacks: a window title, an OSC 52 clipboard write, a screen clear, an 8-bit CSI, a bell, a NUL, a
#: right-to-left override and isolate, a carriage return and backspace that overwrite text, a C1 NEL, a line
#: separator, a Unicode tag character (invisible text).
HOSTILE = (
    "\x1b]0;pwned\x07\x1b]52;c;ZWNobyBoaQ==\x07\x1b[2J\x9b31m\x07\x00\u202etxt.exe\u2066\u200f"
    "\r\x08\x7f\x85\u2028\U000e0041"
)
# every character the views may send: no control character but newline, no format character but the joiners
_ALLOWED = {"\n", "\t", "\u200c", "\u200d"}
ANY_CHAR = st.characters(exclude_categories=())  # surrogates included: envs echo them
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def raw_controls(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on or hide (by the Unicode database, not by the code
    under test)."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") and c not in _ALLOWED]


def group(text: str = "") -> TrajectoryGroup:
    """A base with its reflection, a retry from its turn 1 with guidance, and a sample; ``text`` in every text."""
    turns = [
        Turn(
            observation=f"a corridor {text}",
            response=f"<action>left</action>{text}",
            action=f"left{text}",
            prompt_text=f"where now? {text}",
            admissible=["left", f"right{text}"],
            outcome=f"a wall {text}",
            token_ids=[5, 6],
            behavior_logprobs=[-0.1, -0.2],
            span=(2, 4),
            info={"note": text, "nested": {"deeper": [text]}},
        ),
        Turn(
            observation="o2",
            response=f"?? {text}",
            action=None,
            parse_error=f"no <action> {text}",
            outcome=f"say <action> {text}",
            token_ids=[7],
            behavior_logprobs=[-0.3],
            span=(6, 7),
        ),
    ]
    reflection = {
        "outcome": f"failure{text}",
        "pivot": 1,
        "root_cause": text,
        "suggestion": f"right{text}",
        "error": None,
    }
    base = Trajectory(
        env_id=f"r3ltest/Corridor-v0{text}",
        task_id=f"t-0{text}",
        task=f"walk to the door {text}",
        turns=turns,
        token_ids=[1, 2, 5, 6, 3, 4, 7],
        agent_mask=[0, 0, 1, 1, 0, 0, 1],
        loss_mask=[0, 0, 1, 1, 0, 0, 1],
        behavior_logprobs=[0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3],
        metadata={"reflection": reflection},
    )
    retry = copy.deepcopy(base)
    retry.id, retry.kind, retry.pivot, retry.base_id = "r" * 32, "retry", 1, base.id
    retry.reward, retry.won = 1.0, True
    retry.guidance, retry.metadata = f"walk right {text}", {"beat_base": True}
    return TrajectoryGroup(
        env_id=base.env_id,
        task_id=base.task_id,
        trajectories=[base, retry],
        samples=[Sample(kind=f"reflection{text}", token_ids=[1, 2], loss_mask=[0, 1])],
        metadata={"note": text},
    )


def write_lines(path, *records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def record() -> dict:
    return json.loads(json.dumps(group().to_dict()))


# ---------------------------------------------------------------------------------------------- escapes
def test_a_file_full_of_escape_sequences_reaches_the_terminal_escaped(tmp_path, capfdbinary):
    from r3l_learn.cli.main import main

    path, page = tmp_path / "hostile.jsonl", tmp_path / "page.html"
    save_jsonl(path, [group(HOSTILE), group(HOSTILE).trajectories[0]])
    assert main(["show", str(path), "--max-lines", "0", "--html", str(page)]) == 0
    out = capfdbinary.readouterr().out
    for byte in (b"\x1b", b"\x07", b"\x00", b"\r", b"\x08", b"\x7f", "\x9b".encode(), "\u202e".encode()):
        assert byte not in out
    text = out.decode("utf-8")
    assert raw_controls(text) == []
    assert "\\x1b]52;c;ZWNobyBoaQ==\\x07" in text and "\\u202etxt.exe" in text and "\\U000e0041" in text
    assert text.count("\\x1b]0;pwned") >= 12  # ids, goals, actions, outcomes, reflections, guidance: all shown
    assert "root_cause: \\x1b]0;pwned" in text and "auxiliary samples: reflection\\x1b]0;pwned" in text
    html = page.read_text(encoding="utf-8")
    assert raw_controls(html) == []
    assert "\\u202etxt.exe" in html and "\\x00" in html


def test_the_html_view_shows_what_the_tokenizer_decodes_escaped_and_survives_one_that_fails():
    def decode(ids):
        if 7 in ids:
            raise OverflowError("out of range integral type conversion attempted")
        return HOSTILE + "<b>"

    page = render_html([group()], decode=decode)
    assert raw_controls(page) == [] and "&lt;b&gt;" in page and "\\u202e" in page
    assert ">7</span>" in page  # the ids the tokenizer could not decode are shown as ids


def test_every_control_and_format_character_is_escaped():
    unsafe = [chr(c) for c in range(0x110000) if raw_controls(chr(c))]
    assert all(UNSAFE.fullmatch(c) for c in unsafe)
    assert printable("\x1b\x9b\u202e\U000e0041\ud800") == "\\x1b\\x9b\\u202e\\U000e0041\\ud800"
    assert printable("tab\tand\nnewline, \u200d joiner") == "tab\tand\nnewline, \u200d joiner"


# ---------------------------------------------------------------------------------------------- bad records
def _set(path: tuple, value):
    def mutate(rec: dict) -> None:
        *parents, last = path
        node = rec
        for key in parents:
            node = node[key]
        node[last] = value

    return mutate


T0, T1 = ("trajectories", 0), ("trajectories", 1)
BAD_FIELDS = [
    (_set((*T1, "pivot"), "1"), r"trajectories\[1\]\.pivot: expected an integer or null, got a string '1'"),
    (_set((*T1, "pivot"), 5), r"trajectories\[1\]\.pivot: turn 5 of a trajectory of 2 turns"),
    (_set((*T0, "reward"), "1.0"), r"trajectories\[0\]\.reward: expected a number"),
    (_set((*T0, "reward"), 10**400), r"trajectories\[0\]\.reward: .* too large for a float"),
    (_set((*T0, "won"), "yes"), r"trajectories\[0\]\.won: expected true or false"),
    (_set((*T0, "won"), 1), r"trajectories\[0\]\.won: expected true or false, got the number 1"),
    (_set((*T0, "kind"), ["base"]), r"trajectories\[0\]\.kind: expected a string, got a list"),
    (_set((*T0, "loss_mask"), ["a"] * 7), r"trajectories\[0\]\.loss_mask\[0\]: expected an integer"),
    (_set((*T0, "agent_mask"), [0.5] * 7), r"trajectories\[0\]\.agent_mask\[0\]: expected an integer"),
    (_set((*T0, "agent_mask"), [2] * 7), r"trajectories\[0\]\.agent_mask\[0\]: expected one of \[0, 1\]"),
    (_set((*T0, "loss_mask"), [1, 0, 1]), r"trajectories\[0\]\.loss_mask: 3 values for 7 token_ids"),
    (_set((*T0, "behavior_logprobs"), [0.0] * 8), r"trajectories\[0\]\.behavior_logprobs: 8 values for 7 token_ids"),
    (_set((*T0, "behavior_logprobs"), ["x"] * 7), r"trajectories\[0\]\.behavior_logprobs\[0\]: expected a number"),
    (
        _set((*T0, "token_ids"), [1, -2, 5, 6, 3, 4, 7]),
        r"trajectories\[0\]\.token_ids\[1\]: the number -2 is below the minimum 0",
    ),
    (
        _set((*T0, "metadata", "reflection"), ["root cause"]),
        r"trajectories\[0\]\.metadata\.reflection: expected an object or null",
    ),
    (
        _set((*T0, "metadata", "reflection"), "text"),
        r"trajectories\[0\]\.metadata\.reflection: expected an object or null",
    ),
    (
        _set((*T1, "guidance"), {"a": 1}),
        r"trajectories\[1\]\.guidance: expected a string or null",
    ),
    (
        _set((*T0, "turns", 0, "span"), [2, 99]),
        r"trajectories\[0\]\.turns\[0\]\.span: \[2, 99\] does not lie within the 7 token_ids",
    ),
    (_set((*T0, "turns", 0, "span"), [4, 2]), r"trajectories\[0\]\.turns\[0\]\.span: \[4, 2\] does not lie"),
    (_set((*T0, "turns", 0, "observation"), 5), r"trajectories\[0\]\.turns\[0\]\.observation: expected a string"),
    (_set((*T0, "turns", 0, "action"), ["left"]), r"trajectories\[0\]\.turns\[0\]\.action: expected a string or null"),
    (_set((*T0, "turns", 0, "reward"), "0"), r"trajectories\[0\]\.turns\[0\]\.reward: expected a number"),
    (_set((*T0, "turns"), {"0": {}}), r"trajectories\[0\]\.turns: expected a list, got an object"),
    (_set(("samples", 0, "loss_mask"), [1]), r"samples\[0\]\.loss_mask: 1 value for 2 token_ids"),
    (_set(("trajectories",), "none"), r"trajectories: expected a list, got a string 'none'"),
    (_set(("env_id",), None), r"env_id: expected a string, got null"),
    (_set(("type",), ["group"]), r"unknown record type a list of 1 value; expected one of"),
    (_set(("version",), "2\n\x1b"), r"group of format version a string '2\\n\\x1b'"),
    (_set(("version",), True), r"group of format version true: this r3l reads versions 1 to 4"),
]


@pytest.mark.parametrize(("mutate", "message"), BAD_FIELDS)
def test_a_field_of_the_wrong_type_or_size_is_one_clean_error_naming_line_and_field(tmp_path, mutate, message):
    bad = record()
    mutate(bad)
    path = tmp_path / "bad.jsonl"
    write_lines(path, record(), bad)
    with pytest.raises(DataFormatError, match=r"cannot read .*bad\.jsonl line 2: " + message) as caught:
        render_text(load_viewable(path))  # nothing reaches rendering unchecked
        render_html(load_viewable(path))
    assert caught.value.line == 2 and "\n" not in str(caught.value)


def test_the_cli_turns_a_bad_record_into_one_printable_line(tmp_path, capsys):
    from r3l_learn.cli.main import main

    bad = record()
    bad["trajectories"][0]["kind"] = {HOSTILE: 1}
    bad["trajectories"][0]["pivot"] = HOSTILE
    path = tmp_path / "bad.jsonl"
    write_lines(path, record(), bad)
    try:
        assert main(["show", str(path)]) != 0
        message = capsys.readouterr().err.removesuffix("\n")
    except SystemExit as stop:  # the CLI may end with the message instead
        message = str(stop.code)
    assert "line 2: trajectories[0].kind: expected a string, got an object of 1 field" in message
    assert "\n" not in message and raw_controls(message) == []


def test_100k_deep_nesting_is_a_clean_error_in_bounded_memory(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(record()) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    tracemalloc.start()
    try:
        with pytest.raises(DataFormatError, match=r"line 2: not a record: JSON nested deeper than 64 levels"):
            load_viewable(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20  # the 200 KB line, its bracket skeleton and one group: no 100k-deep structure


def test_a_deep_value_inside_a_record_is_refused_by_the_depth_cap(tmp_path):
    deep: object = "bottom"
    for _ in range(300):  # within what json parses, past what the reader takes
        deep = {"next": deep}
    bad = record()
    bad["trajectories"][0]["turns"][0]["info"]["deep"] = deep
    path = tmp_path / "deep.jsonl"
    write_lines(path, bad)
    with pytest.raises(DataFormatError, match=r"line 1: .*nested deeper than 64 levels \(max_depth\)"):
        list(load_jsonl(path))
    assert len(list(load_jsonl(path, max_depth=400))) == 1  # the cap is a setting, not a limit of the reader


def test_brackets_inside_strings_do_not_count_as_nesting():
    assert nesting(json.dumps({"a": ["[[[[{{{{", {"b": '\\"[[['}]})) == 3
    assert nesting("[1, 2]") == 1 and nesting('"[[["') == 0 and nesting("[" * 1000) == 1000


def test_an_oversized_line_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(record()) + "\n" + '{"type": "group", "env_id": "' + "x" * (16 * 2**20) + '"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(
            DataFormatError, match=r"line 2: the line is longer than 1,048,576 bytes \(max_line_bytes\)"
        ):
            load_viewable(path, max_line_bytes=2**20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20  # at most the ceiling was read of the 16 MB line


def test_a_file_that_is_not_utf8_names_the_byte(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(record()).encode() + b"\n" + b'{"type": "gr\xe9oup"}\n')
    with pytest.raises(DataFormatError, match=r"line 2: not UTF-8 text \(byte 0xe9 at column 13\)"):
        load_viewable(path)


# ---------------------------------------------------------------------------------------------- wrapping
def test_an_8mb_word_renders_in_time_linear_in_its_length():
    """The CPU time for an 8 MB unbroken word over that for a 2 MB one: 4 if linear, 16 if quadratic (textwrap
    copies the rest of the word for every line it cuts). The best of three runs of each, in one test."""

    def render_cost(size: int) -> float:
        traj = group().trajectories[0]
        traj.turns[0].outcome = "x" * size
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            text = render_text([traj], max_lines=0)
            best = min(best, time.process_time() - start)
        assert text.count("x" * 58) == size // 58  # every piece of the word is there, cut at the column width
        return best

    small, large = render_cost(2 * 2**20), render_cost(8 * 2**20)
    assert large / max(small, 1e-3) < 10


@FUZZ
@given(text=st.text(ANY_CHAR, max_size=300), width=st.integers(1, 80))
def test_wrapping_keeps_every_character_and_the_width(text, width):
    lines = list(wrap(text, width))
    assert all(len(line) <= width for line in lines)
    assert "".join(lines).replace(" ", "") == text.expandtabs().replace("\n", "").replace(" ", "")


# ---------------------------------------------------------------------------------------------- fuzz
def _paths(node, prefix=()):
    """Every place in a record a value sits (to be replaced), with the record itself."""
    yield prefix
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from _paths(child, (*prefix, key))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(ANY_CHAR, max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(ANY_CHAR, max_size=8), inner, max_size=3),
    max_leaves=10,
)
PATHS = list(_paths(record()))


def assert_renders_printably(items) -> None:
    assert raw_controls(render_text(items, max_lines=0)) == []
    assert raw_controls(render_html(items)) == []


@FUZZ
@given(where=st.sampled_from(PATHS), value=JSON, drop=st.booleans())
def test_fuzz_a_record_with_any_value_anywhere_reads_or_fails_typed(tmp_path_factory, where, value, drop):
    rec = record()
    if where:
        *parents, last = where
        node = rec
        for key in parents:
            node = node[key]
        if drop and isinstance(node, dict):
            del node[last]
        else:
            node[last] = value
    else:
        rec = value
    path = tmp_path_factory.mktemp("fuzz") / "g.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    try:
        items = load_viewable(path)
    except DataFormatError as exc:
        assert exc.line == 1 and raw_controls(str(exc)) == [] and "\n" not in str(exc)
        return
    assert_renders_printably(items)


@FUZZ
@given(line=st.binary(max_size=200) | st.text(ANY_CHAR, max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_fuzz_any_bytes_read_or_fail_typed(tmp_path_factory, line):
    path = tmp_path_factory.mktemp("fuzz") / "g.jsonl"
    path.write_bytes(line)
    try:
        items = load_viewable(path)
    except DataFormatError as exc:
        assert raw_controls(str(exc)) == [] and "\n" not in str(exc)
        return
    assert_renders_printably(items)


@FUZZ
@given(text=st.text(ANY_CHAR, max_size=60), max_lines=st.integers(0, 4))
def test_fuzz_any_text_in_any_field_renders_printably(tmp_path_factory, text, max_lines):
    items = [group(text), group(text).trajectories[1]]
    assert raw_controls(render_text(items, max_lines=max_lines)) == []
    assert raw_controls(render_html(items)) == []
    path = tmp_path_factory.mktemp("fuzz") / "g.jsonl"
    save_jsonl(path, items)
    assert_renders_printably(load_viewable(path))  # and through the file, lossless


@pytest.mark.parametrize(
    ("checkpoint", "why"),
    [
        (base64.b64encode(b"R3LCKPT\0" + b"junk" * 10).decode(), r"a turn's checkpoint cannot be read \(.+\)$"),
        ("not base64!", r"a turn's checkpoint is not base64 \(.+\)$"),
    ],
)
def test_the_viewer_never_decodes_checkpoints_and_the_reader_reports_a_bad_one(tmp_path, checkpoint, why):
    bad = record()
    bad["trajectories"][0]["turns"][0]["checkpoint"] = checkpoint
    path = tmp_path / "ckpt.jsonl"
    write_lines(path, bad)
    [(base, retry)] = pairs(load_viewable(path)[0])
    assert base.turns[0].checkpoint is None and retry is not None
    with pytest.raises(DataFormatError, match=r"line 1: " + why):
        list(load_jsonl(path))
