"""Checks for the exercises of chapter 17: making generation cheap (quantization, speculative
decoding, a paged KV cache, the online softmax over a streamed vocabulary)."""

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
def check_shortcut_distribution(shortcut_distribution: Callable) -> str:
    """``shortcut_distribution(p, q)``: the exact distribution of the token one verdict keeps when
    the draft proposes ``x ~ q``, it is kept with probability ``min(1, p(x)/q(x))``, and a rejection
    is replaced by a sample of ``p`` itself (not of the residual):
    ``min(p, q) + (1 - sum min(p, q)) * p``."""
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
        kept = torch.minimum(p, q)
        expected = kept + (1 - kept.sum()) * p
        what = f"shortcut_distribution for V={len(p)}" + (" (q = 0 for some tokens)" if bool((q == 0).any()) else "")
        got = shortcut_distribution(p.clone(), q.clone())
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what} should be a torch.Tensor of shape ({len(p)},), got {type(got).__name__}")
        check_shape(got, (len(p),), what)
        got = got.detach().double()
        if not bool(torch.isfinite(got).all()):
            raise CheckFailed(f"{what} holds NaN or infinity: a token the draft never proposes (q = 0) is "
                              f"never accepted, so it adds nothing through acceptance; weight each ratio by q "
                              f"before dividing, or avoid the ratio")
        if abs(float(got.sum()) - 1) > 1e-6:
            raise CheckFailed(f"{what} sums to {float(got.sum()):.4f}, not 1: a replacement is drawn only when "
                              f"the proposal is rejected; weight it by the chance of a rejection")
        if torch.allclose(got, expected, rtol=0, atol=1e-7):
            continue
        if float((got - expected).abs().max()) < 0.03:
            raise CheckFailed(f"{what} is close but not exact (off by {float((got - expected).abs().max()):.1e}): "
                              f"a sample estimate? Add, for each token, the probability of the two ways it can be "
                              f"kept: proposed and accepted, or a rejection and then the replacement")
        if torch.allclose(got, p, rtol=0, atol=1e-7):
            raise CheckFailed(f"{what} is wrong: that is the target's own distribution, which the residual rule "
                              f"keeps; with the shortcut, add up the two ways a token can be kept and see whether "
                              f"they still make p")
        raise CheckFailed(f"{what} is wrong: a token is kept either as the accepted proposal (proposed with "
                          f"probability q, then accepted) or as the replacement after a rejection (any proposal "
                          f"rejected, then this token drawn from the replacement's distribution)")
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


def _fit_skipping(lengths, memory, size):
    """How many fit when a request that does not fit is skipped and the next ones are tried."""
    held, count = 0, 0
    for n in lengths:
        need = math.ceil(n / size) * size
        if held + need <= memory:
            held, count = held + need, count + 1
    return count


