"""ReflectRetry on the test corridor and on Countdown: token-identical prefixes, guidance kept out of training,
pivotal-credit masks, the auxiliary-sample rule, counted reflection failures, fill, JSONL round-trip."""

import json
import re

import gymnasium as gym
import pytest

import r3l_envs
from wrappers import RolloutConfig, load_jsonl, save_jsonl
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig, aggregate_stats, beats, pivotal_mask
from wrappers.retry.reflection import PolicyReflector

pytest.importorskip("transformers")


def scripted(replies):
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(replies)


def walker(prompt_text):
    """Walks left (never wins) unless the context carries the guidance to walk right."""
    return "<action>right</action>" if "walk right" in prompt_text else "<action>left</action>"


def diagnosis(pivot):
    body = {
        "trajectory_summary": "kept walking left",
        "root_cause_analysis": "the goal is to the right",
        "trajectory_outcome": "failure",
        "improvement_suggestion": "walk right",
        "retry_from_step": pivot,
    }
    return json.dumps(body)


# One reflection per base, in order: a fenced string pivot, a negative pivot, prose, a pivot past the end.
REFLECTIONS = ["```json\n" + diagnosis("2") + "\n```", diagnosis(-1), "The agent should go right.", diagnosis(99)]


SEEN: list[str] = []  # every prompt the corridor walker was shown


def recording_walker(prompt_text):
    SEEN.append(prompt_text)
    return walker(prompt_text)


@pytest.fixture(scope="module")
def corridor_groups():
    policy = scripted(recording_walker)
    config = ReflectRetryConfig(group_size=8, rollout=RolloutConfig(max_turns=10), keep_checkpoints=True)
    rr = ReflectRetry("r3ltest/Corridor-v0", policy, PolicyReflector(scripted(REFLECTIONS)), config)
    return policy, rr.collect(["corridor-train-000000", "corridor-train-000001"], seed=3)


def test_groups_have_bases_and_retries(corridor_groups):
    _, groups = corridor_groups
    assert [g.task_id for g in groups] == ["corridor-train-000000", "corridor-train-000001"]
    for g in groups:
        kinds = [(t.kind, t.pivot) for t in g.trajectories]
        # base 0 (pivot "2") and base 3 (pivot 99, clamped to the last turn 9) are retried
        assert kinds == [("base", None), ("retry", 2), ("base", None), ("base", None), ("base", None), ("retry", 9)]
        assert all(t.task_id == g.task_id for t in g.trajectories)
        ids = [t.id for t in g.trajectories]
        assert len(set(ids)) == 6 and g.trajectories[1].base_id == ids[0] and g.trajectories[5].base_id == ids[4]
        assert [t.base_id for t in g.trajectories if t.kind == "base"] == [None] * 4


def test_reflection_failures_are_counted_not_raised(corridor_groups):
    _, groups = corridor_groups
    stats = groups[0].metadata["stats"]
    assert stats["reflections_parsed"] == 2 and stats["reflection_failures"] == {"pivot_negative": 1, "no_json": 1}
    assert stats["reflection_notes"] == {"pivot_clamped": 1} and stats["retries"] == 2 and stats["pivots"] == [2, 9]
    total = aggregate_stats(groups)
    assert total["bases"] == 8 and total["parse_rate"] == 0.5 and total["mean_pivot"] == 5.5
    assert total["reflection_failures"] == {"pivot_negative": 2, "no_json": 2}


def test_distilled_prefix_is_token_identical_and_has_no_guidance(corridor_groups):
    policy, groups = corridor_groups
    for g in groups:
        for retry in (t for t in g.trajectories if t.kind == "retry"):
            base = g.by_id()[retry.base_id]
            p = retry.pivot
            cut = base.turns[p].span[0]
            assert retry.token_ids[:cut] == base.token_ids[:cut]
            assert [t.response for t in retry.turns[:p]] == [t.response for t in base.turns[:p]]
            text = policy.decode(retry.token_ids)
            assert "walk right" not in text and "root cause" not in text.lower()
            assert not any("walk right" in m["content"] for m in retry.messages)
            assert retry.guidance and "walk right" in retry.guidance
            # the pivot's observation is shown once: the retry has as many user turns as turns (plus none extra)
            users = [m for m in retry.messages if m["role"] == "user"]
            assert len(users) == retry.num_turns
            assert users[p]["content"] == base.turns[p].prompt_text
            assert all(t.action == "right" for t in retry.turns[p:])  # the retry followed the guidance


