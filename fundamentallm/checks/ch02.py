"""Checks for the exercises of chapter 2: attention by hand."""

from __future__ import annotations

import math
from typing import Callable

import torch

from .core import (
    ATEN_ATTENTION,
    SOFTMAX_KERNELS,
    CheckFailed,
    assert_same,
    check_shape,
    exercise_check,
    rng,
)

# torch.softmax also refuses torch.ops.aten.softmax, torch._softmax ... (each under its own name);
# the kernels no public name leads to are listed in checks/kernels.py.
_SOFTMAX_KERNELS = SOFTMAX_KERNELS


@exercise_check(forbidden=_SOFTMAX_KERNELS + ("torch.softmax", "torch.log_softmax"))
def check_softmax_rows(softmax_rows: Callable) -> str:
    """``softmax_rows(x)``: softmax over the last dimension, stable for large scores (no
    ``softmax`` or ``log_softmax`` routine)."""
    g = rng(500)
    large = torch.randn(2, 4, generator=g) * 3
    large[0] += 1000.0  # one row near +1000, one near -1000: no single shift serves both
    large[1] -= 1000.0
    masked = torch.randn(3, 5, generator=g)
    for row in range(3):  # -inf planted at fresh places; every row keeps at least two finite scores
        keep = torch.randperm(5, generator=g)[:2 + row]
        masked[row] = torch.where(torch.isin(torch.arange(5), keep), masked[row], float("-inf"))
    spread = torch.randn(2, 4, generator=g)  # float32 rows spanning about 250
    spread[0] += torch.tensor([0.0, 200.0, -50.0, 10.0])[torch.randperm(4, generator=g)]
    spread[1] += torch.tensor([0.0, 220.0, -30.0, float("-inf")])[torch.randperm(4, generator=g)]
    cases = {
        "a (3, 4) matrix": torch.randn(3, 4, generator=g),
        "a 1-D vector": torch.randn(5, generator=g),
        "a (2, 3, 5) batch": torch.randn(2, 3, 5, generator=g, dtype=torch.float64),
        "large scores (rows near +1000 and near -1000)": large,
        "rows holding -inf (masked keys)": masked,
        "float32 rows spanning about 250 (one also masked)": spread,
    }
    for name, x in cases.items():
        x_in = x.clone()
        got = softmax_rows(x_in)
        if not torch.equal(x_in, x):
            raise CheckFailed(f"for {name}: you modified the input in place; return a new tensor")
        if got is not None and torch.isnan(torch.as_tensor(got)).any():
            raise CheckFailed(f"for {name}: the result contains NaN: which exps overflow to inf, or "
                              f"underflow so that a whole row sums to 0? Which shift, for each row, prevents both?")
        expected = torch.softmax(x, dim=-1)
        if x.dtype == torch.float32 and isinstance(got, torch.Tensor) and got.shape == expected.shape \
                and not torch.allclose(got, expected) and torch.allclose(got, expected, atol=1e-3, rtol=1e-3):
            raise CheckFailed(f"for {name}: off by up to {float((got - expected).abs().max()):.1e}, more than "
                              "float32 rounding of the result. Scores near 1000 are spaced 6e-5 apart in float32, "
                              "so subtracting a computed number near 1000 (a log-sum-exp, a mean) loses digits; "
                              "subtracting one of the row's own scores is exact: which one rules out overflow?")
        assert_same(got, expected, what=f"softmax of {name}")
    return f"matches torch.softmax on {len(cases)} inputs, including large scores"


def _qkv(shape_q: tuple, shape_k: tuple, d_v: int, seed: int):
    g = rng(seed)
    q = torch.randn(*shape_q, generator=g, dtype=torch.float64)
    k = torch.randn(*shape_k, generator=g, dtype=torch.float64)
    v = torch.randn(*shape_k[:-1], d_v, generator=g, dtype=torch.float64)
    return q, k, v


@exercise_check(forbidden=("fundamentallm.attention.causal_mask",
                           "torch.nn.Transformer.generate_square_subsequent_mask",
                           "torch.nn.modules.transformer._generate_square_subsequent_mask"))
def check_make_causal_mask(make_causal_mask: Callable) -> str:
    """``make_causal_mask(T)`` -> boolean (T, T), True where key j <= query i."""
    sizes = [1, 2] + [int(t) for t in torch.randint(3, 40, (3,), generator=rng(60))]
    for T in sizes:
        got = make_causal_mask(T)
        check_shape(got, (T, T), what=f"mask for T={T}")
        got = torch.as_tensor(got)
        if got.dtype != torch.bool:
            raise CheckFailed(f"mask for T={T}: expected dtype torch.bool, got {got.dtype} "
                              f"(True = may attend)")
        expected = torch.tensor([[j <= i for j in range(T)] for i in range(T)])
        assert_same(got, expected, what=f"mask for T={T} (row = query, column = key; "
                                        f"True on and below the diagonal)")
    return f"lower-triangular boolean masks for T = {', '.join(map(str, sizes))}"


def _reference_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a fully masked row gets zero weights
    return w @ v, w


# torch.ops.aten's attention kernels behind F.scaled_dot_product_attention and nn.MultiheadAttention
# that no public name leads to (torch.ops.aten.scaled_dot_product_attention is refused with its public name).
_ATEN_ATTENTION = ATEN_ATTENTION


