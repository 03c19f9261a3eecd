"""Structured self-reflection: a valid pivot and an admissible, different suggestion by construction, chosen by
the policy's scores, deterministic, feeding real retries; clear failures where the env lists no actions."""

import gymnasium as gym
import pytest

from wrappers import RolloutConfig, Trajectory, Turn, rollout_batch
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig
from wrappers.retry.reflection import FAILURE_REASONS, ReflectionRequest, Reflector
from wrappers.retry.structured_reflection import StructuredReflector

pytest.importorskip("transformers")

ACTIONS = ("left", "right", "wait")
CONFIG = RolloutConfig(max_turns=5, keep_checkpoints=True)


def scripted(rule):
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(rule)


def walker(prompt_text):
    """Walks left (never wins) unless the context carries guidance to go right."""
    return "<action>right</action>" if "do: 'right'" in prompt_text else "<action>left</action>"


def judge(prompt_text):
    """The policy as its own judge: blames step 2 and would have gone right; walks as ``walker`` otherwise."""
    if prompt_text.endswith("The mistake was at step"):
        return "2:"
    if prompt_text.endswith('Instead, it should have done "'):
        return 'right".'
    return walker(prompt_text)


def corridor_bases(n=4, seed=0):
    envs = [gym.make("r3ltest/Corridor-v0") for _ in range(n)]
    ids = [f"corridor-train-{i % 5:06d}" for i in range(n)]
    return rollout_batch(envs, scripted(walker), CONFIG, task_ids=ids, seed=seed)


def checked(refl, base):
    """A usable reflection whose pivot is a turn of ``base`` and whose suggestion is an admissible action at that
    turn other than the one taken there."""
    assert refl.ok and refl.wants_retry and refl.outcome == "failure", refl
    assert 0 <= refl.pivot < base.num_turns
    turn = base.turns[refl.pivot]
    suggested = [a for a in turn.admissible if f"do: {a!r}." in refl.suggestion]
    assert len(suggested) == 1 and suggested[0] != turn.action, refl.suggestion
    return suggested[0]


def test_the_policy_scores_choose_pivot_and_suggestion():
    bases = corridor_bases()
    assert not any(b.won for b in bases) and all(b.num_turns == 5 for b in bases)
    reflector = StructuredReflector(scripted(judge))
    assert isinstance(reflector, Reflector)
    reflections = reflector.reflect([ReflectionRequest(b) for b in bases])
    assert len(reflections) == len(bases)
    for refl, base in zip(reflections, bases):
        assert refl.pivot == 2 and checked(refl, base) == "right"
        assert refl.text == 'The mistake was at step 2: the agent did "left". Instead, it should have done "right".'
        assert (
            refl.pivot_rule == "judged" and refl.prompt and "Which step was the mistake" in refl.prompt[-1]["content"]
        )
        assert "do: 'right'" in refl.guidance()


def test_retries_follow_the_structured_guidance():
    """Through the reflect-retry wrapper: every failed base gets a retry from the judged pivot, which follows it."""
    config = ReflectRetryConfig(group_size=4, rollout=RolloutConfig(max_turns=12), keep_checkpoints=True)
    policy = scripted(judge)
    rr = ReflectRetry("r3ltest/Corridor-v0", policy, StructuredReflector(policy), config)
    try:
        (group,) = rr.collect(["corridor-train-000002"], seed=1)
    finally:
        rr.close()
    retries = [t for t in group.trajectories if t.kind == "retry"]
    bases = {t.id: t for t in group.trajectories if t.kind == "base"}
    assert len(retries) == 2 and all(t.pivot == 2 and t.turns[2].action == "right" for t in retries)
    assert all(t.score > bases[t.base_id].score for t in retries)  # the corridor is windy: closer, not always won
    assert group.metadata["stats"]["reflections_parsed"] == 2


def test_any_model_gets_a_valid_pivot_and_suggestion_deterministically(tiny_policy):
    """A random tiny model: nothing to parse, so every reflection is usable; the same inputs give the same ones."""
    bases = corridor_bases(n=6, seed=3)
    first = StructuredReflector(tiny_policy).reflect([ReflectionRequest(b) for b in bases])
    again = StructuredReflector(tiny_policy).reflect([ReflectionRequest(b) for b in bases])
    for refl, base in zip(first, bases):
        checked(refl, base)
    assert [(r.pivot, r.text) for r in first] == [(r.pivot, r.text) for r in again]
    sampled = [StructuredReflector(tiny_policy, temperature=1.0, seed=7).reflect([ReflectionRequest(b) for b in bases])]
    sampled.append(
        StructuredReflector(tiny_policy, temperature=1.0, seed=7).reflect([ReflectionRequest(b) for b in bases])
    )
    assert [(r.pivot, r.text) for r in sampled[0]] == [(r.pivot, r.text) for r in sampled[1]]
    for refl, base in zip(sampled[0], bases):
        checked(refl, base)


