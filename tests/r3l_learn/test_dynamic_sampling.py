"""Dynamic sampling (DAPO): groups without contrast are replaced by groups of the stream's next tasks until the step
has the groups it asked for, or the cap on rounds is hit; the cost is counted, and a seeded run repeats itself.

The env is the windy corridor with one turn to win: from cell 2 of 3 a step right wins 70 % of the time, and a
task whose number is a multiple of 3 starts at cell 0 or 1, so its groups never win (no contrast)."""

import pytest
import torch

from r3l_learn.algorithms.batch import rows_from_groups
from r3l_learn.algorithms.catalog import resolve_algorithm
from r3l_learn.algorithms.update import LossConfig, signal_rows
from r3l_learn.loop.groups import PlainGroups, groups_with_contrast
from r3l_learn.loop.setup import TaskStream
from r3l_learn.policies.scripted import ScriptedPolicy
from wrappers import RolloutConfig, SamplingParams

GROUP_SIZE = 4
ROLLOUT = RolloutConfig(sampling=SamplingParams(max_new_tokens=64), max_turns=1)
TASKS = [f"corridor-train-{i:06d}" for i in range(5)]  # the corridor's train split


def _grpo_contrast(groups):
    """What the learner asks of a group: whether its rows carry signal under GRPO."""
    rows = rows_from_groups(groups, resolve_algorithm("grpo"))
    found = {r.group for r in signal_rows(rows, LossConfig(objective="ppo_clip", kl_coef=0.001))}
    return [g in found for g in range(len(groups))]


def _sample(action: str, *, wanted: int, max_rounds: int, seed: int = 5):
    builder = PlainGroups(
        "r3ltest/Corridor-v0",
        ScriptedPolicy(lambda _: f"<action>{action}</action>"),
        group_size=GROUP_SIZE,
        rollout=ROLLOUT,
        env_kwargs={"length": 3},
    )
    stream = TaskStream(TASKS, seed=0)
    try:
        sample = groups_with_contrast(
            builder, stream.take, wanted, seed=seed, with_contrast=_grpo_contrast, max_rounds=max_rounds
        )
    finally:
        builder.close()
    return sample, stream


def _spread(group):
    rewards = [t.reward for t in group.trajectories]
    return max(rewards) > min(rewards)


def test_groups_without_contrast_are_replaced_by_fresh_tasks_until_the_step_has_enough():
    sample, stream = _sample("right", wanted=3, max_rounds=10)
    assert len(sample.groups) == 3 and all(_spread(g) for g in sample.groups)
    dropped = [g for g in sample.built if g not in sample.groups]
    assert dropped and not any(_spread(g) for g in dropped)  # the first round had groups without contrast
    assert sample.rounds > 1 and sample.extra_groups == len(sample.built) - 3 > 0
    assert sample.extra_trajectories == GROUP_SIZE * sample.extra_groups
    assert stream.cursor == len(sample.built)  # every task drawn came from the run's stream, in order
    assert [g.task_id for g in sample.built] == TaskStream(TASKS, seed=0).take(stream.cursor)  # the next ones
    metrics = sample.metrics()
    assert metrics["collect/extra_groups"] == sample.extra_groups and metrics["collect/contrast_groups"] == 3
    assert metrics["collect/dropped_groups"] == len(dropped) and metrics["collect/rounds"] == sample.rounds
    again, _ = _sample("right", wanted=3, max_rounds=10)  # the same seed: the same tasks, episodes and choice
    assert [(g.task_id, [t.reward for t in g.trajectories]) for g in again.built] == [
        (g.task_id, [t.reward for t in g.trajectories]) for g in sample.built
    ]


@pytest.mark.parametrize("max_rounds", [1, 3])
def test_the_cap_on_rounds_is_respected_when_no_group_has_contrast(max_rounds):
    sample, stream = _sample("wait", wanted=2, max_rounds=max_rounds)  # waiting never wins: no contrast anywhere
    assert sample.groups == [] and sample.rounds == max_rounds
    assert len(sample.built) == 2 * max_rounds and stream.cursor == 2 * max_rounds
    extra = 2 * (max_rounds - 1)
    assert sample.extra_groups == extra and sample.extra_trajectories == GROUP_SIZE * extra


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="max_rounds"):
        groups_with_contrast(None, lambda k: [], 2, seed=0, with_contrast=_grpo_contrast, max_rounds=0)
    from r3l_learn.loop.train import TrainConfig

    with pytest.raises(ValueError, match="dynamic_sampling_max_rounds must be >= 1"):
        TrainConfig(dynamic_sampling=True, dynamic_sampling_max_rounds=0)


@pytest.mark.slow
def test_a_dynamic_sampling_run_logs_its_cost_and_resumes_exactly(tmp_path):
    """Through ``r3l train --dynamic-sampling``'s config: each step logs what the resampling cost, the checkpoint's
    cursor counts the extra tasks, and a run resumed after step 1 ends with the weights of a straight run."""
    from r3l_learn.cli.main import build_parser
    from r3l_learn.cli.train_args import config_from_args
    from r3l_learn.loop.checkpoints import latest_checkpoint, load_checkpoint
    from r3l_learn.loop.metrics import read_metrics
    from r3l_learn.loop.train import train

    def config(out, steps):
        argv = ["train", "--env", "r3ltest/Corridor-v0", "--env-kwargs", "length=3", "--model", "tiny-random"]
        argv += ["--algo", "grpo", "--steps", str(steps), "--tasks-per-step", "2", "--group-size", "4"]
        argv += ["--max-turns", "1", "--max-new-tokens", "8", "--actions", "constrained", "--lr", "1e-2"]
        argv += ["--eval-episodes", "0", "--out-dir", str(out), "--checkpoint-every", "1", "--no-save-final"]
        argv += ["--no-tensorboard", "--no-progress", "--dynamic-sampling", "--dynamic-sampling-max-rounds", "4"]
        return config_from_args(build_parser().parse_args(argv))

    straight = config(tmp_path / "a", 2)
    assert straight.dynamic_sampling and straight.dynamic_sampling_max_rounds == 4
    train(straight)
    train(config(tmp_path / "b", 1))
    train(config(tmp_path / "b", 2), resume=True)
    records = [r for r in read_metrics(tmp_path / "a" / "metrics.jsonl") if "train/reward" in r]
    assert len(records) == 2
    for r in records:
        assert 1 <= r["collect/rounds"] <= 4 and r["collect/contrast_groups"] <= 2
        assert r["collect/extra_trajectories"] == 4 * r["collect/extra_groups"]
        assert r["train/trajectories"] == 4 * (2 + r["collect/extra_groups"])  # every group collected
    assert any(r["collect/extra_groups"] for r in records)  # some step resampled
    a = load_checkpoint(latest_checkpoint(tmp_path / "a" / "checkpoints"))
    b = load_checkpoint(latest_checkpoint(tmp_path / "b" / "checkpoints"))
    assert a["cursor"] == b["cursor"] == 4 + sum(r["collect/extra_groups"] for r in records)
    for name in a["model"]:
        torch.testing.assert_close(a["model"][name], b["model"][name], rtol=0, atol=0)
