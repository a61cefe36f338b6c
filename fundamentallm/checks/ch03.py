"""Checks for the exercises of chapter 3: multi-head attention."""

from __future__ import annotations

import re
from typing import Callable

import torch

from .core import (
    ATEN_ATTENTION,
    SOFTMAX_KERNELS,
    CheckFailed,
    _as_tensor,
    assert_same,
    check_shape,
    exercise_check,
    rng,
)


@exercise_check
def check_split_heads(split_heads: Callable) -> str:
    """``split_heads(x, num_heads)``: ``(B, T, C)`` -> ``(B, H, T, D)`` with ``D = C // H``; head
    ``h`` holds channels ``h·D .. (h+1)·D - 1``; ``ValueError`` when ``num_heads`` does not
    divide ``C``."""
    g = rng(3)
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
                             f"of every token, in order: which axis do your view and transpose cut into heads?)")
    try:
        split_heads(torch.zeros(1, 2, 10), 3)
    except ValueError as e:
        if "num_heads" not in str(e):
            raise CheckFailed(f"the ValueError for num_heads=3, C=10 should name num_heads; got: {e}") from None
        if not re.search(r"\bC\b|\b10\b|channel", str(e)):
            raise CheckFailed(f"the ValueError for num_heads=3, C=10 names num_heads but not C (its name or "
                              f"its value): the reader needs both to see why they do not fit; got: {e}") from None
    except NotImplementedError:
        raise
    except Exception as e:
        raise CheckFailed(f"split_heads(x with C=10, num_heads=3) should raise ValueError, "
                          f"got {type(e).__name__}: {e}") from None
    else:
        raise CheckFailed("split_heads(x with C=10, num_heads=3) should raise ValueError "
                          "(3 does not divide 10) instead of returning")
    return f"{len(cases)} shapes and the num_heads validation"


def _random_scores(shape: tuple, scale: float, g: torch.Generator) -> torch.Tensor:
    """Scores with about a third of the keys masked (-inf); every row keeps at least one key."""
    s = torch.randn(*shape, generator=g, dtype=torch.float64) * scale
    masked = torch.rand(*shape, generator=g) < 0.35
    keep = torch.randint(0, shape[-1], shape[:-1], generator=g)
    masked.scatter_(-1, keep[..., None], False)
    return s.masked_fill(masked, float("-inf"))


# Ways to take the logarithm of a weight (the weights' form -sum p ln p, which the exercise replaces by
# the scores' form): ln Z comes from torch.logsumexp, and no other logarithm is needed.
_NO_LOG = ("torch.log", "torch.log2", "torch.log10", "torch.log1p", "torch.xlogy", "torch.special.xlogy",
           "torch.special.xlog1py", "math.log", "math.log2", "math.log10", "math.log1p", "numpy.log",
           "numpy.log2", "numpy.log10", "numpy.log1p")


# torch.softmax also refuses torch.ops.aten.softmax, torch._softmax ... (each under its own name);
# the kernels no public name leads to are listed in checks/kernels.py.
_SOFTMAX_KERNELS = SOFTMAX_KERNELS


@exercise_check(forbidden=_SOFTMAX_KERNELS + _NO_LOG
                + ("torch.special.entr", "torch.softmax", "torch.log_softmax", "torch.distributions"))
