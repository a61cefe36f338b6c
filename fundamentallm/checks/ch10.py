"""Checks for the exercises of chapter 10: sampling."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from .calls import TooManyCalls, TorchCallCounter
from .core import CheckFailed, check_shape, exercise_check, rng
from .predict import number, require_prediction


def _ch10_rng(seed: int) -> torch.Generator:
    return rng(1000 + seed)


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


def _ch10_repetition_reference(logits: torch.Tensor, ids: torch.Tensor, penalty: float) -> torch.Tensor:
    out = logits.clone()
    for b in range(logits.shape[0]):
        for t in set(ids[b].tolist()):
            z = out[b, t]
            out[b, t] = z * penalty if z < 0 else z / penalty
    return out


@exercise_check(forbidden=("transformers",))
def check_repetition_penalty(repetition_penalty: Callable) -> str:
    """``repetition_penalty(logits, ids, penalty)``: ``(B, V)`` next-token logits and the ``(B, T)``
    tokens so far -> new logits in which the logit of every token that occurs in its row's context
    (once or more) is lowered by the factor ``penalty`` on its magnitude (a logit of exactly 0 stays 0) (CTRL's penalty,
    Keskar et al. 2019, corrected for negative logits); the other logits unchanged."""
    g = _ch10_rng(7)
    V = 12
    cases = []
    for what, B, T, penalty, scale in (("(2, 12) logits, 6 tokens of context", 2, 6, 1.3, 2.0),
                                       ("(3, 12) logits, 20 tokens (repeats)", 3, 20, 2.0, 3.0),
                                       ("one row, penalty 1 (no change)", 1, 5, 1.0, 2.0),
                                       ("(2, 12) logits all negative", 2, 8, 1.5, 1.0)):
        logits = torch.randn(B, V, generator=g) * scale
        if "negative" in what:
            logits = -logits.abs() - 0.1
        cases.append((what, logits, torch.randint(0, V, (B, T), generator=g), penalty))
    mixed = torch.tensor([[2.0, -1.0, 0.5, -3.0, 1.0, 0.0]])
    cases.append(("[2, -1, 0.5, -3, 1, 0] after tokens [1, 3, 3, 0]", mixed, torch.tensor([[1, 3, 3, 0]]), 2.0))
    cases.append(("[2, -1, 0.5, -3, 1, 0] after tokens [5, 1, 5] (a logit of exactly 0 in the context)",
                  mixed, torch.tensor([[5, 1, 5]]), 2.0))
    for what, logits, ids, penalty in cases:
        got = repetition_penalty(logits, ids, penalty)
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
        check_shape(got, tuple(logits.shape), what=what)
        if not torch.isfinite(got).all():
            raise CheckFailed(f"{what}: the result has NaN or inf; a penalty rescales logits, it removes nothing")
        expected = _ch10_repetition_reference(logits, ids, penalty)
        bad = ~torch.isclose(got, expected, rtol=1e-6, atol=1e-6)
        if bad.any():
            b, t = (int(i) for i in bad.nonzero()[0])
            seen = t in set(ids[b].tolist())
            z, new = logits[b, t].item(), got[b, t].item()
            if not seen:
                hint = "this token is not in the row's context: leave its logit alone"
            elif ids[b].tolist().count(t) > 1 and z != 0 and abs(new) != abs(z) and \
                    abs(abs(new) / abs(z) - 1 / penalty) > 1e-4 and abs(abs(new) / abs(z) - penalty) > 1e-4:
                hint = "this token occurs several times in the context; the penalty is applied once per token, not per occurrence"
            elif z < 0 and new > z:
                hint = "this repeated token's logit was negative and moved up: it became MORE likely; which way does dividing by penalty > 1 move a negative number?"
            elif z > 0 and new >= z and penalty > 1:
                hint = "this repeated token's logit was positive and did not go down"
            elif z == 0:
                hint = "this repeated token's logit is exactly 0: what does rescaling its magnitude by penalty give?"
            else:
                hint = "a repeated token's logit must shrink towards less likely by the factor penalty (in magnitude)"
            raise CheckFailed(f"{what}, penalty={penalty}: row {b}, token {t} (logit {z:.4g}) became {new:.4g}; {hint}")
    return f"{len(cases)} cases: positive and negative logits, repeated tokens, penalty 1"


def _ch10_no_row_loop(fn: Callable, arg: float, what: str) -> None:
    """Fail if ``fn(logits, arg)`` on a (4096, 50) batch makes a torch call per row: a Python loop
    over rows. One batched pass makes a few dozen calls, whatever the batch size."""
    logits = torch.randn(4096, 50, generator=_ch10_rng(11))
    with contextlib.suppress(TooManyCalls), TorchCallCounter(500) as counter:
        fn(logits, arg)
    if counter.n > 500:
        raise CheckFailed(f"{what}: on a (4096, 50) batch your function made more than 500 tensor operations, "
                          f"more than one per row: a Python loop over the rows. The exercise asks for one "
                          f"batched pass -- every operation on the whole (..., V) tensor at once")


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


@exercise_check(forbidden=("fundamentallm.generation.top_p_filter", "transformers"))
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
    _ch10_no_row_loop(top_p_filter, 0.9, "p=0.9")
    return (f"{len(cases)} cases (a worked example, batches, p = 1, peaked rows) equal the reference; "
            f"a (4096, 50) batch in one pass")


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


@exercise_check(forbidden=("transformers",))
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
    _ch10_no_row_loop(min_p_filter, 0.1, "min_p=0.1")
    return f"{len(cases)} cases: kept exactly the tokens with p >= min_p * p_max; a (4096, 50) batch in one pass"


@exercise_check
def check_positions_processed(positions_processed: Callable, factor_p16: Any, limit_factor: Any) -> str:
    """``positions_processed(prompt_len, n_new, use_cache)`` -> how many token positions pass through
    the network to generate ``n_new`` tokens after a prompt of ``prompt_len``: recomputing runs the
    whole sequence at each of the ``n_new`` steps; the cache runs the prompt once, then one position
    per step, and no forward after the last token. ``factor_p16``: the predicted saving
    (recompute / cache) for P = 16 and n = 20; ``limit_factor``: the saving as P grows without
    bound, for n = 20. Both graded to 0.05 (a continuum of answers: nothing to guess)."""
    require_prediction(factor_p16, "factor_p16", "a number")
    require_prediction(limit_factor, "limit_factor", "a number")
    P, n = 16, 20
    factor = sum(range(P, P + n)) / (P + n - 1)
    got = number(factor_p16, "factor_p16")
    if not abs(got - factor) <= 0.05:
        raise CheckFailed(f"factor_p16: {got:g} is not the saving for P={P}, n={n}; count both sides: "
                          f"recomputing runs the whole sequence so far at each step (how long is it at "
                          f"step i?), the cache runs the prompt once and then one position per step, with "
                          f"no forward pass after the last token")
    limit = number(limit_factor, "limit_factor")
    if not abs(limit - n) <= 0.05:
        raise CheckFailed(f"limit_factor: {limit:g} is not the limit for n={n}; write the saving as a "
                          f"ratio of two polynomials in P and let P grow")
    cases = [(1, 63), (1, 1), (5, 10), (16, 500), (7, 0), (3, 2), (64, 1)]
    for prompt_len, n_new in cases:
        recompute = sum(range(prompt_len, prompt_len + n_new))
        cached = prompt_len + n_new - 1 if n_new else 0
        for use_cache, expected in ((False, recompute), (True, cached)):
            got = positions_processed(prompt_len, n_new, use_cache)
            if got is None or int(got) != expected:
                raise CheckFailed(f"prompt_len={prompt_len}, n_new={n_new}, use_cache={use_cache}: "
                                  f"your count {got} is not what generate runs; "
                                  + ("the prompt is processed once, then one position per new token except "
                                     "after the last" if use_cache else "at step i the whole sequence so far "
                                     "(prompt and the i tokens already generated) is run again"))
    return (f"{len(cases)} (prompt, new tokens) pairs; for P={P}, n={n} the cache saves a factor "
            f"{factor:.2f} > (n + 1) / 2 = {(n + 1) / 2}, tending to n as the prompt grows")


class _Bigram(torch.nn.Module):
    """A (V, V) table of next-token logits as a model: row = the last token."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table[ids]


