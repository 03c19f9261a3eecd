"""The math oracle's pivot rule: ``last_wrong`` (the default) retries the last failed attempt with the earlier
attempts and their feedback as a prefix shared with the base, so pivotal credit applies; ``first_wrong`` (the
rule before) restarts at attempt 0 and shares nothing. Each retry records the rule that chose its pivot."""

import re

import pytest

from wrappers.retry.oracle import OracleReflector
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig, pivotal_mask

pytest.importorskip("transformers")

TASKS = ["countdown-train-000000", "countdown-train-000001"]


def countdown_solver(prompt_text):
    """Answers 1 + 2 (wrong) unless the guidance gives the answer, which it then copies."""
    found = re.search(r"The correct answer is (.+?)\.\n", prompt_text)
    return f"<action>{found.group(1)}</action>" if found else "<action>1 + 2</action>"


def collect(**oracle):
    from r3l_learn.policies.scripted import ScriptedPolicy

    reflector = OracleReflector(reveal_answer=True, **oracle)
    rr = ReflectRetry("r3l/Countdown-v0", ScriptedPolicy(countdown_solver), reflector, ReflectRetryConfig(group_size=2))
    try:
        return [g.trajectories for g in rr.collect(TASKS, seed=0)]
    finally:
        rr.close()


def test_last_wrong_retries_the_last_attempt_on_a_shared_prefix_with_pivotal_credit():
    for base, retry in collect():
        assert base.num_turns == 3 and not base.won  # three wrong attempts, the env's max_attempts
        assert retry.pivot == 2 and retry.won and retry.metadata["beat_base"]
        assert retry.metadata["pivot_rule"] == base.metadata["reflection"]["pivot_rule"] == "last_wrong"
        # the failed attempts and their feedback are shared, token for token
        assert [t.action for t in retry.turns[:2]] == [t.action for t in base.turns[:2]]
        cut = base.turns[2].span[0]
        assert retry.token_ids[:cut] == base.token_ids[:cut] and "Incorrect" in retry.turns[2].prompt_text
        # pivotal credit: the shared attempts train in neither trajectory; the retried attempt does
        for traj in (base, retry):
            assert traj.loss_mask == pivotal_mask(traj, 2) and sum(traj.loss_mask) < sum(traj.agent_mask)
            start, end = traj.turns[2].span
            assert traj.loss_mask[start:end] == traj.agent_mask[start:end] and any(traj.agent_mask[start:end])


def test_first_wrong_keeps_the_old_rule_and_says_so():
    for base, retry in collect(math_pivot="first_wrong"):
        assert retry.pivot == 0 and retry.won and retry.metadata["pivot_rule"] == "first_wrong"
        assert base.loss_mask == base.agent_mask  # pivot 0: nothing shared, no credit to assign


def test_an_unknown_math_pivot_rule_is_refused():
    with pytest.raises(ValueError, match="math_pivot must be one of"):
        OracleReflector(math_pivot="middle")
