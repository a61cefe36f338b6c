"""Chapter 5 checks: their wrong answers live in the package table (fundamentallm/checks/ch05.py,
run by tests/test_catches.py); correct answers and stubs: tests/test_course.py. Here: the check of
the branch scale accepts the depth-independent scales a student may reasonably choose."""

import pytest

from fundamentallm import checks


@pytest.mark.parametrize("scale", [lambda L: L ** -0.5, lambda L: (2 * L) ** -0.5, lambda L: 2 / L ** 0.5])
def test_branch_scale_accepts_any_constant_over_sqrt_depth(scale):
    assert checks.check_branch_scale(scale) is True