def check_entropy_from_scores(entropy_from_scores: Callable) -> str:
    """``entropy_from_scores(scores)``: ``(..., T_q, T_k)`` attention scores, ``-inf`` where a key is
    masked -> ``(..., T_q)`` entropies in nats of ``softmax(scores)``, without a softmax or entropy
    routine; compared with ``entr(softmax(scores)).sum(-1)`` on fresh scores, masked and large ones
    included (float32 scores near +-800, where an unshifted exp overflows or underflows and ln Z
    minus the mean score cancels unless the scores are shifted first). No logarithm but
    ``torch.logsumexp`` (torch's, math's and numpy's ``log`` family are refused), so the weights'
    form ``-sum p ln p`` is refused and ``ln p_j = s_j - ln Z`` has to be derived."""
    g = rng(5)
    cases = {
        "unmasked scores (T_q=3, T_k=4)": torch.randn(3, 4, generator=g, dtype=torch.float64),
        "masked scores (some -inf)": _random_scores((5, 6), 1.0, g),
        "large masked scores (x 60)": _random_scores((4, 7), 60.0, g),
        "float32 scores near +800 and -800 (masked)": (_random_scores((4, 6), 3.0, g)
                                                        + torch.tensor([800.0, -800.0, 800.0, -800.0],
                                                                       dtype=torch.float64)[:, None]).float(),
        "a (B, H, T, T) causal batch": torch.randn(2, 3, 5, 5, generator=g, dtype=torch.float64).masked_fill(
            ~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")),
        "rows with one visible key": torch.randn(3, 5, generator=g, dtype=torch.float64).masked_fill(
            torch.arange(5) != torch.randint(0, 5, (3, 1), generator=g), float("-inf")),
        # Scores inside a model carry gradients: a detour through NumPy (np.log of the weights,
        # which the profiler cannot see) fails here, as it would in training.
        "scores that require grad, as in a model": torch.randn(2, 4, 6, generator=g,
                                                               dtype=torch.float64).requires_grad_(),
    }
    for name, s in cases.items():
        try:
            out = entropy_from_scores(s.clone())
        except RuntimeError as e:
            if s.requires_grad and "numpy" in str(e).lower():
                raise CheckFailed(f"entropy_from_scores on {name}: your code left torch for NumPy ({e}). "
                                  "Stay in torch: scores in a model carry gradients. No logarithm of a "
                                  "weight is needed: what is ln p_j in terms of s_j and ln Z?") from None
            raise
        what = f"entropy_from_scores on {name}"
        check_shape(out, s.shape[:-1], what=what)
        out = _as_tensor(out).detach().double()
        s = s.detach()
        if torch.isnan(out).any():
            raise CheckFailed(f"{what}: got NaN. A masked key has weight 0 and score -inf: which of your "
                              "products becomes 0·(-inf) or 0·log 0, and what should that term contribute?")
        if not torch.isfinite(out).all():
            raise CheckFailed(f"{what}: got an infinite entropy. Which exp overflows to inf (or underflows "
                              "so that a whole row sums to 0), and which shift of the scores prevents it?")
        expected = torch.special.entr(torch.softmax(s.double(), dim=-1)).sum(-1)
        if s.dtype == torch.float32:
            if not torch.allclose(out, expected, rtol=1e-4, atol=1e-4):
                raise CheckFailed(f"{what}: off by up to {float((out - expected).abs().max()):.2g}. Here ln Z and "
                                  "sum_j p_j s_j are both near 800 and float32 keeps about 7 digits of each, so "
                                  "their difference loses most of them: which shift of the scores, changing "
                                  "neither p nor the entropy, keeps both small?")
            continue
        assert_same(out, expected, what=f"{what} (entropy in nats, of each row of softmax(scores))",
                    rtol=1e-6, atol=1e-9)
    return f"{len(cases)} fresh sets of scores, masked and large ones included"


# torch.ops.aten's attention kernels behind F.scaled_dot_product_attention and nn.MultiheadAttention
# that no public name leads to (torch.ops.aten.scaled_dot_product_attention is refused with its public name).
_ATEN_ATTENTION = ATEN_ATTENTION


def _ref_cross(x, memory, w_q, w_k, w_v, w_o, num_heads, memory_mask):
    C = x.shape[-1]
    ref = torch.nn.MultiheadAttention(C, num_heads, bias=False, batch_first=True).to(x.dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([w_q, w_k, w_v]))
        ref.out_proj.weight.copy_(w_o)
        # nn.MultiheadAttention's key_padding_mask is True where a key must NOT be read.
        pad = None if memory_mask is None else ~memory_mask
        return ref(x, memory, memory, key_padding_mask=pad, need_weights=False)[0]


def _cross_variant(x, memory, w_q, w_k, w_v, w_o, H, keep, scale):
    """Multi-head cross-attention with a given score scale and a boolean ``keep`` (B, T_k) mask:
    the diagnosis of two common slips (the scale of the whole width, the mask inverted)."""
    B, T_q, C = x.shape
    T_k, D = memory.shape[1], C // H
    q = (x @ w_q.T).view(B, T_q, H, D).transpose(1, 2)
    k = (memory @ w_k.T).view(B, T_k, H, D).transpose(1, 2)
    v = (memory @ w_v.T).view(B, T_k, H, D).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / scale
    if keep is not None:
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    return (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T_q, C) @ w_o.T


@exercise_check(forbidden=("torch.nn.functional.multi_head_attention_forward", "torch.nn.MultiheadAttention.forward",
                           "torch.nn.functional.scaled_dot_product_attention",
                           "fundamentallm.attention.scaled_dot_product_attention",
                           "fundamentallm.attention.MultiHeadAttention.forward") + _ATEN_ATTENTION)
def check_cross_attention(multi_head_cross_attention: Callable) -> str:
    """``multi_head_cross_attention(x, memory, w_q, w_k, w_v, w_o, num_heads, memory_mask=None)``:
    queries from ``x`` ``(B, T_q, C)``, keys and values from ``memory`` ``(B, T_k, C)``, ``(C, C)``
    weights in ``nn.Linear`` layout, ``memory_mask`` ``(B, T_k)`` boolean (``True`` = a real source
    token); compared with ``nn.MultiheadAttention(x, memory, memory, key_padding_mask=~memory_mask)``
    on fresh inputs."""
    g = rng(6)
    cases = [(2, 3, 5, 8, 2, False), (2, 4, 6, 8, 2, True), (1, 5, 3, 12, 3, True), (2, 2, 7, 6, 1, False),
             (3, 6, 4, 8, 4, True)]  # (B, T_q, T_k, C, H, padded)
    for B, T_q, T_k, C, H, padded in cases:
        x = torch.randn(B, T_q, C, generator=g, dtype=torch.float64)
        memory = torch.randn(B, T_k, C, generator=g, dtype=torch.float64)
        w_q, w_k, w_v, w_o = (torch.randn(C, C, generator=g, dtype=torch.float64) / C ** 0.5 for _ in range(4))
        mask = None
        if padded:  # right padding of a different length per sequence; each keeps >= 1 token
            lengths = torch.randint(1, T_k + 1, (B,), generator=g)
            lengths[0] = max(1, T_k - 2)
            mask = torch.arange(T_k)[None, :] < lengths[:, None]  # (B, T_k)
        args = (x.clone(), memory.clone(), w_q.clone(), w_k.clone(), w_v.clone(), w_o.clone(), H)
        out = multi_head_cross_attention(*args) if mask is None else \
            multi_head_cross_attention(*args, memory_mask=mask.clone())
        what = (f"multi_head_cross_attention(x {(B, T_q, C)}, memory {(B, T_k, C)}, num_heads={H}"
                + (", padded memory)" if padded else ")"))
        check_shape(out, (B, T_q, C), what=what + " (one output row per query)")
        out = _as_tensor(out).double()
        if torch.isnan(out).any():
            raise CheckFailed(f"{what}: NaN in the output: does some query see no key at all? Which "
                              "value of memory_mask marks a real token?")
        expected = _ref_cross(x, memory, w_q, w_k, w_v, w_o, H, mask)
        if out.shape == expected.shape and not torch.allclose(out, expected, atol=1e-10, rtol=1e-8):
            if H > 1 and torch.allclose(out, _cross_variant(x, memory, w_q, w_k, w_v, w_o, H, mask, C ** 0.5),
                                        atol=1e-10, rtol=1e-8):
                raise CheckFailed(f"{what}: your scores are scaled for dot products of length C = {C}; how "
                                  "many terms does one head's dot product q_h . k_h have?")
            if mask is not None and (~mask).any(-1).all() and torch.allclose(
                    out, _cross_variant(x, memory, w_q, w_k, w_v, w_o, H, ~mask, (C // H) ** 0.5),
                    atol=1e-10, rtol=1e-8):
                raise CheckFailed(f"{what}: your queries read exactly the padded positions and skip the real "
                                  "ones: which value of memory_mask marks a real source token?")
        assert_same(out, expected, what=what + " (vs nn.MultiheadAttention)", atol=1e-10, rtol=1e-8)
    return f"{len(cases)} fresh cases equal to nn.MultiheadAttention, T_q != T_k and padded memories included"


@exercise_check(forbidden=("torch.nn.functional.scaled_dot_product_attention",
                           "fundamentallm.attention.scaled_dot_product_attention") + _ATEN_ATTENTION)
def check_grouped_query_attention(grouped_query_attention: Callable) -> str:
    """``grouped_query_attention(q, k, v, causal=False)``: ``q`` ``(B, H, T, D)``, ``k`` and ``v``
    ``(B, G, T, D)`` with ``G`` dividing ``H``; query head ``h`` reads key/value head
    ``h // (H // G)``. Compared with ``F.scaled_dot_product_attention(..., enable_gqa=True)``."""
    import torch.nn.functional as F

    cases = [(2, 4, 2, 5, 3, False), (1, 6, 3, 7, 4, True), (2, 4, 1, 4, 8, True),
             (1, 3, 3, 6, 2, False), (1, 8, 2, 5, 4, True)]  # (B, H, G, T, D, causal)
    g = rng(330)
    for B, H, G, T, D, causal in cases:
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
                raise CheckFailed(f"{what}: your query heads read the key/value heads in a cycle (0, 1, 0, "
                                  "1, ...); which group does query head h belong to if consecutive heads share one?")
        assert_same(_as_tensor(got).double(), expected, what=what + " (vs F.scaled_dot_product_attention)")
    return f"matches F.scaled_dot_product_attention(enable_gqa=True) on {len(cases)} fresh cases"


@exercise_check(may_return_none=True)
def check_buggy_split_prediction(head1_rows) -> str:
    """``head1_rows``: for each of the 6 rows ("positions") of head 1 of ``x.view(1, 2, 6, 4)``
    (``x`` of shape ``(1, 6, 8)``, no transpose), the token position its 4 numbers come from. 6^6
    possible answers; the message names the mechanism, not the answer."""
    from .predict import answer_given

    answer = answer_given(head1_rows, "head1_rows", "a list of 6 token positions, one per row of head 1")
    try:
        if not isinstance(answer, (list, tuple)):
            raise TypeError
        answer = [int(t) for t in answer]
    except (TypeError, ValueError):
        raise CheckFailed(f"head1_rows should be a list of integers, got {head1_rows!r}") from None
    if len(answer) != 6:
        raise CheckFailed(f"head1_rows has {len(answer)} entries: head 1 has 6 rows (T = 6); give the token "
                          "position of each row, in order")
    x = torch.arange(6)[None, :, None].expand(1, 6, 8).contiguous()  # each entry holds its token position
    expected = x.view(1, 2, 6, 4)[0, 1, :, 0].tolist()
    if answer == expected:
        return ("view reads memory in order: each row of head 1 is half a token, from the second half "
                "of the sequence, not channels 4-7 of every token")
    if answer == list(range(6)):
        raise CheckFailed("that is the correct split, with the transpose. Without it, view just cuts the "
                          "48 numbers, stored token after token, into consecutive pieces: which pieces "
                          "make up head 1?")
    raise CheckFailed(f"{answer} is not right: x is stored token after token, 8 numbers each; view(1, 2, 6, 4) "
                      "cuts that memory, in order, into 2 heads of 6 rows of 4 numbers")
