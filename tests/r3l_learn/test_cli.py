"""One ``r3l`` CLI: train and eval share flags and defaults, help shows defaults and choices and cites docs that
ship, flags keep preset precedence, bad env ids get a hint, Ctrl-C and closed pipes end without a traceback
(help layout: test_cli_help.py; library errors as one line: test_cli_errors.py)."""

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from r3l_learn.algorithms.catalog import ABLATIONS, ALGORITHMS
from r3l_learn.cli.main import build_parser, main
from r3l_learn.cli.train_args import config_from_args
from r3l_learn.loop.train import TrainConfig

TESTS = Path(__file__).resolve().parents[1]
# runs the CLI in a child process with the test corridor registered
SCRIPT = (
    f"import sys; sys.path.append({str(TESTS)!r}); import corridor; corridor.register(); "
    "from r3l_learn.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


def _help(*command):
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    return sub.choices[command[0]].format_help() if command else parser.format_help()


def test_train_help_shows_every_default_and_the_choices_of_every_closed_field():
    text = " ".join(_help("train").split())
    for f in dataclasses.fields(TrainConfig):
        flag = f"--{f.name.replace('_', '-')}"
        assert flag in text, flag
    assert text.count("(default: ") >= len(dataclasses.fields(TrainConfig))
    closed = [sorted(ALGORITHMS), sorted(ABLATIONS), ["free", "constrained", "direct"], ["k1", "k2", "k3"]]
    for choices in [*closed, ["token_mean", "seq_mean", "token_sum"]]:
        assert "{" + ",".join(choices) + "}" in text, choices
    for flag, choices in (("--dtype", "{float32,bfloat16,auto}"), ("--rollout-backend", "{hf,vllm,auto}")):
        assert f"{flag} {choices}" in text
    assert "{auto,off,bf16}" in text
    for name in ABLATIONS:  # every ablation has its shortcut, and --ablations lists all of them
        assert f"--{name.replace('_', '-')}" in text


@pytest.mark.parametrize("command", [(), ("train",), ("eval",), ("show",), ("check",), ("tour",)])
def test_help_cites_only_docs_that_ship(command):
    text = _help(*command)
    assert "R3L.md" not in text and "FACTS.md" not in text


def test_train_and_eval_share_flags_and_defaults():
    parser = build_parser()
    ev = parser.parse_args(["eval", "--env", "r3l/Countdown-v0"])
    config = TrainConfig()
    shared = ("actions", "dtype", "autocast", "device", "rollout_backend", "max_new_tokens", "seed")
    assert {k: getattr(ev, k) for k in shared} == {k: getattr(config, k) for k in shared}
    assert ev.temperature == config.eval_temperature and ev.split == config.eval_split
    assert ev.batch_size == config.eval_batch_size


def test_flags_given_override_the_preset_even_when_equal_to_the_default():
    parser = build_parser()
    preset = config_from_args(parser.parse_args(["train", "--preset", "cpu-demo"]))
    assert preset.actions == "constrained" and preset.out_dir == "runs/cpu-demo"
    given = config_from_args(parser.parse_args(["train", "--preset", "cpu-demo", "--actions", "free", "--out", "x"]))
    assert given.actions == "free" and given.out_dir == "x"  # --out is accepted for --out-dir
    kw = config_from_args(parser.parse_args(["train", "--env-kwargs", "max_attempts=5", "split=test", "--no-fill"]))
    assert kw.env_kwargs == {"max_attempts": 5, "split": "test"} and kw.fill is False
    both = config_from_args(parser.parse_args(["train", "--ablations", "no_pivot_credit", "--retry-from-scratch"]))
    assert both.ablations == ("no_pivot_credit", "retry_from_scratch")


def test_bad_values_are_usage_errors_not_tracebacks(capsys):
    for argv in (["train", "--algo", "ppo"], ["train", "--env-kwargs", "novalue"], ["eval", "--actions", "x"]):
        with pytest.raises(SystemExit) as err:
            build_parser().parse_args(argv)
        assert err.value.code == 2
    assert "invalid choice: 'ppo'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["eval", "--env", "r3l/Countdwn-v0"], ["check", "r3l/Countdwn-v0"]])
def test_an_unknown_env_id_gets_a_hint_in_every_command(argv):
    with pytest.raises(SystemExit) as err:
        main([*argv, "--model", "tiny-random"] if argv[0] == "eval" else argv)
    assert "not registered; did you mean 'r3l/Countdown-v0'" in str(err.value.code)


def test_check_takes_the_env_as_flag_or_as_the_older_positional(capsys):
    assert main(["check", "--env", "r3ltest/Corridor-v0", "--env-kwargs", "length=4"]) == 0
    assert main(["check", "r3ltest/Corridor-v0", "length=4"]) == 0
    assert capsys.readouterr().out.count("check_env passed") == 2


def test_eval_takes_env_kwargs_both_ways_and_an_out_dir(tmp_path):
    argv = ["eval", "--env", "r3ltest/Corridor-v0", "--model", "tiny-random", "--episodes", "1", "--max-turns", "1"]
    assert main([*argv, "--env-kwargs", "length=3", "--out-dir", str(tmp_path)]) == 0
    assert (tmp_path / "r3l-eval-Corridor-v0-test.jsonl").is_file()
    assert main([*argv, "--out", str(tmp_path / "b.jsonl"), "length=3"]) == 0
    with pytest.raises(ValueError, match="backend must be one of"):
        from r3l_learn.loop.evaluate import load_policy

        load_policy("tiny-random", backend="onnx")


@pytest.mark.slow  # a child process that imports torch
def test_ctrl_c_in_eval_exits_130_with_one_line_and_no_traceback(tmp_path):
    err = tmp_path / "stderr"
    argv = ["eval", "--env", "r3ltest/Corridor-v0", "--model", "tiny-random", "--episodes", "400", "--batch-size", "1"]
    argv += ["--out", str(tmp_path / "e.jsonl")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, *argv], stdout=subprocess.DEVNULL, stderr=stderr, env=env
        )
        deadline = time.monotonic() + 120
        while proc.poll() is None and "(400 ep) ..." not in err.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)  # the eval's start line (stderr is no terminal): the eval is under way
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    text = err.read_text()
    assert code == 130, text
    assert "Traceback" not in text and "interrupted" in text.splitlines()[-1]


