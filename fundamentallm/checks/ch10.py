"""Checks for the exercises of chapter 10: sampling."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from .core import CheckFailed, check_shape, exercise_check
from .predict import number, require_prediction


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


def _ch10_greedy_reference(table: torch.Tensor, ids: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        ids = torch.cat([ids, table[ids[:, -1]].argmax(-1, keepdim=True)], dim=1)
    return ids


@exercise_check(forbidden=("fundamentallm.generation.generate",))
def check_greedy_decode(greedy_decode: Callable) -> str:
    """``greedy_decode(table, ids, n)`` -> ``(B, T + n)``: a bigram model given as a ``(V, V)``
    table of next-token logits (row = the last token), decoded greedily ``n`` times."""
    V = 11
    table = torch.randn(V, V, generator=_ch10_rng(2))
    prompts = [(torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]]), 6), (torch.tensor([[3]]), 10),
               (torch.tensor([[0, 10, 5, 5]]), 0)]
    for ids, n in prompts:
        before, table_before = ids.clone(), table.clone()
        got = greedy_decode(table, ids, n)
        if not (torch.equal(ids, before) and torch.equal(table, table_before)):
            raise CheckFailed("your function modified its inputs; build a new tensor")
        what = f"prompt of shape {tuple(ids.shape)}, n={n}"
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
        expected = _ch10_greedy_reference(table, ids, n)
        check_shape(got, tuple(expected.shape), what=what)
        if not torch.equal(got[:, :ids.shape[1]], ids):
            raise CheckFailed(f"{what}: the result must start with the prompt")
        if not torch.equal(got.long(), expected):
            t = int((got.long() != expected).any(0).nonzero()[0])
            raise CheckFailed(f"{what}: position {t} should be {expected[:, t].tolist()}, got "
                              f"{got[:, t].tolist()} (each new token is the argmax of the row of the "
                              f"token just before it)")
    return f"{len(prompts)} prompts decoded like the reference"


@exercise_check
def check_min_p_filter(min_p_filter: Callable) -> str:
    """``min_p_filter(logits, min_p)`` -> logits of the same shape, ``-inf`` where a token's
    probability is below ``min_p`` times the row's largest probability."""
    g = _ch10_rng(5)
    cases = [("one row (V=6)", torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0]), 0.3),
             ("a batch (4, 50)", torch.randn(4, 50, generator=g) * 2, 0.1),
             ("a (2, 3, 20) tensor", torch.randn(2, 3, 20, generator=g), 0.5),
             ("min_p = 0 keeps everything", torch.randn(3, 10, generator=g), 0.0),
             ("a peaked row keeps one token", torch.tensor([[10.0, 0.0, 0.0, 0.0]]), 0.05),
             ("a flat row keeps every token", torch.zeros(2, 7), 0.9)]
    for what, logits, min_p in cases:
        before = logits.clone()
        got = min_p_filter(logits, min_p)
        if not torch.equal(logits, before):
            raise CheckFailed(f"{what}: your function modified its input; return a new tensor")
        got = _ch10_filtered(got, logits, what)
        probs = torch.softmax(logits.double(), dim=-1)
        ratio = probs / probs.amax(dim=-1, keepdim=True)
        keep = ratio >= min_p
        clear = (ratio - min_p).abs() > 1e-6
        _ch10_compare_kept(got[clear], keep[clear], f"{what}, min_p={min_p}")
    return f"{len(cases)} cases: kept exactly the tokens with p >= min_p * p_max"


@exercise_check
def check_positions_processed(positions_processed: Callable, cache_saves_more: Any, limit_factor: Any) -> str:
    """``positions_processed(prompt_len, n_new, use_cache)`` -> how many token positions pass through
    the network to generate ``n_new`` tokens after a prompt of ``prompt_len``: recomputing runs the
    whole sequence at each of the ``n_new`` steps; the cache runs the prompt once, then one position
    per step, and no forward after the last token. ``cache_saves_more``: whether, for P = 16 and
    n = 20, the cache saves more than the factor (n + 1) / 2 of a one-token prompt;
    ``limit_factor``: the factor as P grows without bound, for n = 20."""
    require_prediction(cache_saves_more, "cache_saves_more", "True or False")
    require_prediction(limit_factor, "limit_factor", "a number")
    if not isinstance(cache_saves_more, bool):
        raise CheckFailed(f"cache_saves_more must be True or False, got {cache_saves_more!r}")
    P, n = 16, 20
    factor = sum(range(P, P + n)) / (P + n - 1)
    if cache_saves_more != (factor > (n + 1) / 2):
        raise CheckFailed(f"cache_saves_more: count both sides for P={P}, n={n}: recomputing runs "
                          f"P + i positions at step i, the cache P + n - 1 in all; compare the ratio "
                          f"with (n + 1) / 2 = {(n + 1) / 2}")
    limit = number(limit_factor, "limit_factor")
    if not math.isclose(limit, n, rel_tol=1e-6):
        raise CheckFailed(f"limit_factor: {limit:g} is not the limit for n={n}; write the ratio "
                          f"(n·P + n(n-1)/2) / (P + n - 1) and let P grow")
    cases = [(1, 63), (1, 1), (5, 10), (16, 500), (7, 0), (3, 2), (64, 1)]
    for prompt_len, n_new in cases:
        recompute = sum(range(prompt_len, prompt_len + n_new))
        cached = prompt_len + n_new - 1 if n_new else 0
        for use_cache, expected in ((False, recompute), (True, cached)):
            got = positions_processed(prompt_len, n_new, use_cache)
            if got is None or int(got) != expected:
                raise CheckFailed(f"prompt_len={prompt_len}, n_new={n_new}, use_cache={use_cache}: "
                                  f"expected {expected} positions, got {got}")
    return (f"{len(cases)} (prompt, new tokens) pairs; for P={P}, n={n} the cache saves a factor "
            f"{factor:.1f} > (n + 1) / 2 = {(n + 1) / 2}, tending to n as the prompt grows")
