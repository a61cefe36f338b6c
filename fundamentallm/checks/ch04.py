"""Checks for the exercises of chapter 4: tokens to vectors (positions)."""

from __future__ import annotations

from typing import Callable

import torch

from .core import (
    CheckFailed,
    _as_tensor,
    _expect_value_error,
    assert_same,
    check_shape,
    exercise_check,
)


@exercise_check(forbidden=("fundamentallm.positions.rotate_half",))
def check_rotate_half(rotate_half: Callable) -> str:
    """``rotate_half(x)``: ``(x1, x2) -> (-x2, x1)`` on the two halves of the last dimension;
    ``ValueError`` for an odd last dimension."""
    g = torch.Generator().manual_seed(8)
    x = torch.arange(1.0, 7.0)
    out = rotate_half(x.clone())
    assert_same(out, torch.tensor([-4.0, -5.0, -6.0, 1.0, 2.0, 3.0]),
                what="rotate_half([1, 2, 3, 4, 5, 6]) (halves, not interleaved pairs)")
    for shape in [(2, 8), (2, 3, 5, 4), (1, 2)]:
        x = torch.randn(shape, generator=g)
        half = shape[-1] // 2
        expected = torch.empty_like(x)
        expected[..., :half], expected[..., half:] = -x[..., half:], x[..., :half]
        assert_same(rotate_half(x.clone()), expected, what=f"rotate_half(x of shape {shape})")
    _expect_value_error(lambda: rotate_half(torch.zeros(2, 5)), "rotate_half(x with last dimension 5)", "5")
    return "known answer, batched shapes and the odd-size validation"