def made(actions, admissible, *, logprobs=None, won=False, env_id="r3ltest/Corridor-v0"):
    """A finished trajectory with the given actions and per-turn admissible lists."""
    traj = Trajectory(env_id=env_id, task_id="t-0", task="reach cell 6")
    for k, (action, listed) in enumerate(zip(actions, admissible)):
        lp = logprobs[k] if logprobs else [-1.0]
        turn = Turn(observation=f"cell {k}", response=action, action=action, admissible=listed, behavior_logprobs=lp)
        traj.turns.append(turn)
    traj.won, traj.stop_reason = won, "terminated" if won else "max_turns"
    return traj


def test_a_turn_without_an_alternative_is_never_the_pivot():
    """Step 2 is the judge's favourite, but its one admissible action is the one taken: step 2 cannot be blamed."""
    traj = made(["left", "left", "left", "left"], [list(ACTIONS), list(ACTIONS), ["left"], list(ACTIONS)])
    (refl,) = StructuredReflector(scripted(judge)).reflect([ReflectionRequest(traj)])
    assert refl.ok and refl.pivot != 2
    checked(refl, traj)
    only = made(["left", "left"], [["left"], ["left"]])
    (none,) = StructuredReflector(scripted(judge)).reflect([ReflectionRequest(only)])
    assert none.error == "no_alternative" and not none.wants_retry and none.error in FAILURE_REASONS


def test_least_likely_blames_the_choice_the_policy_was_least_sure_of():
    traj = made(["left"] * 4, [list(ACTIONS)] * 4, logprobs=[[-0.1], [-0.2, -0.4], [-3.0, -0.1], [-0.5]])
    (refl,) = StructuredReflector(scripted(judge), pivot="least_likely").reflect([ReflectionRequest(traj)])
    assert refl.pivot == 2 and refl.pivot_rule == "least_likely"  # mean -1.55, the lowest
    assert checked(refl, traj) == "right"


def test_a_won_trajectory_is_a_success_without_retry():
    traj = made(["right"], [list(ACTIONS)], won=True)
    (refl,) = StructuredReflector(scripted(judge)).reflect([ReflectionRequest(traj)])
    assert refl.ok and refl.outcome == "success" and not refl.wants_retry


def test_without_admissible_lists_the_suggestion_is_free_or_a_clear_error():
    """Math-like turns list no actions: a short free generation suggests, or (free_tokens=0) a named error."""
    traj = made(["12", "15"], [None, None], env_id="r3l/Countdown-v0")

    def mathy(prompt_text):
        return "1:" if prompt_text.endswith("The mistake was at step") else " tried 3 * 4 + 2 = 14\nmore"

    (refl,) = StructuredReflector(scripted(mathy)).reflect([ReflectionRequest(traj)])
    assert refl.ok and refl.pivot == 1 and refl.suggestion == "Instead, it should have tried 3 * 4 + 2 = 14"
    (off,) = StructuredReflector(scripted(mathy), free_tokens=0).reflect([ReflectionRequest(traj)])
    assert off.error == "no_admissible" and off.pivot is None and "no admissible actions" in FAILURE_REASONS[off.error]

    def silent(prompt_text):
        return "0:" if prompt_text.endswith("The mistake was at step") else "\n"

    (empty,) = StructuredReflector(scripted(silent)).reflect([ReflectionRequest(traj)])
    assert empty.error == "no_guidance" and not empty.wants_retry


def test_bad_settings_are_refused_with_the_reason():
    class NoScore:
        name = "generator-only"

    with pytest.raises(TypeError, match=r"Policy\.score"):
        StructuredReflector(NoScore())
    policy = scripted(judge)
    with pytest.raises(ValueError, match="pivot must be one of"):
        StructuredReflector(policy, pivot="first")
    with pytest.raises(ValueError, match="score must be"):
        StructuredReflector(policy, score="max")
    with pytest.raises(ValueError, match="temperature"):
        StructuredReflector(policy, temperature=-1)


def test_the_trainer_offers_it_as_reflector_self_structured(tiny_policy):
    from r3l_learn.loop.config import TrainConfig
    from r3l_learn.loop.setup import make_reflector

    reflector = make_reflector(TrainConfig(algo="r3l", reflector="self-structured"), tiny_policy)
    assert isinstance(reflector, StructuredReflector) and reflector.policy is tiny_policy
