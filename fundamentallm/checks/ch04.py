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


@exercise_check
def check_embedding_lookup(embedding_lookup: Callable) -> str:
    """``embedding_lookup(ids, weight)``: integer ids of any shape ``S`` and a ``(V, C)`` table ->
    ``S + (C,)`` rows, differentiable in ``weight``; ``ValueError`` for ids outside ``[0, V)``."""
    g = torch.Generator().manual_seed(7)
    V, C = 10, 4
    cases = {"ids of shape (5,)": torch.tensor([3, 1, 3, 0, 9]),
             "ids of shape (2, 3)": torch.randint(0, V, (2, 3), generator=g),
             "a single id, shape ()": torch.tensor(7)}
    for name, ids in cases.items():
        weight = torch.randn(V, C, generator=g, requires_grad=True)
        out = embedding_lookup(ids, weight)
        what = f"embedding_lookup({name})"
        check_shape(out, tuple(ids.shape) + (C,), what=what)
        assert_same(out, torch.nn.functional.embedding(ids, weight), what=what)
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            raise CheckFailed(f"{what}: the result must be differentiable with respect to weight "
                              f"(build it from weight with torch operations, not from a copy)")
        upstream = torch.randn(out.shape, generator=g)
        (out * upstream).sum().backward()
        expected = torch.zeros(V, C).index_add_(0, ids.reshape(-1), upstream.reshape(-1, C))
        assert_same(weight.grad, expected, what=f"{what}: gradient of weight (each row should "
                    f"receive the sum of the gradients of every position holding that id)")
    w = torch.randn(V, C, generator=g)
    _expect_value_error(lambda: embedding_lookup(torch.tensor([1, V]), w),
                        f"embedding_lookup(ids containing {V}, weight with V={V} rows)", "ids")
    _expect_value_error(lambda: embedding_lookup(torch.tensor([-1, 2]), w),
                        "embedding_lookup(ids containing -1, ...)", "ids")
    return "values, shapes, the accumulated gradient and out-of-range ids"


def _ref_sinusoidal(max_seq_len: int, d_model: int, base: float) -> torch.Tensor:
    import math
    pe = torch.zeros(max_seq_len, d_model, dtype=torch.float64)
    for pos in range(max_seq_len):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


@exercise_check(forbidden=("fundamentallm.positions.sinusoidal_table",))
def check_sinusoidal_encoding(sinusoidal_encoding: Callable) -> str:
    """``sinusoidal_encoding(max_seq_len, d_model, base=10000.0)``: the ``(max_seq_len, d_model)``
    table ``PE[pos, 2i] = sin(pos / base^(2i/d_model))``, ``PE[pos, 2i+1] = cos(...)``;
    ``ValueError`` for an odd ``d_model``."""
    cases = [(8, 4, 10000.0), (50, 16, 10000.0), (5, 6, 10000.0), (3, 2, 10000.0), (20, 8, 100.0)]
    for T, d, base in cases:
        out = sinusoidal_encoding(T, d) if base == 10000.0 else sinusoidal_encoding(T, d, base=base)
        what = f"sinusoidal_encoding(max_seq_len={T}, d_model={d}, base={base:g})"
        check_shape(out, (T, d), what=what)
        assert_same(_as_tensor(out).double(), _ref_sinusoidal(T, d, base), atol=1e-5, rtol=1e-5,
                    what=f"{what} (even columns sin, odd columns cos, column pair i uses "
                         f"frequency base^(-2i/d_model))")
    _expect_value_error(lambda: sinusoidal_encoding(4, 5), "sinusoidal_encoding(4, d_model=5)", "d_model")
    return f"{len(cases)} tables (two bases) and the odd-d_model validation"


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

    g = torch.Generator().manual_seed(seed)
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
                         f"interleaved model (each head: pair (2k, 2k+1) must land on (k, k + D/2))")
        assert_same(out, weight[rows], what=f"{what}: the rows")
    bias = torch.randn(16, generator=g, dtype=torch.float64)
    out = interleaved_to_half(bias.clone(), 2)
    check_shape(out, (16,), what="interleaved_to_half(a bias of shape (16,), num_heads=2)")
    expected = torch.cat([bias[0:8:2], bias[1:8:2], bias[8:16:2], bias[9:16:2]])
    assert_same(_as_tensor(out).double(), expected, what="interleaved_to_half(bias, num_heads=2)")
    return f"{len(cases)} projections (scores of both conventions equal) and a bias"
