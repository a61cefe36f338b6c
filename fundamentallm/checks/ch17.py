"""Checks for the exercises of chapter 17: making generation cheap (quantization, speculative
decoding, a paged KV cache, the online softmax)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from .core import CheckFailed, assert_close_number, check_shape, exercise_check, finite_number, rng


def _tensor(got, expected: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what} should be a torch.Tensor, got {type(got).__name__}")
    check_shape(got, tuple(expected.shape), what)
    got = got.detach().double()
    if not bool(torch.isfinite(got).all()):
        raise CheckFailed(f"{what} holds NaN or infinity: every entry is a finite number")
    return got


# --- Chapter 17: making generation cheap -----------------------------------------------------------

@exercise_check
def check_quantize_rows(quantize_rows: Callable) -> str:
    """``quantize_rows(w, bits)``: ``(out, in)`` float weight -> ``(q, scale)``, symmetric, one
    scale per row: ``scale = max|row| / (2^(bits-1) - 1)``, ``q = round(w / scale)``."""
    gen = rng(1700)
    cases = [(torch.randn(5, 12, generator=gen), 8), (torch.randn(3, 16, generator=gen) * 4, 4),
             (torch.randn(4, 7, generator=gen), 8)]
    cases[2][0][1] = 0.0  # a row of zeros
    for w, bits in cases:
        qmax = 2 ** (bits - 1) - 1
        amax = w.abs().amax(-1, keepdim=True)
        scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
        q_ref = torch.round(w / scale)
        result = quantize_rows(w, bits)
        if not isinstance(result, tuple) or len(result) != 2:
            raise CheckFailed("quantize_rows should return a tuple (q, scale)")
        q, s = result
        q = _tensor(q, q_ref, f"q for a {tuple(w.shape)} weight at {bits} bits (a row of zeros in it: "
                    f"{bool((amax == 0).any())})")
        s = _tensor(s, scale, f"scale for a {tuple(w.shape)} weight at {bits} bits")
        if not bool((q == torch.round(q)).all()):
            raise CheckFailed("q must hold whole numbers: round each w / scale to the nearest integer")
        if int(q.abs().max()) > qmax:
            raise CheckFailed(f"q exceeds the largest code of {bits} signed bits used symmetrically")
        nonzero = (amax > 0).squeeze(-1)
        if not torch.allclose(s[nonzero], scale.double()[nonzero], rtol=1e-5, atol=1e-8):
            raise CheckFailed(f"the scale is wrong at {bits} bits: one scale per row, chosen so that the "
                              f"row's largest |w| lands on the largest code")
        if not bool((q[~nonzero] == 0).all()):
            raise CheckFailed("a row of zeros must quantize to codes 0")
        if not torch.equal(q[nonzero], q_ref.double()[nonzero]):
            raise CheckFailed(f"q is wrong at {bits} bits: round w / scale to the NEAREST integer")
    return "three weights, a row of zeros in one"


@exercise_check
def check_acceptance_probability(acceptance_probability: Callable) -> str:
    """``acceptance_probability(p, q)``: the probability that one proposal ``x ~ q`` of the draft is
    accepted under the rule ``min(1, p(x) / q(x))``: ``sum_x min(p(x), q(x))``."""
    gen = rng(1701)
    cases = []
    for V in (5, 2, 30):
        cases.append((torch.softmax(torch.randn(V, generator=gen).double() * 2, -1),
                      torch.softmax(torch.randn(V, generator=gen).double() * 2, -1)))
    same = torch.softmax(torch.randn(6, generator=gen).double(), -1)
    cases.append((same, same.clone()))  # a draft equal to the target
    cases.append((torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0], dtype=torch.float64),
                  torch.tensor([0.0, 0.25, 0.25, 0.5, 0.0], dtype=torch.float64)))  # q = 0: never proposed
    for p, q in cases:
        expected = float(torch.minimum(p, q).sum())
        what = f"acceptance_probability for V={len(p)}" + (" (q = 0 where p > 0)" if bool((q == 0).any()) else "")
        got = acceptance_probability(p.clone(), q.clone())
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, float) and not math.isfinite(got):
            raise CheckFailed(f"{what} is NaN or infinite: a token the draft never proposes (q = 0) adds "
                              f"nothing, since it is never the proposal; weight each ratio by q before "
                              f"dividing")
        if isinstance(got, float) and abs(got - float((p * q).sum())) < 1e-9 < abs(got - expected):
            raise CheckFailed(f"{what} is wrong: it is not the chance that draft and target pick the same "
                              f"token; the target never samples here, it accepts x with probability "
                              f"min(1, p(x)/q(x))")
        assert_close_number(got, expected, what, rtol=1e-9, atol=1e-12,
                            hint=f"{what} is wrong: average the acceptance rule over the proposals, each "
                                 f"proposed with the draft's probability q(x)")
    return "five pairs of distributions, an identical pair and a draft that never proposes some tokens included"


@exercise_check
def check_speculative_speedup(speculative_speedup: Callable) -> str:
    """``speculative_speedup(alpha, k, c)``: tokens per unit time of speculative decoding against the
    target alone, when each proposal is accepted with probability ``alpha``, a round drafts ``k``
    tokens at ``c`` target steps each and verifies them in one target forward (one step's cost):
    ``(1 - alpha^(k+1)) / (1 - alpha) / (k c + 1)``."""
    for alpha, k, c in ((0.6, 4, 0.1), (0.9, 1, 0.5), (0.3, 7, 0.05), (0.0, 3, 0.2), (1.0, 5, 0.25),
                        (0.75, 2, 0.0), (0.5, 3, 1.0)):
        tokens = k + 1.0 if alpha == 1.0 else (1 - alpha ** (k + 1)) / (1 - alpha)
        expected = tokens / (k * c + 1)
        hint = (f"speculative_speedup({alpha}, {k}, {c}) is wrong: a round costs its k draft steps and one "
                f"target forward, and adds the accepted proposals (the round stops at the first rejection) "
                f"plus the one token the target always adds; the target alone makes one token per step")
        if alpha == 1.0:
            hint += " (alpha = 1 is allowed: every proposal is accepted)"
        assert_close_number(speculative_speedup(alpha, k, c), expected, f"speculative_speedup({alpha}, {k}, {c})",
                            rtol=1e-9, atol=1e-12, hint=hint)
    return "seven (alpha, k, c) triples, alpha = 0 and 1 and a free draft (c = 0) included"


def _fit(lengths, memory, size):
    """How many of the requests, in order, fit at once when each holds size * ceil(n / size) positions."""
    held = 0
    for i, n in enumerate(lengths):
        held += math.ceil(n / size) * size
        if held > memory:
            return i
    return len(lengths)


@exercise_check
def check_requests_that_fit(requests_that_fit: Callable) -> str:
    """``requests_that_fit(lengths, memory, max_seq_len, block_size)``: how many of the requests,
    admitted in order, fit at once in ``memory`` cache positions: ``(contiguous, paged)``."""
    cases = [([100, 30, 300, 5, 64, 200], 1024, 512, 16), ([16, 16, 16, 16], 64, 64, 16),
             ([1, 2, 3, 4, 5, 6, 7, 8], 40, 32, 8), ([500, 10], 400, 512, 16), ([40, 7, 90, 3, 12], 160, 128, 32)]
    for lengths, memory, max_seq_len, size in cases:
        expected = (min(len(lengths), memory // max_seq_len), _fit(lengths, memory, size))
        call = f"requests_that_fit({lengths}, {memory}, {max_seq_len}, {size})"
        got = requests_that_fit(list(lengths), memory, max_seq_len, size)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckFailed(f"{call} should return a pair (contiguous, paged)")
        assert_close_number(got[0], expected[0], f"the contiguous count of {call}", hint=(
            f"the contiguous count of {call} is wrong: a contiguous cache reserves max_seq_len positions "
            f"for every request when it starts, however long the request turns out"))
        paged = finite_number(got[1], f"the paged count of {call}")
        if paged != expected[1]:
            if paged == _fit(lengths, memory, 1):
                raise CheckFailed(f"the paged count of {call} is wrong: a paged cache holds whole blocks, "
                                  f"a partly filled last block included")
            if paged == _fit(sorted(lengths), memory, size):
                raise CheckFailed(f"the paged count of {call} is wrong: the requests are admitted in order, "
                                  f"not shortest first")
            if paged == expected[1] - 1 and sum(math.ceil(n / size) * size for n in lengths[:expected[1]]) == memory:
                raise CheckFailed(f"the paged count of {call} is wrong: requests that fill the memory "
                                  f"exactly all fit")
            raise CheckFailed(f"the paged count of {call} is wrong: count the requests, in order, whose "
                              f"blocks still fit in the memory")
    return "five batches, one that fills its memory exactly and one whose first request does not fit"


@exercise_check(forbidden=("torch.softmax", "torch.log_softmax", "fundamentallm.flash"))
def check_online_softmax(online_softmax: Callable) -> str:
    """``online_softmax(x, block_size)``: ``softmax`` of a 1-D tensor, computed with a running
    maximum and a running sum over blocks of ``block_size`` entries."""
    gen = rng(1702)
    cases = [(torch.randn(10, generator=gen), 3), (torch.arange(12.0) * 100, 4),
             (torch.randn(7, generator=gen) * 50 + 800, 2), (torch.randn(5, generator=gen), 8)]
    for x, size in cases:
        expected = torch.exp(x.double() - x.double().max())
        expected = expected / expected.sum()
        got = online_softmax(x.clone(), size)
        if isinstance(got, torch.Tensor) and not bool(torch.isfinite(got).all()):
            raise CheckFailed(f"online_softmax of scores up to {float(x.max()):.0f} holds NaN or infinity: "
                              f"exp overflows unless you subtract the running maximum")
        got = _tensor(got, expected, f"online_softmax of {len(x)} scores in blocks of {size}")
        if not torch.allclose(got, expected, rtol=1e-4, atol=1e-6):
            raise CheckFailed(f"online_softmax of {len(x)} scores in blocks of {size} is wrong: when the "
                              f"running maximum grows, rescale the running sum accumulated under the old one")
    return "four score vectors, growing maxima and scores of several hundred included"
