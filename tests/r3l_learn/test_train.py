"""The learner loop end to end with the tiny model on the corridor env (constrained actions): resume
determinism, skipped non-finite steps, config validation, outputs, and the ``r3l train`` CLI."""

import json

import pytest
import torch

import r3l_learn.algorithms.update as update_module
from r3l_learn.cli.main import main
from r3l_learn.loop.checkpoints import latest_checkpoint, load_checkpoint
from r3l_learn.loop.metrics import read_metrics
from r3l_learn.loop.train import TrainConfig, TrainingDivergedError, train
from r3l_learn.policies.models import tiny_model
from wrappers import load_jsonl

pytestmark = pytest.mark.slow


def _config(tmp_path, **overrides):
    values = dict(
        env="r3ltest/Corridor-v0",
        model="tiny-random",
        algo="r3l",
        reflector="oracle",
        steps=2,
        tasks_per_step=1,
        group_size=2,
        max_turns=4,
        max_new_tokens=8,
        actions="constrained",
        lr=1e-2,
        eval_episodes=0,
        out_dir=str(tmp_path / "run"),
        checkpoint_every=1,
        save_final=False,
        tensorboard=False,
        progress=False,
    )
    values.update(overrides)
    return TrainConfig(**values)


def _weights(out_dir):
    return load_checkpoint(latest_checkpoint(f"{out_dir}/checkpoints"))["model"]


@pytest.mark.parametrize("algo", ["r3l", "grpo"])
def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path, algo):
    short = {"env_kwargs": {"length": 3}, "max_turns": 8, "tasks_per_step": 2}  # groups with contrast: it trains
    straight = _config(tmp_path / "a", algo=algo, steps=3, **short)
    train(straight)
    first = _config(tmp_path / "b", algo=algo, steps=1, **short)
    train(first)
    resumed = train(_config(tmp_path / "b", algo=algo, steps=3, **short), resume=True)
    assert resumed.steps_done == 3
    a, b = _weights(straight.out_dir), _weights(first.out_dir)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)
    initial = dict(tiny_model(seed=straight.seed)[0].named_parameters())
    assert any(not torch.equal(a[name], initial[name].detach()) for name in a)  # it did train
    steps = [r["step"] for r in read_metrics(f"{first.out_dir}/metrics.jsonl") if "train/reward" in r]
    assert steps == [1, 2, 3]


def test_skipping_the_initial_eval_changes_nothing_else(tmp_path):
    """A sweep evaluates the initial model once and turns ``eval_before`` off in its other runs: the training
    must not depend on whether that eval ran (it draws from its own seeded streams)."""
    with_eval = train(_config(tmp_path / "a", eval_episodes=2, eval_batch_size=2))
    without = train(_config(tmp_path / "b", eval_episodes=2, eval_batch_size=2, eval_before=False))
    assert with_eval.eval_before is not None and without.eval_before is None
    a, b = _weights(tmp_path / "a" / "run"), _weights(tmp_path / "b" / "run")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)
    after = [
        (e.success_rate, e.mean_score, e.mean_turns, e.mean_tokens) for e in (with_eval.eval_after, without.eval_after)
    ]
    assert after[0] == after[1]


def test_resume_refuses_another_configuration_and_a_fresh_run_refuses_old_checkpoints(tmp_path):
    train(_config(tmp_path, steps=1))
    with pytest.raises(Exception, match="lr"):
        train(_config(tmp_path, steps=2, lr=1e-3), resume=True)
    with pytest.raises(Exception, match="--resume"):
        train(_config(tmp_path, steps=2))


def test_resuming_a_finished_run_says_so_and_reuses_its_final_eval(tmp_path, caplog):
    config = _config(tmp_path, steps=1, eval_episodes=2, eval_batch_size=2)
    done = train(config)

    def evals():
        return [r["step"] for r in read_metrics(f"{config.out_dir}/metrics.jsonl") if "eval/success_rate" in r]

    before = evals()
    again = train(config, resume=True)
    assert again.already_finished and again.steps_done == 1
    assert evals() == before == [0, 1]  # the final eval was not run (nor logged) again
    assert again.eval_after == done.eval_after and again.eval_before == done.eval_before
    assert "already finished" in caplog.text and "not redone" in caplog.text
    more = train(_config(tmp_path, steps=2, eval_episodes=2, eval_batch_size=2), resume=True)  # --steps raised
    assert not more.already_finished and more.steps_done == 2 and evals() == [0, 1, 2]


