"""Progress for long waits: a live bar on a terminal (updated every round of an eval and within a training step),
one start and one end line per phase elsewhere, nothing with progress off."""

import io
import re
import sys

import gymnasium as gym
import pytest

from r3l_learn.loop.progress import phase, progress_default

pytest.importorskip("transformers")

from r3l_learn.loop.evaluate import evaluate
from r3l_learn.loop.prebuild import reset_task_ids
from r3l_learn.loop.train import TrainConfig, train
from r3l_learn.policies.scripted import ScriptedPolicy
from wrappers import RolloutConfig, SamplingParams


class Terminal(io.StringIO):
    """What a bar writes to a terminal, kept: a text stream that says it is a TTY."""

    def isatty(self):
        return True


def wrong_answers(prompt_text: str) -> str:
    return "<think>no idea</think> <action>1 + 1</action>"


def test_off_a_terminal_each_phase_writes_a_start_and_an_end_line():
    out = io.StringIO()
    with phase("compiling 3 games", total=3, unit="game", file=out) as bar:
        for _ in range(3):
            bar.update()
        bar.set_postfix(cached="yes")
    with phase("starting Ray (local)", file=out):
        pass
    lines = out.getvalue().splitlines()
    assert lines[0] == "compiling 3 games (3 game) ..."
    assert re.fullmatch(r"compiling 3 games: 3/3 game, done in \d+\.\d s \(cached=yes\)", lines[1])
    assert lines[2] == "starting Ray (local) ..."
    assert re.fullmatch(r"starting Ray \(local\): done in \d+\.\d s", lines[3])
    assert len(lines) == 4 and "\r" not in out.getvalue()


def test_a_failed_phase_says_so_in_its_end_line():
    out = io.StringIO()
    with pytest.raises(RuntimeError), phase("compiling 2 games", total=2, file=out) as bar:
        bar.update()
        raise RuntimeError("the compiler broke")
    assert re.fullmatch(r"compiling 2 games: 1/2 it, failed in \d+\.\d s", out.getvalue().splitlines()[-1])


def test_progress_off_writes_nothing():
    out = io.StringIO()
    with phase("a", total=2, enabled=False, file=out) as bar:
        bar.update(2)
    with progress_default(False), phase("b", file=out):  # a phase that is not told takes the run's setting
        pass
    with progress_default(False), phase("c", enabled=True, file=out):  # one that is told obeys that
        pass
    lines = out.getvalue().splitlines()
    assert lines[0] == "c ..." and lines[1].startswith("c: done in ") and len(lines) == 2


def test_on_a_terminal_the_bar_shows_counts_and_the_live_status():
    out, calls = Terminal(), []

    def status():
        calls.append(1)
        return f"tokens={len(calls)}"

    with phase("eval", total=2, unit="ep", file=out, status=status) as bar:
        bar.update()
        bar.set_postfix(turn=3)
    text = out.getvalue()
    assert "eval" in text and "1/2" in text and "turn=3, tokens=" in text and "\r" in text


def test_eval_on_a_terminal_updates_its_bar_every_round():
    """Episodes that all take 3 turns: the postfix shows each turn of the batch, not only finished episodes."""
    out = Terminal()
    config = RolloutConfig(sampling=SamplingParams(max_new_tokens=16))
    sys_err, sys.stderr = sys.stderr, out
    try:
        evaluate("r3l/Countdown-v0", ScriptedPolicy(wrong_answers), episodes=2, seed=1, config=config, desc="eval x")
    finally:
        sys.stderr = sys_err
    text = out.getvalue()
    turns = re.findall(r"turn=(\d)(?:/3)?,", text)  # the budget (3 attempts) shows once a round was played
    assert sorted(set(turns)) == ["1", "2", "3"]
    assert "eval x" in text and "2/2" in text and "success=0.00" in text


def test_eval_off_a_terminal_writes_one_line_at_each_end_and_none_with_progress_off(capsys):
    evaluate("r3l/Countdown-v0", ScriptedPolicy(wrong_answers), episodes=2, seed=1, desc="eval before training")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "eval before training (2 ep) ..."
    assert re.fullmatch(r"eval before training: 2/2 ep, done in \d+\.\d s \(tokens=\d+, success=0\.00\)", lines[1])
    assert len(lines) == 2
    evaluate("r3l/Countdown-v0", ScriptedPolicy(wrong_answers), episodes=2, seed=1, progress=False)
    assert capsys.readouterr().err == ""


def test_the_tiny_models_work_counter_grows_with_each_call(tiny_policy):
    """The live status within a long round reads this counter: it counts every token generated or scored."""
    prompts = [tiny_policy.tokenize("hello there"), tiny_policy.tokenize("general kenobi")]
    before = tiny_policy.tokens_done
    gens = tiny_policy.generate(prompts, SamplingParams(max_new_tokens=5, seed=0))
    after_generate = tiny_policy.tokens_done
    assert after_generate - before == sum(len(g.token_ids) for g in gens) > 0
    conts = [tiny_policy.tokenize(" a b"), tiny_policy.tokenize(" c")]
    tiny_policy.score([prompts[0], prompts[0]], conts)
    assert tiny_policy.tokens_done - after_generate == sum(len(c) for c in conts)


def test_reset_task_ids_are_the_tasks_the_resets_play():
    env = gym.make("r3l/Countdown-v0", split="test")
    predicted = reset_task_ids(env, range(100, 120))
    played = [env.reset(seed=seed)[1]["task_id"] for seed in range(100, 120)]
    assert predicted == played and len(set(played)) > 1


def _train_config(tmp_path, progress):
    return TrainConfig(
        env="r3ltest/Corridor-v0",
        model="tiny-random",
        algo="grpo",
        steps=2,
        tasks_per_step=1,
        group_size=2,
        max_turns=3,
        max_new_tokens=4,
        actions="constrained",
        eval_episodes=2,
        eval_batch_size=2,
        out_dir=str(tmp_path / "run"),
        checkpoint_every=0,
        save_final=False,
        tensorboard=False,
        progress=progress,
    )


@pytest.mark.slow  # two short training runs of the tiny model
def test_training_off_a_terminal_writes_one_line_per_phase_and_nothing_without_progress(tmp_path, capsys):
    train(_train_config(tmp_path / "on", progress=True))
    lines = capsys.readouterr().err.splitlines()
    names = [line.removesuffix(" ...") for line in lines if line.endswith(" ...")]
    assert names == [
        "eval before training (2 ep)",
        "training grpo on r3ltest/Corridor-v0 (2 step)",
        "saving the checkpoint of step 2 (weights and optimiser state)",
        "eval after training (2 ep)",
    ]
    assert len(lines) == 2 * len(names) and all(" done in " in line for line in lines if not line.endswith(" ..."))
    assert re.search(r"training grpo on r3ltest/Corridor-v0: 2/2 step, done in .* \(reward=", "\n".join(lines))
    train(_train_config(tmp_path / "off", progress=False))
    assert capsys.readouterr().err == ""
