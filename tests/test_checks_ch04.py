"""Chapter 4 checks: their wrong answers live in the package table (fundamentallm/checks/ch04.py,
run by tests/test_catches.py); correct answers and stubs: tests/test_course.py. Here: the checks'
references equal the package."""

import torch


def test_the_rope_reference_agrees_with_the_package():
    """The check's rotation matrix R_m equals fundamentallm's rotary embedding at position m."""
    from fundamentallm.checks.ch04 import _rope_rotation
    from fundamentallm.positions import RotaryEmbedding

    x = torch.randn(1, 1, 12, 8, dtype=torch.float64)
    rotated = RotaryEmbedding(8, 16)(x.float()).double()  # positions 0..11
    for m in (0, 5, 11):
        torch.testing.assert_close(rotated[0, 0, m], _rope_rotation(m, 8, 10000.0) @ x[0, 0, m],
                                   atol=1e-5, rtol=1e-5)


def test_the_alibi_reference_agrees_with_a_position_ordered_computation():
    """The check's mean distance equals one computed with the keys in position order (j = 0 .. T-1)."""
    from fundamentallm.checks.ch04 import _alibi_mean_distance

    H, T = 8, 40
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)
    d = torch.arange(T - 1, -1, -1, dtype=torch.float64)  # i - j for the last query, j = 0 .. T-1
    w = torch.softmax(-slopes[:, None] * d, dim=-1)
    torch.testing.assert_close(_alibi_mean_distance(H, T), (w * d).sum(-1))
