"""Chapter 2 checks: they pass on correct answers and fail, with a clear message, on wrong ones."""

import math

import pytest
import torch
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

softmax_rows = book_solution("ch02-ex2", "softmax_rows")


scaled_scores = book_solution("ch02-ex1", "scaled_scores")


make_causal_mask = book_solution("ch02-ex3", "make_causal_mask")


attention = book_solution("ch02-ex4", "attention")


def attention_bool_only(q, k, v, mask=None):
    """Treats every mask as boolean (a float 0/-inf mask then keeps the wrong keys)."""
    return attention(q, k, v, None if mask is None else mask.bool())


def attention_nan_rows(q, k, v, mask=None):
    """Forgets fully masked rows: softmax of only -inf is NaN."""
    scores = scaled_scores(q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    w = torch.softmax(scores, dim=-1)
    return w @ v, w


def stub(*args, **kwargs):
    raise NotImplementedError


CORRECT = {
    "check_softmax_rows": softmax_rows,
    "check_scaled_scores": scaled_scores,
    "check_make_causal_mask": make_causal_mask,
    "check_attention": attention,
}

WRONG = {
    "check_softmax_rows": [
        lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True),  # overflows on large scores
        lambda x: torch.softmax(x, dim=0),  # wrong dimension
        lambda x: x.sub_(x.amax(-1, keepdim=True)).exp() / x.exp().sum(-1, keepdim=True),  # in place
    ],
    "check_scaled_scores": [
        lambda q, k: q @ k.transpose(-2, -1),  # not scaled
        lambda q, k: q @ k.transpose(-2, -1) / q.shape[-1],  # divides by d_k
        lambda q, k: k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]),  # transposed
    ],
    "check_make_causal_mask": [
        lambda T: torch.ones(T, T, dtype=torch.bool).triu(),  # upper triangle
        lambda T: torch.ones(T, T).tril(),  # float, not bool
        lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1),  # excludes the diagonal
    ],
    "check_attention": [
        lambda q, k, v, mask=None: attention(q, k, v),  # ignores the mask
        lambda q, k, v, mask=None: attention(q, k, v, mask)[0],  # returns only the output
        lambda q, k, v, mask=None: (lambda o, w: (o, w.transpose(-2, -1)))(*attention(q, k, v, mask)),
        lambda q, k, v, mask=None: attention(q, k, v, mask if mask is None or mask.dtype != torch.bool
                                             else ~mask),  # inverted boolean mask
        attention_bool_only,
        attention_nan_rows,
    ],
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_check_passes_on_correct_answer(name, capsys):
    assert checks.CHECKS[name](CORRECT[name]) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_check_fails_on_stub(name):
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.CHECKS[name](stub)


@pytest.mark.parametrize("name,i", [(n, i) for n in sorted(WRONG) for i in range(len(WRONG[n]))])
def test_check_fails_on_wrong_answer(name, i):
    with pytest.raises(CheckFailed, match=name):
        checks.CHECKS[name](WRONG[name][i])


def test_softmax_overflow_message_explains():
    with pytest.raises(CheckFailed, match="subtract each row's max"):
        checks.check_softmax_rows(WRONG["check_softmax_rows"][0])


def test_causal_mask_dtype_message():
    with pytest.raises(CheckFailed, match="torch.bool"):
        checks.check_make_causal_mask(WRONG["check_make_causal_mask"][1])


def test_attention_nan_message_explains():
    with pytest.raises(CheckFailed, match="all-zero weights"):
        checks.check_attention(attention_nan_rows)


# --- the scale of the scores ----------------------------------------------------------------------

def test_check_score_scale():
    assert checks.check_score_scale(lambda d_k, sq, sk: 1 / (sq * sk * d_k ** 0.5)) is True
    with pytest.raises(CheckFailed, match="unit-variance"):
        checks.check_score_scale(lambda d_k, sq, sk: 1 / d_k ** 0.5)
    with pytest.raises(CheckFailed, match="variance"):
        checks.check_score_scale(lambda d_k, sq, sk: 1 / (sq * sk * d_k))
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.check_score_scale(stub)
