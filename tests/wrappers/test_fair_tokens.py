"""Which reply tokens carry loss: only those the policy chose (never the tags, template text and end-of-turn
token the rollout writes around them), and replies cut at the generation cap are marked."""

import json
from pathlib import Path

import gymnasium as gym
import pytest

import r3l_envs  # noqa: F401  (registers the envs)
from wrappers import AgentEpisode, RolloutConfig, SamplingParams, load_jsonl, rollout, save_jsonl
from wrappers.chat import chosen_span
from wrappers.data.trajectory import Trajectory

pytest.importorskip("transformers")

FIXTURE_V1 = Path(__file__).parent.parent / "fixtures" / "data_v1" / "groups_v1.jsonl"


def scripted(rule):
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(rule)


def agent_text(policy, traj: Trajectory, turn) -> str:
    """The decoded tokens of ``turn``'s reply that carry agent_mask 1."""
    start, end = turn.span
    return policy.decode([t for t, a in zip(traj.token_ids[start:end], traj.agent_mask[start:end]) if a])


def assert_only_chosen_tokens_are_agent(policy, traj: Trajectory, chosen: list[str]) -> None:
    """Every turn's agent tokens are exactly the tokens of its chosen text, after the written opening (the
    tiny tokenizer is byte-level, so text and tokens correspond one to one)."""
    opening = policy.tokenize("<action>")
    assert sum(traj.agent_mask) == sum(len(policy.tokenize(c)) for c in chosen)
    for turn, text in zip(traj.turns, chosen, strict=True):
        start, end = turn.span
        assert turn.token_ids == traj.token_ids[start:end]  # the span still covers the whole reply
        assert turn.token_ids[: len(opening)] == opening and turn.token_ids[-1] == policy.eos_token_ids[0]
        assert agent_text(policy, traj, turn) == text
        mask = traj.agent_mask[start:end]
        first = mask.index(1)
        assert mask == [0] * first + [1] * len(policy.tokenize(text)) + [0] * (len(mask) - first - len(text))
    assert traj.loss_mask == traj.agent_mask
    assert len(traj.behavior_logprobs) == len(traj.token_ids)  # aligned, forced tokens included


def test_direct_mode_gives_the_forced_opening_closer_and_end_of_turn_agent_mask_0():
    env = gym.make("r3l/Countdown-v0", num_numbers=3, max_number=10, max_attempts=2)
    policy = scripted(lambda prompt_text: "1 + 1</action>")
    t = rollout(env, policy, RolloutConfig(direct=True), seed=0)
    assert [turn.action for turn in t.turns] == ["1 + 1", "1 + 1"]
    assert_only_chosen_tokens_are_agent(policy, t, ["1 + 1", "1 + 1"])
    assert [turn.sampled_mask().count(1) for turn in t.turns] == [5, 5]


def test_a_filled_slot_gives_the_template_text_around_it_agent_mask_0():
    def walk_the_shop(prompt_text):
        if prompt_text.endswith("<action>search["):
            return "protein bars] and more</action>"
        return "<action>click[Back to Search]</action>"

    policy = scripted(walk_the_shop)
    t = rollout(gym.make("r3l/WebShop-v0"), policy, RolloutConfig(constrained=True, max_turns=1), seed=0)
    (turn,) = t.turns
    assert turn.action == "search[protein bars]"
    assert agent_text(policy, t, turn) == "protein bars"  # not "search[", "]", the tags or the end of turn
    assert sum(t.agent_mask) == len(policy.tokenize("protein bars"))


def test_a_constrained_choice_keeps_the_chosen_action_and_masks_what_is_written_around_it():
    policy = scripted(lambda prompt_text: "<action>right</action>")
    t = rollout(gym.make("r3ltest/Corridor-v0"), policy, RolloutConfig(constrained=True, max_turns=3), seed=0)
    assert t.turns and all(turn.constrained for turn in t.turns)
    assert_only_chosen_tokens_are_agent(policy, t, [turn.action for turn in t.turns])


def test_a_token_merging_written_and_chosen_characters_counts_as_chosen():
    # "<action>" + "[x]" tokenised whole may merge ">[" into one token: it holds a chosen character.
    assert chosen_span([1, 2, 9, 4, 5, 0], head=[1, 2, 3], tail=[5, 0]) == (2, 4)
    assert chosen_span([1, 2, 3, 5, 0], head=[1, 2, 3], tail=[5, 0]) == (3, 3)  # an empty choice
    assert chosen_span([1, 2, 3, 7, 7, 0], head=[1, 2, 3], tail=[7, 0]) == (3, 4)