def test_retry_starts_from_the_base_state_at_the_pivot(corridor_groups):
    _, groups = corridor_groups
    for g in groups:
        for retry in (t for t in g.trajectories if t.kind == "retry"):
            base = g.by_id()[retry.base_id]
            p = retry.pivot
            env = gym.make("r3ltest/Corridor-v0")
            r3l_envs.restore(env, base.turns[p].checkpoint)
            assert r3l_envs.checkpoint(env).step == p  # restored to the base's step p
            assert retry.turns[p].observation == base.turns[p].observation
            assert retry.turns[p].info["step"] == p + 1  # the env continued from step p, not from scratch


def expected_mask(traj, pivot):
    mask = [0] * len(traj.token_ids)
    for i, turn in enumerate(traj.turns):
        if pivot is None or i >= pivot:
            mask[turn.span[0] : turn.span[1]] = [1] * (turn.span[1] - turn.span[0])
    return mask


def test_masks_follow_pivotal_credit(corridor_groups):
    _, groups = corridor_groups
    for g in groups:
        retried = {t.base_id: t.pivot for t in g.trajectories if t.kind == "retry"}
        for t in g.trajectories:
            pivot = t.pivot if t.kind == "retry" else retried.get(t.id)
            assert t.loss_mask == expected_mask(t, pivot)
            assert sum(t.loss_mask) == sum(len(turn.token_ids) for turn in t.turns[pivot or 0 :])
            assert t.agent_mask == expected_mask(t, None)  # pivotal credit leaves the agent mask alone


def test_retry_logprobs_name_the_guided_context(corridor_groups):
    _, groups = corridor_groups
    for g in groups:
        for t in g.trajectories:
            guided = [turn.guided for turn in t.turns]
            if t.kind == "base":
                assert not any(guided) and not any(t.guided_mask())
                continue
            p = t.pivot
            assert guided == [False] * p + [True] * (t.num_turns - p)
            assert t.guided_mask() == expected_mask(t, p)  # exactly the agent tokens from the pivot on
            (seq,) = t.sequences()
            assert seq.guided_mask == t.guided_mask() and seq.loss_mask == t.loss_mask


def test_ids_are_stable_for_a_seed_and_differ_between_seeds():
    def ids(seed):
        config = ReflectRetryConfig(group_size=4, rollout=RolloutConfig(max_turns=3))
        rr = ReflectRetry("r3ltest/Corridor-v0", scripted(walker), PolicyReflector(scripted([diagnosis(1)])), config)
        (group,) = rr.collect(["corridor-train-000002"], seed=seed)
        return [(t.id, t.base_id) for t in group.trajectories]

    first = ids(0)
    assert ids(0) == first and len({i for i, _ in first}) == 4
    assert {i for i, _ in ids(1)}.isdisjoint({i for i, _ in first})
    unseeded = ids(None)
    assert {i for i, _ in unseeded}.isdisjoint({i for i, _ in ids(None)})  # random, not colliding


def test_aux_samples_only_when_the_retry_beat_its_base(corridor_groups):
    policy, groups = corridor_groups
    for g in groups:
        won = [t for t in g.trajectories if t.kind == "retry" and t.metadata["beat_base"]]
        for retry in (t for t in g.trajectories if t.kind == "retry"):
            base = g.by_id()[retry.base_id]
            assert retry.metadata["beat_base"] == (retry.won and base.reward == 0)
        assert sorted(s.kind for s in g.samples) == sorted(["reflection", "guided_retry"] * len(won))
        assert [s.metadata["pivot"] for s in g.samples if s.kind == "guided_retry"] == [t.pivot for t in won]
        assert g.metadata["stats"]["retries_beat_base"] == len(won)
    assert any(t.metadata.get("beat_base") for g in groups for t in g.trajectories)  # the rule was exercised
    assert any(t.kind == "retry" and not t.metadata["beat_base"] for g in groups for t in g.trajectories)
    sample = next(s for g in groups for s in g.samples if s.kind == "guided_retry")
    context = policy.decode([i for i, m in zip(sample.token_ids, sample.loss_mask, strict=True) if m == 0])
    target = policy.decode([i for i, m in zip(sample.token_ids, sample.loss_mask, strict=True) if m == 1])
    assert "walk right" in context and "walk right" not in target and "left" not in target
    refl = next(s for g in groups for s in g.samples if s.kind == "reflection")
    target = json.loads(policy.decode([i for i, m in zip(refl.token_ids, refl.loss_mask, strict=True) if m]))
    assert target["retry_from_step"] == refl.metadata["pivot"]  # canonical JSON with the pivot actually used


