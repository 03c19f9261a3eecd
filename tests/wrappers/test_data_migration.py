"""Files of older format versions load as the current one. Format 1 (written before the data model had a
version: tests/fixtures/data_v1): ids and base links instead of positions, the agent mask beside the training mask,
each turn's guided flag, and sequences that end with the last reply. Format 3: one name for behaviour log-probs
and one place for the guidance."""

import json
from pathlib import Path

import pytest

from wrappers import Trajectory, TrajectoryGroup, load_jsonl, save_jsonl
from wrappers.data.trajectory import FORMAT_VERSION

V1 = Path(__file__).parents[1] / "fixtures" / "data_v1" / "groups_v1.jsonl"


@pytest.fixture(scope="module")
def raw():
    return [json.loads(line) for line in V1.read_text().splitlines()]


@pytest.fixture(scope="module")
def loaded():
    return list(load_jsonl(V1))


def test_the_fixture_is_format_1(raw):
    assert all("version" not in r for r in raw)
    retry = raw[0]["trajectories"][1]
    assert retry["metadata"]["base_index"] == 0 and retry["metadata"]["guided_logprobs"] is True


def test_v1_group_loads_with_ids_and_base_links(raw, loaded):
    group = loaded[0]
    assert isinstance(group, TrajectoryGroup) and [t.kind for t in group.trajectories] == ["base", "retry", "base"]
    base, retry, other = group.trajectories
    assert len({t.id for t in group.trajectories}) == 3
    assert retry.base_id == base.id and base.base_id is None and other.base_id is None
    assert all("base_index" not in t.metadata and "guided_logprobs" not in t.metadata for t in group.trajectories)
    # the link survives filtering and reordering, which the old positional index did not
    kept = TrajectoryGroup(group.env_id, group.task_id, [retry, other][::-1])
    kept.trajectories.append(base)
    assert kept.by_id()[retry.base_id] is base
    # the same file gives the same ids
    assert [t.id for t in next(iter(load_jsonl(V1))).trajectories] == [t.id for t in group.trajectories]
    assert len(group.samples) == 2 and group.metadata == raw[0]["metadata"]


def test_v1_masks_and_guided_turns(raw, loaded):
    group = loaded[0]
    for old, traj in zip(raw[0]["trajectories"], group.trajectories, strict=True):
        assert traj.token_ids == old["token_ids"] and traj.loss_mask == old["loss_mask"]  # nothing to trim here
        assert traj.behavior_logprobs == old["logprobs"]
        assert sum(traj.agent_mask) == traj.num_tokens
        for turn in traj.turns:
            assert all(traj.agent_mask[turn.span[0] : turn.span[1]])
    base, retry, _ = group.trajectories
    p = retry.pivot
    assert p == 1 and retry.guidance and "guidance" not in retry.metadata
    assert [t.guided for t in retry.turns] == [False] * p + [True] * (retry.num_turns - p)
    assert not any(t.guided for t in base.turns)
    # pivotal credit had overwritten loss_mask: the agent mask now keeps what it removed
    assert base.loss_mask != base.agent_mask and sum(base.agent_mask) - sum(base.loss_mask) == len(
        base.turns[0].token_ids
    )
    guided = retry.guided_mask()
    assert sum(guided) == sum(len(t.token_ids) for t in retry.turns[p:])


def test_v1_context_length_trajectory_ends_with_its_last_reply(raw, loaded):
    old, traj = raw[1], loaded[1]
    assert isinstance(traj, Trajectory) and traj.stop_reason == "context_length"
    assert old["messages"][-1]["role"] == "user"  # format 1 kept the prompt that did not fit
    last = traj.turns[-1]
    assert len(traj.token_ids) == last.span[1] < len(old["token_ids"])
    assert traj.token_ids == old["token_ids"][: last.span[1]] and traj.messages == old["messages"][:-1]
    assert len(traj.agent_mask) == len(traj.loss_mask) == len(traj.behavior_logprobs) == len(traj.token_ids)


def test_v1_windowed_trajectory_keeps_its_training_sequences(raw, loaded):
    old, traj = raw[2], loaded[2]
    assert traj.windowed and traj.agent_mask == old["loss_mask"] and traj.token_ids == old["token_ids"]
    for turn, seq in zip(old["turns"], traj.sequences(), strict=True):
        assert seq.token_ids == turn["prompt_ids"] + turn["token_ids"]
        assert seq.behavior_logprobs == [0.0] * len(turn["prompt_ids"]) + turn["logprobs"]


def test_v1_files_are_rewritten_as_the_current_version(loaded, tmp_path):
    path = tmp_path / "v2.jsonl"
    save_jsonl(path, loaded)
    assert {json.loads(line)["version"] for line in path.read_text().splitlines()} == {FORMAT_VERSION}
    assert list(load_jsonl(path)) == loaded


def as_format_3(record: dict) -> dict:
    """A current group record as format 3 wrote it: a turn's ``logprobs`` and ``logprob_context``, the guidance in
    the trajectory's metadata."""

    def turn(t: dict) -> dict:
        out = {k: v for k, v in t.items() if k not in ("behavior_logprobs", "guided")}
        return {**out, "logprobs": t["behavior_logprobs"], "logprob_context": "guided" if t["guided"] else "sequence"}

    def trajectory(t: dict) -> dict:
        out = {k: v for k, v in t.items() if k != "guidance"}
        meta = {**t["metadata"], "guidance": t["guidance"]} if t["kind"] == "retry" else t["metadata"]
        return {**out, "version": 3, "metadata": meta, "turns": [turn(x) for x in t["turns"]]}

    samples = [{**s, "version": 3} for s in record["samples"]]
    return {**record, "version": 3, "trajectories": [trajectory(t) for t in record["trajectories"]], "samples": samples}


def test_format_3_files_load_with_one_name_for_log_probs_and_guidance(loaded, tmp_path):
    group = loaded[0]
    retry = group.trajectories[1]
    assert retry.guidance and any(t.guided for t in retry.turns)  # the case the upgrade must carry over
    old = as_format_3(group.to_dict())
    assert "guidance" in old["trajectories"][1]["metadata"] and "logprobs" in old["trajectories"][1]["turns"][0]
    path = tmp_path / "v3.jsonl"
    path.write_text(json.dumps(old) + "\n")
    (again,) = load_jsonl(path)
    assert again.to_dict() == group.to_dict()
    assert TrajectoryGroup.from_dict(old).to_dict() == group.to_dict()  # the export's path: from_dict upgrades too


def test_a_format_3_turn_with_an_unknown_log_prob_context_is_refused(loaded, tmp_path):
    from wrappers.data.jsonl import DataFormatError

    old = as_format_3(loaded[0].to_dict())
    old["trajectories"][0]["turns"][0]["logprob_context"] = "elsewhere"
    path = tmp_path / "v3.jsonl"
    path.write_text(json.dumps(old) + "\n")
    with pytest.raises(DataFormatError, match="logprob_context"):
        list(load_jsonl(path))
