"""The HF transformers policy on the tiny random model: seeding, left padding, stop strings, scoring."""

import pytest

from wrappers import Policy, SamplingParams

torch = pytest.importorskip("torch")


def prompts(policy, n=3):
    texts = ["hi", "a much longer prompt than the first one", "medium prompt"][:n]
    return [policy.tokenize(policy.render([{"role": "user", "content": t}], add_generation_prompt=True)) for t in texts]


def test_implements_the_protocol(tiny_policy):
    assert isinstance(tiny_policy, Policy)
    assert tiny_policy.eos_token_ids == (tiny_policy.tokenizer.eos_token_id,)


def test_same_seed_same_samples_and_caller_rng_untouched(tiny_policy):
    params = SamplingParams(max_new_tokens=16, seed=3)
    torch.manual_seed(123)
    before = torch.rand(1)
    a = tiny_policy.generate(prompts(tiny_policy), params)
    b = tiny_policy.generate(prompts(tiny_policy), params)
    c = tiny_policy.generate(prompts(tiny_policy), SamplingParams(max_new_tokens=16, seed=4))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    torch.manual_seed(123)
    assert torch.equal(torch.rand(1), before)


def test_left_padding_does_not_change_greedy_output(tiny_policy):
    params = SamplingParams(temperature=0, max_new_tokens=12)
    batch = tiny_policy.generate(prompts(tiny_policy), params)
    for prompt, together in zip(prompts(tiny_policy), batch):
        alone = tiny_policy.generate([prompt], params)[0]
        assert alone.token_ids == together.token_ids
        assert alone.logprobs == pytest.approx(together.logprobs, abs=1e-4)


def test_generation_logprobs_match_scoring(tiny_policy):
    ps = prompts(tiny_policy)
    gens = tiny_policy.generate(ps, SamplingParams(max_new_tokens=10, seed=0))
    scored = tiny_policy.score(ps, [g.token_ids for g in gens])
    for g, s in zip(gens, scored):
        assert g.logprobs == pytest.approx(s, abs=1e-4)
        assert g.finish_reason in ("stop", "length") and len(g.token_ids) <= 10
    full = tiny_policy.sequence_logprobs(ps[0] + gens[0].token_ids)
    assert full[len(ps[0]) - 1 :] == pytest.approx(gens[0].logprobs, abs=1e-4)


def test_shared_prompt_scoring_handles_ragged_continuations(tiny_policy):
    prompt = prompts(tiny_policy, 1)[0]
    conts = [[70], [70, 71, 72, 73], [], [80, 81]]
    tiny_policy.score_chunk = 3  # exercise chunking
    scored = tiny_policy.score([prompt] * 4, conts)
    tiny_policy.score_chunk = 16
    assert [len(s) for s in scored] == [1, 4, 0, 2]
    for cont, s in zip(conts, scored):
        if cont:
            assert s == pytest.approx(tiny_policy.sequence_logprobs(prompt + cont)[len(prompt) - 1 :], abs=1e-4)


def test_stop_strings_and_length(tiny_policy):
    ps = prompts(tiny_policy, 2)
    long = tiny_policy.generate(ps, SamplingParams(max_new_tokens=20, seed=1))
    # choose a stop string that occurs in the first sample's text, then regenerate with it
    text = long[0].text
    assert long[0].finish_reason == "length" and len(text) >= 6, "the seed must give a full-length sample"
    stop = text[3:5]
    cut = tiny_policy.generate(ps, SamplingParams(max_new_tokens=20, seed=1, stop=(stop,)))
    assert cut[0].finish_reason == "stop" and cut[0].text.endswith(stop) and stop not in cut[0].text[: -len(stop)]
    assert cut[0].token_ids == long[0].token_ids[: len(cut[0].token_ids)]
    assert len(cut[0].logprobs) == len(cut[0].token_ids)


def test_bf16_policy_generates_and_scores():
    from r3l_learn.policies.hf import HFPolicy
    from r3l_learn.policies.models import tiny_model

    model, tok = tiny_model(seed=1)
    policy = HFPolicy(model.to(torch.bfloat16), tok)
    ps = prompts(policy, 2)
    gens = policy.generate(ps, SamplingParams(max_new_tokens=8, seed=0))
    scored = policy.score(ps, [g.token_ids for g in gens])
    for g, s in zip(gens, scored):
        assert g.logprobs == pytest.approx(s, abs=0.1)  # bf16: same math, different kernels and order


def test_bf16_autocast_over_fp32_weights():
    """``autocast`` computes in bf16 (results move by bf16 rounding, not more) and leaves the fp32 weights alone."""
    from r3l_learn.policies.hf import HFPolicy
    from r3l_learn.policies.models import tiny_model

    model, tok = tiny_model(seed=1)
    policy = HFPolicy(model, tok)
    ps = prompts(policy, 2)
    gens = policy.generate(ps, SamplingParams(max_new_tokens=8, seed=0))
    exact = policy.score(ps, [g.token_ids for g in gens])
    policy.autocast = torch.bfloat16
    fast = policy.score(ps, [g.token_ids for g in gens])
    again = policy.generate(ps, SamplingParams(max_new_tokens=8, seed=0))
    assert all(p.dtype == torch.float32 for p in policy.model.parameters())
    flat_exact, flat_fast = [x for row in exact for x in row], [x for row in fast for x in row]
    assert flat_fast == pytest.approx(flat_exact, abs=0.1) and flat_fast != flat_exact
    for g, s in zip(again, policy.score(ps, [g.token_ids for g in again])):
        assert g.logprobs == pytest.approx(s, abs=0.1)
