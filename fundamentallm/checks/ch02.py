"""Checks for the exercises of chapter 2: attention by hand."""

from __future__ import annotations

from typing import Callable

import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check
from .wrong import wrong_answer


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


@exercise_check
def check_prefix_lm_mask(prefix_lm_mask: Callable) -> str:
    """``prefix_lm_mask(T, prefix_len)``: the boolean ``(T, T)`` mask of a prefix language model,
    ``True`` where query ``i`` may read key ``j``: every key of the prefix (``j < prefix_len``),
    and causally after it (``j <= i``)."""
    g = torch.Generator().manual_seed(20)
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


@exercise_check(may_return_none=True)
def check_permutation_prediction(permutation_prediction) -> str:
    """``permutation_prediction``: what happens to the output of unmasked attention when the rows of
    K and V are permuted together, and when the rows of Q are permuted."""
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


# --- Wrong answers each check rejects (python -m fundamentallm.course catches --chapter 02) ------

wrong_answer("check_softmax_rows", "mistake", "exp without subtracting the row max (overflows on large scores)", """
def softmax_rows(x):
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)
""", call="softmax_rows", message=r"NaN|overflow")
wrong_answer("check_softmax_rows", "mistake", "normalises over the first dimension, not the last", """
def softmax_rows(x):
    e = torch.exp(x - x.amax(0, keepdim=True))
    return e / e.sum(0, keepdim=True)
""", call="softmax_rows", message=r"softmax of")
wrong_answer("check_softmax_rows", "method", "calls torch's softmax under another name", """
from torch.nn.functional import softmax as my_normaliser
def softmax_rows(x):
    return my_normaliser(x, dim=-1)
""", call="softmax_rows", message=r"softmax")
