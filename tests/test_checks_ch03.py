"""Chapter 3 checks: the wrong answers each check rejects live in the package's table
(fundamentallm/checks/ch03.py, run by tests/test_catches.py); correct answers and stubs:
tests/test_course.py. Here: the graded prediction never states its answer on a wrong attempt."""

import itertools

import pytest

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

RIGHT = [3, 3, 4, 4, 5, 5]


@pytest.mark.parametrize("answer", [list(a) for a in itertools.islice(itertools.product(range(6), repeat=6), 0, 46656, 997)]
                         + [[0, 1, 2, 3, 4, 5], [3, 4, 5, 3, 4, 5], [3, 3, 4, 4, 5, 4]])
def test_the_split_prediction_never_reveals_its_answer(answer):
    if answer == RIGHT:
        return
    with pytest.raises(CheckFailed) as info:
        checks.check_buggy_split_prediction(answer)
    message = str(info.value).replace(" ", "")
    assert "[3,3,4,4,5,5]" not in message and "3,3,4,4,5,5" not in message


def test_the_split_prediction_passes_the_right_rows():
    assert checks.check_buggy_split_prediction(RIGHT) is True
