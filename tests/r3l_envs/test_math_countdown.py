"""Countdown: the puzzle generator and the safe exact expression checker."""

from fractions import Fraction

import pytest

from r3l_envs.math.countdown import check_expression, generate_puzzle

NUMBERS, TARGET = (3, 5, 7, 100), 36


def test_accepts_a_right_expression():
    verdict = check_expression("(3 + 5) * 7 - 100 / 5", (3, 5, 7, 100, 5), TARGET)
    assert verdict.correct and verdict.value == Fraction(36)
    assert check_expression("(100 - 7 * 3 - 5) / 2", (100, 7, 3, 5, 2), 37).correct


def test_exact_rational_arithmetic():
    assert check_expression("7 / 3 * 3", (7, 3, 3), 7).correct  # floats would give 7.000000000000001
    assert not check_expression("7 / 2", (7, 2), 3).correct


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("(3 + 5) * 7 - 100 / 5", "more often than given"),
        ("3 + 5 + 28", "not one of the given numbers"),
        ("__import__('os').system('true')", "not allowed"),
        ("3 ** 100", "Powers"),
        ("3 ^ 5 ^ 7", "Powers"),
        ("100 / (5 - 5)", "divides by zero"),
        ("100 / (7 - 7)", "divides by zero"),
        ("-3 + 5", "Unary minus"),
        ("(3 + 5", "not closed"),
        ("3 5", "Unexpected"),
        ("3.5 * 2", "not allowed"),
        ("1" * 40, "not one of the given numbers"),
        ("(" * 400 + "3" + ")" * 400, "longer than"),
        ("(" * 60 + "3" + ")" * 60, "nested"),
        ("", "empty"),
        ("3 + 5", "evaluates to 8, not 36"),
    ],
)
def test_rejects_with_a_reason(expression, reason):
    verdict = check_expression(expression, NUMBERS, TARGET)
    assert not verdict.correct
    assert reason in verdict.message


def test_accepts_common_spellings_and_restated_result():
    assert check_expression(r"(3 + 5) \times 7 - 100 \div 5", (3, 5, 7, 100, 5), 36).correct
    assert check_expression("(3 + 5) × 7 − 20 = 36", (3, 5, 7, 20), 36).correct


def test_generated_puzzles_are_deterministic_and_solvable():
    puzzles = [generate_puzzle(f"test/{i}") for i in range(300)]
    assert puzzles == [generate_puzzle(f"test/{i}") for i in range(300)]
    assert len({p.numbers for p in puzzles}) > 250
    for puzzle in puzzles:
        assert len(puzzle.numbers) == 4 and all(1 <= n <= 100 for n in puzzle.numbers)
        assert 2 <= puzzle.target <= 1000 and puzzle.target not in puzzle.numbers
        assert check_expression(puzzle.solution, puzzle.numbers, puzzle.target).correct
    assert generate_puzzle("a", num_numbers=6).numbers != generate_puzzle("a").numbers