def _ref_rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """RoPE through complex numbers: channel pair (i, i + D/2) is z = x_i + j·x_{i+D/2}, and
    rotating it by angle a is multiplying by e^{j·a}."""
    D = x.shape[-1]
    x64 = x.double()
    z = torch.complex(x64[..., : D // 2], x64[..., D // 2:])  # (..., T, D/2)
    freqs = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angles = positions.double()[:, None] * freqs  # (T, D/2)
    z = z * torch.polar(torch.ones_like(angles), angles)
    return torch.cat([z.real, z.imag], dim=-1)


@exercise_check
def check_apply_rope(apply_rope: Callable) -> str:
    """``apply_rope(x, positions, base=10000.0)``: rotate each pair ``(x_i, x_{i+D/2})`` of the
    ``(..., T, D)`` tensor by ``positions[t] · base^(-2i/D)``; ``positions`` is a ``(T,)`` tensor."""
    g = torch.Generator().manual_seed(9)
    cases = [((1, 4, 8), torch.arange(4), 10000.0, "positions 0..3"),
             ((2, 3, 5, 6), torch.arange(5) + 7, 10000.0, "positions 7..11"),
             ((2, 3, 16), torch.tensor([9, 0, 4]), 10000.0, "positions [9, 0, 4] in any order"),
             ((6, 4), torch.arange(6), 100.0, "base 100")]
    for shape, pos, base, name in cases:
        x = torch.randn(shape, generator=g)
        out = apply_rope(x.clone(), pos, base) if base != 10000.0 else apply_rope(x.clone(), pos)
        what = f"apply_rope(x of shape {shape}, {name})"
        check_shape(out, shape, what=what)
        assert_same(_as_tensor(out).double(), _ref_rope(x, pos, base), atol=1e-5, rtol=1e-4,
                    what=f"{what} (pair channel i with i + D/2, angle = position · base^(-2i/D), "
                         f"x·cos + rotate_half(x)·sin)")
    return f"{len(cases)} cases equal to a complex-number reference"


@exercise_check
def check_alibi_bias(alibi_bias: Callable) -> str:
    """``alibi_bias(num_heads, T)`` -> ``(H, T, T)`` ALiBi biases: ``-m_h·(i - j)`` for keys
    ``j <= i`` and ``-inf`` above the diagonal, with slopes ``m_h = 2^(-8(h+1)/H)``."""
    cases = [(8, 5), (4, 3), (1, 4), (16, 2)]
    for H, T in cases:
        slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)  # (H,)
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        expected = -slopes[:, None, None] * (i - j).to(torch.float64)  # (H, T, T)
        expected = expected.masked_fill(j > i, float("-inf"))
        got = alibi_bias(H, T)
        what = f"biases for num_heads={H}, T={T}"
        check_shape(got, (H, T, T), what=what)
        got = torch.as_tensor(got).double()
        future = (j > i).expand(H, T, T)
        if T > 1 and not (torch.isinf(got[future]) & (got[future] < 0)).all():
            raise CheckFailed(f"{what}: keys after the query (j > i) must get -inf (causal)")
        past = ~future
        if H > 1 and torch.allclose(got[0][past[0]], got[-1][past[0]]):
            raise CheckFailed(f"{what}: every head has the same slope; head h uses 2^(-8(h+1)/H)")
        assert_same(got[past], expected[past], what=what + " on and below the diagonal")
    return f"matches the ALiBi formula on {len(cases)} shapes"


@exercise_check(may_return_none=True)
def check_no_position_prediction(no_position_prediction) -> str:
    """``no_position_prediction``: for a transformer without positional encoding reading
    ``[BOS, a, a, ..., a]``: can the outputs at the repeated ``a`` differ (``"causal"``,
    ``"bidirectional"``: bool), and does the difference between neighbouring positions
    ``"shrink"``, ``"stay"`` or ``"grow"`` along the sequence in the causal model (``"neighbours"``)."""
    from .ch01 import choice_answers

    answer = choice_answers(no_position_prediction, "no_position_prediction",
                            {"causal": (True, False), "bidirectional": (True, False),
                             "neighbours": ("shrink", "stay", "grow")})
    if answer["bidirectional"]:
        raise CheckFailed("bidirectional: every 'a' has the same token vector and reads the same set "
                          "of keys (BOS and all the a's), so every layer gives every 'a' the same output")
    if not answer["causal"]:
        raise CheckFailed("causal: the 'a' at position t reads BOS and t copies of 'a'; the softmax "
                          "shares its weight among them, so BOS's share, and the output, changes with t")
    if answer["neighbours"] != "shrink":
        raise CheckFailed("neighbours: with equal scores BOS's share at position t is 1/(t + 1); from t "
                          "to t + 1 it changes by 1/((t + 1)(t + 2)), less and less as t grows")
    return ("the causal mask leaks position, through BOS's share of the weight, and less and less "
            "clearly as the sequence grows")


def _rope_rotation(position: float, D: int, base: float) -> torch.Tensor:
    """(D, D) matrix R_m of the half convention: rope(x, m) = R_m x for one vector x (D,)."""
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    a = position * theta
    R = torch.zeros(D, D, dtype=torch.float64)
    i = torch.arange(D // 2)
    R[i, i], R[i, i + D // 2] = torch.cos(a), -torch.sin(a)
    R[i + D // 2, i], R[i + D // 2, i + D // 2] = torch.sin(a), torch.cos(a)
    return R


@exercise_check
def check_rope_score_matrix(rope_score_matrix: Callable) -> str:
    """``rope_score_matrix(offset, D, base=10000.0)`` -> the ``(D, D)`` matrix ``M`` with
    ``rope(q, m) . rope(k, n) = q @ M @ k`` whenever ``m - n = offset`` (half convention)."""
    g = torch.Generator().manual_seed(44)
    cases = [(0, 4, 10000.0), (3, 8, 10000.0), (-5, 6, 100.0), (17, 16, 10000.0)]
    for offset, D, base in cases:
        M = rope_score_matrix(offset, D, base)
        what = f"rope_score_matrix({offset}, {D}, {base})"
        check_shape(M, (D, D), what=what)
        M = _as_tensor(M).double()
        n = int(torch.randint(0, 50, (1,), generator=g))
        m = n + offset
        expected = _rope_rotation(m, D, base).T @ _rope_rotation(n, D, base)  # R_m^T R_n
        q, k = torch.randn(D, generator=g, dtype=torch.float64), torch.randn(D, generator=g, dtype=torch.float64)
        score = (_rope_rotation(m, D, base) @ q) @ (_rope_rotation(n, D, base) @ k)
        if not torch.allclose(q @ M @ k, score, rtol=1e-5, atol=1e-8):
            if offset and torch.allclose(M, expected.T, atol=1e-6):
                raise CheckFailed(f"{what}: you returned the transpose, the matrix for offset "
                                  f"{-offset}; the query at m = n + offset is rotated by m, the key by n")
            raise CheckFailed(f"{what}: q @ M @ k = {float(q @ M @ k):.6g}, but the rotated "
                              f"score at m = {m}, n = {n} is {float(score):.6g}; M should be "
                              "R_m^T R_n, a rotation of each pair (i, i + D/2) by -offset * theta_i")
        assert_same(M, expected, what=what, atol=1e-6, rtol=1e-5)
    return "the score depends on the positions only through m - n"
