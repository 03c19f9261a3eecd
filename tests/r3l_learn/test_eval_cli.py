"""``r3l eval``: summary lines, JSONL output, and the evaluate() aggregates."""

import pytest

from wrappers import load_jsonl

pytest.importorskip("torch")

from r3l_learn.cli.main import main


def test_eval_cli_writes_trajectories(tmp_path, capsys):
    out = tmp_path / "eval.jsonl"
    argv = ["eval", "--env", "r3ltest/Corridor-v0", "--model", "tiny-random", "--episodes", "3", "--batch-size", "2"]
    argv += ["--actions", "constrained"]
    assert main([*argv, "--split", "valid", "--max-turns", "3", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for needle in ("3 episodes", "success rate", "mean score", "mean turns", "mean tokens", f"trajectories: {out}"):
        assert needle in text
    trajs = list(load_jsonl(out))
    assert len(trajs) == 3
    assert all(t.task_id.startswith("corridor-valid-") for t in trajs)
    assert all(turn.constrained and turn.action in ("left", "right", "wait") for t in trajs for turn in t.turns)


def test_evaluate_summary_matches_trajectories():
    from r3l_learn.loop.evaluate import evaluate
    from r3l_learn.policies.scripted import ScriptedPolicy

    policy = ScriptedPolicy(["<action>right</action>", "nonsense"])
    summary, trajs = evaluate("r3ltest/Corridor-v0", policy, episodes=4, batch_size=3, split="train", progress=False)
    assert summary.episodes == 4 == len(trajs)
    assert summary.success_rate == sum(t.won for t in trajs) / 4
    assert summary.mean_turns == sum(t.num_turns for t in trajs) / 4
    assert 0 < summary.parse_error_rate < 1
    assert sum(summary.stop_reasons.values()) == 4


def test_an_interrupted_eval_cli_continues_with_the_same_command(tmp_path, capsys, monkeypatch):
    import r3l_learn.loop.evaluate as evaluate_module

    argv = ["eval", "--env", "r3ltest/Corridor-v0", "--model", "tiny-random", "--episodes", "3", "--batch-size", "2"]
    argv += ["--max-turns", "3", "--max-new-tokens", "6", "--temperature", "1.0", "--no-progress"]
    whole = tmp_path / "whole.jsonl"
    assert main([*argv, "--out", str(whole)]) == 0
    real, calls = evaluate_module.rollout_batch, []

    def stopped_at_the_second_batch(*args, **kwargs):
        calls.append(kwargs["seeds"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluate_module, "rollout_batch", stopped_at_the_second_batch)
    out = tmp_path / "eval.jsonl"
    assert main([*argv, "--out", str(out)]) == 130
    assert f"continues from the finished batches kept in {out}.batches" in capsys.readouterr().err
    calls.clear()
    assert main([*argv, "--out", str(out)]) == 0
    assert calls == [[2]] and "2 of them played by an earlier, interrupted call" in capsys.readouterr().out
    assert [t.to_dict() for t in load_jsonl(out)] == [t.to_dict() for t in load_jsonl(whole)]
    assert not (tmp_path / "eval.jsonl.batches").exists()
    # --no-resume plays every batch again
    calls.clear()
    assert main([*argv, "--out", str(out)]) == 130
    calls.clear()
    assert main([*argv, "--out", str(out), "--no-resume"]) == 130 and calls == [[0, 1], [2]]