def test_non_finite_steps_are_skipped_then_the_run_stops(tmp_path, monkeypatch):
    real = update_module.accumulate_gradients

    def poisoned(model, *args, **kwargs):
        stats = real(model, *args, **kwargs)
        first = next(model.parameters())
        first.grad = torch.full_like(first, float("nan"))
        return stats

    monkeypatch.setattr(update_module, "accumulate_gradients", poisoned)
    # a corridor short enough that the tiny model's groups have contrast, so every step computes an update
    config = _config(
        tmp_path, steps=5, max_bad_steps=3, weight_decay=0.0, env_kwargs={"length": 3}, max_turns=8, tasks_per_step=2
    )
    with pytest.raises(TrainingDivergedError, match="3 consecutive"):
        train(config)
    records = read_metrics(f"{config.out_dir}/metrics.jsonl")
    assert [r["skipped"] for r in records if "skipped" in r] == [True, True, True]
    initial, _ = tiny_model(seed=config.seed)  # what load_policy("tiny-random") builds
    for name, value in _weights(config.out_dir).items():  # the checkpoint after two skipped steps
        torch.testing.assert_close(value, dict(initial.named_parameters())[name].detach(), rtol=0, atol=0)


def test_config_errors_say_how_to_fix_them():
    with pytest.raises(ValueError) as err:
        TrainConfig(env="r3l/Countdwn-v0", algo="ppo", group_size=3, lr=0, ablations=("no_pivot_credit",))
    text = str(err.value)
    for expected in ("did you mean", "r3l/Countdown-v0", "algo must be one of", "lr must be > 0", "ablations switch"):
        assert expected in text


