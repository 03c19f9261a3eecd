"""ChatSequence builds the exact template token sequence without re-tokenising generated text."""

import pytest

from wrappers.chat import ChatSequence, end_of_turn_id, turn_suffix_ids

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def policy():
    from r3l_learn.scripted import ScriptedPolicy

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
    assert sum(seq.loss_mask) == generated
    assert [lp for lp, m in zip(seq.logprobs, seq.loss_mask) if m] == [-0.5] * generated
    assert all(lp == 0.0 for lp, m in zip(seq.logprobs, seq.loss_mask) if not m)


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
