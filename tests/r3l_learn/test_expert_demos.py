"""The oracle-privilege control (issue 15 item 6): plain groups whose N trajectories include ``expert_demos``
that play the env's expert plan, from PlainGroups through TrainConfig and ``r3l train --expert-demos`` to a
training step, on real TextWorld games."""

import pytest
import torch

from r3l_learn.cli.main import build_parser
from r3l_learn.cli.train_args import config_from_args
from r3l_learn.loop.checkpoints import latest_checkpoint, load_checkpoint
from r3l_learn.loop.groups import PlainGroups, make_group_builder
from r3l_learn.loop.train import TrainConfig, train
from wrappers import RolloutConfig, SamplingParams
from wrappers.retry.expert import EXPERT_KIND, NoExpertPlanError

TW = "r3l/TextWorld-v0"
TW_KWARGS = {"game_type": "coin_collector", "difficulty": 1, "max_tasks": 2}
TASKS = ["tw-coin_collector-d1-train-00000", "tw-coin_collector-d1-train-00001"]
SHORT = SamplingParams(max_new_tokens=8)


def test_a_group_holds_group_size_trajectories_of_which_expert_demos_play_the_plan(tiny_policy):
    builder = PlainGroups(
        TW, tiny_policy, group_size=4, rollout=RolloutConfig(SHORT, max_turns=2), env_kwargs=TW_KWARGS, expert_demos=3
    )
    try:
        groups = builder.collect(TASKS, seed=7)
    finally:
        builder.close()
    assert [g.task_id for g in groups] == TASKS
    for group in groups:
        kinds = [t.kind for t in group.trajectories]
        assert kinds == ["base"] + [EXPERT_KIND] * 3 and group.metadata["expert_demos"] == 3
        assert {t.task_id for t in group.trajectories} == {group.task_id}
        experts = group.trajectories[1:]
        assert all(t.won and t.turns[0].action == "take coin" for t in experts)
        assert len({t.id for t in group.trajectories}) == 4  # one episode each (reset seeds g * N + j)


def test_no_expert_demos_keeps_plain_groups_as_they_were(tiny_policy):
    rollout = RolloutConfig(SHORT, max_turns=1)
    builder = PlainGroups(TW, tiny_policy, group_size=2, rollout=rollout, env_kwargs=TW_KWARGS)
    (group,) = builder.collect(TASKS[:1], seed=7)
    builder.close()
    assert [t.kind for t in group.trajectories] == ["base", "base"] and "expert_demos" not in group.metadata


def test_expert_demos_out_of_range_or_without_an_expert_are_clear_errors(tiny_policy):
    for bad in (-1, 4):
        with pytest.raises(ValueError, match=r"expert_demos must be in \[0, group_size\)"):
            PlainGroups(TW, tiny_policy, group_size=4, env_kwargs=TW_KWARGS, expert_demos=bad)
    with pytest.raises(NoExpertPlanError, match="declares no expert plan"):
        PlainGroups("r3ltest/Corridor-v0", tiny_policy, group_size=4, expert_demos=1)
    with pytest.raises(ValueError, match="oracle reflector"):
        make_group_builder(
            TW, tiny_policy, reflect_retry=True, group_size=4, rollout=RolloutConfig(), env_kwargs=TW_KWARGS,
            expert_demos=1,
        )  # fmt: skip


def _config(tmp_path, **overrides):
    values = dict(
        env=TW,
        env_kwargs=TW_KWARGS,
        model="tiny-random",
        algo="raft",
        steps=1,
        tasks_per_step=2,
        group_size=4,
        expert_demos=2,
        max_turns=2,
        max_new_tokens=8,
        lr=1e-2,
        eval_episodes=0,
        out_dir=str(tmp_path / "run"),
        save_final=False,
        tensorboard=False,
        progress=False,
    )
    values.update(overrides)
    return TrainConfig(**values)


def test_the_config_validates_expert_demos(tmp_path):
    assert _config(tmp_path, algo="grpo").expert_demos == 2
    assert _config(tmp_path, algo="r3l", ablations=("no_reflect_retry",)).expert_demos == 2  # plain groups too
    assert TrainConfig().expert_demos == 0
    for overrides, message in (
        ({"expert_demos": 4}, r"expert_demos must be in \[0, group_size\) = \[0, 4\)"),
        ({"expert_demos": -1}, r"expert_demos must be in"),
        ({"algo": "r3l", "reflector": "oracle"}, "reflect-retry groups"),
        ({"env": "r3ltest/Corridor-v0", "env_kwargs": {}}, "declares none"),
    ):
        with pytest.raises(ValueError, match=message):
            _config(tmp_path, **overrides)


def test_the_cli_flag_comes_from_the_config_field():
    config = config_from_args(build_parser().parse_args(["train", "--algo", "raft", "--expert-demos", "3"]))
    assert config.expert_demos == 3
    help_text = build_parser()._subparsers._group_actions[0].choices["train"].format_help()
    assert "--expert-demos" in help_text and "privileged control" in help_text


@pytest.mark.slow
def test_one_raft_step_trains_on_groups_with_expert_demonstrations(tmp_path):
    seen = []
    result = train(_config(tmp_path), on_step=[lambda info: seen.append(info.groups)])
    (groups,) = seen
    assert len(groups) == 2 and all(len(g.trajectories) == 4 for g in groups)
    experts = [t for g in groups for t in g.trajectories if t.kind == EXPERT_KIND]
    assert len(experts) == 4 and all(t.won for t in experts)
    metrics = result.last_metrics
    assert metrics["train/trajectories"] == 8 and not metrics["skipped"]
    # RAFT trains on the successes: at least the expert tokens (each "<action>take coin</action>")
    assert metrics["train/target_tokens"] >= sum(sum(t.loss_mask) for t in experts) > 0
    assert metrics["loss/policy"] is not None


@pytest.mark.slow
def test_a_checkpoint_from_before_new_config_fields_resumes_as_it_ran(tmp_path):
    """A checkpoint written before ``expert_demos`` and ``aux_mean`` existed ran without expert demonstrations and
    with the aux term in its own mean: resuming it so must work (it failed once: the missing field read as None,
    a "different configuration"), and resuming it as another run must not."""
    old = dict(algo="grpo", expert_demos=0, aux_mean="separate", checkpoint_every=1)

    def forget_the_new_fields():
        path = latest_checkpoint(tmp_path / "run" / "checkpoints")
        state = load_checkpoint(path)
        del state["config"]["expert_demos"], state["config"]["aux_mean"]
        torch.save(state, path)

    train(_config(tmp_path, **old, steps=1))
    forget_the_new_fields()
    assert train(_config(tmp_path, **old, steps=2), resume=True).steps_done == 2
    forget_the_new_fields()
    with pytest.raises(Exception, match="expert_demos"):
        train(_config(tmp_path, **{**old, "expert_demos": 1}, steps=3), resume=True)
    # GRPO trains no aux rows, so aux_mean's new default makes no other run (see test_algorithms for R³L)
    assert train(_config(tmp_path, **{**old, "aux_mean": "shared"}, steps=3), resume=True).steps_done == 3
