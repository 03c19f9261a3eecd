"""evaluate(): progress within episodes, and Ctrl-C that keeps the finished episodes."""

import io
import os
import signal
import sys

import gymnasium as gym
import pytest

from wrappers import RolloutConfig, load_jsonl, rollout_batch

pytest.importorskip("transformers")

from r3l_learn.loop.evaluate import EvaluationInterrupted, evaluate
from r3l_learn.loop.prebuild import eval_task_ids
from r3l_learn.policies.scripted import ScriptedPolicy


class CountdownSolver:
    """Answers Countdown tasks from an answer key; interrupts itself (a real SIGINT, as Ctrl-C sends) on reply
    number ``interrupt_at``. The tasks come in play order (``options``: each reset's options); the even-numbered
    ones get the solution, the others a wrong answer (all of them with ``wrong``)."""

    def __init__(self, options, interrupt_at=None, wrong=False):
        env = gym.make("r3l/Countdown-v0", split="test")
        self.key = {}
        for i, reset in enumerate(options):
            env.reset(**reset)
            task = env.unwrapped.current_task
            self.key[task.problem] = task.reference if i % 2 == 0 and not wrong else "1 + 1"
        self.interrupt_at, self.calls = interrupt_at, 0

    @classmethod
    def for_eval(cls, episodes, seed=0, **kwargs):
        """The solver of the tasks ``evaluate(episodes=episodes, seed=seed)`` plays."""
        tasks = eval_task_ids(gym.make("r3l/Countdown-v0", split="test"), seed, episodes)
        return cls([{"options": {"task_id": t}} for t in tasks], **kwargs)

    @classmethod
    def for_seeds(cls, seeds, **kwargs):
        """The solver of the tasks resets with ``seeds`` play."""
        return cls([{"seed": s} for s in seeds], **kwargs)

    def __call__(self, prompt_text: str) -> str:
        self.calls += 1
        if self.calls == self.interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)
        (answer,) = [a for p, a in self.key.items() if p in prompt_text]
        return f"<think>sure</think> <action>{answer}</action>"


def test_ctrl_c_keeps_and_writes_the_finished_episodes(tmp_path):
    # One batch of 4: the even seeds win on turn 1 (round 1); Ctrl-C arrives while round 2 is generated.
    solver = CountdownSolver.for_eval(4, interrupt_at=4 + 1)
    out = tmp_path / "eval.jsonl"
    with pytest.raises(EvaluationInterrupted) as stop:
        evaluate("r3l/Countdown-v0", ScriptedPolicy(solver), episodes=4, batch_size=4, out=out, progress=False)
    assert isinstance(stop.value, KeyboardInterrupt)  # callers that do not catch it stop as before
    summary, trajs = stop.value.summary, stop.value.trajectories
    assert summary.interrupted and summary.episodes == 2 == len(trajs)
    assert summary.success_rate == 1.0 and all(t.won and t.stop_reason == "terminated" for t in trajs)
    assert "interrupted" in summary.lines()[0]
    saved = list(load_jsonl(out))
    assert [t.task_id for t in saved] == [t.task_id for t in trajs]


def test_ctrl_c_between_batches_keeps_the_earlier_batches(tmp_path):
    # batch 1 (episodes 0, 1) takes 1 + 3 replies; the next generate call (batch 2, round 1) is interrupted
    solver = CountdownSolver.for_eval(4, interrupt_at=5)
    out = tmp_path / "eval.jsonl"
    with pytest.raises(EvaluationInterrupted) as stop:
        evaluate("r3l/Countdown-v0", ScriptedPolicy(solver), episodes=4, batch_size=2, out=out, progress=False)
    assert stop.value.summary.episodes == 2 and [t.won for t in stop.value.trajectories] == [True, False]
    assert len(list(load_jsonl(out))) == 2


def test_an_uninterrupted_run_is_not_marked():
    solver = CountdownSolver.for_eval(2)
    summary, trajs = evaluate("r3l/Countdown-v0", ScriptedPolicy(solver), episodes=2, progress=False)
    assert not summary.interrupted and "interrupted" not in summary.lines()[0] and len(trajs) == 2


def test_progress_shows_turns_and_tokens_within_an_episode(monkeypatch):
    """A batch whose episodes all take 3 turns reports each round, not only finished episodes (on a terminal: off
    one, each phase writes a start and an end line, tests/r3l_learn/test_progress.py)."""

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    solver = CountdownSolver.for_eval(2, seed=1, wrong=True)  # wrong answers: 3 attempts each
    evaluate("r3l/Countdown-v0", ScriptedPolicy(solver), episodes=2, seed=1, progress=True)
    text = err.getvalue()
    for turn in (1, 2, 3):
        assert f"turn={turn}" in text
    assert "tokens=0" in text and "success=0.00" in text


def test_on_round_sees_every_round():
    solver = CountdownSolver.for_seeds([0, 1])
    envs = [gym.make("r3l/Countdown-v0", split="test") for _ in range(2)]
    seen = []
    trajs = rollout_batch(
        envs,
        ScriptedPolicy(solver),
        RolloutConfig(env_workers=1),
        seeds=[0, 1],
        on_round=lambda episodes: seen.append([len(e.trajectory.turns) for e in episodes]),
    )
    assert seen == [[1, 1], [1, 2], [1, 3]]
    assert [t.num_turns for t in trajs] == [1, 3]


def test_an_eval_plays_distinct_tasks_while_the_split_has_enough():
    """64 episodes of a 64-task split play each task once (drawing each episode's task from its reset seed
    repeated about a third of them); beyond the split's size every task is played before any repeats."""
    env = gym.make("r3l/TextWorld-v0", split="test", game_type="coin_collector", difficulty=2, max_tasks=64)
    ids = list(env.unwrapped.task_ids)
    assert len(ids) == 64
    assert sorted(eval_task_ids(env, 0, 64)) == sorted(ids)
    tasks = eval_task_ids(env, 0, 100)
    assert sorted(tasks[:64]) == sorted(ids) and len(set(tasks[64:])) == 36
    assert eval_task_ids(env, 0, 10) == eval_task_ids(env, 0, 10) != eval_task_ids(env, 1, 10)


def test_the_summary_counts_the_distinct_tasks():
    summary, trajs = evaluate("r3l/Countdown-v0", ScriptedPolicy(CountdownSolver.for_eval(6)), episodes=6)
    assert summary.distinct_tasks == len({t.task_id for t in trajs}) == 6
    assert "6 distinct tasks" in summary.lines()[0]
