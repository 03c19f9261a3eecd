"""Trajectories: lossless JSONL round-trip and a loss mask that covers exactly the generated tokens."""

import gymnasium as gym
import pytest

from wrappers import RolloutConfig, Sample, TrajectoryGroup, Turn, load_jsonl, rollout, save_jsonl, to_dataset

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def trajectory():
    from r3l_learn.scripted import ScriptedPolicy

    replies = ["<think>east</think> <action>right</action>", "garbage \ud800\x00", "<action>left</action>"]
    env = gym.make("r3ltest/Corridor-v0")
    traj = rollout(env, ScriptedPolicy(replies), RolloutConfig(keep_checkpoints=True, max_turns=6), seed=3)
    # awkward values every writer must keep exactly
    traj.turns[0].info["ratio"] = 0.1 + 0.2
    traj.turns[0].info["nested"] = {"a": [1, 2.5, None, True], "é": "\u2603"}
    traj.metadata["note"] = "\ud83d lone surrogate"
    return traj


def test_jsonl_round_trip_is_lossless(tmp_path, trajectory):
    group = TrajectoryGroup(
        env_id=trajectory.env_id,
        task_id=trajectory.task_id,
        trajectories=[trajectory, trajectory],
        samples=[Sample(kind="reflection", token_ids=[1, 2, 3], loss_mask=[0, 1, 1], metadata={"x": -0.0})],
        metadata={"alpha": 3.0},
    )
    path = tmp_path / "out" / "groups.jsonl"
    assert save_jsonl(path, [group, trajectory]) == 2
    loaded_group, loaded_traj = list(load_jsonl(path))
    assert loaded_traj == trajectory
    assert loaded_group == group
    assert all(t.checkpoint is not None for t in loaded_traj.turns)
    assert loaded_traj.turns[1].checkpoint.digest == trajectory.turns[1].checkpoint.digest
    assert not list(path.parent.glob(".*partial"))


def test_unknown_record_type_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type": "nonsense"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: unknown record type"):
        list(load_jsonl(path))


def test_loss_mask_covers_exactly_the_generated_tokens(trajectory):
    t = trajectory
    assert len(t.token_ids) == len(t.loss_mask) == len(t.logprobs)
    covered = set()
    for turn in t.turns:
        start, end = turn.span
        assert t.token_ids[start:end] == turn.token_ids
        assert t.logprobs[start:end] == turn.logprobs
        covered.update(range(start, end))
    assert {i for i, m in enumerate(t.loss_mask) if m} == covered
    assert sum(t.loss_mask) == t.num_tokens


def test_turn_round_trip_without_checkpoint():
    turn = Turn(observation="o", response="r", action=None, parse_error="the reply has no <action>", span=(3, 5))
    assert Turn.from_dict(turn.to_dict()) == turn


def test_to_dataset(trajectory):
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install datasets"):
            to_dataset([trajectory])
        return
    ds = to_dataset([TrajectoryGroup(trajectory.env_id, trajectory.task_id, [trajectory, trajectory])])
    assert ds.num_rows == 2 and ds[0]["token_ids"] == trajectory.token_ids