def test_without_reflection_samples_only_the_guided_retries_are_kept(corridor_groups):
    _, groups = corridor_groups
    config = ReflectRetryConfig(group_size=8, rollout=RolloutConfig(max_turns=10), reflection_samples=False)
    rr = ReflectRetry("r3ltest/Corridor-v0", scripted(recording_walker), PolicyReflector(scripted(REFLECTIONS)), config)
    without = rr.collect(["corridor-train-000000", "corridor-train-000001"], seed=3)
    for full, lean in zip(groups, without, strict=True):
        assert [t.token_ids for t in lean.trajectories] == [t.token_ids for t in full.trajectories]
        guided = [s.token_ids for s in full.samples if s.kind == "guided_retry"]
        assert guided and [s.token_ids for s in lean.samples] == guided


def test_beats_rule():
    from wrappers import Trajectory, Turn

    def traj(reward, turns):
        return Trajectory("e", "t", "t", reward=reward, turns=[Turn("o", "r", "a") for _ in range(turns)])

    assert beats(traj(1.0, 5), traj(0.0, 3))
    assert beats(traj(1.0, 2), traj(1.0, 3))  # same reward, fewer turns
    assert not beats(traj(1.0, 3), traj(1.0, 3))
    assert not beats(traj(0.5, 1), traj(0.0, 3))  # below the success threshold
    assert beats(traj(0.5, 1), traj(0.0, 3), success_threshold=0.5)


def test_groups_round_trip_through_jsonl(corridor_groups, tmp_path):
    _, groups = corridor_groups
    assert save_jsonl(tmp_path / "groups.jsonl", groups) == len(groups)
    back = list(load_jsonl(tmp_path / "groups.jsonl"))
    assert [g.to_dict() for g in back] == [g.to_dict() for g in groups]


def test_fill_tops_groups_up_and_checkpoints_are_dropped_by_default():
    config = ReflectRetryConfig(group_size=4, rollout=RolloutConfig(max_turns=4), fill=True, pivotal_credit=False)
    rr = ReflectRetry(
        "r3ltest/ReplayCorridor-v0", scripted(walker), PolicyReflector(scripted([diagnosis(1), "x"])), config
    )
    (group,) = rr.collect(["corridor-train-000002"], seed=0)
    assert [(t.kind, t.metadata.get("extra", False)) for t in group.trajectories] == [
        ("base", False),
        ("retry", False),
        ("base", False),
        ("base", True),
    ]
    assert all(turn.checkpoint is None for t in group.trajectories for turn in t.turns)
    assert sum(group.trajectories[0].loss_mask) == group.trajectories[0].num_tokens  # pivotal credit off


def test_retry_from_scratch_replays_every_turn_with_the_guidance():
    """restart="scratch": the same reflections, but each retry starts from turn 0 and is all target."""
    config = ReflectRetryConfig(group_size=4, rollout=RolloutConfig(max_turns=6), restart="scratch")
    rr = ReflectRetry("r3ltest/Corridor-v0", scripted(walker), PolicyReflector(scripted([diagnosis(3)] * 2)), config)
    (group,) = rr.collect(["corridor-train-000003"], seed=0)
    retries = [t for t in group.trajectories if t.kind == "retry"]
    assert len(retries) == 2
    for retry in retries:
        base = group.by_id()[retry.base_id]
        assert retry.pivot == 0 and all(t.action == "right" for t in retry.turns)  # turn 0 on, guided
        assert retry.turns[0].observation == base.turns[0].observation
        assert retry.loss_mask == expected_mask(retry, 0) and base.loss_mask == expected_mask(base, 0)
    assert group.metadata["stats"]["pivots"] == [0, 0]


def test_config_validation():
    with pytest.raises(ValueError, match="restart"):
        ReflectRetryConfig(restart="middle")
    with pytest.raises(ValueError, match="group_size"):
        ReflectRetryConfig(group_size=1)
    with pytest.raises(ValueError, match="history=None"):
        ReflectRetryConfig(rollout=RolloutConfig(history=2))


def test_pivotal_mask_zeroes_only_prefix_agent_tokens(corridor_groups):
    _, groups = corridor_groups
    base = groups[0].trajectories[2]  # not retried: full mask
    assert pivotal_mask(base, 0) == base.loss_mask
    assert sum(pivotal_mask(base, base.num_turns)) == 0


def countdown_solver(prompt_text):
    """Answers 1 + 2 (wrong) unless the guidance gives the answer, which it then copies."""
    found = re.search(r"The correct answer is (.+?)\.\n", prompt_text)
    return f"<action>{found.group(1)}</action>" if found else "<action>1 + 2</action>"