def cut_then_short(max_new_tokens: int):
    """A direct-mode rule: the first reply runs past ``max_new_tokens``, the later ones stop in time."""
    calls = []

    def rule(prompt_text):
        if prompt_text.endswith("<action>"):
            calls.append(prompt_text)
        return "left " * max_new_tokens + "</action>" if len(calls) == 1 else "right</action>"

    return rule


def test_a_reply_cut_at_max_new_tokens_in_direct_mode_is_marked_length():
    policy = scripted(cut_then_short(8))
    config = RolloutConfig(direct=True, max_turns=3, sampling=SamplingParams(max_new_tokens=8))
    t = rollout(gym.make("r3ltest/Corridor-v0"), policy, config, seed=0)
    cut, *rest = t.turns
    assert cut.response == "<action>left lef</action>"  # the rollout closed the cut reply
    assert cut.finish_reason == "length" and cut.reply_cut and not cut.truncated
    assert rest and all(turn.finish_reason == "stop" and not turn.reply_cut for turn in rest)
    (masks,) = t.cut_reply_masks()
    start, end = cut.span
    assert len(masks) == len(t.token_ids)
    assert masks == [0] * start + t.agent_mask[start:end] + [0] * (len(t.token_ids) - end)
    assert sum(masks) == len(policy.tokenize("left lef"))
    # The marks survive a JSONL round trip and a retry that copies the turn.
    back = Trajectory.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back.cut_reply_masks() == [masks] and back.turns[0].reply_cut and back.agent_mask == t.agent_mask


def test_a_retry_keeps_the_cut_mark_and_the_written_tokens_mask_of_its_prefix():
    config = RolloutConfig(direct=True, max_turns=3, keep_checkpoints=True, sampling=SamplingParams(max_new_tokens=8))
    base = rollout(gym.make("r3ltest/Corridor-v0"), scripted(cut_then_short(8)), config, seed=0)
    retry = AgentEpisode.resume(gym.make("r3ltest/Corridor-v0"), scripted(lambda p: "right</action>"), config, base, 1)
    from wrappers.rollout import play

    (done,) = play([retry], retry.policy, config)
    end = base.turns[0].span[1]
    assert done.turns[0].reply_cut and done.agent_mask[:end] == base.agent_mask[:end]
    assert done.cut_reply_masks()[0][:end] == base.cut_reply_masks()[0][:end] and sum(done.cut_reply_masks()[0]) > 0
    assert done.agent_mask[:end].count(1) == len("left lef")


def test_a_windowed_history_gives_one_cut_mask_per_sequence():
    policy = scripted(cut_then_short(8))
    config = RolloutConfig(direct=True, max_turns=3, history=1, sampling=SamplingParams(max_new_tokens=8))
    t = rollout(gym.make("r3ltest/Corridor-v0"), policy, config, seed=0)
    sequences, masks = t.sequences(), t.cut_reply_masks()
    assert len(masks) == len(sequences) == len(t.turns) >= 2
    assert [len(m) for m in masks] == [len(s.token_ids) for s in sequences]
    assert masks[0] == sequences[0].agent_mask and sum(masks[0]) == len("left lef")
    assert all(sum(m) == 0 for m in masks[1:])
    # Each sequence's agent tokens are its own reply's chosen ones: no tag, closer or end-of-turn token.
    for turn, seq in zip(t.turns, sequences, strict=True):
        chosen = [tok for tok, a in zip(seq.token_ids, seq.agent_mask) if a]
        assert policy.decode(chosen) == turn.action


def test_old_format_files_still_load_with_their_masks():
    items = list(load_jsonl(FIXTURE_V1))
    trajectories = [t for item in items for t in getattr(item, "trajectories", [item]) if isinstance(t, Trajectory)]
    assert trajectories and any(t.turns for t in trajectories)
    for t in trajectories:
        assert all(turn.sampled is None and turn.sampled_mask() == [1] * len(turn.token_ids) for turn in t.turns)
        assert [len(m) for m in t.cut_reply_masks()] == [len(s.token_ids) for s in t.sequences()]


def test_a_format_2_record_reads_as_its_whole_replies(tmp_path):
    policy = scripted(lambda prompt_text: "<action>right</action>")
    t = rollout(gym.make("r3ltest/Corridor-v0"), policy, RolloutConfig(max_turns=2), seed=0)
    record = t.to_dict()
    record["version"] = 2
    for turn in record["turns"]:
        del turn["sampled"]
    path = tmp_path / "v2.jsonl"
    path.write_text(json.dumps(record) + "\n")
    (back,) = load_jsonl(path)
    assert back.agent_mask == t.agent_mask and all(turn.sampled is None for turn in back.turns)
    save_jsonl(tmp_path / "v3.jsonl", [back])
    assert list(load_jsonl(tmp_path / "v3.jsonl")) == [back]
