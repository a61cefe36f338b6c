"""The check of exercise ch04-ex6 passes the book's solution and a row-index version written
independently (wrong answers: the package table in fundamentallm/checks/ch04.py)."""

import pytest
from book_solutions import book_solution

from fundamentallm import checks

interleaved_to_half = book_solution("ch04-ex6", "interleaved_to_half")


def by_index(weight, num_heads):
    D = weight.shape[0] // num_heads
    rows = [h * D + (2 * j if j < D // 2 else 2 * (j - D // 2) + 1)
            for h in range(num_heads) for j in range(D)]
    return weight[rows]


@pytest.mark.parametrize("fn", [interleaved_to_half, by_index])
def test_correct_answers_pass(fn):
    assert checks.check_interleaved_to_half(fn) is True
    assert checks.check_interleaved_to_half(fn, seed=5) is True
