"""Task sources: CHAMP's prose answers turned into gradable golds, and their grading."""

import pytest

from r3l_envs.math.sources import ChampSource, champ_golds


@pytest.mark.parametrize(
    ("raw", "golds"),
    [
        ("239", ("239",)),
        ("@@C(10, 5)@@, or equivalently @@252@@", ("C(10, 5)", "252")),
        ("@@5/14@@, or approximately 35.7%", ("5/14",)),
        ("@@2^(n-1)@@", ("2^(n-1)",)),
        ("100 (i.e., all values)", ("100",)),
        ("0 is the only possible value", ("0",)),
        ("At most 0 values (i.e., no such values)", ("0",)),
        ("2 inequalities", ("2",)),
        ("The limit exists and is equal to @@2/3@@", ("2/3",)),
        ("The only possible value for the limit is 4", ("4",)),
        ("No integer solutions", ("No integer solutions",)),
        (
            "Yes, and the sequence is @@1/2^3, 1/2^6, 1/2^9, ...@@",
            ("Yes, and the sequence is 1/2^3, 1/2^6, 1/2^9, ...", "Yes"),
        ),
    ],
)
def test_champ_golds(raw, golds):
    assert champ_golds(raw) == golds


@pytest.fixture(scope="module")
def champ():
    return ChampSource("all")


@pytest.mark.parametrize(
    ("task_id", "reply", "correct"),
    [
        ("P_Combinatorics_2", "\\boxed{252}", True),
        ("P_Combinatorics_2", "\\boxed{\\binom{10}{5}}", True),
        ("P_Combinatorics_2", "\\boxed{250}", False),
        ("P_Combinatorics_17", "The answer is no.", True),
        ("P_Combinatorics_17", "\\boxed{on}", False),  # math-verify alone would read both as the product n*o
        ("P_Combinatorics_17", "\\boxed{Yes}", False),
        ("P_Inequality_18", "\\boxed{\\frac{1}{\\sqrt{3}}}", True),
        ("P_Number-Theory_7", "\\boxed{\\text{No integer solutions}}", True),
    ],
)
def test_champ_grading(champ, task_id, reply, correct):
    assert champ.grade(champ.task(task_id), reply, timeout=5.0).correct is correct


def test_every_champ_reference_grades_correct_and_a_wrong_number_does_not(champ):
    for task_id in champ.task_ids[::9]:
        task = champ.task(task_id)
        assert champ.grade(task, f"The final answer is {task.reference}", timeout=5.0).correct, task_id
        assert not champ.grade(task, "\\boxed{98765}", timeout=5.0).correct, task_id