def test_oracle_drives_a_successful_countdown_retry():
    config = ReflectRetryConfig(group_size=4)
    oracle = OracleReflector(reveal_answer=True, math_pivot="first_wrong")  # last_wrong: test_math_pivot.py
    rr = ReflectRetry("r3l/Countdown-v0", scripted(countdown_solver), oracle, config)
    groups = rr.collect(["countdown-train-000000", "countdown-train-000001"], seed=0)
    for g in groups:
        assert [(t.kind, t.won) for t in g.trajectories] == [("base", False), ("retry", True)] * 2
        assert all(t.num_turns == 3 for t in g.trajectories if t.kind == "base")
        for retry in g.trajectories[1::2]:
            assert retry.pivot == 0 and retry.metadata["beat_base"]  # the first wrong attempt
            assert "correct answer" not in json.dumps(retry.messages)
        assert g.metadata["stats"]["retries_beat_base"] == 2 and len(g.samples) == 4
        refl = g.trajectories[0].metadata["reflection"]
        assert refl["source"] == "oracle" and refl["outcome"] == "failure" and "answered '1 + 2'" in refl["root_cause"]
    assert aggregate_stats(groups)["beat_base_rate"] == 1.0


def test_math_oracle_does_not_leak_the_answer_by_default():
    rr = ReflectRetry(
        "r3l/Countdown-v0", scripted(countdown_solver), OracleReflector(), ReflectRetryConfig(group_size=2)
    )
    (g,) = rr.collect(["countdown-train-000003"], seed=0)
    env = gym.make("r3l/Countdown-v0")
    env.reset(options={"task_id": "countdown-train-000003"})
    answer = env.unwrapped.reference_answer()
    retry = g.trajectories[1]
    assert retry.kind == "retry" and answer not in retry.guidance and not retry.won
    assert g.samples == []  # the retry did not beat its base


def test_self_reflection_with_a_random_model_never_crashes(tiny_policy):
    from wrappers import SamplingParams

    rollout = RolloutConfig(sampling=SamplingParams(max_new_tokens=12), max_turns=3, constrained=True)
    config = ReflectRetryConfig(group_size=4, rollout=rollout, fill=True)
    reflector = PolicyReflector(tiny_policy, SamplingParams(max_new_tokens=24))
    groups = ReflectRetry("r3ltest/Corridor-v0", tiny_policy, reflector, config).collect(
        ["corridor-train-000003"], seed=1
    )
    (group,) = groups
    stats = aggregate_stats(groups)
    assert len(group.trajectories) == 4 and stats["bases"] == 2
    assert stats["reflections_parsed"] + sum(stats["reflection_failures"].values()) == 2
    assert stats["reflection_failures"]  # random bytes are no JSON: counted, not raised


def test_guided_retry_sample_is_the_context_the_retry_was_generated_from(corridor_groups):
    policy, groups = corridor_groups
    samples = [s for g in groups for s in g.samples if s.kind == "guided_retry"]
    assert samples
    for sample in samples:
        first_target = sample.loss_mask.index(1)
        context = policy.tokenizer.decode(sample.token_ids[:first_target], skip_special_tokens=False)
        assert context in SEEN and context.count("walk right") == 1


def test_a_success_claimed_on_a_failed_base_is_counted():
    claim = json.dumps({"trajectory_outcome": "success", "trajectory_summary": "done"})
    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=3))
    rr = ReflectRetry("r3ltest/Corridor-v0", scripted(walker), PolicyReflector(scripted([claim])), config)
    (group,) = rr.collect(["corridor-train-000004"], seed=0)
    assert [t.kind for t in group.trajectories] == ["base"] and not group.trajectories[0].won
    assert group.metadata["stats"]["reflection_notes"] == {"success_claimed_on_failure": 1}


def test_r3l_show_renders_base_beside_retry_with_the_pivot(corridor_groups, tmp_path, capsys):
    from r3l_learn.cli.main import main

    _, groups = corridor_groups
    save_jsonl(tmp_path / "groups.jsonl", groups)
    assert main(["show", str(tmp_path / "groups.jsonl"), "--html", str(tmp_path / "groups.html")]) == 0
    text = capsys.readouterr().out
    retry = next(t for g in groups for t in g.trajectories if t.kind == "retry")
    assert f"pivot {retry.pivot}" in text and "▶" in text and "reflection" in text
    assert retry.turns[retry.pivot].action in text
    page = (tmp_path / "groups.html").read_text()
    assert page.startswith("<!doctype html>") and "class='pivot'" in page and page.count("<script") == 1