@pytest.mark.slow  # a child process that imports torch
def test_show_into_a_closed_pipe_ends_quietly(tmp_path):
    from wrappers import Trajectory, Turn, save_jsonl

    turns = [Turn(observation="o", response="r", action=f"step {i}", outcome="x\n" * 5) for i in range(20)]
    trajs = [
        Trajectory(env_id="r3ltest/Corridor-v0", task_id=f"t{i}", task="reach the end", turns=turns) for i in range(300)
    ]
    save_jsonl(tmp_path / "t.jsonl", trajs)
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "show", str(tmp_path / "t.jsonl")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.readline()  # `| head -1`
    proc.stdout.close()
    code = proc.wait(timeout=120)
    stderr = proc.stderr.read().decode()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code == 141


def test_show_a_missing_file_is_one_clear_line(tmp_path):
    with pytest.raises(SystemExit) as err:
        main(["show", str(tmp_path / "nope.jsonl")])
    assert str(err.value.code) == f"r3l show: no such file: {tmp_path / 'nope.jsonl'}"


def test_show_a_file_that_is_not_jsonl_is_one_clear_line(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("these are my notes\n")
    assert main(["show", str(bad)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"r3l show: error: cannot read {bad} line 1: ")


def test_demo_is_now_tour_and_the_old_name_says_so(capsys):
    assert main(["tour", "--episodes", "1"]) == 0
    assert "Solved 1/1" in capsys.readouterr().out
    assert main(["demo", "--episodes", "1"]) == 0
    assert "`r3l demo` is now `r3l tour`" in capsys.readouterr().out


def test_readme_opens_with_its_title_then_the_two_commands_and_cites_docs_that_ship():
    readme = (TESTS.parent / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert lines[0] == "# r3l"
    first_block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in first_block.strip().splitlines()] == [["make", "demo"], ["make", "test"]]
    assert "R3L.md" not in readme and "FACTS.md" not in readme


def test_make_demo_keeps_one_checkpoint_while_it_runs_and_none_after():
    from r3l_learn.loop.presets import PRESETS

    demo = PRESETS["cpu-demo"]
    assert demo["checkpoint_every"] == 0 and demo["keep_checkpoints"] == 1
    makefile = (TESTS.parent / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "r3l train --preset cpu-demo" in recipe and "rm -rf runs/cpu-demo/checkpoints" in recipe


def test_no_import_circle_between_the_cli_modules():
    """cli imports train_cli (lazily); train_cli and cli_args never import cli back, not even inside a function."""
    import ast

    import r3l_learn.cli.args
    import r3l_learn.cli.train_args

    for module in (r3l_learn.cli.train_args, r3l_learn.cli.args):
        tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "r3l_learn.cli.main" not in imported, module.__name__
