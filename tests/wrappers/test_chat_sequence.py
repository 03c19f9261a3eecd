"""ChatSequence builds the exact template token sequence without re-tokenising generated text."""

import pytest

from wrappers.chat import ChatSequence, end_of_turn_id, replay, turn_suffix_ids, with_guidance

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def policy():
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(["unused"])


def test_sequence_equals_template_of_whole_chat(policy):
    """With a byte-level tokenizer tokenisation is unique, so the incrementally built sequence must equal
    the template applied to the whole conversation at once."""
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "obs 0"}]
    seq = ChatSequence(policy, messages)
    eos = policy.eos_token_ids[0]
    replies = ["<action>a</action>", "héllo\n<action>b</action>"]
    for i, reply in enumerate(replies):
        ids = policy.tokenize(reply) + ([eos] if i == 0 else [])  # second reply cut off by a stop string
        span = seq.add_generation(reply, ids, [-0.5] * len(ids))
        assert seq.token_ids[span[0] : span[1]] == ids
        seq.add_user(f"obs {i + 1}")
    chat = [*messages]
    for i, reply in enumerate(replies):
        chat += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"obs {i + 1}"}]
    assert seq.token_ids == policy.tokenize(policy.render(chat, add_generation_prompt=True))
    assert seq.messages == chat
    generated = sum(len(policy.tokenize(r)) for r in replies) + 1
    assert sum(seq.agent_mask) == generated
    assert [lp for lp, m in zip(seq.logprobs, seq.agent_mask) if m] == [-0.5] * generated
    assert all(lp == 0.0 for lp, m in zip(seq.logprobs, seq.agent_mask) if not m)
    assert [seq.token_ids[a:b] for a, b in seq.spans] == [
        [*policy.tokenize(replies[0]), eos],
        policy.tokenize(replies[1]),
    ]


def test_replay_rebuilds_a_chat_from_turns_with_guidance_at_one_user_turn(policy):
    from wrappers import Turn

    turns = [Turn("o", r, "a", token_ids=[*policy.tokenize(r), policy.eos_token_ids[0]]) for r in ("one", "two")]
    for t in turns:
        t.behavior_logprobs = [-1.0] * len(t.token_ids)
    users = ["u0", "u1", "u2"]
    for at in (0, 1, 2):
        seq = replay(policy, "sys", users, turns, guidance="HINT", guided_at=at)
        shown = [m["content"] for m in seq.messages if m["role"] == "user"]
        assert shown == [with_guidance("HINT", u) if i == at else u for i, u in enumerate(users)]
        assert seq.messages[-1]["role"] == "user" and len(seq.spans) == 2
    ended = replay(policy, "sys", users[:2], turns)  # one user message per reply: ends with the last reply
    assert ended.messages[-1] == {"role": "assistant", "content": "two"}
    assert ended.token_ids[ended.spans[-1][0] :] == turns[-1].token_ids
    assert with_guidance(None, "u") == "u" and with_guidance("", "u") == "u"
    with pytest.raises(ValueError, match="one per reply"):
        replay(policy, "sys", users[:1], turns)


def test_end_of_turn_token(policy):
    assert end_of_turn_id(policy) == policy.eos_token_ids[0]
    eos = policy.eos_token_ids[0]
    with_eos = turn_suffix_ids(policy, "next", eos)
    without = turn_suffix_ids(policy, "next", None)
    assert without == [eos, *with_eos]


def test_mismatched_logprobs_raise(policy):
    seq = ChatSequence(policy, [{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="log-probs"):
        seq.add_generation("a", [5, 6], [0.0])


def test_chat_generates_from_messages(policy):
    from wrappers import SamplingParams, chat

    gens = chat(policy, [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "yo"}]], SamplingParams())
    assert [g.text for g in gens] == ["unused", "unused"]
    assert all(g.token_ids[-1] == policy.eos_token_ids[0] and g.finish_reason == "stop" for g in gens)
