"""math-verify grading in its worker subprocess: correctness, hard timeout off the main thread, recovery."""

import multiprocessing
import threading
import time

import pytest

from r3l_envs.math import grading
from r3l_envs.math.grading import GradeResult, grade

# Measured: math-verify does not return on this within minutes (sympy evaluates the tower in C).
PATHOLOGICAL = "9^{9^{9^{9^{9}}}}"


@pytest.mark.parametrize(
    ("answer", "gold", "correct"),
    [
        (r"\frac{1}{2}", "0.5", True),
        ("0.51", "0.5", False),
        (r"\sqrt{3}/2", r"\frac{\sqrt{3}}{2}", True),
        ("1000", "1,000", True),
        ("(x+1)^2", "x^2+2x+1", True),
        (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{\pi}{2})", True),
        ("4", "5", False),
    ],
)
def test_grades_equivalence(answer, gold, correct):
    assert grade(answer, gold) == GradeResult(correct, "ok")


def test_boxed_half_equals_gold_half():
    from r3l_envs.math.answers import extract_answer

    assert grade(extract_answer(r"\boxed{\frac{1}{2}}"), "0.5").correct
    assert not grade(extract_answer(r"\boxed{0.51}"), "0.5").correct


def test_any_gold_alternative_counts():
    assert grade("252", ["C(10, 5)", "252"]).correct
    assert not grade("253", ["C(10, 5)", "252"]).correct


def test_junk_is_incorrect_not_an_error():
    assert not grade("\ud800 ]]{{", "1").correct
    assert grade("", "1") == GradeResult(False, "empty")
    assert grade("1" * (grading.MAX_ANSWER_CHARS + 1), "1") == GradeResult(False, "too_long")


def test_pathological_input_times_out_from_a_worker_thread():
    grade("1", "1")  # start the worker outside the timed part
    results = []
    thread = threading.Thread(target=lambda: results.append(grade(PATHOLOGICAL, "1", timeout=1.0)))
    start = time.monotonic()
    thread.start()
    thread.join(timeout=30)
    elapsed = time.monotonic() - start
    assert results == [GradeResult(False, "timeout")]
    assert elapsed < 3.0, f"grading took {elapsed:.1f} s despite a 1 s timeout"
    assert grade(r"\frac{1}{2}", "0.5").correct  # a fresh worker serves the next call


def test_concurrent_threads_get_their_own_answers():
    cases = [(str(i), str(i), True) for i in range(8)] + [(str(i), str(i + 1), False) for i in range(8)]
    results = {}

    def run(index, answer, gold):
        results[index] = grade(answer, gold).correct

    threads = [threading.Thread(target=run, args=(i, *case[:2])) for i, case in enumerate(cases)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [results[i] for i in range(len(cases))] == [case[2] for case in cases]


def _grade_in_child(pair):
    return grade(*pair).correct


def test_works_inside_daemonic_multiprocessing_workers():
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:  # pool workers are daemonic: they may not start multiprocessing children
        assert pool.map(_grade_in_child, [(r"\frac{1}{2}", "0.5"), ("0.51", "0.5")]) == [True, False]


def test_shutdown_then_grade_restarts():
    grading.shutdown()
    assert grade("2", "2").correct
