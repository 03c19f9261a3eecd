"""Trajectories: lossless, versioned JSONL round-trip, typed errors for unreadable records, and an agent mask
that covers exactly the generated tokens."""

import json

import gymnasium as gym
import pytest

from wrappers import RolloutConfig, Sample, TrajectoryGroup, Turn, load_jsonl, rollout, save_jsonl, to_dataset
from wrappers.data.trajectory import FORMAT_VERSION, DataFormatError

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def trajectory():
    from r3l_learn.policies.scripted import ScriptedPolicy

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
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["version"] for r in records] == [FORMAT_VERSION] * 2
    assert records[0]["trajectories"][0]["id"] == trajectory.id and len(trajectory.id) == 32


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"type": "nonsense"}', "unknown record type 'nonsense'"),
        ("[1, 2]", "unknown record type None"),
        ('{"type": "sample", "kind": "x", "token_ids": [1]', "not a JSON record"),
        ('{"type": "sample", "version": 99, "kind": "x", "token_ids": [1], "loss_mask": [1]}', "upgrade to read"),
        ('{"type": "sample", "version": 2, "kind": "x"}', "missing or unknown fields"),
        ('{"type": "trajectory", "version": 2, "env_id": "e", "task_id": "t", "task": "", "colour": 1}', "unknown"),
    ],
)
def test_unreadable_records_are_typed_errors_naming_the_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n" + line + "\n")
    with pytest.raises(DataFormatError, match=r"cannot read .*bad\.jsonl line 2: .*" + message.replace("(", r"\(")):
        list(load_jsonl(path))


def test_agent_mask_covers_exactly_the_generated_tokens(trajectory):
    t = trajectory
    assert len(t.token_ids) == len(t.agent_mask) == len(t.loss_mask) == len(t.behavior_logprobs)
    covered = set()
    for turn in t.turns:
        start, end = turn.span
        assert t.token_ids[start:end] == turn.token_ids
        assert t.behavior_logprobs[start:end] == turn.behavior_logprobs
        assert not turn.guided  # a plain rollout generates from its own sequence
        covered.update(range(start, end))
    assert {i for i, m in enumerate(t.agent_mask) if m} == covered
    assert t.loss_mask == t.agent_mask and sum(t.agent_mask) == t.num_tokens  # no builder chose otherwise
    assert t.guided_mask() == [0] * len(t.token_ids)
    (seq,) = t.sequences()
    assert seq == (t.token_ids, t.agent_mask, t.loss_mask, t.behavior_logprobs, t.guided_mask())


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
    assert ds[0]["agent_mask"] == trajectory.agent_mask and ds[0]["behavior_logprobs"] == trajectory.behavior_logprobs
    assert ds[0]["id"] == trajectory.id and ds[0]["base_id"] is None
