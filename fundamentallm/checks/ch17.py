"""Checks for the exercises of chapter 17: making generation cheap (quantization, speculative
decoding, a paged KV cache, the online softmax)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from .core import CheckFailed, assert_close_number, check_shape, exercise_check, rng


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
def check_residual_distribution(residual_distribution: Callable) -> str:
    """``residual_distribution(p, q)``: target and draft distributions ``(V,)`` -> the distribution a
    rejected proposal is replaced from, ``max(0, p - q)`` normalised."""
    gen = rng(1701)
    for V in (5, 2, 30):
        p = torch.softmax(torch.randn(V, generator=gen) * 2, -1).double()
        q = torch.softmax(torch.randn(V, generator=gen) * 2, -1).double()
        expected = (p - q).clamp(min=0)
        expected = expected / expected.sum()
        got = _tensor(residual_distribution(p, q), expected, f"the residual of V={V} distributions")
        if bool((got < -1e-12).any()):
            raise CheckFailed("the residual has negative entries: a probability is never negative; where "
                              "the draft already over-proposes a token, the residual gives it nothing")
        if abs(float(got.sum()) - 1) > 1e-6:
            raise CheckFailed("the residual must sum to 1: it is a distribution to sample from")
        if not torch.allclose(got, expected, atol=1e-7):
            raise CheckFailed(f"the residual of V={V} distributions is wrong: it must supply exactly the "
                              f"probability the target wants on a token beyond what the draft's accepted "
                              f"proposals already give it")
    return "three pairs of distributions"


@exercise_check
def check_expected_tokens(expected_tokens: Callable) -> str:
    """``expected_tokens(alpha, k)``: the expected number of tokens a round of speculative decoding
    adds when each proposal is accepted independently with probability ``alpha``."""
    for alpha, k in ((0.6, 4), (0.9, 1), (0.3, 7), (0.0, 3), (1.0, 5), (0.75, 2)):
        expected = k + 1.0 if alpha == 1.0 else (1 - alpha ** (k + 1)) / (1 - alpha)
        assert_close_number(expected_tokens(alpha, k), expected, f"expected_tokens({alpha}, {k})", rtol=1e-9,
                            atol=1e-12,
                            hint=f"expected_tokens({alpha}, {k}) is wrong: count the accepted proposals "
                                 f"(the round stops at the first rejection) and the one token the target "
                                 f"always adds, by a replacement or after all k were accepted"
                                 + (" (alpha = 1 is allowed: every proposal is accepted)" if alpha == 1.0
                                    else ""))
    return "six (alpha, k) pairs, alpha = 0 and 1 included"


@exercise_check
def check_blocks_needed(blocks_needed: Callable) -> str:
    """``blocks_needed(lengths, block_size)``: blocks a paged cache holds for sequences of these
    lengths (each sequence has its own blocks)."""
    for lengths, size in (([10, 100, 3, 64], 16), ([16, 32, 0, 1], 16), ([7], 1), ([5, 9, 13], 4)):
        expected = sum(math.ceil(n / size) for n in lengths)
        assert_close_number(blocks_needed(list(lengths), size), expected,
                            f"blocks_needed({lengths}, {size})",
                            hint=f"blocks_needed({lengths}, {size}) is wrong: a sequence needs a block for "
                                 f"every block_size positions, a partly filled last block included, and "
                                 f"none for positions it does not have; blocks belong to one sequence")
    return "four batches, lengths that fill their blocks exactly and an empty sequence included"


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
