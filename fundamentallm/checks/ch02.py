"""Checks for the exercises of chapter 2: attention by hand."""

from __future__ import annotations

from typing import Callable

import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check


@exercise_check(forbidden=("torch.softmax",))
def check_softmax_rows(softmax_rows: Callable) -> str:
    """``softmax_rows(x)``: softmax over the last dimension, stable for large scores."""
    g = torch.Generator().manual_seed(500)
    cases = {
        "a (3, 4) matrix": torch.randn(3, 4, generator=g),
        "a 1-D vector": torch.randn(5, generator=g),
        "a (2, 3, 5) batch": torch.randn(2, 3, 5, generator=g, dtype=torch.float64),
        "large scores (~1000; exp overflows unless you subtract the row max)":
            torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -999.0]]),
        "rows holding -inf (masked keys)":
            torch.tensor([[0.5, float("-inf"), 1.5], [float("-inf"), 2.0, float("-inf")]]),
    }
    for name, x in cases.items():
        x_in = x.clone()
        got = softmax_rows(x_in)
        if not torch.equal(x_in, x):
            raise CheckFailed(f"for {name}: you modified the input in place; return a new tensor")
        if got is not None and torch.isnan(torch.as_tensor(got)).any():
            raise CheckFailed(f"for {name}: the result contains NaN -- subtract each row's max "
                              f"before exp to keep exp from overflowing")
        assert_same(got, torch.softmax(x, dim=-1), what=f"softmax of {name}")
    return f"matches torch.softmax on {len(cases)} inputs, including large scores"


def _qkv(shape_q: tuple, shape_k: tuple, d_v: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape_q, generator=g, dtype=torch.float64)
    k = torch.randn(*shape_k, generator=g, dtype=torch.float64)
    v = torch.randn(*shape_k[:-1], d_v, generator=g, dtype=torch.float64)
    return q, k, v


@exercise_check
def check_scaled_scores(scaled_scores: Callable) -> str:
    """``scaled_scores(q, k)`` -> ``q kᵀ / √d_k``: (..., T_q, D), (..., T_k, D) -> (..., T_q, T_k)."""
    worked = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    cases = [("the worked example Q = K", worked, worked.clone())]
    for i, (sq, sk) in enumerate([((4, 8), (4, 8)), ((3, 16), (5, 16)), ((2, 3, 6, 4), (2, 3, 7, 4))]):
        q, k, _ = _qkv(sq, sk, 1, 600 + i)
        cases.append((f"q of shape {sq} and k of shape {sk}", q, k))
    for name, q, k in cases:
        # independent reference: an explicit sum over the shared dimension
        expected = (q[..., :, None, :] * k[..., None, :, :]).sum(-1) / q.shape[-1] ** 0.5
        got = scaled_scores(q.clone(), k.clone())
        check_shape(got, tuple(expected.shape), what=f"scores for {name}")
        assert_same(got, expected, what=f"scaled scores for {name} (divide by sqrt(d_k))")
    return f"correct on {len(cases)} inputs, including batched ones with T_q != T_k"


@exercise_check(forbidden=("fundamentallm.attention.causal_mask",))
def check_make_causal_mask(make_causal_mask: Callable) -> str:
    """``make_causal_mask(T)`` -> boolean (T, T), True where key j <= query i."""
    for T in (1, 2, 5, 9):
        got = make_causal_mask(T)
        check_shape(got, (T, T), what=f"mask for T={T}")
        got = torch.as_tensor(got)
        if got.dtype != torch.bool:
            raise CheckFailed(f"mask for T={T}: expected dtype torch.bool, got {got.dtype} "
                              f"(True = may attend)")
        expected = torch.tensor([[j <= i for j in range(T)] for i in range(T)])
        assert_same(got, expected, what=f"mask for T={T} (row = query, column = key; "
                                        f"True on and below the diagonal)")
    return "lower-triangular boolean masks for T = 1, 2, 5, 9"


def _reference_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a fully masked row gets zero weights
    return w @ v, w


