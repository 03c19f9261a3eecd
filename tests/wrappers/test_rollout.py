"""Rollouts over the test corridor (and a real math env): parsing failures, constrained mode, context guard,
per-turn checkpoints, history windows and batching."""

import gymnasium as gym
import pytest

import r3l_envs
from wrappers import RolloutConfig, SamplingParams, rollout, rollout_batch

pytest.importorskip("transformers")


def scripted(replies):
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(replies)


def corridor():
    return gym.make("r3ltest/Corridor-v0")


def test_scripted_agent_wins():
    t = rollout(corridor(), scripted(["<think>go</think><action>right</action>"]), seed=0, sample_seed=0)
    assert t.won and t.reward == 1.0 and t.stop_reason == "terminated"
    assert all(turn.action == "right" and turn.parse_error is None for turn in t.turns)
    assert t.messages[0]["role"] == "system" and t.messages[-1]["role"] == "assistant"


GARBAGE = [
    "",
    "   \n\t ",
    "x" * 100_000,
    "\ud800\udfff broken surrogates <action>\ud800",
    "\x00\x1b[31m control \x07",
    "```\n<action>left</action><action>right</action>\n```",
    "<action></action>",
    "<action>fly to the moon</action>",  # parsed, but not admissible: the env explains
]


def test_garbage_never_crashes_a_rollout():
    env = corridor()
    t = rollout(env, scripted(GARBAGE), RolloutConfig(max_turns=len(GARBAGE)), seed=1)
    assert t.num_turns == len(GARBAGE) and t.stop_reason == "max_turns"
    errors = [turn.parse_error for turn in t.turns]
    assert errors[-1] is None and "Nothing happens" in t.turns[-1].outcome
    assert all(errors[i] is not None for i in (0, 1, 2, 6))
    assert t.turns[2].finish_reason == "length" and len(t.turns[2].token_ids) == 256
    assert t.turns[5].action == "left"  # generation stops at the first closing tag
    for turn in t.turns:
        if turn.parse_error:
            assert turn.outcome.startswith("Your reply could not be used")
    # env state intact: only parsed actions were played
    assert r3l_envs.checkpoint(env).step == sum(turn.action is not None for turn in t.turns)


def test_random_model_output_never_crashes(tiny_policy):
    config = RolloutConfig(sampling=SamplingParams(max_new_tokens=24), max_turns=3)
    trajs = rollout_batch([corridor() for _ in range(3)], tiny_policy, config, seeds=[0, 1, 2], seed=0)
    for t in trajs:
        assert t.num_turns == 3 and t.stop_reason == "max_turns"
        assert all(turn.parse_error for turn in t.turns)  # random bytes never form the tags
        assert sum(t.loss_mask) == t.num_tokens > 0


def test_constrained_mode_always_yields_admissible_actions(tiny_policy):
    config = RolloutConfig(sampling=SamplingParams(temperature=1.0), max_turns=6, constrained=True)
    trajs = rollout_batch([corridor() for _ in range(4)], tiny_policy, config, seeds=[0, 1, 2, 3], seed=5)
    for t in trajs:
        for turn in t.turns:
            assert turn.constrained and turn.action in ("left", "right", "wait")
            assert turn.response == f"<action>{turn.action}</action>"
            assert turn.token_ids[-1] in tiny_policy.eos_token_ids
            start, _ = turn.span  # the recorded log-probs are the policy's scores of exactly these ids
            rescored = tiny_policy.score([t.token_ids[:start]], [turn.token_ids])[0]
            assert turn.behavior_logprobs == pytest.approx(rescored, abs=1e-4)
    # sampling at temperature 1 over 4 x 6 choices is not stuck on one action
    assert len({turn.action for t in trajs for turn in t.turns}) > 1


def test_constrained_scripted_choice_follows_the_rule():
    greedy = RolloutConfig(sampling=SamplingParams(temperature=0), constrained=True)
    t = rollout(corridor(), scripted(["<action>right</action>"]), greedy, seed=0)
    assert t.won and all(turn.constrained and turn.action == "right" for turn in t.turns)


def test_context_guard_stops_cleanly():
    policy = scripted(["<action>wait</action>"])
    policy.max_context = 1000
    t = rollout(corridor(), policy, RolloutConfig(sampling=SamplingParams(max_new_tokens=16), max_turns=50), seed=0)
    assert t.stop_reason == "context_length"
    assert 0 < t.num_turns < 50
    assert len(t.token_ids) + 16 > 1000 - 80  # it ran until the context was nearly full
    assert sum(t.loss_mask) == t.num_tokens


