"""The vLLM policy on a GPU (skipped without CUDA or without vLLM): protocol, log-probs, weight pushes."""

import gymnasium as gym
import pytest

from wrappers import Policy, RolloutConfig, SamplingParams, rollout_batch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def policies():
    pytest.importorskip("vllm")
    from r3l_learn.hf_policy import HFPolicy
    from r3l_learn.models import DEFAULT_MODEL
    from r3l_learn.vllm_policy import VLLMPolicy

    vllm_policy = VLLMPolicy(DEFAULT_MODEL, dtype="float32", max_context=2048, gpu_memory_utilization=0.3)
    hf_policy = HFPolicy.from_pretrained(DEFAULT_MODEL, dtype="float32", device="cuda")
    return vllm_policy, hf_policy


def test_generation_logprobs_match_a_training_forward_pass(policies):
    vllm_policy, hf_policy = policies
    assert isinstance(vllm_policy, Policy)
    config = RolloutConfig(sampling=SamplingParams(max_new_tokens=32), max_turns=2)
    trajs = rollout_batch(
        [gym.make("r3ltest/Corridor-v0") for _ in range(4)], vllm_policy, config, seeds=[0, 1, 2, 3], seed=0
    )
    for t in trajs:
        recomputed = hf_policy.sequence_logprobs(t.token_ids)
        gaps = [abs(recomputed[i - 1] - t.logprobs[i]) for i, m in enumerate(t.loss_mask) if m]
        assert max(gaps) < 5e-3


def test_scores_match_hf(policies):
    vllm_policy, hf_policy = policies
    prompt = vllm_policy.tokenize(
        vllm_policy.render([{"role": "user", "content": "Say hi"}], add_generation_prompt=True)
    )
    conts = [vllm_policy.tokenize("Hi!"), vllm_policy.tokenize("Hello there, friend.")]
    for a, b in zip(vllm_policy.score([prompt] * 2, conts), hf_policy.score([prompt] * 2, conts)):
        assert a == pytest.approx(b, abs=5e-3)


def test_identical_prompts_sample_differently_and_seeds_repeat(policies):
    vllm_policy, _ = policies
    prompt = vllm_policy.tokenize(
        vllm_policy.render([{"role": "user", "content": "Tell a story"}], add_generation_prompt=True)
    )
    params = SamplingParams(max_new_tokens=24, seed=11)
    a = vllm_policy.generate([prompt] * 4, params)
    b = vllm_policy.generate([prompt] * 4, params)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert len({tuple(g.token_ids) for g in a}) > 1


def test_weight_push_changes_and_restores_outputs(policies):
    vllm_policy, hf_policy = policies
    prompt = vllm_policy.tokenize(
        vllm_policy.render([{"role": "user", "content": "Capital of France?"}], add_generation_prompt=True)
    )
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    before = vllm_policy.generate([prompt], greedy)[0].token_ids
    state = {k: v.detach().clone() for k, v in hf_policy.model.state_dict().items()}
    broken = {k: (v * 0 if "mlp.down_proj" in k else v) for k, v in state.items()}
    vllm_policy.update_weights(broken)
    assert vllm_policy.generate([prompt], greedy)[0].token_ids != before
    vllm_policy.update_weights(state)
    assert vllm_policy.generate([prompt], greedy)[0].token_ids == before


def test_training_with_vllm_rollouts_runs_and_pushes_updates(tmp_path):
    pytest.importorskip("vllm")
    from r3l_learn.models import DEFAULT_MODEL
    from r3l_learn.train import TrainConfig, train

    config = TrainConfig(
        env="r3ltest/Corridor-v0",
        model=DEFAULT_MODEL,
        algo="opmd",
        steps=2,
        tasks_per_step=2,
        group_size=4,
        max_turns=4,
        actions="constrained",
        device="cuda",
        rollout_backend="vllm",
        eval_episodes=4,
        out_dir=str(tmp_path / "run"),
        save_final=False,
        progress=False,
    )
    result = train(config)
    assert result.steps_done == 2 and result.eval_after is not None