@exercise_check(forbidden=("fundamentallm.attention.scaled_dot_product_attention",))
def check_attention(attention: Callable) -> str:
    """``attention(q, k, v, mask=None)`` -> ``(output, weights)``. A boolean mask keeps True keys,
    a float mask is added to the scores; a query with every key masked gets zeros, not NaN."""
    cases = []
    q, k, v = _qkv((3, 2), (3, 2), 2, 700)
    cases.append(("unmasked (T=3, D=2)", q, k, v, None))
    q, k, v = _qkv((2, 6, 4), (2, 6, 4), 3, 701)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    cases.append(("a boolean causal mask (B=2, T=6)", q, k, v, causal))
    additive = torch.zeros(6, 6, dtype=torch.float64).masked_fill(~causal, float("-inf"))
    cases.append(("a float (additive, 0/-inf) causal mask (B=2, T=6)", q, k, v, additive))
    q, k, v = _qkv((2, 3, 4, 8), (2, 3, 5, 8), 6, 702)
    g = torch.Generator().manual_seed(703)
    m = torch.rand(2, 1, 4, 5, generator=g) > 0.5
    m[..., 0] = True  # every query keeps at least one key
    cases.append(("a random boolean mask with T_q=4 != T_k=5", q, k, v, m))
    cases.append(("no mask with T_q=4 != T_k=5, D_v=6", q, k, v, None))
    bias = torch.randn(4, 5, generator=g, dtype=torch.float64)
    cases.append(("a finite float mask (a bias added to the scores)", q, k, v, bias))
    q, k, v = _qkv((3, 4), (3, 4), 2, 704)
    dead = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    cases.append(("a mask whose second row is all False (that query sees no key)", q, k, v, dead))
    for name, q, k, v, mask in cases:
        out_ref, w_ref = _reference_attention(q, k, v, mask)
        args = (q.clone(), k.clone(), v.clone())
        res = attention(*args) if mask is None else attention(*args, mask=mask.clone())
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise CheckFailed(f"for {name}: return a pair (output, weights), got {type(res).__name__}")
        out, w = res
        if torch.isnan(torch.as_tensor(w)).any() or torch.isnan(torch.as_tensor(out)).any():
            raise CheckFailed(f"for {name}: NaN in your result -- a query whose keys are all masked "
                              f"must get all-zero weights and a zero output")
        assert_same(w, w_ref, what=f"weights for {name}")
        assert_same(out, out_ref, what=f"output for {name}")
        if not torch.isinf(torch.as_tensor(mask if mask is not None else 0.0)).all(-1).any():
            sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            assert_same(out, sdpa, what=f"output for {name} (vs F.scaled_dot_product_attention)")
    return f"correct on {len(cases)} cases (boolean, float and fully masked rows)"


@exercise_check
def check_score_scale(score_scale: Callable) -> str:
    """``score_scale(d_k, sigma_q, sigma_k)`` -> the factor that gives ``q·k`` unit variance when
    ``q`` and ``k`` have independent zero-mean entries of standard deviations ``sigma_q`` and
    ``sigma_k``; checked against the formula and against a measurement on 20,000 samples."""
    cases = [(64, 1.0, 1.0), (16, 2.0, 1.5), (1, 3.0, 1.0), (256, 0.1, 0.2), (8, 1.0, 4.0)]
    for seed, (d_k, sigma_q, sigma_k) in enumerate(cases):
        got = score_scale(d_k, sigma_q, sigma_k)
        got = float(got.item() if isinstance(got, torch.Tensor) else got)
        expected = 1.0 / (sigma_q * sigma_k * d_k ** 0.5)
        what = f"score_scale(d_k={d_k}, sigma_q={sigma_q}, sigma_k={sigma_k})"
        if abs(got - 1.0 / d_k ** 0.5) < 1e-9 * expected and abs(sigma_q * sigma_k - 1) > 1e-9:
            raise CheckFailed(f"{what}: 1/sqrt(d_k) assumes unit-variance entries; "
                              "Var(q·k) = d_k·sigma_q²·sigma_k² here")
        g = torch.Generator().manual_seed(220 + seed)
        q = torch.randn(20000, d_k, generator=g, dtype=torch.float64) * sigma_q
        k = torch.randn(20000, d_k, generator=g, dtype=torch.float64) * sigma_k
        measured = ((q * k).sum(-1) * got).var().item()
        if not 0.9 < measured < 1.1:
            raise CheckFailed(f"{what} = {got:.6g}: the scaled scores have variance {measured:.3f} "
                              "on 20,000 samples, not 1")
        assert_same(torch.tensor(got), torch.tensor(expected), what=what, rtol=1e-6, atol=0.0)
    return f"unit-variance scores on {len(cases)} settings"