def test_per_turn_checkpoints_restore_the_state_before_each_turn():
    env = corridor()
    t = rollout(
        env,
        scripted(["<action>right</action>", "oops", "<action>left</action>"]),
        RolloutConfig(keep_checkpoints=True, max_turns=5),
        seed=2,
    )
    for k, turn in enumerate(t.turns):
        fresh = corridor()
        r3l_envs.restore(fresh, turn.checkpoint)
        for later in t.turns[k:]:
            if later.action is None:
                continue
            obs, reward, *_ = fresh.step(later.action)
            assert (obs, reward) == (later.outcome, later.reward)


def test_history_window_keeps_the_last_turns():
    policy = scripted(["<action>wait</action>"])
    t = rollout(corridor(), policy, RolloutConfig(history=1, max_turns=4), seed=0)
    seqs = t.sequences()
    assert len(seqs) == 4
    for turn, (ids, agent, mask, logprobs, guided) in zip(t.turns, seqs):
        assert ids[-len(turn.token_ids) :] == turn.token_ids and sum(mask) == len(turn.token_ids)
        assert logprobs[-len(turn.token_ids) :] == turn.behavior_logprobs
        assert ids[: -len(turn.token_ids)] == turn.prompt_ids
        assert agent == mask and not any(guided)
    # the trajectory's own sequence is the last turn's: the prompt it was generated from, and its reply
    last = seqs[-1]
    assert (t.token_ids, t.agent_mask, t.behavior_logprobs) == (last.token_ids, last.agent_mask, last.behavior_logprobs)
    assert [m["role"] for m in t.messages] == ["system", "user", "assistant", "user", "assistant"]  # window of 1
    last_prompt = policy.tokenizer.decode(t.turns[3].prompt_ids)
    assert "(2 earlier turns omitted.)" in last_prompt
    assert last_prompt.count("<action>wait</action>") == 1


def test_batched_equals_single_for_a_deterministic_policy():
    policy = scripted(["<action>right</action>"])
    batch = rollout_batch([corridor() for _ in range(3)], policy, seeds=[0, 1, 2])
    single = [rollout(corridor(), policy, seed=s) for s in range(3)]
    for b, s in zip(batch, single):
        assert b.token_ids == s.token_ids and [x.outcome for x in b.turns] == [x.outcome for x in s.turns]


def test_sampling_is_seeded(tiny_policy):
    config = RolloutConfig(sampling=SamplingParams(max_new_tokens=12), max_turns=2)
    a = rollout_batch([corridor(), corridor()], tiny_policy, config, seeds=[0, 1], seed=7)
    b = rollout_batch([corridor(), corridor()], tiny_policy, config, seeds=[0, 1], seed=7)
    c = rollout_batch([corridor(), corridor()], tiny_policy, config, seeds=[0, 1], seed=8)
    assert [t.token_ids for t in a] == [t.token_ids for t in b]
    assert [t.token_ids for t in a] != [t.token_ids for t in c]


def test_math_env_free_text_answers():
    env = gym.make("r3l/Countdown-v0")
    t = rollout(env, scripted(["<think>guess</think> <action>1 + 2</action>"]), seed=0)
    assert t.stop_reason == "terminated" and t.num_turns == 3 and not t.won
    assert t.turns[0].info["admissible_actions"] is None
    assert all(turn.action == "1 + 2" for turn in t.turns)
    assert "Put your final" in t.messages[1]["content"] and t.messages[0]["content"].startswith("You solve math")