def test_cli_trains_writes_outputs_and_prints_the_evals(tmp_path, capsys):
    out = tmp_path / "cli"
    code = main(
        [
            "train",
            "--env",
            "r3ltest/Corridor-v0",
            "--model",
            "tiny-random",
            "--algo",
            "r3l",
            "--no-amplification",
            "--reflector",
            "oracle",
            "--steps",
            "1",
            "--tasks-per-step",
            "1",
            "--group-size",
            "2",
            "--max-turns",
            "3",
            "--actions",
            "constrained",
            "--eval-episodes",
            "2",
            "--no-tensorboard",
            "--no-progress",
            "--out-dir",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "eval before training" in printed and "eval after training" in printed
    config = json.loads((out / "config.json").read_text())
    assert config["ablations"] == ["no_amplification"] and config["steps"] == 1
    assert (out / "final" / "config.json").is_file()
    assert (out / "plots" / "reward.png").is_file()
    assert (out / "summary.txt").read_text().strip()


def test_ctrl_c_saves_the_last_completed_step_and_resume_continues(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    out = tmp_path / "interrupted"
    tests_dir = Path(__file__).resolve().parents[1]
    script = (
        f"import sys; import wrappers; sys.path.append({str(tests_dir)!r}); import corridor; corridor.register(); "
        "from r3l_learn.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    args = ["train", "--env", "r3ltest/Corridor-v0", "--model", "tiny-random", "--algo", "opmd", "--steps", "200"]
    args += ["--tasks-per-step", "1", "--group-size", "2", "--max-turns", "3", "--actions", "constrained"]
    args += ["--eval-episodes", "0", "--checkpoint-every", "0", "--no-tensorboard", "--no-progress"]
    args += ["--no-save-final", "--out-dir", str(out)]
    proc = subprocess.Popen([sys.executable, "-c", script, *args], env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        metrics = out / "metrics.jsonl"
        if metrics.is_file() and len(read_metrics(metrics)) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    state = load_checkpoint(latest_checkpoint(out / "checkpoints"))
    logged = [r["step"] for r in read_metrics(out / "metrics.jsonl")]
    assert state["step"] >= 2 and logged[-1] == state["step"]  # every completed step is logged, then saved
    # the same command plus --resume (the saved config.json supplies everything else)
    again = subprocess.run(
        [sys.executable, "-c", script, "train", "--resume", "--out-dir", str(out), "--steps", str(state["step"] + 1)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=False,
    )
    assert again.returncode == 0
    assert load_checkpoint(latest_checkpoint(out / "checkpoints"))["step"] == state["step"] + 1


def test_resume_makes_the_periodic_eval_an_interruption_skipped(tmp_path):
    config = _config(tmp_path, steps=1, eval_every=1, eval_episodes=2, eval_before=False)
    train(config)
    metrics = tmp_path / "run" / "metrics.jsonl"
    evals = [r for r in read_metrics(metrics) if "eval/success_rate" in r]
    assert [r["step"] for r in evals] == [1]
    # as if stopped between step 1 and its eval: drop the eval record, then resume for one more step
    kept = [r for r in read_metrics(metrics) if "eval/success_rate" not in r]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in kept))
    (tmp_path / "run" / "evals.json").unlink(missing_ok=True)
    # a smaller micro-batch (memory only: the loss does not depend on it) may differ on resume
    resumed = _config(tmp_path, steps=2, eval_every=1, eval_episodes=2, eval_before=False, micro_batch_size=1)
    train(resumed, resume=True)
    evals = [r["step"] for r in read_metrics(metrics) if "eval/success_rate" in r]
    assert evals == [1, 2]  # the missed point, then the final eval


def test_a_run_stopped_before_its_final_eval_makes_it_on_resume(tmp_path):
    config = _config(tmp_path, steps=1, eval_episodes=2, eval_batch_size=2)
    done = train(config)
    # each eval's held-out episodes are kept, and they are the ones its summary counts
    played = list(load_jsonl(tmp_path / "run" / "evals" / "step-000001.jsonl"))
    assert len(played) == 2 and len(list(load_jsonl(tmp_path / "run" / "evals" / "step-000000.jsonl"))) == 2
    assert sum(t.won for t in played) / 2 == done.eval_after.success_rate
    assert not (tmp_path / "run" / "evals" / "step-000001").exists()
    metrics = tmp_path / "run" / "metrics.jsonl"
    # as if stopped after the last step's checkpoint, before the final eval: drop that eval's record
    kept = [r for r in read_metrics(metrics) if not ("eval/success_rate" in r and r["step"] == 1)]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in kept))
    (tmp_path / "run" / "evals.json").unlink(missing_ok=True)
    again = train(config, resume=True)
    assert not again.already_finished and again.steps_done == 1
    assert [r["step"] for r in read_metrics(metrics) if "eval/success_rate" in r] == [0, 1]
    assert again.eval_after is not None and again.eval_after.success_rate == done.eval_after.success_rate


def test_ctrl_c_during_the_final_eval_is_an_interruption_that_resume_completes(tmp_path, monkeypatch):
    """Ctrl-C while the final eval runs ends the run as any interruption does (checkpoint kept, ``interrupted``, no
    traceback, no partial eval recorded as the result), and ``--resume`` then completes the eval."""
    import r3l_learn.loop.train as train_module
    from r3l_learn.loop.evaluate import EvaluationInterrupted

    real = train_module.evaluate

    def interrupted_after_training(*args, **kwargs):
        summary, trajs = real(*args, **kwargs)
        if kwargs["desc"] == "eval after training":  # as evaluate does on Ctrl-C, with what it finished
            raise EvaluationInterrupted(summary, trajs[:1])
        return summary, trajs

    monkeypatch.setattr(train_module, "evaluate", interrupted_after_training)
    config = _config(tmp_path, steps=1, eval_episodes=2, eval_batch_size=2)
    stopped = train(config)
    assert stopped.interrupted and stopped.eval_after is None
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert [r["step"] for r in read_metrics(metrics) if "eval/success_rate" in r] == [0]
    assert load_checkpoint(latest_checkpoint(tmp_path / "run" / "checkpoints"))["step"] == 1
    monkeypatch.setattr(train_module, "evaluate", real)
    again = train(config, resume=True)
    assert not again.interrupted and again.eval_after is not None
    assert [r["step"] for r in read_metrics(metrics) if "eval/success_rate" in r] == [0, 1]


def test_eval_seed_gives_every_seed_the_same_held_out_tasks(tmp_path, monkeypatch):
    """A sweep that sets ``eval_seed`` evaluates each of its seeds on the same held-out tasks (its initial model
    then needs one eval for all of them); without it each seed has its own, ``10000 + seed``."""
    import r3l_learn.loop.train as train_module

    seeds, real = [], train_module.evaluate

    def spy(*args, **kwargs):
        seeds.append(kwargs["seed"])
        return real(*args, **kwargs)

    monkeypatch.setattr(train_module, "evaluate", spy)
    evals = {"steps": 1, "eval_episodes": 2, "eval_batch_size": 2, "checkpoint_every": 0}
    for name, seed, eval_seed in (("a", 0, 7), ("b", 1, 7), ("c", 1, None)):
        train(_config(tmp_path / name, seed=seed, eval_seed=eval_seed, **evals))
    assert seeds == [7, 7, 7, 7, 10_001, 10_001]  # before and after training, per run
