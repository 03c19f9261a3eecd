"""An error of the library ends an ``r3l`` command with one line, ``r3l COMMAND: error: MESSAGE``, on stderr and
exit status 1; ``-v`` adds the traceback; any other exception (a bug) keeps its traceback."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

import r3l_envs
from r3l_learn.cli.main import main


def _one_error_line(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith(f"r3l {command}: error: "), err
    return lines[0].removeprefix(f"r3l {command}: error: ")


def test_an_env_error_is_one_line(tmp_path, capsys):  # r3l_envs: DataNotFoundError
    argv = ["check", "--env", "r3l/GSM8K-v0", "--env-kwargs", f"data_path={tmp_path / 'gsm8k.jsonl'}"]
    assert main(argv) == 1
    assert _one_error_line(capsys.readouterr().err, "check").startswith("GSM8K data not found")


def test_a_learner_error_is_one_line(capsys):  # r3l_learn: ModelNotFoundError
    assert main(["eval", "--env", "r3ltest/Corridor-v0", "--model", "no-such-model"]) == 1
    assert _one_error_line(capsys.readouterr().err, "eval").startswith("unknown model 'no-such-model'")


@pytest.mark.parametrize("saved", ['{"steps": "many"}', "[1, 2]", "{"])
def test_a_garbage_saved_config_is_one_line(tmp_path, capsys, saved):  # the run's config.json, read by --resume
    (tmp_path / "config.json").write_text(saved, encoding="utf-8")
    assert main(["train", "--resume", "--out-dir", str(tmp_path)]) == 1
    assert "config.json" in _one_error_line(capsys.readouterr().err, "train")


def test_a_bad_groups_file_is_one_line_with_its_control_characters_escaped(tmp_path, capsys):  # wrappers
    bad = tmp_path / "evil\n\x1b[2J.jsonl"  # a newline would split the line, an escape sequence clear the screen
    bad.write_text("not a record\n", encoding="utf-8")
    assert main(["show", str(bad)]) == 1
    message = _one_error_line(capsys.readouterr().err, "show")
    assert "line 1" in message and "\x1b" not in message and "evil\\n\\x1b[2J.jsonl" in message


@pytest.mark.parametrize("argv", [["-v", "eval"], ["eval", "-v"]])
def test_verbose_adds_the_traceback(argv, capsys):
    assert main([*argv, "--env", "r3ltest/Corridor-v0", "--model", "no-such-model"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "ModelNotFoundError" in err
    assert err.strip().splitlines()[-1].startswith("r3l eval: error: unknown model")


def test_a_bug_keeps_its_traceback(monkeypatch):
    def broken() -> list[str]:
        raise RuntimeError("a bug, not bad input")

    monkeypatch.setattr(r3l_envs, "list_envs", broken)
    with pytest.raises(RuntimeError, match="a bug"):  # not caught: the interpreter prints the traceback
        main(["envs"])


@pytest.mark.slow  # a child process that imports torch and builds the tiny model
def test_a_resume_error_exits_1_with_one_line_from_the_installed_command(tmp_path):
    argv = ["train", "--resume", "--out-dir", str(tmp_path / "run"), "--model", "tiny-random", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "r3l_learn.cli.main", *argv], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("r3l train: error: ")]
    assert "Traceback" not in done.stderr and len(errors) == 1, done.stderr
    assert "--resume: no checkpoint" in errors[0]