@exercise_check
def check_requests_that_fit(requests_that_fit: Callable) -> str:
    """``requests_that_fit(lengths, memory, max_seq_len, block_size)``: how many of the requests,
    admitted in order, fit at once in ``memory`` cache positions: ``(contiguous, paged)``."""
    cases = [([100, 30, 300, 5, 64, 200], 1024, 512, 16), ([16, 16, 16, 16], 64, 64, 16),
             ([1, 2, 3, 4, 5, 6, 7, 8], 40, 32, 8), ([500, 10], 400, 512, 16), ([40, 7, 90, 3, 12], 160, 128, 32),
             ([30, 50, 20], 4096, 256, 16)]
    for lengths, memory, max_seq_len, size in cases:
        expected = (min(len(lengths), memory // max_seq_len), _fit(lengths, memory, size))
        call = f"requests_that_fit({lengths}, {memory}, {max_seq_len}, {size})"
        got = requests_that_fit(list(lengths), memory, max_seq_len, size)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckFailed(f"{call} should return a pair (contiguous, paged)")
        assert_close_number(got[0], expected[0], f"the contiguous count of {call}", hint=(
            f"the contiguous count of {call} is wrong: a contiguous cache reserves max_seq_len positions "
            f"for every request when it starts, however long the request turns out, and it cannot hold "
            f"more requests than there are"))
        paged = finite_number(got[1], f"the paged count of {call}")
        if paged != expected[1]:
            if paged == _fit(lengths, memory, 1):
                raise CheckFailed(f"the paged count of {call} is wrong: a paged cache holds whole blocks, "
                                  f"a partly filled last block included")
            if paged in (_fit(sorted(lengths), memory, size), _fit_skipping(lengths, memory, size)):
                raise CheckFailed(f"the paged count of {call} is wrong: the requests are admitted in the order "
                                  f"given; one that does not fit stops the admission of those behind it")
            if paged == expected[1] - 1 and sum(math.ceil(n / size) * size for n in lengths[:expected[1]]) == memory:
                raise CheckFailed(f"the paged count of {call} is wrong: requests that fill the memory "
                                  f"exactly all fit")
            raise CheckFailed(f"the paged count of {call} is wrong: count the requests, in order, whose "
                              f"blocks still fit in the memory")
    return "six batches, one that fills its memory exactly, one whose first request does not fit and one with room to spare"


def _blocks(x: torch.Tensor, size: int, reuse: bool):
    """The scores x as a stream of blocks of ``size``. With ``reuse``, every block is a view of one
    buffer that the next block overwrites (a tile in on-chip memory), and the buffer is filled with
    NaN once the stream ends: a block kept for later has changed by then."""
    buffer = torch.empty(size, dtype=x.dtype)
    for start in range(0, len(x), size):
        n = min(size, len(x) - start)
        if reuse:
            buffer[:n] = x[start:start + n]
            yield buffer[:n]
        else:
            yield x[start:start + n].clone()
    if reuse:
        buffer.fill_(float("nan"))


@exercise_check(forbidden=("torch.softmax", "torch.log_softmax", "torch.logsumexp",
                           "torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss",
                           "fundamentallm.flash"))
def check_streamed_cross_entropy(streamed_cross_entropy: Callable) -> str:
    """``streamed_cross_entropy(blocks, target)``: ``-log softmax(s)[target]`` for scores ``s`` that
    arrive as an iterator of 1-D blocks, each read once (a running maximum and sum, and the target's
    score picked up as its block passes): ``logsumexp(s) - s[target]``."""
    gen = rng(1702)
    cases = [(torch.randn(10, generator=gen).double(), 3, 9),            # the target in a shorter last block
             (torch.arange(12.0).double() * 100, 4, 0),                  # a maximum that grows every block
             (torch.randn(7, generator=gen).double() * 50 + 800, 2, 3),  # scores of several hundred
             (torch.randn(5, generator=gen).double(), 8, 2),             # one block
             (torch.randn(50, generator=gen).double() * 3, 7, 23),
             (torch.randn(9, generator=gen).double() * 20 - 900, 4, 4)]     # every score far below 0
    for x, size, target in cases:
        expected = float(torch.logsumexp(x, 0) - x[target])
        what = (f"streamed_cross_entropy of {len(x)} scores up to {float(x.max()):.0f} in blocks of {size}, "
                f"target {target}")
        got = streamed_cross_entropy(_blocks(x, size, reuse=True), target)
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if isinstance(got, float) and not math.isfinite(got):
            fresh = streamed_cross_entropy(_blocks(x, size, reuse=False), target)
            fresh = fresh.item() if isinstance(fresh, torch.Tensor) and fresh.numel() == 1 else fresh
            if isinstance(fresh, float) and math.isfinite(fresh):
                raise CheckFailed(f"{what} is NaN: a block was used after the next one was read. The blocks "
                                  f"come in one buffer, as tiles do in on-chip memory: keep a few running "
                                  f"numbers between blocks, not the blocks")
            raise CheckFailed(f"{what} is NaN or infinite: exp overflows (or, for scores far below 0, "
                              f"underflows to a sum of 0) unless every exponent is taken relative to the "
                              f"running maximum of the scores")
        assert_close_number(got, expected, what, rtol=1e-6, atol=1e-6, hint=(
            f"{what} is wrong: the running sum holds exp(s - m) for the running maximum m: rescale it when m "
            f"grows, and remember that it is relative to m when you take its log; the target's score is "
            f"the one at its index in the whole vocabulary"))
    return "six score vectors: a growing maximum, scores of several hundred above and below 0, a target in a short last block"