@exercise_check(forbidden=("fundamentallm.beam", "fundamentallm.generation", "transformers"))
def check_greedy_trap(make_trap: Callable) -> str:
    """``make_trap()`` -> ``(table, start)``: a ``(V, V)`` bigram table of next-token logits
    (2 <= V <= 12) and a start token on which, for 3 new tokens, the most likely continuation
    (total log-probability, by exhaustive search) beats greedy decoding's by at least 1 nat, and
    beam search with 2 beams finds it. A ``make_trap`` that runs more than 500 tensor operations is
    refused as a search, not a design."""
    import itertools

    from ..beam import beam_search

    out, counter = None, TorchCallCounter(500)
    with contextlib.suppress(TooManyCalls), counter:
        out = make_trap()
    if counter.n > 500:
        raise CheckFailed("make_trap made more than 500 tensor operations: that is a search over tables, not "
                          "a design (a designed table takes a few dozen). Reason it out instead: which rows "
                          "must be confident and which unsure for greedy's first choice to lead nowhere?")
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise CheckFailed(f"make_trap() should return (table, start), got {type(out).__name__}")
    table, start = out
    if not (isinstance(table, torch.Tensor) and table.is_floating_point() and table.dim() == 2
            and table.shape[0] == table.shape[1] and 2 <= table.shape[0] <= 12):
        raise CheckFailed("table must be a float tensor of shape (V, V) with 2 <= V <= 12")
    if not torch.isfinite(table).all():
        raise CheckFailed("table has NaN or inf; use large finite logits (e.g. 20) for near-certain steps")
    V = table.shape[0]
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < V:
        raise CheckFailed(f"start must be a token id in [0, {V}), got {start!r}")
    logp = torch.log_softmax(table.double(), dim=-1)
    n = 3
    seq, greedy_total = [start], 0.0
    for _ in range(n):
        t = int(logp[seq[-1]].argmax())
        greedy_total += float(logp[seq[-1], t])
        seq.append(t)
    best_total, best = max((sum(float(logp[a, b]) for a, b in zip((start,) + c, c)), c)
                           for c in itertools.product(range(V), repeat=n))
    gap = best_total - greedy_total
    if not gap >= 1.0:
        raise CheckFailed(f"on your table greedy's continuation {seq[1:]} is within {gap:.2f} nats of the "
                          f"most likely one (at least 1 is asked); greedy is optimal whenever the best next "
                          f"token also leads to the best future: what must the rows after greedy's first "
                          f"choice look like, compared with the rows after a runner-up?")
    ids, _ = beam_search(_Bigram(table.detach().double()), torch.tensor([start]), num_beams=2,
                         max_new_tokens=n, length_penalty=0.0)
    found = ids[0, 1:].tolist()
    found_total = sum(float(logp[a, b]) for a, b in zip([start] + found, found))
    if not found_total >= best_total - 1e-9:
        raise CheckFailed(f"greedy misses the most likely continuation by {gap:.2f} nats, but beam search with "
                          f"2 beams misses it too (it finds {found}): it keeps only the two best partial "
                          f"sequences at each step, and your most likely path is not among them at some step")
    # where greedy leaves the best path, its token must be strictly more likely than the best path's
    k = next(i for i in range(n) if seq[i + 1] != best[i])
    prev = seq[k]
    if not float(logp[prev, seq[k + 1]] - logp[prev, best[k]]) >= 1e-3:
        raise CheckFailed(f"at step {k + 1} (after token {prev}) greedy leaves the most likely continuation "
                          f"only because two tokens tie and argmax's tie-break picks one, not because of "
                          f"the probabilities; design a trap in which greedy's choice there is strictly more "
                          f"likely (by at least 0.001 nats) than the token the better path takes")
    return (f"greedy finds {seq[1:]} (total log-prob {greedy_total:.2f}); the most likely continuation "
            f"{list(best)} ({best_total:.2f}, {gap:.2f} nats more) is found by 2 beams")
