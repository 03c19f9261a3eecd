"""An eval interrupted part-way resumes from its finished batches (r3l_learn/loop/eval_resume.py): the result is
the uninterrupted eval's, bit for bit, with a sampling policy; batches played under another identity, or unreadable
ones, are played again; a training run interrupted in its final eval keeps the finished batches too."""

import json

import pytest
import torch

pytest.importorskip("transformers")

import r3l_learn.loop.evaluate as evaluate_module
from r3l_learn.loop.eval_resume import FinishedBatches, weights_key
from r3l_learn.loop.evaluate import EvaluationInterrupted, evaluate, load_policy
from r3l_learn.policies.models import tiny_model
from wrappers import RolloutConfig, SamplingParams

ENV = "r3ltest/Corridor-v0"
#: sampled replies (temperature 1), so that a batch played again with another seed could not pass for the first
CONFIG = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=6), max_turns=3)
EVAL = dict(episodes=5, batch_size=2, seed=3, config=CONFIG, progress=False)


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny-random", seed=0)


def _counting(monkeypatch, stop_at=None):
    """Count the batches ``evaluate`` plays; with ``stop_at``, Ctrl-C arrives as batch number ``stop_at`` starts."""
    real, calls = evaluate_module.rollout_batch, []

    def counted(*args, **kwargs):
        calls.append(kwargs["seeds"])
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluate_module, "rollout_batch", counted)
    return calls


def _dicts(trajs):
    return [t.to_dict() for t in trajs]


def test_an_interrupted_eval_resumes_at_its_first_unfinished_batch_and_gives_the_whole_evals_result(
    tmp_path, policy, monkeypatch
):
    whole, whole_trajs = evaluate(ENV, policy, **EVAL)
    folder = tmp_path / "eval"
    _counting(monkeypatch, stop_at=3)
    with pytest.raises(EvaluationInterrupted):
        evaluate(ENV, policy, **EVAL, resume=folder, resume_key="w")
    assert sorted(p.name for p in folder.iterdir()) == [
        "batch-00000.json",
        "batch-00000.jsonl",
        "batch-00001.json",
        "batch-00001.jsonl",
        "identity.json",
    ]
    calls = _counting(monkeypatch)
    summary, trajs = evaluate(ENV, policy, **EVAL, resume=folder, resume_key="w")
    assert calls == [[7]]  # only the last batch (episode 4, reset seed 3 + 4) was played again
    assert _dicts(trajs) == _dicts(whole_trajs)
    assert (summary.success_rate, summary.mean_tokens, summary.stop_reasons) == (
        whole.success_rate,
        whole.mean_tokens,
        whole.stop_reasons,
    )
    assert summary.resumed_episodes == 4 and summary.resumed_wall_s > 0 and summary.resumed_cpu_s > 0
    assert summary.seconds >= summary.resumed_wall_s and "earlier, interrupted call" in summary.lines()[0]
    assert not folder.exists()  # the eval is complete: nothing is kept


def test_batches_of_another_identity_or_unreadable_are_played_again(tmp_path, policy, monkeypatch):
    folder = tmp_path / "eval"
    _counting(monkeypatch, stop_at=3)
    with pytest.raises(EvaluationInterrupted):
        evaluate(ENV, policy, **EVAL, resume=folder, resume_key="w")
    # other weights: nothing kept counts
    calls = _counting(monkeypatch, stop_at=2)
    with pytest.raises(EvaluationInterrupted):
        evaluate(ENV, policy, **EVAL, resume=folder, resume_key="other weights")
    assert calls == [[3, 4], [5, 6]]
    assert json.loads((folder / "identity.json").read_text())["key"] == "other weights"
    # the new identity's batch 0 is kept; then a damaged batch 0 is played again, and every batch after it
    calls = _counting(monkeypatch, stop_at=2)
    with pytest.raises(EvaluationInterrupted):
        evaluate(ENV, policy, **EVAL, resume=folder, resume_key="other weights")
    assert calls == [[5, 6], [7]]
    (folder / "batch-00000.jsonl").write_text("not json\n")
    calls = _counting(monkeypatch)
    summary, _ = evaluate(ENV, policy, **EVAL, resume=folder, resume_key="other weights")
    assert calls == [[3, 4], [5, 6], [7]] and summary.resumed_episodes == 0
    # a batch file of another size (e.g. written under another batch size) is not taken either
    kept = FinishedBatches(tmp_path / "k", {"key": 1})
    kept.save(0, [], 1.0, 1.0)
    assert kept.load([2, 2]) == [] and not (tmp_path / "k" / "batch-00000.json").exists()


def test_the_weights_key_names_the_weights():
    model, _ = tiny_model(seed=0)
    same, _ = tiny_model(seed=0)
    assert weights_key(model) == weights_key(same)
    with torch.no_grad():
        next(same.parameters()).view(-1)[0] += 1e-6
    assert weights_key(model) != weights_key(same)


@pytest.mark.slow
def test_a_run_interrupted_in_its_final_eval_resumes_it_from_the_kept_batches(tmp_path, monkeypatch):
    from r3l_learn.loop.metrics import read_metrics
    from r3l_learn.loop.train import TrainConfig, train

    def config(name):
        return TrainConfig(
            env=ENV,
            model="tiny-random",
            algo="grpo",
            steps=1,
            tasks_per_step=1,
            group_size=2,
            max_turns=3,
            max_new_tokens=6,
            actions="constrained",
            eval_episodes=4,
            eval_batch_size=2,
            eval_before=False,
            out_dir=str(tmp_path / name),
            save_final=False,
            tensorboard=False,
            progress=False,
        )

    whole = train(config("whole"))
    calls = _counting(monkeypatch, stop_at=2)  # the final eval's second batch
    assert train(config("cut")).interrupted
    assert (tmp_path / "cut" / "evals" / "step-000001" / "batch-00000.json").is_file()
    calls.clear()
    resumed = train(config("cut"), resume=True)
    assert len(calls) == 1 and resumed.eval_after.resumed_episodes == 2
    assert resumed.eval_after.success_rate == whole.eval_after.success_rate
    assert resumed.eval_after.mean_tokens == whole.eval_after.mean_tokens
    final = [r for r in read_metrics(tmp_path / "cut" / "metrics.jsonl") if "eval/success_rate" in r]
    assert final[-1]["eval/resumed_episodes"] == 2 and final[-1]["eval/cpu_s"] > 0
    assert not (tmp_path / "cut" / "evals" / "step-000001").exists()
