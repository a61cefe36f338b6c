"""Chapter 1 checks: the wrong answers each check rejects live in the package's table
(fundamentallm/checks/ch01.py, run by tests/test_catches.py); correct answers and stubs:
tests/test_course.py. Here: the numbers the solutions' prose states."""

import math

from book_solutions import book_solution


def test_jordan_peak_is_what_the_solution_says():
    norm = book_solution("ch01-ex3", "jordan_gradient_norm")
    values = [norm(0.9, 1.0, k) for k in range(101)]
    k_peak = max(range(101), key=values.__getitem__)
    assert k_peak == 9 and 3.85 < values[9] < 3.95
    assert math.isclose(norm(0.9, 1.0, 0), 1.0) and math.isclose(norm(0.9, -2.0, 5), norm(0.9, 2.0, 5))


def test_bound_slack_of_the_chapter_example():
    slack = book_solution("ch01-ex5", "bound_slack")
    assert 7.3e5 < slack(2.0, 20, 8.0) < 7.5e5
    assert math.isclose(slack(1.0, 7, 0.5), slack(3.0, 7, 0.5))  # independent of a
