"""Checks for the exercises of chapter 10: sampling."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check


def _ch10_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + seed)


def _ch10_filtered(got: Any, logits: torch.Tensor, what: str) -> torch.Tensor:
    """The student's filtered logits as a tensor of the input's shape; the input unchanged."""
    if got is None:
        raise CheckFailed(f"{what}: got None -- did you forget to return the filtered logits?")
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
    check_shape(got, tuple(logits.shape), what=what)
    if torch.isnan(got).any():
        raise CheckFailed(f"{what}: the result contains NaN; removed tokens should be -inf")
    removed_other = (got != logits) & ~torch.isneginf(got)
    if removed_other.any():
        idx = tuple(int(i) for i in removed_other.nonzero()[0])
        raise CheckFailed(f"{what}: at index {idx} the logit {logits[idx].item():.4g} became "
                          f"{got[idx].item():.4g}; kept logits must be unchanged and removed "
                          f"ones exactly -inf (not 0, not probabilities)")
    return got


def _ch10_compare_kept(got: torch.Tensor, expected_keep: torch.Tensor, what: str) -> None:
    kept = ~torch.isneginf(got)
    if not torch.equal(kept, expected_keep):
        idx = tuple(int(i) for i in (kept != expected_keep).nonzero()[0])
        should = "kept" if bool(expected_keep[idx]) else "removed (-inf)"
        raise CheckFailed(f"{what}: the token at index {idx} should be {should}; you kept "
                          f"{int(kept.sum())} tokens, the reference keeps {int(expected_keep.sum())}")


@exercise_check(forbidden=("fundamentallm.generation.top_k_filter",))
def check_top_k_filter(top_k_filter: Callable) -> str:
    """``top_k_filter(logits, k)`` for ``(..., V)`` logits: keep each row's logits >= its k-th
    largest (ties kept), -inf elsewhere; compared with a reference built on ``torch.sort``."""
    g = _ch10_rng(0)
    cases = [("(4, 50) logits, k=5", torch.randn(4, 50, generator=g), 5),
             ("(2, 3, 20) logits, k=1 (greedy)", torch.randn(2, 3, 20, generator=g), 1),
             ("one row (30,), k=7", torch.randn(30, generator=g) * 4, 7),
             ("(3, 10) logits, k=V=10", torch.randn(3, 10, generator=g), 10),
             ("(3, 10) logits, k=15 > V", torch.randn(3, 10, generator=g), 15),
             ("float64 (2, 40) logits, k=12", torch.randn(2, 40, generator=g, dtype=torch.float64), 12),
             ("ties: [1, 3, 3, 2, 0], k=2 (both 3s are kept)",
              torch.tensor([[1.0, 3.0, 3.0, 2.0, 0.0]]), 2),
             ("ties: [1, 3, 3, 2, 0], k=3", torch.tensor([[1.0, 3.0, 3.0, 2.0, 0.0]]), 3),
             ("ties: [5, 5, 5, 1], k=1 (all three 5s are kept)", torch.tensor([5.0, 5.0, 5.0, 1.0]), 1)]
    for what, logits, k in cases:
        before = logits.clone()
        got = top_k_filter(logits, k)
        if not torch.equal(logits, before):
            raise CheckFailed(f"{what}: your function modified its input; return a new tensor")
        got = _ch10_filtered(got, logits, what)
        r = min(k, logits.shape[-1])
        kth = torch.sort(logits, dim=-1, descending=True).values[..., r - 1:r]  # (..., 1)
        _ch10_compare_kept(got, logits >= kth, what)
    return f"{len(cases)} cases (batches, k = 1, k >= V, float64, ties) equal the reference"


def _ch10_top_p_reference(logits: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Row by row in float64: the keep mask, and which rows sit within 1e-5 of a boundary."""
    rows = logits.reshape(-1, logits.shape[-1]).double()
    keep = torch.zeros(rows.shape, dtype=torch.bool)
    ambiguous = torch.zeros(rows.shape[0], dtype=torch.bool)
    for r, row in enumerate(rows):
        probs = torch.softmax(row, dim=-1)
        mass = 0.0
        for i in torch.argsort(row, descending=True).tolist():
            if abs(mass - p) < 1e-5:
                ambiguous[r] = True
            if mass >= p:
                break
            keep[r, i] = True
            mass += probs[i].item()
    return keep.reshape(logits.shape), ambiguous.reshape(logits.shape[:-1])


@exercise_check(forbidden=("fundamentallm.generation.top_p_filter",))
def check_top_p_filter(top_p_filter: Callable) -> str:
    """``top_p_filter(logits, p)`` for ``(..., V)`` logits: nucleus filtering of each row, compared
    with a row-by-row float64 reference (rows within 1e-5 of a boundary are not compared)."""
    g = _ch10_rng(1)
    three = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    peaked = torch.zeros(2, 25)
    peaked[:, 3] = 20.0
    cases = [("[0.5, 0.3, 0.2], p=0.75 (keeps two)", three, 0.75),
             ("[0.5, 0.3, 0.2], p=0.85 (keeps three)", three, 0.85),
             ("[0.5, 0.3, 0.2], p=0.3 (keeps the most likely only)", three, 0.3),
             ("[0.5, 0.3, 0.2] in reverse order, p=0.75", three.flip(0), 0.75),
             ("(4, 30) logits, p=0.9", torch.randn(4, 30, generator=g) * 2, 0.9),
             ("(2, 3, 12) logits, p=0.5", torch.randn(2, 3, 12, generator=g) * 2, 0.5),
             ("one row (40,), p=0.1", torch.randn(40, generator=g) * 3, 0.1),
             ("(3, 16) logits, p=1.0 (keeps everything)", torch.randn(3, 16, generator=g), 1.0),
             ("(2, 25) peaked rows, p=0.9", peaked, 0.9),
             ("float64 (5, 50) logits, p=0.95", torch.randn(5, 50, generator=g, dtype=torch.float64), 0.95)]
    for what, logits, p in cases:
        before = logits.clone()
        got = top_p_filter(logits, p)
        if not torch.equal(logits, before):
            raise CheckFailed(f"{what}: your function modified its input; return a new tensor")
        got = _ch10_filtered(got, logits, what)
        keep, ambiguous = _ch10_top_p_reference(logits, p)
        clear = ~ambiguous
        _ch10_compare_kept(got[clear], keep[clear], what)
    return f"{len(cases)} cases (a worked example, batches, p = 1, peaked rows) equal the reference"


