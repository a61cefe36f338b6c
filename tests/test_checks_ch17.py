"""The chapter 17 exercise checks: they pass correct answers written in other ways than the book's
and fail, with CheckFailed, a stub; the wrong answers each check rejects are the package's table
(fundamentallm/checks/ch17.py, run by tests/test_catches.py)."""

from __future__ import annotations

import math

import pytest
import torch
from check_tables import table_tests

from fundamentallm import checks
from fundamentallm.checks import CheckFailed
from fundamentallm.quantize import quantize

# --- correct answers, written in other ways than the book's --------------------------------------


def quantize_rows_with_package(w, bits):
    q, scale, _ = quantize(w, bits=bits)
    return q.float(), scale  # (out, 1): one group per row


def quantize_rows_loop(w, bits):
    qmax = 2 ** (bits - 1) - 1
    rows, scales = [], []
    for row in w:
        s = max(abs(x) for x in row.tolist()) / qmax or 1.0
        rows.append([round(x / s) for x in row.tolist()])
        scales.append([s])
    return torch.tensor(rows, dtype=torch.float64), torch.tensor(scales, dtype=torch.float64)


def acceptance_by_loop(p, q):
    # sum over proposals x of q(x) * min(1, p(x) / q(x)), skipping tokens never proposed
    return sum(qx * min(1.0, px / qx) for px, qx in zip(p.tolist(), q.tolist()) if qx > 0)


def acceptance_by_total_variation(p, q):
    return 1 - 0.5 * (p - q).abs().sum()  # a 0-d tensor


def speedup_by_sum(alpha, k, c):
    return sum(alpha ** i for i in range(k + 1)) / (1 + k * c)


def fit_by_search(lengths, memory, max_seq_len, block_size):
    blocks = [math.ceil(n / block_size) for n in lengths]
    paged = max(n for n in range(len(lengths) + 1) if sum(blocks[:n]) * block_size <= memory)
    return min(len(lengths), memory // max_seq_len), paged


def online_softmax_python(x, block_size):
    m, total = -math.inf, 0.0
    values = x.tolist()
    for i in range(0, len(values), block_size):
        block = values[i:i + block_size]
        new = max(m, max(block))
        total = total * math.exp(m - new) + sum(math.exp(v - new) for v in block)
        m = new
    return torch.tensor([math.exp(v - m) / total for v in values])


CORRECT = {
    "check_quantize_rows": [quantize_rows_with_package, quantize_rows_loop],
    "check_acceptance_probability": [acceptance_by_loop, acceptance_by_total_variation],
    "check_speculative_speedup": [speedup_by_sum],
    "check_requests_that_fit": [fit_by_search],
    "check_online_softmax": [online_softmax_python],
}

test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \
    table_tests(CORRECT, {})


def test_online_softmax_refuses_torchs_softmax():
    with pytest.raises(CheckFailed, match="not to use"):
        checks.check_online_softmax(lambda x, block_size: torch.nn.functional.softmax(x, dim=0))


def test_online_softmax_refuses_the_packages_tiled_attention():
    from fundamentallm.flash import tiled_attention

    def through_attention(x, block_size):
        v = torch.eye(len(x))
        return tiled_attention(torch.ones(1, 1), x[:, None] * 1.0, v, block_size)[0]

    with pytest.raises(CheckFailed, match="not to use"):
        checks.check_online_softmax(through_attention)


def test_nan_answers_fail():
    with pytest.raises(CheckFailed, match="finite"):
        checks.check_speculative_speedup(lambda alpha, k, c: float("nan"))
    with pytest.raises(CheckFailed, match="NaN"):
        checks.check_acceptance_probability(lambda p, q: float("nan"))
