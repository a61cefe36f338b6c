"""The chapter 3 exercise checks: they pass a correct answer and fail, with CheckFailed, a stub
and plausible wrong answers."""

from __future__ import annotations

import math

import pytest
import torch
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

# --- correct answers ---------------------------------------------------------------------------


split_heads = book_solution("ch03-ex1", "split_heads")


merge_heads = book_solution("ch03-ex2", "merge_heads")


attention_entropy = book_solution("ch03-ex3", "attention_entropy")


def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, causal=False, scale_dim=None):
    B, T, C = x.shape
    D = C // num_heads
    heads = []
    for h in range(num_heads):
        rows = slice(h * D, (h + 1) * D)
        q, k, v = x @ w_q[rows].T, x @ w_k[rows].T, x @ w_v[rows].T
        scores = q @ k.transpose(-2, -1) / math.sqrt(scale_dim or D)
        if causal:
            scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        heads.append(torch.softmax(scores, -1) @ v)
    return torch.cat(heads, -1) @ w_o.T


# --- wrong answers -----------------------------------------------------------------------------

def stub(*args, **kwargs):
    raise NotImplementedError


def split_heads_no_transpose(x, num_heads):
    B, T, C = x.shape
    if C % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide C={C}")
    return x.reshape(B, num_heads, T, C // num_heads)  # right shape, tokens mixed


def split_heads_unvalidated(x, num_heads):
    B, T, C = x.shape
    return x.reshape(B, T, num_heads, -1).transpose(1, 2)


def merge_heads_no_transpose(x):
    B, H, T, D = x.shape
    return x.reshape(B, T, H * D)


def merge_heads_view(x):
    B, H, T, D = x.shape
    return x.transpose(1, 2).view(B, T, H * D)  # fails on non-contiguous input


def entropy_naive(weights):
    return -(weights * weights.log()).sum(-1)  # NaN where a weight is 0


def entropy_bits(weights):
    return attention_entropy(weights) / math.log(2)


def mha_scaled_by_model_width(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    return multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, causal, scale_dim=x.shape[-1])


def mha_ignores_causal(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    return multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, causal=False)


def mha_no_output_projection(x, w_q, w_k, w_v, w_o, num_heads, causal=False):
    return multi_head_attention(x, w_q, w_k, w_v, torch.eye(x.shape[-1]), num_heads, causal)


# --- tests -------------------------------------------------------------------------------------

CASES = [
    ("check_split_heads", split_heads, [split_heads_no_transpose, split_heads_unvalidated]),
    ("check_merge_heads", merge_heads, [merge_heads_no_transpose, merge_heads_view]),
    ("check_attention_entropy", attention_entropy, [entropy_naive, entropy_bits]),
    ("check_multi_head_attention", multi_head_attention,
     [mha_scaled_by_model_width, mha_ignores_causal, mha_no_output_projection]),
]


@pytest.mark.parametrize("name,correct,wrong", CASES, ids=[c[0] for c in CASES])
def test_check_passes_a_correct_answer(name, correct, wrong, capsys):
    assert getattr(checks, name)(correct) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("name,correct,wrong", CASES, ids=[c[0] for c in CASES])
def test_check_fails_a_stub(name, correct, wrong):
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        getattr(checks, name)(stub)


@pytest.mark.parametrize("name,correct,wrong", CASES, ids=[c[0] for c in CASES])
def test_check_fails_wrong_answers(name, correct, wrong):
    for fn in wrong:
        with pytest.raises(CheckFailed, match=name):
            getattr(checks, name)(fn)


def test_messages_say_what_is_wrong():
    with pytest.raises(CheckFailed, match="transpose"):
        checks.check_split_heads(split_heads_no_transpose)
    with pytest.raises(CheckFailed, match="ValueError"):
        checks.check_split_heads(split_heads_unvalidated)
    with pytest.raises(CheckFailed, match=r"0·log\(0\)"):
        checks.check_attention_entropy(entropy_naive)
    with pytest.raises(CheckFailed, match="first mismatch"):
        checks.check_multi_head_attention(mha_scaled_by_model_width)


def test_checks_are_registered():
    for name, *_ in CASES:
        assert name in checks.CHECKS


# --- grouped-query attention ----------------------------------------------------------------------

def _gqa(q, k, v, causal=False):
    import torch.nn.functional as F
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _gqa_cycled(q, k, v, causal=False):
    import torch.nn.functional as F
    groups = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1),
                                          is_causal=causal)


def _gqa_ignores_causal(q, k, v, causal=False):
    return _gqa(q, k, v, causal=False)


def test_check_grouped_query_attention(capsys):
    assert checks.check_grouped_query_attention(_gqa) is True
    assert "passed" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="h // \\(H // G\\)"):
        checks.check_grouped_query_attention(_gqa_cycled)
    with pytest.raises(CheckFailed, match="causal=True"):
        checks.check_grouped_query_attention(_gqa_ignores_causal)
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.check_grouped_query_attention(stub)