def _ch10_greedy_reference(model_fn: Callable, ids: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        ids = torch.cat([ids, model_fn(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


@exercise_check(forbidden=("fundamentallm.generation.generate",))
def check_greedy_decode(greedy_decode: Callable) -> str:
    """``greedy_decode(model_fn, ids, n)`` -> ``(B, T + n)``, compared with a reference loop, on
    a bigram model and on a model whose prediction depends on the whole context."""
    V = 11
    table = torch.randn(V, V, generator=_ch10_rng(2))

    def bigram(ids):  # (B, T) -> (B, T, V): depends on the last token only
        return table[ids]

    def whole_context(ids):  # position t looks at the sum of tokens 0..t
        return table[ids.cumsum(dim=1) % V]

    models = {"a bigram model": bigram, "a model that reads the whole context": whole_context}
    prompts = [torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]]), torch.tensor([[3]]),
               torch.tensor([[0, 10, 5, 5]])]
    for name, fn in models.items():
        for ids, n in zip(prompts, (6, 10, 0)):
            before = ids.clone()
            got = greedy_decode(fn, ids, n)
            if not torch.equal(ids, before):
                raise CheckFailed("your function modified the prompt ids; build a new tensor")
            what = f"{name}, prompt of shape {tuple(ids.shape)}, n={n}"
            if not isinstance(got, torch.Tensor):
                raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
            expected = _ch10_greedy_reference(fn, ids, n)
            check_shape(got, tuple(expected.shape), what=what)
            if not torch.equal(got[:, :ids.shape[1]], ids):
                raise CheckFailed(f"{what}: the result must start with the prompt")
            if not torch.equal(got.long(), expected):
                t = int((got.long() != expected).any(0).nonzero()[0])
                raise CheckFailed(f"{what}: position {t} should be {expected[:, t].tolist()}, got "
                                  f"{got[:, t].tolist()} (does the model see the whole sequence "
                                  f"so far at every step?)")
    return "bigram and whole-context models decoded like the reference"


@exercise_check
def check_cached_attention(cached_attention: Callable) -> str:
    """``cached_attention(q, k_new, v_new, cache)`` -> ``(out, (k, v))``, fed in chunks and
    compared with ``F.scaled_dot_product_attention(..., is_causal=True)`` on the whole sequence."""
    g = _ch10_rng(3)
    B, H, T, D = 2, 3, 9, 4
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    for chunks in ([9], [4, 1, 1, 3], [1] * 9, [2, 5, 2]):
        what = f"chunks of {chunks}"
        cache, outs, start = None, [], 0
        for size in chunks:
            end = start + size
            res = cached_attention(q[:, :, start:end], k[:, :, start:end], v[:, :, start:end], cache)
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise CheckFailed(f"{what}: return a pair (out, (k, v))")
            out, cache = res
            if not isinstance(cache, (tuple, list)) or len(cache) != 2:
                raise CheckFailed(f"{what}: the new cache must be a pair (k, v)")
            step = f"{what}, positions {start}..{end - 1}"
            check_shape(out, (B, H, size, D), what=f"out for {step}")
            assert_same(cache[0], k[:, :, :end], what=f"cached keys after {step}")
            assert_same(cache[1], v[:, :, :end], what=f"cached values after {step}")
            assert_same(out, expected[:, :, start:end],
                        what=f"out for {step} (vs causal attention over the whole sequence)")
            outs.append(out)
            start = end
    return "4 ways of chunking a sequence equal causal attention over the whole sequence"


@exercise_check
def check_positions_processed(positions_processed: Callable) -> str:
    """``positions_processed(prompt_len, n_new, use_cache)`` -> how many token positions pass through
    the network to generate ``n_new`` tokens after a prompt of ``prompt_len``: recomputing runs the
    whole sequence at each of the ``n_new`` steps; the cache runs the prompt once, then one position
    per step, and no forward after the last token."""
    cases = [(1, 63), (1, 1), (5, 10), (16, 500), (7, 0), (3, 2), (64, 1)]
    for prompt_len, n_new in cases:
        recompute = sum(range(prompt_len, prompt_len + n_new))
        cached = prompt_len + n_new - 1 if n_new else 0
        for use_cache, expected in ((False, recompute), (True, cached)):
            got = positions_processed(prompt_len, n_new, use_cache)
            if got is None or int(got) != expected:
                raise CheckFailed(f"prompt_len={prompt_len}, n_new={n_new}, use_cache={use_cache}: "
                                  f"expected {expected} positions, got {got}")
    return f"{len(cases)} (prompt, new tokens) pairs, with and without the cache"
