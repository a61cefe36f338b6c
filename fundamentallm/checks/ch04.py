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
    finite_number,
    rng,
)


@exercise_check(forbidden=("fundamentallm.positions.rotate_half", "transformers"))
def check_rotate_half(rotate_half: Callable) -> str:
    """``rotate_half(x)``: ``(x1, x2) -> (-x2, x1)`` on the two halves of the last dimension;
    ``ValueError`` for an odd last dimension."""
    g = rng(8)
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


def _alibi_mean_distance(H: int, T: int) -> torch.Tensor:
    """Reference: (H,) expected distance i - j of the last query's attention under ALiBi with
    equal raw scores (float64)."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1, dtype=torch.float64) / H)  # (H,)
    d = torch.arange(T, dtype=torch.float64)  # distances 0 .. T-1 of the keys the last query reads
    w = torch.softmax(-slopes[:, None] * d, dim=-1)  # (H, T)
    return (w * d).sum(-1)


@exercise_check
def check_alibi_mean_distance(alibi_mean_distance: Callable) -> str:
    """``alibi_mean_distance(num_heads, T)`` -> ``(H,)``: for the last query (position ``T - 1``)
    of a causal model with equal raw scores, the expected distance ``i - j`` under each head's
    ALiBi-biased attention weights (slopes ``m_h = 2^(-8(h+1)/H)``)."""
    g = rng(45)
    cases = [(8, 1), (8, 5), (4, 64), (1, 3), (8, 2048), (12, 300)]
    cases += [(int(torch.randint(1, 17, (1,), generator=g)), int(torch.randint(2, 600, (1,), generator=g)))
              for _ in range(2)]
    for H, T in cases:
        what = f"alibi_mean_distance(num_heads={H}, T={T})"
        got = alibi_mean_distance(H, T)
        check_shape(got, (H,), what=what)
        got = _as_tensor(got).double()
        if not torch.isfinite(got).all():
            raise CheckFailed(f"{what}: {got.tolist()} is not finite; with T = {T} key(s) every "
                              "distance lies between 0 and T - 1")
        expected = _alibi_mean_distance(H, T)
        if ((got < -1e-9) | (got > T - 1 + 1e-9)).any():
            raise CheckFailed(f"{what}: a mean distance outside [0, T - 1] = [0, {T - 1}]; the last "
                              f"query reads only the {T} keys at or before it")
        if H > 1 and torch.allclose(got, expected.flip(0), rtol=1e-6, atol=1e-9) and \
                not torch.allclose(got, expected, rtol=1e-6, atol=1e-9):
            raise CheckFailed(f"{what}: the values are right but the heads come in the reverse order; "
                              "which head has the smallest slope?")
        if not torch.allclose(got, expected, rtol=1e-6, atol=1e-9):
            h = int((got - expected).abs().argmax())
            raise CheckFailed(f"{what}: head {h} gets {float(got[h]):.6g}, off by "
                              f"{float((got - expected)[h]):+.3g}; the weights are a softmax over the "
                              f"{T} keys j = 0 .. {T - 1} of -m_h (i - j); the mean distance is the "
                              "weighted average of i - j")
    return f"{len(cases)} settings, from one key (T = 1) to 2048"


@exercise_check(may_return_none=True, self_check=True)
def check_no_position_prediction(no_position_prediction) -> str:
    """``no_position_prediction``: for a transformer without positional encoding reading
    ``[BOS, a, a, ..., a]``: can the outputs at the repeated ``a`` differ (``"causal"``,
    ``"bidirectional"``: bool), and does the difference between neighbouring positions
    ``"shrink"``, ``"stay"`` or ``"grow"`` along the sequence in the causal model (``"neighbours"``)."""
    from .predict import choice_answers

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


@exercise_check(forbidden=("fundamentallm.positions.RotaryEmbedding.forward", "fundamentallm.positions.rotate_half",
                           "fundamentallm.positions.rotate_interleaved"))
def check_rope_score_matrix(rope_score_matrix: Callable) -> str:
    """``rope_score_matrix(offset, D, base=10000.0)`` -> the ``(D, D)`` matrix ``M`` with
    ``rope(q, m) . rope(k, n) = q @ M @ k`` whenever ``m - n = offset`` (half convention)."""
    g = rng(44)
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
                              f"score at m = {m}, n = {n} is {float(score):.6g}; write the score as q^T (R_m^T R_n) k: "
                              "how do two rotations of the same planes compose, and what is R_m^T?")
        assert_same(M, expected, what=what, atol=1e-6, rtol=1e-5)
    return "the score depends on the positions only through m - n"


def _ch04_slow_count(D: int, base: float, context: float) -> int:
    """How many of the D/2 RoPE pairs turn by less than one full turn over ``context`` positions."""
    import math

    return sum(context * base ** (-2 * i / D) < 2 * math.pi for i in range(D // 2))


@exercise_check
def check_base_for_slow_pairs(base_for_slow_pairs: Callable) -> str:
    """``base_for_slow_pairs(D, context, n_slow)`` -> the threshold RoPE base b* (half convention,
    theta_i = b^(-2i/D)): above it at least ``n_slow`` of the ``D/2`` pairs turn by less than one
    full turn (2 pi) between positions 0 and ``context``, below it fewer do. Compared to a relative
    1e-9 on fresh settings (an inequality solved exactly, not a search); ``n_slow = D/2`` must raise
    a ValueError naming ``n_slow``."""
    import math

    g = rng(46)
    cases = [(64, 4096, 9), (16, 512, 3), (128, 32768, 40)]
    while len(cases) < 9:
        D = int(8 * torch.randint(2, 17, (1,), generator=g))  # 16 .. 128
        context = int(torch.randint(100, 10 ** 6, (1,), generator=g))
        n_slow = int(torch.randint(1, D // 2, (1,), generator=g))
        if D / (D - 2 * n_slow) * math.log10(context / (2 * math.pi)) < 250:  # b* fits a float64
            cases.append((D, context, n_slow))
    for D, context, n_slow in cases:
        what = f"base_for_slow_pairs(D={D}, context={context}, n_slow={n_slow})"
        got = finite_number(base_for_slow_pairs(D, context, n_slow), what)
        expected = (context / (2 * math.pi)) ** (D / (D - 2 * n_slow))
        if got > 0 and abs(math.log(got / expected)) <= 1e-9:
            continue
        if not got > 1:
            raise CheckFailed(f"{what}: {got!r} is no RoPE base; theta_i = base^(-2i/D) slows down "
                              f"with i only for a base above 1")
        above = _ch04_slow_count(D, got * (1 + 1e-7), context)
        if abs(got / expected - 1) <= 1e-3:
            raise CheckFailed(f"{what}: close to the threshold (relative error {abs(got / expected - 1):.1e}) "
                              f"but not on it: solve the inequality for the base exactly instead of "
                              f"searching for it")
        if above != n_slow:
            raise CheckFailed(f"{what}: with a base just above yours, {above} of the {D // 2} pairs turn by "
                              f"less than one turn, not {n_slow}: which pairs are the slow ones, and "
                              f"which one is the last to become slow as the base grows?")
        raise CheckFailed(f"{what}: a base just below yours still makes {n_slow} pairs slow, so yours "
                          f"is not the threshold: where does the pair that becomes slow last turn "
                          f"exactly once?")
    # The derivation gives b* as an expression of the context; a search for the base, however fine,
    # gives a number with no derivative. With context a tensor that requires grad, d b*/d context
    # must be D/(D - 2 n_slow) * b*/context.
    D, n_slow = 64, 9
    context = torch.tensor(4096.0, dtype=torch.float64, requires_grad=True)
    what = f"base_for_slow_pairs(D={D}, context=torch.tensor(4096.0, requires_grad=True), n_slow={n_slow})"
    got = base_for_slow_pairs(D, context, n_slow)
    if not (isinstance(got, torch.Tensor) and got.requires_grad):
        raise CheckFailed(f"{what} returned {type(got).__name__} {float(got):.6g} with no derivative with "
                          "respect to the context: your base is not an expression of the context (a search "
                          "for it, or math.log / float() on the tensor, loses the dependence). Solve the "
                          "inequality for the base and write the result with operations that accept a tensor "
                          "(** and /, torch.log)")
    (slope,) = torch.autograd.grad(got.sum(), context)
    b_star = (4096.0 / (2 * math.pi)) ** (D / (D - 2 * n_slow))
    expected_slope = D / (D - 2 * n_slow) * b_star / 4096.0
    if not abs(float(slope) / expected_slope - 1) <= 1e-9:
        raise CheckFailed(f"{what}: your b* changes with the context at the rate {float(slope):.6g} per "
                          f"position, the threshold at {expected_slope:.6g}: your expression has the right "
                          "value here but not the right dependence on the context; solve the inequality for "
                          "the base")
    _expect_value_error(lambda: base_for_slow_pairs(16, 4096, 8), "base_for_slow_pairs(D=16, context=4096, "
                        "n_slow=8), every pair slow (pair 0 turns by context radians at any base)", "n_slow")
    return (f"{len(cases)} settings, D from 16 to 128 and contexts up to a million positions, b* an "
            f"expression of the context (its derivative checked), and n_slow = D/2 refused")


def _rope_scores(x: torch.Tensor, weight: torch.Tensor, H: int, rope) -> torch.Tensor:
    """Scores q·q of the queries ``x @ weight.T`` (x: (B, T, C)) after ``rope``: (B, H, T, T)."""
    B, T, _ = x.shape
    q = rope((x @ weight.T).view(B, T, H, -1).transpose(1, 2))  # (B, H, T, D)
    return q @ q.transpose(-2, -1)


@exercise_check(forbidden=("fundamentallm.interop.permute_rope_weights",))
def check_interleaved_to_half(interleaved_to_half: Callable, seed: int = 0) -> str:
    """``interleaved_to_half(weight, num_heads)``: each head's ``D`` rows of a query/key
    projection ``(num_heads·D, C)`` (or bias ``(num_heads·D,)``) reordered from the interleaved
    RoPE layout (pairs ``2k, 2k+1``) to the half layout (pairs ``k, k + D/2``). Judged by the
    scores: half-RoPE on the converted projection must equal interleaved RoPE on the original."""
    from ..positions import RotaryEmbedding

    g = rng(seed)
    cases = [(1, 2, 3), (2, 8, 5), (4, 4, 16), (3, 6, 1)]  # (num_heads, D, C)
    for H, D, C in cases:
        weight = torch.randn(H * D, C, generator=g, dtype=torch.float64)
        out = interleaved_to_half(weight.clone(), H)
        what = f"interleaved_to_half(weight of shape {(H * D, C)}, num_heads={H})"
        check_shape(out, (H * D, C), what=what)
        out = _as_tensor(out).double()
        # written-out reference: half row j of a head is interleaved row 2j (j < D/2), else 2(j - D/2) + 1
        rows = [h * D + (2 * j if j < D // 2 else 2 * (j - D // 2) + 1) for h in range(H) for j in range(D)]
        x = torch.randn(2, 7, C, generator=g, dtype=torch.float64)  # (B, T, C)
        half = RotaryEmbedding(D, 7, style="half").double()
        inter = RotaryEmbedding(D, 7, style="interleaved").double()

        assert_same(_rope_scores(x, out, H, half), _rope_scores(x, weight, H, inter), atol=1e-9, rtol=1e-9,
                    what=f"{what}: attention scores of a half-RoPE model with your rows vs the "
                         f"interleaved model (which rows does each convention rotate together, "
                         f"and within which head?)")
        assert_same(out, weight[rows], what=f"{what}: the rows")
    bias = torch.randn(16, generator=g, dtype=torch.float64)
    out = interleaved_to_half(bias.clone(), 2)
    check_shape(out, (16,), what="interleaved_to_half(a bias of shape (16,), num_heads=2)")
    expected = torch.cat([bias[0:8:2], bias[1:8:2], bias[8:16:2], bias[9:16:2]])
    assert_same(_as_tensor(out).double(), expected, what="interleaved_to_half(bias, num_heads=2)")
    return f"{len(cases)} projections (scores of both conventions equal) and a bias"
