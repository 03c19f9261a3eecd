"""Reflection parsing (fenced/surrounded JSON, string integers, missing fields, the pivot rule), the prompt,
and the model reflector's failure handling."""

import json

import pytest

from wrappers import Trajectory, Turn
from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflection import (
    FAILURE_REASONS,
    PolicyReflector,
    ReflectionRequest,
    Reflector,
    parse_reflection,
    reflection_messages,
)

pytest.importorskip("transformers")


def reply(**fields):
    data = {
        "trajectory_summary": "walked left",
        "root_cause_analysis": "wrong direction",
        "trajectory_outcome": "failure",
        "improvement_suggestion": "walk right",
        "retry_from_step": 2,
    }
    data.update(fields)
    return json.dumps({k: v for k, v in data.items() if v is not ...})


def test_plain_json():
    r = parse_reflection(reply(), 5)
    assert r.ok and r.wants_retry and r.pivot == 2 and r.outcome == "failure"
    assert (r.summary, r.root_cause, r.suggestion) == ("walked left", "wrong direction", "walk right")
    assert "walk right" in r.guidance() and "wrong direction" in r.guidance()


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + reply() + "\n```",
        "Here is my analysis:\n```\n" + reply() + "\n```\nHope it helps.",
        "Sure! " + reply() + " That is all.",
        "{not json} and then " + reply(),
    ],
)
def test_fenced_or_surrounded_json(text):
    r = parse_reflection(text, 5)
    assert r.ok and r.pivot == 2


@pytest.mark.parametrize("raw", ["2", " 2 ", 2.0, "step 2"])
def test_string_and_float_pivots(raw):
    r = parse_reflection(reply(retry_from_step=raw), 5)
    assert r.ok and r.pivot == 2


def test_missing_optional_fields_are_empty():
    r = parse_reflection(reply(trajectory_summary=..., root_cause_analysis=...), 5)
    assert r.ok and r.summary == "" and r.root_cause == "" and r.pivot == 2


def test_outcome_spelling_is_normalised():
    assert parse_reflection(reply(trajectory_outcome="Success but inefficient"), 5).outcome == "success_but_inefficient"


def test_success_needs_no_pivot():
    r = parse_reflection(reply(trajectory_outcome="success", retry_from_step=...), 5)
    assert r.ok and not r.wants_retry and r.pivot is None


def test_pivot_beyond_the_end_is_clamped_and_noted():
    r = parse_reflection(reply(retry_from_step=9), 5)
    assert r.ok and r.pivot == 4 and r.notes == ["pivot_clamped"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("I think the agent should walk right.", "no_json"),
        ("{'retry_from_step': 2,}", "invalid_json"),
        (reply(trajectory_outcome="meh"), "bad_outcome"),
        (reply(trajectory_outcome=...), "bad_outcome"),
        (reply(retry_from_step=...), "missing_pivot"),
        (reply(retry_from_step=""), "missing_pivot"),
        (reply(retry_from_step="two"), "bad_pivot"),
        (reply(retry_from_step="2 or 3"), "bad_pivot"),
        (reply(retry_from_step=True), "bad_pivot"),
        (reply(retry_from_step=2.5), "bad_pivot"),
        (reply(retry_from_step=-1), "pivot_negative"),
        (reply(root_cause_analysis="", improvement_suggestion=...), "no_guidance"),
        (reply(root_cause_analysis="<text>", improvement_suggestion=" <text> "), "no_guidance"),  # copied schema
    ],
)
def test_failures_have_reasons(text, reason):
    r = parse_reflection(text, 5)
    assert not r.ok and not r.wants_retry and r.error == reason and reason in FAILURE_REASONS


def test_no_turns_cannot_be_retried():
    assert parse_reflection(reply(retry_from_step=0), 0).error == "no_turns"


def _trajectory(env_id="r3l/Countdown-v0"):
    turns = [Turn(observation="What is 6 * 7?", response="<action>41</action>", action="41", outcome="Incorrect.")]
    return Trajectory(env_id=env_id, task_id="t0", task="What is 6 * 7?", turns=turns, stop_reason="terminated")


def test_prompt_uses_the_env_family_and_the_final_feedback():
    system, user = reflection_messages(_trajectory())
    assert "math problems" in system["content"] and "ALFWorld" not in system["content"]
    assert "Step 0" in user["content"] and "Action: 41" in user["content"] and "Result: Incorrect." in user["content"]
    assert "total reward 0" in user["content"] and "(0 to 0)" in user["content"]


def test_policy_reflector_parses_each_reply_in_order():
    from r3l_learn.policies.scripted import ScriptedPolicy

    policy = ScriptedPolicy(["```json\n" + reply(retry_from_step="0") + "\n```", "no idea"])
    reflector = PolicyReflector(policy)
    assert isinstance(reflector, Reflector) and isinstance(OracleReflector(), Reflector)
    out = reflector.reflect([ReflectionRequest(_trajectory()), ReflectionRequest(_trajectory())])
    assert [r.error for r in out] == [None, "no_json"]
    assert out[0].pivot == 0 and out[0].source == "scripted" and out[0].prompt[0]["role"] == "system"
    assert out[0].token_ids and len(out[0].token_ids) == len(out[0].logprobs)


def test_policy_reflector_reports_a_prompt_that_cannot_fit():
    from r3l_learn.policies.scripted import ScriptedPolicy

    policy = ScriptedPolicy([reply()], max_context=300)
    (r,) = PolicyReflector(policy).reflect([ReflectionRequest(_trajectory())])
    assert r.error == "prompt_too_long"


def test_tiny_model_reflections_never_crash(tiny_policy):
    from wrappers import SamplingParams

    reflector = PolicyReflector(tiny_policy, SamplingParams(max_new_tokens=16))
    out = reflector.reflect([ReflectionRequest(_trajectory()) for _ in range(3)])
    assert len(out) == 3 and all(r.error in FAILURE_REASONS for r in out)  # random bytes are no JSON


def test_prefill_starts_the_answer():
    from r3l_learn.policies.scripted import ScriptedPolicy

    prefill = '{"trajectory_summary": "'
    rest = reply(retry_from_step="0")[len(prefill) :]
    seen = []

    def rule(prompt_text):
        seen.append(prompt_text)
        return rest

    (r,) = PolicyReflector(ScriptedPolicy(rule), prefill=prefill).reflect([ReflectionRequest(_trajectory())])
    assert r.ok and r.pivot == 0 and r.text == prefill + rest and seen[0].endswith(prefill)
