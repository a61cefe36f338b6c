"""The check of exercise ch04-ex6 (helper tok, issue 28): it passes the book's solution and the
package's permute_rope_weights, and fails a stub and plausible wrong answers."""

import pytest
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

interleaved_to_half = book_solution("ch04-ex6", "interleaved_to_half")


def by_index(weight, num_heads):
    D = weight.shape[0] // num_heads
    rows = [h * D + (2 * j if j < D // 2 else 2 * (j - D // 2) + 1)
            for h in range(num_heads) for j in range(D)]
    return weight[rows]


def stub(weight, num_heads):
    raise NotImplementedError


def unchanged(weight, num_heads):
    return weight


def inverse(weight, num_heads):  # half -> interleaved: the other direction
    D = weight.shape[0] // num_heads
    return weight.reshape(num_heads, 2, D // 2, *weight.shape[1:]).transpose(1, 2).reshape(weight.shape)


def whole_matrix(weight, num_heads):  # ignores the heads: one permutation over all rows
    return by_index(weight, 1)


def swapped_halves(weight, num_heads):  # the pairs land on (k + D/2, k): a reflection, not a rotation
    D = weight.shape[0] // num_heads
    half = by_index(weight, num_heads).reshape(num_heads, 2, D // 2, *weight.shape[1:])
    return half.flip(1).reshape(weight.shape)


def via_package(weight, num_heads):
    from fundamentallm.interop import permute_rope_weights
    return permute_rope_weights(weight, num_heads)


@pytest.mark.parametrize("fn", [interleaved_to_half, by_index])
def test_correct_answers_pass(fn):
    assert checks.check_interleaved_to_half(fn) is True
    assert checks.check_interleaved_to_half(fn, seed=5) is True


@pytest.mark.parametrize("fn,message", [
    (stub, "NotImplementedError"),
    (unchanged, "attention scores"),
    (inverse, "attention scores"),
    (whole_matrix, "attention scores"),
    (swapped_halves, "attention scores"),
    (via_package, "permute_rope_weights"),
])
def test_wrong_answers_fail(fn, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_interleaved_to_half(fn)