@exercise_check(forbidden=("fundamentallm.attention.scaled_dot_product_attention",
                           "torch.nn.functional.scaled_dot_product_attention",
                           "torch.nn.functional.multi_head_attention_forward") + _ATEN_ATTENTION)
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
    g = rng(703)
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
    ``sigma_k``; derived exactly (a sampled estimate is off by its noise), and measured on 20,000
    samples."""
    g = rng(220)
    u = torch.rand(5, 3, generator=g, dtype=torch.float64)
    cases = [(int(2 ** (8 * float(a))), 0.1 + 3.9 * float(b), 0.1 + 3.9 * float(c)) for a, b, c in u]
    cases += [(64, 1.0, 1.0), (1, 2.0, 2.0)]
    for d_k, sigma_q, sigma_k in cases:
        got = score_scale(d_k, sigma_q, sigma_k)
        got = float(got.item() if isinstance(got, torch.Tensor) else got)
        expected = 1.0 / (sigma_q * sigma_k * d_k ** 0.5)
        what = f"score_scale(d_k={d_k}, sigma_q={sigma_q:.4g}, sigma_k={sigma_k:.4g})"
        if not math.isfinite(got) or got <= 0:
            raise CheckFailed(f"{what} = {got!r}: a scale factor is a positive finite number")
        if abs(got - 1.0 / d_k ** 0.5) < 1e-9 * expected and abs(sigma_q * sigma_k - 1) > 1e-9:
            raise CheckFailed(f"{what}: 1/sqrt(d_k) assumes unit-variance entries; what is the variance "
                              "of one product q_i k_i when the entries have these standard deviations?")
        q = torch.randn(20000, d_k, generator=g, dtype=torch.float64) * sigma_q
        k = torch.randn(20000, d_k, generator=g, dtype=torch.float64) * sigma_k
        measured = ((q * k).sum(-1) * got).var().item()
        if not 0.9 < measured < 1.1:
            raise CheckFailed(f"{what} = {got:.6g}: the scaled scores have variance {measured:.3f} "
                              "on 20,000 samples, not 1: variances add over the d_k terms, and a factor "
                              "multiplies a variance by its square")
        if not abs(got - expected) <= 1e-6 * expected:
            raise CheckFailed(f"{what} = {got:.6g} gives variance {measured:.3f}, close to 1 but not exactly "
                              "the derived factor: an estimate from samples carries their noise; derive "
                              "Var(q·k) exactly instead")
    return f"unit-variance scores on {len(cases)} fresh settings"


@exercise_check
def check_prefix_lm_mask(prefix_lm_mask: Callable) -> str:
    """``prefix_lm_mask(T, prefix_len)``: the boolean ``(T, T)`` mask of a prefix language model,
    ``True`` where query ``i`` may read key ``j``: every key of the prefix (``j < prefix_len``),
    and causally after it (``j <= i``)."""
    g = rng(20)
    cases = [(5, 0), (5, 5), (6, 2), (1, 1)] + [
        (int(T), int(torch.randint(1, int(T), (1,), generator=g)))
        for T in torch.randint(3, 12, (3,), generator=g)]
    for T, prefix_len in cases:
        got = prefix_lm_mask(T, prefix_len)
        what = f"prefix_lm_mask({T}, {prefix_len})"
        check_shape(got, (T, T), what=what)
        if not (isinstance(got, torch.Tensor) and got.dtype == torch.bool):
            raise CheckFailed(f"{what}: return a torch.bool tensor (True = may look), got "
                              f"{getattr(got, 'dtype', type(got).__name__)}")
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        expected = (j <= i) | (j < prefix_len)
        bad = (got != expected).nonzero()
        if len(bad):
            qi, kj = (int(v) for v in bad[0])
            where = "inside the prefix" if kj < prefix_len else "after the prefix"
            rule = ("every query reads the whole prefix, in both directions" if kj < prefix_len
                    else "a key after the prefix is read only by queries at or after it (j <= i)")
            raise CheckFailed(f"{what}: entry (query {qi}, key {kj}), a key {where}, should be "
                              f"{bool(expected[qi, kj])}: {rule}")
    return f"{len(cases)} masks, from fully causal (prefix 0) to fully bidirectional (prefix T)"


@exercise_check(may_return_none=True, self_check=True)
def check_permutation_prediction(permutation_prediction) -> str:
    """``permutation_prediction``: what happens to the output of unmasked attention when the rows of
    K and V are permuted together, and when the rows of Q are permuted. A self-check (3 choices
    each): its message explains the answer."""
    from .predict import choice_answers

    options = ("unchanged", "permuted", "changed")
    answer = choice_answers(permutation_prediction, "permutation_prediction",
                            {"keys_and_values": options, "queries": options})
    if answer["keys_and_values"] != "unchanged":
        raise CheckFailed("keys_and_values: each output row is a sum over the keys, "
                          "sum_j a_ij v_j; reordering the (k_j, v_j) pairs together reorders the "
                          "terms of that sum, not its value")
    if answer["queries"] != "permuted":
        raise CheckFailed("queries: output row i depends only on q_i (and all keys and values); "
                          "moving q_i to another row moves its output row with it")
    return "attention treats its keys as a set and its queries one by one"
