"""The prompt KV cache of HFPolicy.score: a multi-turn prompt runs only its new tokens, with the same numbers."""

import itertools

import pytest

torch = pytest.importorskip("torch")

from r3l_learn.policies.hf import HFPolicy  # noqa: E402
from r3l_learn.policies.models import tiny_model  # noqa: E402
from r3l_learn.policies.prompt_cache import PromptCache  # noqa: E402


def _policy(cache_bytes=2 << 30):
    model, tokenizer = tiny_model(seed=0)
    policy = HFPolicy(model, tokenizer, name="tiny")
    policy.prompt_cache = PromptCache(cache_bytes)
    return policy


def _turns(policy):
    """Three prompts of one conversation, each extending the last (as a multi-turn episode's do)."""
    messages = [{"role": "user", "content": "You are in a kitchen. Exits: east, north."}]
    prompts = []
    for reply, observation in [("go east", "You are in a hall."), ("go north", "You see a coin."), (None, None)]:
        prompts.append(policy.tokenize(policy.render(messages, add_generation_prompt=True)))
        if reply is not None:
            messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": observation}]
    return prompts


CANDIDATES = [[70, 71], [72], [80, 81, 82]]


def test_later_turns_run_only_their_new_tokens_with_the_same_scores():
    cached, plain = _policy(), _policy(0)
    prompts = _turns(cached)
    assert all(b[: len(a)] == a for a, b in itertools.pairwise(prompts)), "each prompt extends the previous one"
    for prompt in prompts:
        got = cached.score([prompt] * 3, CANDIDATES)
        want = plain.score([prompt] * 3, CANDIDATES)
        for g, w in zip(got, want):
            assert g == pytest.approx(w, abs=1e-5)
    cache = cached.prompt_cache
    assert (cache.misses, cache.hits) == (1, 2)
    assert cache.computed_tokens == len(prompts[-1])  # every token ran once
    assert plain.prompt_cache.computed_tokens == sum(len(p) for p in prompts) and len(plain.prompt_cache) == 0


def test_an_update_to_the_weights_empties_the_cache():
    policy, prompt = _policy(), _turns(_policy(0))[0]
    before = policy.score([prompt], [CANDIDATES[0]])[0]
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-2)
    loss = policy.model(input_ids=torch.tensor([prompt])).logits.mean()
    loss.backward()
    optimizer.step()
    after = policy.score([prompt], [CANDIDATES[0]])[0]
    fresh = _policy(0)
    fresh.model.load_state_dict(policy.model.state_dict())
    assert after == pytest.approx(fresh.score([prompt], [CANDIDATES[0]])[0], abs=1e-5)
    assert abs(after[0] - before[0]) > 1e-3, "the step must move the log-prob, or this test means nothing"
    assert policy.prompt_cache.misses == 2  # the stale entry was not used


def test_memory_is_bounded_and_least_recently_used_prompts_go_first():
    policy = _policy()
    a = _turns(policy)[0]
    b = [a[0] + 1, *a[1:]]  # as long as a, sharing no prefix with it
    policy.score([a], [[70]])
    one = policy.prompt_cache._bytes
    policy.prompt_cache = PromptCache(max_bytes=one + one // 2)  # room for about one prompt of this size
    policy.score([a], [[70]])
    policy.score([b], [[70]])
    assert len(policy.prompt_cache) == 1 and policy.prompt_cache._bytes <= policy.prompt_cache.max_bytes
    policy.score([a], [[70]])
    assert policy.prompt_cache.misses == 3  # a was evicted by b
    with pytest.raises(ValueError, match="max_bytes"):
        PromptCache(-1)


def _batch(policy, n=4):
    """Prompts of one batch: the same long system prompt, different questions (as an eval batch's first turns)."""
    system = {"role": "system", "content": "Answer the question with one number, inside action tags. " * 4}
    return [
        policy.tokenize(
            policy.render(
                [system, {"role": "user", "content": f"What is {i} plus {i * 3}?"}], add_generation_prompt=True
            )
        )
        for i in range(n)
    ]


def test_generate_runs_a_batchs_common_prefix_once_with_the_same_samples():
    from wrappers import SamplingParams

    shared, plain = _policy(), _policy(0)
    prompts = _batch(shared)
    prefix = shared.shared_prefix(prompts)
    assert prefix >= shared.min_shared_prefix and plain.shared_prefix(prompts) == 0
    assert all(p[:prefix] == prompts[0][:prefix] for p in prompts) and min(map(len, prompts)) > prefix
    for temperature in (0.0, 1.0):
        params = SamplingParams(temperature=temperature, max_new_tokens=8, seed=7)
        got, want = shared.generate(prompts, params), plain.generate(prompts, params)
        for g, w in zip(got, want):
            assert g.token_ids == w.token_ids
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)
    cache = shared.prompt_cache
    assert cache.computed_tokens == prefix and (cache.misses, cache.hits) == (1, 1)  # once, then from the cache


def test_one_continuation_per_prompt_is_scored_on_the_common_prefix():
    shared, plain = _policy(), _policy(0)
    prompts = _batch(shared)
    continuations = [[70 + i, 71, 72][: 1 + i % 3] for i in range(len(prompts))]
    got, want = shared.score(prompts, continuations), plain.score(prompts, continuations)
    for g, w, c in zip(got, want, continuations):
        assert len(g) == len(c) and g == pytest.approx(w, abs=1e-5)
    assert shared.prompt_cache.computed_tokens == shared.shared_prefix(prompts)  # the rest ran batched on top


def test_the_kv_cache_goes_by_the_name_the_installed_transformers_declares():
    """transformers renamed ``past_key_values`` to ``cache`` (the old name warns, then goes in 5.40): generating
    and scoring on a cached prefix must use the declared name, or a later release runs them without the cache."""
    import inspect
    import warnings

    from wrappers import SamplingParams

    policy = _policy()
    prompts = _batch(policy)
    declared = inspect.signature(type(policy.model).forward).parameters
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        policy.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=4, seed=0))
        policy.score(prompts, [[70]] * len(prompts))
    renamed = [str(w.message) for w in caught if "past_key_values" in str(w.message)]
    assert renamed == [], renamed
    assert ("cache" in declared) or ("past_key_values" in declared)
