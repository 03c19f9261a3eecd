"""``train()``'s extension points: ``on_step`` callbacks (the metrics hook benchmarks use instead of patching the
loop) and a collection backend passed in (``collector=``), which the caller keeps."""

import pytest
import torch

from r3l_learn.loop.checkpoints import latest_checkpoint, load_checkpoint
from r3l_learn.loop.metrics import read_metrics
from r3l_learn.loop.train import StepInfo, TrainConfig, train
from wrappers.collectors.local import LocalCollector

pytestmark = pytest.mark.slow


def _config(out, **overrides):
    values = dict(
        env="r3ltest/Corridor-v0",
        model="tiny-random",
        algo="grpo",
        steps=2,
        tasks_per_step=1,
        group_size=2,
        max_turns=3,
        actions="constrained",
        lr=1e-2,
        eval_episodes=0,
        out_dir=str(out),
        checkpoint_every=0,
        save_final=False,
        tensorboard=False,
        progress=False,
    )
    values.update(overrides)
    return TrainConfig(**values)


def test_on_step_callbacks_see_every_step_and_their_metrics_are_logged(tmp_path):
    seen: list[StepInfo] = []

    def count(info: StepInfo):
        seen.append(info)
        return {"bench/trajectories": sum(len(g.trajectories) for g in info.groups)}

    def observe(info: StepInfo):  # returns nothing: only watches
        assert "bench/trajectories" not in info.metrics  # each callback sees the learner's own metrics

    config = _config(tmp_path / "run", steps=3)
    result = train(config, on_step=[count, observe])
    assert [info.step for info in seen] == [1, 2, 3]
    assert all(len(info.groups) == config.tasks_per_step and "train/reward" in info.metrics for info in seen)
    records = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "train/reward" in r]
    assert [r["bench/trajectories"] for r in records] == [config.group_size] * 3
    assert result.last_metrics["bench/trajectories"] == config.group_size


def test_a_callback_may_not_overwrite_what_the_step_logs(tmp_path):
    with pytest.raises(ValueError, match="train/reward"):
        train(_config(tmp_path / "run", steps=1), on_step=[lambda info: {"train/reward": 1.0}])


def test_train_on_a_collector_passed_in_equals_the_default_and_leaves_it_open(tmp_path):
    default = train(_config(tmp_path / "a"))
    with LocalCollector("r3ltest/Corridor-v0", env_kwargs={"split": "train"}, workers=1) as collector:
        given = train(_config(tmp_path / "b"), collector=collector)
        assert len(collector) == 2  # its envs played the episodes
        collector.local_env(0).reset(seed=0)  # and are still open: the caller closes them
    assert given.last_metrics["train/reward"] == default.last_metrics["train/reward"]
    a, b = (load_checkpoint(latest_checkpoint(r.out_dir / "checkpoints"))["model"] for r in (default, given))
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)


def test_a_collector_of_another_env_is_refused(tmp_path):
    other = LocalCollector("r3ltest/ReplayCorridor-v0", workers=1)
    with other, pytest.raises(ValueError, match="the collector runs r3ltest/ReplayCorridor-v0"):
        train(_config(tmp_path / "run"), collector=other)
