"""Chapter 2 checks: the wrong answers each check rejects live in the package's table
(fundamentallm/checks/ch02.py, run by tests/test_catches.py); correct answers and stubs:
tests/test_course.py. Here: a lookup table of the inputs a notebook sees does not pass when the
grader draws fresh ones, and the three-choice prediction is a self-check."""

import math

import pytest
import torch

from fundamentallm import checks
from fundamentallm.checks import CheckFailed
from fundamentallm.checks.core import SELF_CHECK, grading_seed


def _recording(fn):
    seen = {}

    def answer(*args):
        key = tuple(args)
        seen[key] = fn(*args)
        return seen[key]

    def table(*args):
        return seen[tuple(args)]  # KeyError for an input it never saw

    return answer, table


@pytest.mark.parametrize("name,fn", [
    ("check_score_scale", lambda d, a, b: 1.0 / (a * b * math.sqrt(d))),
    ("check_make_causal_mask", lambda T: torch.ones(T, T, dtype=torch.bool).tril()),
    ("check_prefix_lm_mask", lambda T, p: (torch.arange(T)[None] <= torch.arange(T)[:, None]) | (torch.arange(T)[None] < p)),
])
def test_a_table_of_the_notebooks_inputs_fails_when_grading(name, fn):
    answer, table = _recording(fn)
    assert checks.CHECKS[name](answer) is True  # the notebook's inputs, recorded
    assert checks.CHECKS[name](table) is True  # the table answers them
    with grading_seed(12345), pytest.raises(CheckFailed):
        checks.CHECKS[name](table)  # fresh inputs: the table has no entry


def test_the_permutation_prediction_is_a_self_check():
    assert "check_permutation_prediction" in SELF_CHECK