def test_resume_from_a_pivot_keeps_the_prefix_token_identical_and_guidance_out_of_training():
    from wrappers import AgentEpisode, play

    config = RolloutConfig(keep_checkpoints=True, max_turns=6)
    base = rollout(corridor(), scripted(["<action>left</action>", "junk", "<action>wait</action>"]), config, seed=4)
    pivot = 2
    seen = []

    def rule(prompt_text):
        seen.append(prompt_text)
        return "<action>right</action>"

    policy = scripted(rule)
    env = corridor()
    episode = AgentEpisode.resume(env, policy, config, base, pivot, guidance="HINT: walk right.")
    assert r3l_envs.checkpoint(env).step == sum(t.action is not None for t in base.turns[:pivot])  # at the pivot
    (retry,) = play([episode], policy, config, seed=0)
    assert retry.kind == "retry" and retry.pivot == pivot and retry.guidance == "HINT: walk right."
    assert retry.turns[:pivot] == base.turns[:pivot]
    cut = base.turns[pivot].span[0]
    assert retry.token_ids[:cut] == base.token_ids[:cut] and retry.loss_mask[:cut] == base.loss_mask[:cut]
    assert all(t.action == "right" for t in retry.turns[pivot:])
    assert "HINT: walk right." in seen[0]  # generation saw the guidance ...
    assert "HINT" not in policy.decode(retry.token_ids)  # ... the training sequence does not contain it
    assert not any("HINT" in m["content"] for m in retry.messages)
    for turn in retry.turns[pivot:]:
        assert retry.token_ids[turn.span[0] : turn.span[1]] == turn.token_ids


def test_resume_needs_checkpoints():
    from wrappers import AgentEpisode

    base = rollout(corridor(), scripted(["<action>left</action>"]), RolloutConfig(max_turns=2), seed=0)
    with pytest.raises(ValueError, match="keep_checkpoints=True"):
        AgentEpisode.resume(corridor(), scripted(["x"]), RolloutConfig(), base, 1)


def walk_the_shop(prompt_text):
    """Fills the search slot with a query that runs on (constrained mode must cut it at the slot's end)."""
    if prompt_text.endswith("<action>search["):
        return "protein   bars\n] and more</action>"
    return "<action>click[Back to Search]</action>"


def test_constrained_mode_has_the_policy_fill_a_lone_slot_template():
    env = gym.make("r3l/WebShop-v0")
    policy = scripted(walk_the_shop)
    t = rollout(env, policy, RolloutConfig(constrained=True, max_turns=2), seed=0)
    first = t.turns[0]
    assert first.admissible == ["search[<query>]"] and first.constrained and first.parse_error is None
    assert first.action == "search[protein bars]" and first.response == "<action>search[protein bars]</action>"
    assert policy.decode(first.token_ids) == first.response + policy.decode([policy.eos_token_ids[0]])
    assert len(first.behavior_logprobs) == len(first.token_ids)
    assert t.turns[1].constrained and t.turns[1].action in t.turns[1].admissible


def test_free_mode_leaves_slot_templates_to_the_policy():
    env = gym.make("r3l/WebShop-v0")
    policy = scripted(["<action>search[protein bars]</action>", "<action>click[Back to Search]</action>"])
    t = rollout(env, policy, RolloutConfig(max_turns=1), seed=0)
    assert not t.turns[0].constrained and t.turns[0].action == "search[protein bars]"


def test_direct_mode_has_the_policy_write_the_action_alone():
    env = gym.make("r3l/Countdown-v0", num_numbers=3, max_number=10, max_attempts=2)
    env.reset(seed=0)
    solution = env.unwrapped.reference_answer()  # the rollout resets to the same task
    generated = []  # prompts the policy continued (scoring the finished replies asks it too)

    def answer(prompt_text):
        if prompt_text.endswith("<action>"):
            generated.append(prompt_text)
        return f"{solution}\n</action> and then some" if len(generated) > 1 else "1 + 1</action>"

    policy = scripted(answer)
    t = rollout(env, policy, RolloutConfig(direct=True), seed=0)
    assert len(generated) == 2  # every turn opened with the action tag
    assert "Answer with exactly one action" in t.messages[0]["content"]  # no reasoning part asked for
    assert "<think>" not in t.messages[0]["content"]
    first, second = t.turns
    assert first.action == "1 + 1" and first.parse_error is None and first.response == "<action>1 + 1</action>"
    assert second.action == solution and t.won
    assert policy.decode(second.token_ids) == second.response + policy.decode([policy.eos_token_ids[0]])
    assert len(second.behavior_logprobs) == len(second.token_ids)
    assert t.metadata["direct"] is True


def test_direct_mode_leaves_listed_actions_to_constrained_mode():
    env = corridor()
    policy = scripted(lambda prompt_text: "right</action>")
    t = rollout(env, policy, RolloutConfig(constrained=True, direct=True, max_turns=2), seed=0)
    assert all(turn.constrained and turn.action in turn.admissible for turn in t.turns)
