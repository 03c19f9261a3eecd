"""The eval bar advances as each episode finishes, not once per batch of episodes."""

import io
import sys

import gymnasium as gym
import pytest

pytest.importorskip("transformers")

from r3l_learn.loop.evaluate import evaluate
from r3l_learn.loop.prebuild import eval_task_ids
from r3l_learn.policies.scripted import ScriptedPolicy


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _solver(episodes):
    """Answers the Countdown tasks an eval of ``episodes`` episodes (seed 0) plays: the right answer for the
    even-numbered episodes (one turn), a wrong one for the others (three)."""
    env = gym.make("r3l/Countdown-v0", split="test")
    key = {}
    for i, task_id in enumerate(eval_task_ids(env, 0, episodes)):
        env.reset(options={"task_id": task_id})
        task = env.unwrapped.current_task
        key[task.problem] = task.reference if i % 2 == 0 else "1 + 1"

    def reply(prompt_text: str) -> str:
        (answer,) = [a for p, a in key.items() if p in prompt_text]
        return f"<think>sure</think> <action>{answer}</action>"

    return reply


def test_the_bar_counts_episodes_finished_within_a_batch(monkeypatch):
    """One batch of 4: the two one-turn episodes end after round 1, the other two after round 3. The bar shows 2/4
    (with the batch still running: a turn to come in its postfix) before it shows 4/4."""
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    evaluate("r3l/Countdown-v0", ScriptedPolicy(_solver(4)), episodes=4, batch_size=4, seed=0, progress=True)
    text = err.getvalue()
    assert "2/4" in text and "4/4" in text
    assert text.index("2/4") < text.index("4/4")
    mid_batch = [frame for frame in text.split("\r") if "2/4" in frame]
    assert any("turn=2" in frame for frame in mid_batch)


def test_every_episode_is_counted_once_over_several_batches(monkeypatch):
    """Three batches of 2 (the last one short): the end line counts each episode once."""
    err = io.StringIO()  # off a terminal: one start line and one end line with the count
    monkeypatch.setattr(sys, "stderr", err)
    evaluate("r3l/Countdown-v0", ScriptedPolicy(_solver(5)), episodes=5, batch_size=2, seed=0, progress=True)
    assert " 5/5 ep," in err.getvalue()
