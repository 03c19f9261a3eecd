"""``r3l --help`` and every subcommand's help: one line per subcommand, each flag listed under one spelling (older
spellings still parse), booleans as ``--x, --no-x``, and every flag's default shown."""

import argparse
import dataclasses
import re

import pytest

pytest.importorskip("transformers")

from r3l_learn.cli.main import build_parser, main
from r3l_learn.cli.train_args import config_from_args
from r3l_learn.loop.train import TrainConfig

COMMANDS = ("tour", "envs", "check", "train", "eval", "warmup", "show")
# an entry of the options list: two spaces, the flag's spellings, then its help after two spaces or on the next line
ENTRY = re.compile(r"^  (-[^ ].*?)(?:  +(.*))?$")


def _help(capsys, monkeypatch, *argv: str) -> str:
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps to the terminal's width
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def _entries(text: str) -> dict[str, str]:
    """Each listed flag's spellings (``"--fill, --no-fill"``) -> its help text, from the ``options:`` section."""
    section = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    entries: dict[str, str] = {}
    current = None
    for line in section.splitlines():
        match = ENTRY.match(line)
        if match:
            current = match.group(1).strip()
            assert current not in entries, f"{current} listed twice"
            entries[current] = match.group(2) or ""
        else:
            entries[current] += " " + line.strip()
    return entries


def _spellings(entry: str) -> list[str]:
    return [words.split()[0] for words in entry.split(", ")]


def test_r3l_help_lists_each_subcommand_on_one_line_and_the_exit_statuses(capsys, monkeypatch):
    text = _help(capsys, monkeypatch)
    listing = text.split("  COMMAND\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0] for line in listing] == list(COMMANDS), listing  # no wrapped continuation lines
    assert all(re.match(r"^    \w+ {2,}\S", line) for line in listing)
    assert "-v, --verbose" in text
    epilog = " ".join(text.split("exit status:", 1)[1].split())
    assert "1 an error of r3l" in epilog and "r3l COMMAND: error: MESSAGE" in epilog and "2 a usage error" in epilog


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_is_listed_once_in_one_spelling_with_its_default(command, capsys, monkeypatch):
    text = _help(capsys, monkeypatch, command)
    entries = _entries(text)
    spellings = [s for entry in entries for s in _spellings(entry)]
    assert len(spellings) == len(set(spellings)), spellings
    assert not [s for s in spellings if "_" in s], "underscore spellings are accepted, not listed"
    assert not re.search(r"\[[A-Z_]+\]", text), "a boolean is --x/--no-x, not --x [X]"
    for entry, helptext in entries.items():
        if entry in ("-h, --help", "-v, --verbose"):
            continue
        assert "(default: " in helptext or helptext.endswith("(required)"), (entry, helptext)


def test_train_help_has_a_flag_per_config_field_and_booleans_as_a_pair(capsys, monkeypatch):
    entries = _entries(_help(capsys, monkeypatch, "train"))
    by_flag = {_spellings(entry)[0]: (entry, helptext) for entry, helptext in entries.items()}
    for f in dataclasses.fields(TrainConfig):
        flag = f"--{f.name.replace('_', '-')}"
        entry, helptext = by_flag[flag]
        if f.type in (bool, "bool"):
            assert entry == f"{flag}, --no-{flag[2:]}"
            assert helptext.endswith(f"(default: {f.default})")
    assert "(default: True)" in by_flag["--progress"][1]


def test_older_spellings_still_parse_unlisted():
    parser = build_parser()
    old = ["train", "--out_dir", "o", "--no_fill", "--eval_before", "--no_progress", "--tasks_per_step", "2"]
    config = config_from_args(parser.parse_args(old))
    assert (config.out_dir, config.fill, config.eval_before, config.progress, config.tasks_per_step) == (
        "o",
        False,
        True,
        False,
        2,
    )
    assert config_from_args(parser.parse_args(["train", "--out", "p"])).out_dir == "p"
    assert parser.parse_args(["eval", "--env", "r3l/Countdown-v0", "--env_kwargs", "a=1"]).env_kwargs == [("a", 1)]
    assert parser.parse_args(["demo"]).command == "demo"  # the old name of `tour`, no longer listed


OFF_BY_FLAG = [["--no-progress"], ["--no_progress"], ["--preset", "cpu-demo", "--no-progress"]]


@pytest.mark.parametrize("flags", [[], ["--progress"], *OFF_BY_FLAG])
def test_no_progress_switches_the_progress_field_off(flags):
    progress = config_from_args(build_parser().parse_args(["train", *flags])).progress
    assert progress is (flags not in OFF_BY_FLAG)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_boolean_flag_of_every_command_is_switched_off_by_its_no_twin(command):
    parser = build_parser(command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    values = {"env": "r3l/Countdown-v0", "out": "o"}
    required = [
        w for a in sub._actions if a.required and a.option_strings for w in (a.option_strings[0], values[a.dest])
    ]
    flags = [a for a in sub._actions if isinstance(a, argparse.BooleanOptionalAction)]
    for flag in flags:
        (on,) = [o for o in flag.option_strings if o.startswith("--") and not o.startswith("--no")]
        args = parser.parse_args([command, *required, f"--no-{on[2:]}"])
        assert getattr(args, flag.dest) is False, f"r3l {command} --no-{on[2:]}"
        assert getattr(parser.parse_args([command, *required, on]), flag.dest) is True


def test_a_boolean_flag_takes_no_value():
    with pytest.raises(SystemExit) as err:
        build_parser().parse_args(["train", "--fill", "false"])
    assert err.value.code == 2


def test_verbose_is_accepted_before_or_after_the_command():
    parser = build_parser()
    assert parser.parse_args(["-v", "envs"]).verbose and parser.parse_args(["envs", "-v"]).verbose
    assert parser.parse_args(["-v", "train"]).verbose and parser.parse_args(["train", "--verbose"]).verbose
    assert not parser.parse_args(["envs"]).verbose
