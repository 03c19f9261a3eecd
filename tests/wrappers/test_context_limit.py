"""Issue 19 item 2: no stored training sequence is longer than the policy's context.

An episode that stops because the next prompt no longer fits ends with its last agent reply: the user turn
nobody answered is not part of the trajectory's sequence. Checked for plain free-text, constrained and windowed
rollouts, for reflect-retry bases and retries (whose guided context is longer than the distilled sequence), and
for a real (tiny random) model.
"""

import json

import gymnasium as gym
import pytest

from wrappers import RolloutConfig, SamplingParams, rollout, rollout_batch
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig
from wrappers.retry.reflection import PolicyReflector

pytest.importorskip("transformers")

MAX_CONTEXT = 900
NEW = 24


def scripted(replies, max_context=MAX_CONTEXT):
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(replies, max_context=max_context)


def corridor():
    return gym.make("r3ltest/Corridor-v0")


def assert_within(traj, max_context):
    """Every training sequence fits, and the trajectory's own sequence ends with its last reply."""
    assert traj.sequences(), "it played turns, so it has something to train"
    for seq in traj.sequences():
        assert len(seq.token_ids) <= max_context
    assert len(traj.token_ids) <= max_context
    if traj.turns and traj.turns[-1].span is not None:
        assert traj.token_ids[-len(traj.turns[-1].token_ids) :] == traj.turns[-1].token_ids
        assert traj.messages[-1]["role"] == "assistant"


@pytest.mark.parametrize(
    "config",
    [
        RolloutConfig(sampling=SamplingParams(max_new_tokens=NEW), max_turns=100),
        RolloutConfig(sampling=SamplingParams(max_new_tokens=NEW, temperature=0), max_turns=100, constrained=True),
        RolloutConfig(sampling=SamplingParams(max_new_tokens=NEW), max_turns=100, history=3),
    ],
    ids=["free", "constrained", "windowed"],
)
def test_plain_rollouts_stopped_for_context_fit_the_context(config):
    policy = scripted(["<think>hm</think><action>wait</action>"])
    t = rollout(corridor(), policy, config, seed=0, sample_seed=0)
    if config.history is None:
        assert t.stop_reason == "context_length"
    assert_within(t, MAX_CONTEXT)


def test_a_prompt_that_never_fits_gives_no_sequence():
    policy = scripted(["<action>wait</action>"], max_context=50)  # the system prompt alone is longer
    t = rollout(corridor(), policy, RolloutConfig(sampling=SamplingParams(max_new_tokens=NEW)), seed=0)
    assert t.stop_reason == "context_length" and t.num_turns == 0
    assert t.token_ids == t.agent_mask == t.loss_mask == t.behavior_logprobs == [] and t.sequences() == []
    assert [m["role"] for m in t.messages] == ["system", "user"]  # what did not fit is still shown


def walker(prompt_text):
    return "<action>right</action>" if "walk right" in prompt_text else "<action>left</action>"


def test_reflect_retry_bases_and_retries_fit_the_context():
    diagnosis = json.dumps(
        {"trajectory_outcome": "failure", "improvement_suggestion": "walk right " * 20, "retry_from_step": 1}
    )
    rollout_config = RolloutConfig(sampling=SamplingParams(max_new_tokens=NEW), max_turns=100)
    config = ReflectRetryConfig(group_size=4, rollout=rollout_config)
    # a corridor too long to finish: every episode runs until the context is full
    rr = ReflectRetry(
        "r3ltest/Corridor-v0",
        scripted(walker),
        PolicyReflector(scripted([diagnosis], max_context=1 << 16)),  # the reflector reads it all
        config,
        env_kwargs={"length": 10_000},
    )
    (group,) = rr.collect(["corridor-train-000000"], seed=0)
    kinds = [t.kind for t in group.trajectories]
    assert kinds.count("retry") == 2
    for t in group.trajectories:
        assert t.stop_reason == "context_length"
        assert_within(t, MAX_CONTEXT)


def test_a_tiny_model_in_free_text_fits_the_context(tiny_policy):
    max_context, before = 800, tiny_policy.max_context
    tiny_policy.max_context = max_context
    try:
        config = RolloutConfig(sampling=SamplingParams(max_new_tokens=32, temperature=1.0), max_turns=100)
        trajs = rollout_batch([corridor() for _ in range(2)], tiny_policy, config, seeds=[0, 1], seed=0)
    finally:
        tiny_policy.max_context = before
    for t in trajs:
        assert t.stop_reason == "context_length"
        assert_within(t, max_context)
