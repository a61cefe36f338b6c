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


def shortcut_by_loop(p, q):
    # by cases: accepted as the proposal (q(x) * min(1, p/q), tokens never proposed add 0), or a
    # replacement from p after a rejection of whichever token was proposed
    pl, ql = p.tolist(), q.tolist()
    kept = [qx * min(1.0, px / qx) if qx > 0 else 0.0 for px, qx in zip(pl, ql)]
    reject = sum(qx * (1 - min(1.0, px / qx)) for px, qx in zip(pl, ql) if qx > 0)
    return torch.tensor([k + reject * px for k, px in zip(kept, pl)], dtype=torch.float64)


def shortcut_float32(p, q):
    p, q = p.float(), q.float()
    a = torch.minimum(p, q)
    return a + (1 - a.sum()) * p


def speedup_by_sum(alpha, k, c):
    return sum(alpha ** i for i in range(k + 1)) / (1 + k * c)


def fit_by_search(lengths, memory, max_seq_len, block_size):
    blocks = [math.ceil(n / block_size) for n in lengths]
    paged = max(n for n in range(len(lengths) + 1) if sum(blocks[:n]) * block_size <= memory)
    return min(len(lengths), memory // max_seq_len), paged


def cross_entropy_python(blocks, target):
    m, total, position, picked = -math.inf, 0.0, 0, None
    for block in blocks:
        for value in block.tolist():
            new = max(m, value)
            total = total * math.exp(m - new) + math.exp(value - new)
            m = new
            if position == target:
                picked = value
            position += 1
    return m + math.log(total) - picked


def cross_entropy_tensor_state(blocks, target):
    # the running state kept as 0-d tensors, the target's score found with a mask
    m = torch.tensor(-math.inf, dtype=torch.float64)
    total = torch.tensor(0.0, dtype=torch.float64)
    picked, start = torch.tensor(0.0, dtype=torch.float64), 0
    for block in blocks:
        new = torch.maximum(m, block.max())
        total = total * torch.exp(m - new) + torch.exp(block - new).sum()
        m = new
        index = torch.arange(start, start + len(block))
        picked = picked + (block * (index == target)).sum()
        start += len(block)
    return m + torch.log(total) - picked


CORRECT = {
    "check_quantize_rows": [quantize_rows_with_package, quantize_rows_loop],
    "check_shortcut_distribution": [shortcut_by_loop, shortcut_float32],
    "check_speculative_speedup": [speedup_by_sum],
    "check_requests_that_fit": [fit_by_search],
    "check_streamed_cross_entropy": [cross_entropy_python, cross_entropy_tensor_state],
}

test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \
    table_tests(CORRECT, {})


def test_streamed_cross_entropy_refuses_torchs_functions():
    def through_cross_entropy(blocks, target):
        return float(torch.nn.functional.cross_entropy(torch.cat([b.clone() for b in blocks])[None],
                                                       torch.tensor([target])))

    for answer in (through_cross_entropy,
                   lambda blocks, target: float(-torch.log_softmax(torch.cat([b.clone() for b in blocks]), 0)[target])):
        with pytest.raises(CheckFailed, match="not to use"):
            checks.check_streamed_cross_entropy(answer)


def test_streamed_cross_entropy_refuses_kept_blocks():
    def two_passes(blocks, target):
        kept = list(blocks)
        m = max(float(b.max()) for b in kept)
        x = torch.cat(kept)
        return m + math.log(float(torch.exp(x - m).sum())) - float(x[target])

    with pytest.raises(CheckFailed, match="after the next one was read"):
        checks.check_streamed_cross_entropy(two_passes)


def test_nan_answers_fail():
    with pytest.raises(CheckFailed, match="finite"):
        checks.check_speculative_speedup(lambda alpha, k, c: float("nan"))
    with pytest.raises(CheckFailed, match="NaN"):
        checks.check_shortcut_distribution(lambda p, q: p * float("nan"))
