"""Checks for the exercises of chapter 3: multi-head attention."""

from __future__ import annotations

from typing import Callable

import torch

from .core import CheckFailed, _as_tensor, assert_same, check_shape, exercise_check


def _ref_split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.reshape(B, T, num_heads, C // num_heads).permute(0, 2, 1, 3)  # (B, H, T, D)


@exercise_check
def check_split_heads(split_heads: Callable) -> str:
    """``split_heads(x, num_heads)``: ``(B, T, C)`` -> ``(B, H, T, D)`` with ``D = C // H``; head
    ``h`` holds channels ``h·D .. (h+1)·D - 1``; ``ValueError`` when ``num_heads`` does not
    divide ``C``."""
    g = torch.Generator().manual_seed(3)
    cases = [(2, 5, 8, 2), (1, 3, 12, 3), (3, 1, 6, 1), (2, 4, 16, 16), (2, 6, 12, 4)]
    for B, T, C, H in cases:
        x = torch.randn(B, T, C, generator=g)
        out = split_heads(x.clone(), H)
        what = f"split_heads(x of shape {(B, T, C)}, num_heads={H})"
        check_shape(out, (B, H, T, C // H), what=what)
        D = C // H
        for h in range(H):
            assert_same(out[:, h], x[..., h * D:(h + 1) * D],
                        what=f"{what}[:, {h}] (head {h} must hold channels {h * D}..{(h + 1) * D - 1} "
                             f"of every token; a view to (B, H, T, D) without a transpose mixes tokens)")
    try:
        split_heads(torch.zeros(1, 2, 10), 3)
    except ValueError as e:
        if "num_heads" not in str(e):
            raise CheckFailed(f"the ValueError for num_heads=3, C=10 should name num_heads; got: {e}") from None
    except NotImplementedError:
        raise
    except Exception as e:
        raise CheckFailed(f"split_heads(x with C=10, num_heads=3) should raise ValueError, "
                          f"got {type(e).__name__}: {e}") from None
    else:
        raise CheckFailed("split_heads(x with C=10, num_heads=3) should raise ValueError "
                          "(3 does not divide 10) instead of returning")
    return f"{len(cases)} shapes and the num_heads validation"


@exercise_check(forbidden=("torch.special.entr",))
def check_attention_entropy(attention_entropy: Callable) -> str:
    """``attention_entropy(weights)``: ``(..., T_q, T_k)`` rows of probabilities -> ``(..., T_q)``
    entropies in nats, with ``0·log 0 = 0``."""
    g = torch.Generator().manual_seed(5)
    uniform = torch.full((3, 4), 0.25)
    one_hot = torch.eye(5)
    causal = torch.softmax(torch.randn(6, 6, generator=g).masked_fill(
        ~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf")), dim=-1)
    batched = torch.softmax(torch.randn(2, 3, 4, 7, generator=g), dim=-1)
    cases = {"uniform rows over 4 keys": uniform, "one-hot rows": one_hot,
             "causal weights (with exact zeros)": causal, "(B, H, T, T) weights": batched}
    for name, w in cases.items():
        out = attention_entropy(w.clone())
        what = f"attention_entropy on {name}"
        check_shape(out, w.shape[:-1], what=what)
        if torch.isnan(_as_tensor(out)).any():
            raise CheckFailed(f"{what}: got NaN -- 0·log(0) must count as 0 (log(0) is -inf and "
                              f"0·(-inf) is NaN); skip or mask the zero weights")
        assert_same(out, torch.special.entr(w).sum(-1), what=f"{what} (entropy in nats: "
                    f"-sum p·ln p; uniform over n keys gives ln n)")
    return "uniform, one-hot, causal (zeros) and batched weights"


def _ref_mha(x, w_q, w_k, w_v, w_o, num_heads, causal):
    C = x.shape[-1]
    ref = torch.nn.MultiheadAttention(C, num_heads, bias=False, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([w_q, w_k, w_v]))
        ref.out_proj.weight.copy_(w_o)
    T = x.shape[1]
    # nn.MultiheadAttention's boolean mask is True where attention is NOT allowed.
    blocked = ~torch.ones(T, T, dtype=torch.bool).tril() if causal else None
    with torch.no_grad():
        return ref(x, x, x, attn_mask=blocked, need_weights=False)[0]


@exercise_check(forbidden=("fundamentallm.attention.MultiHeadAttention.forward",))
def check_multi_head_attention(multi_head_attention: Callable) -> str:
    """``multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, causal=False)`` with ``(C, C)``
    weights in ``nn.Linear`` layout (``q = x @ w_q.T``), compared with ``nn.MultiheadAttention``."""
    g = torch.Generator().manual_seed(6)
    cases = [(2, 5, 8, 2, False), (2, 5, 8, 2, True), (1, 4, 12, 3, True), (2, 3, 6, 1, False),
             (1, 6, 8, 4, True)]
    for B, T, C, H, causal in cases:
        x = torch.randn(B, T, C, generator=g)
        w_q, w_k, w_v, w_o = (torch.randn(C, C, generator=g) / C ** 0.5 for _ in range(4))
        out = multi_head_attention(x, w_q, w_k, w_v, w_o, H, causal=causal)
        what = f"multi_head_attention(x {(B, T, C)}, num_heads={H}, causal={causal})"
        check_shape(out, (B, T, C), what=what)
        assert_same(out, _ref_mha(x, w_q, w_k, w_v, w_o, H, causal), what=what, atol=1e-5, rtol=1e-4)
    return f"{len(cases)} cases equal to nn.MultiheadAttention"


@exercise_check
def check_grouped_query_attention(grouped_query_attention: Callable) -> str:
    """``grouped_query_attention(q, k, v, causal=False)``: ``q`` ``(B, H, T, D)``, ``k`` and ``v``
    ``(B, G, T, D)`` with ``G`` dividing ``H``; query head ``h`` reads key/value head
    ``h // (H // G)``. Compared with ``F.scaled_dot_product_attention(..., enable_gqa=True)``."""
    import torch.nn.functional as F

    cases = [(2, 4, 2, 5, 3, False, 0), (1, 6, 3, 7, 4, True, 1), (2, 4, 1, 4, 8, True, 2),
             (1, 3, 3, 6, 2, False, 3)]  # (B, H, G, T, D, causal, seed)
    for B, H, G, T, D, causal, seed in cases:
        g = torch.Generator().manual_seed(330 + seed)
        q = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
        k = torch.randn(B, G, T, D, generator=g, dtype=torch.float64)
        v = torch.randn(B, G, T, D, generator=g, dtype=torch.float64)
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        got = grouped_query_attention(q.clone(), k.clone(), v.clone(), causal=causal)
        what = f"output for H={H} query heads, G={G} key/value heads, causal={causal}"
        check_shape(got, (B, H, T, D), what=what)
        if 1 < G < H:  # the classic slip: head h reading group h % G instead of h // (H // G)
            cycled = F.scaled_dot_product_attention(q, k.repeat(1, H // G, 1, 1),
                                                    v.repeat(1, H // G, 1, 1), is_causal=causal)
            if torch.allclose(_as_tensor(got).double(), cycled):
                raise CheckFailed(f"{what}: query head h read key/value head h % G; consecutive "
                                  "query heads share a group: h // (H // G) (repeat_interleave)")
        assert_same(_as_tensor(got).double(), expected, what=what + " (vs F.scaled_dot_product_attention)")
    return f"matches F.scaled_dot_product_attention(enable_gqa=True) on {len(cases)} cases"


@exercise_check(may_return_none=True)
def check_buggy_split_prediction(head1_tokens) -> str:
    """``head1_tokens``: the sorted token positions whose numbers land in head 1 when ``x`` of shape
    ``(1, 6, 8)`` is split into 2 heads with ``x.view(1, 2, 6, 4)`` (no transpose)."""
    from .predict import answer_given

    answer = answer_given(head1_tokens, "head1_tokens", "a sorted list of token positions")
    try:
        if not isinstance(answer, (list, tuple)):
            raise TypeError
        answer = sorted(int(t) for t in answer)
    except (TypeError, ValueError):
        raise CheckFailed(f"head1_tokens should be a list of integers, got {head1_tokens!r}") from None
    x = torch.arange(6)[None, :, None].expand(1, 6, 8).contiguous()  # each entry holds its token position
    expected = sorted(set(x.view(1, 2, 6, 4)[0, 1].flatten().tolist()))
    if answer == expected:
        return ("view reads memory in order: head 1 gets the last 24 numbers, whole tokens 3-5, "
                "not channels 4-7 of every token")
    if answer == list(range(6)):
        raise CheckFailed("every token would reach head 1 with the transpose (the correct split); "
                          "view alone fills head 1 with the last 24 numbers in memory order")
    raise CheckFailed(f"{answer} is not right: x is stored token after token, 8 numbers each; "
                      "view(1, 2, 6, 4) gives head 0 the first 24 numbers and head 1 the next 24")
