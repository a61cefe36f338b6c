"""Checks for the exercises of chapter 12: capstone, digit operations."""

from __future__ import annotations

from typing import Callable

import torch

from .core import (
    CheckFailed,
    assert_same,
    check_shape,
    exercise_check,
    finite_number,
    is_close_number,
)


def _ch12_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1200 + seed)


_CH12_OPS = ("First", "Second", "Last", "Max", "Min")


def _ch12_answer(op: str, digits: list[int]) -> int:
    # An independent reference: by sorting and indexing rather than max/min.
    ordered = sorted(digits)
    return {"First": digits[0], "Second": digits[1], "Last": digits[len(digits) - 1],
            "Max": ordered[-1], "Min": ordered[0]}[op]


@exercise_check
def check_apply_operation(apply_operation: Callable) -> str:
    """``apply_operation(op, digits)`` -> the answer digit, on hand-picked cases (ties, two
    digits, the answer at either end), on 500 examples of ``digit_operations`` (compared with
    their labels), and a ``ValueError`` naming an unknown operation."""
    from ..data import digit_operations

    cases = [("Max", [3, 5, 1]), ("Min", [3, 5, 1]), ("First", [7, 2]), ("Second", [7, 2]),
             ("Last", [7, 2]), ("Max", [9, 9, 0]), ("Min", [4, 0, 0, 8]), ("Last", [1, 2, 3, 4, 5, 6]),
             ("Max", [0, 1, 2, 3, 9]), ("Min", [0, 5, 5]), ("Second", [5, 5, 6]), ("First", [0, 0])]
    for op, digits in cases:
        given = list(digits)
        got = apply_operation(op, given)
        if given != digits:
            raise CheckFailed(f"{op} {digits}: your function changed the caller's list to {given} "
                              f"(sorting in place?); work on a copy")
        expected = _ch12_answer(op, digits)
        if got is None or isinstance(got, bool) or int(got) != expected:
            raise CheckFailed(f"{op} ( {' '.join(map(str, digits))} ): expected {expected}, got {got!r}")
    task = digit_operations(n_train=500, n_val=0, n_test=0, min_len=2, max_len=8, seed=12)
    split = task.train
    for i, (op, digits) in enumerate(zip(split.operations, split.digits)):
        got = apply_operation(op, list(digits))
        if got is None or int(got) != int(split.labels[i]):
            raise CheckFailed(f"digit_operations example {i}, {op} {digits}: the label is "
                              f"{int(split.labels[i])}, got {got!r}")
    try:
        apply_operation("Median", [1, 2, 3])
    except ValueError as e:
        if "Median" not in str(e):
            raise CheckFailed(f"the ValueError for an unknown operation should name it ('Median'); "
                              f"the message was: {e}") from None
    else:
        raise CheckFailed("apply_operation('Median', [1, 2, 3]) should raise ValueError naming the "
                          "operation and the allowed ones")
    return f"{len(cases)} cases, 500 examples, a bad operation"


def _ch12_per_op_reference(preds, labels, operations) -> dict[str, float]:
    out: dict[str, float] = {}
    for op in dict.fromkeys(operations):  # first-seen order
        idx = [i for i, o in enumerate(operations) if o == op]
        out[op] = sum(int(preds[i]) == int(labels[i]) for i in idx) / len(idx)
    return out


@exercise_check
def check_decoder_framing(frame: Callable) -> str:
    """``frame(op, digits)`` -> a list of at most 16 token strings of ``DIGIT_VOCAB`` (no
    ``<pad>``), the answer excluded: any lossless framing passes. Lossless means: different
    examples give different framings, the digit tokens in order are the digits (repeated whole, if
    at all), and the only operation token is ``op`` itself (so the answer cannot be smuggled in)."""
    from ..data import DIGIT_VOCAB, OPERATIONS

    g = _ch12_rng(5)
    seen: dict = {}
    allowed = set(DIGIT_VOCAB) - {"<pad>"}
    n = 300
    for _ in range(n):
        op = OPERATIONS[int(torch.randint(0, 5, (1,), generator=g))]
        k = int(torch.randint(2, 7, (1,), generator=g))
        digits = torch.randint(0, 10, (k,), generator=g).tolist()
        what = f"frame({op!r}, {digits})"
        tokens = frame(op, list(digits))
        if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
            raise CheckFailed(f"{what}: expected a list of token strings, got {str(tokens)[:60]}")
        tokens = list(tokens)
        bad = [t for t in tokens if t not in allowed]
        if bad:
            raise CheckFailed(f"{what}: {bad[0]!r} is not a token of DIGIT_VOCAB (or is <pad>)")
        if not 1 <= len(tokens) <= 16:
            raise CheckFailed(f"{what}: {len(tokens)} tokens; use 1 to 16")
        shown = [int(t) for t in tokens if t.isdigit()]
        if not shown or len(shown) % len(digits) or shown != digits * (len(shown) // len(digits)):
            raise CheckFailed(f"{what}: the digit tokens of your framing are {shown}; they must be the "
                              f"digits in order (repeated whole, if you like), nothing computed from them")
        ops = {t for t in tokens if t in OPERATIONS}
        if ops != {op}:
            raise CheckFailed(f"{what}: the framing must name the operation {op!r}, and no other "
                              f"operation (found {sorted(ops) or 'none'})")
        key = tuple(tokens)
        if key in seen and seen[key] != (op, tuple(digits)):
            raise CheckFailed(f"{what} and frame{seen[key]} give the same tokens {tokens}: the "
                              f"model could not tell them apart")
        seen[key] = (op, tuple(digits))
    return f"{n} random examples: a lossless framing (now measure what it does for the decoder)"


@exercise_check
def check_mean_pool(mean_pool: Callable) -> str:
    """``mean_pool(hidden, attention_mask)`` -> ``(B, C)`` mean of the non-padding vectors,
    compared with a per-row loop."""
    g = _ch12_rng(2)
    B, T, C = 4, 7, 5
    hidden = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    lengths = [7, 1, 4, 6]
    bool_mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    cases = [("a bool mask, rows of 7, 1, 4 and 6 tokens", hidden, bool_mask),
             ("a 0/1 integer mask", hidden, bool_mask.long()),
             ("no padding", hidden[:2], torch.ones(2, T, dtype=torch.bool)),
             ("padding in the middle", hidden[:1], torch.tensor([[1, 0, 1, 1, 0, 0, 1]], dtype=torch.bool))]
    for what, h, m in cases:
        h_before, m_before = h.clone(), m.clone()
        got = mean_pool(h, m)
        if not (torch.equal(h, h_before) and torch.equal(m, m_before)):
            raise CheckFailed(f"{what}: your function modified its inputs")
        expected = torch.stack([h[b][m[b].bool()].mean(dim=0) for b in range(h.shape[0])])
        check_shape(got, tuple(expected.shape), what=f"output for {what}")
        assert_same(got, expected, what=f"output for {what}")
    return f"{len(cases)} masks: every row's mean over its real tokens matches"


def _ch12_mlm_call(mlm_mask: Callable, ids: torch.Tensor, seed: int, **kwargs):
    before = ids.clone()
    out = mlm_mask(ids, seed, **kwargs)
    if not torch.equal(ids, before):
        raise CheckFailed("your function modified input_ids in place; corrupt a copy")
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise CheckFailed(f"expected a pair (corrupted_ids, labels), got {type(out).__name__}")
    corrupted, labels = (torch.as_tensor(t) for t in out)
    for name, t in (("corrupted_ids", corrupted), ("labels", labels)):
        check_shape(t, tuple(ids.shape), what=name)
        if t.is_floating_point() or t.dtype == torch.bool:
            raise CheckFailed(f"{name}: expected integer token ids, got dtype {t.dtype}")
    return corrupted.long(), labels.long()


@exercise_check
def check_mlm_mask(mlm_mask: Callable) -> str:
    """``mlm_mask(input_ids, seed, mask_id, vocab_size, special_ids, select_prob)`` ->
    ``(corrupted_ids, labels)``: structure checked exactly (labels, untouched positions and special
    tokens), the 15% / 80-10-10 rates checked statistically (5 standard deviations) on 2,000
    sequences, and reproducibility from the seed alone."""
    V, mask_id, pad, cls = 30, 5, 0, 1
    special = (pad, cls, mask_id)
    kwargs = dict(mask_id=mask_id, vocab_size=V, special_ids=special, select_prob=0.15)
    g = _ch12_rng(3)
    B, T = 2000, 24
    ids = torch.randint(6, V, (B, T), generator=g)  # ordinary tokens are 6..29
    ids[:, 0] = cls
    lengths = torch.randint(4, T + 1, (B,), generator=g)
    ids[torch.arange(T)[None, :] >= lengths[:, None]] = pad
    corrupted, labels = _ch12_mlm_call(mlm_mask, ids, 0, **kwargs)
    eligible = ~torch.isin(ids, torch.tensor(special))
    selected = labels != -100
    if (selected & ~eligible).any():
        b, t = (int(i) for i in (selected & ~eligible).nonzero()[0])
        raise CheckFailed(f"special token {int(ids[b, t])} at [{b}, {t}] was selected; "
                          f"tokens in special_ids={special} are never selected")
    if not torch.equal(labels[selected], ids[selected]):
        raise CheckFailed("labels must hold the ORIGINAL token at selected positions")
    if not torch.equal(corrupted[~selected], ids[~selected]):
        b, t = (int(i) for i in (corrupted != ids).logical_and(~selected).nonzero()[0])
        raise CheckFailed(f"position [{b}, {t}] is not selected (its label is -100) but its token "
                          f"changed from {int(ids[b, t])} to {int(corrupted[b, t])}")
    if corrupted.min() < 0 or corrupted.max() >= V:
        raise CheckFailed(f"corrupted ids must lie in [0, vocab_size={V})")
    n_eligible, n_sel = int(eligible.sum()), int(selected.sum())

    def near(name, value, p, n, slack=0.005):
        tol = 5 * (p * (1 - p) / n) ** 0.5 + slack
        if not is_close_number(value, p, atol=tol):
            raise CheckFailed(f"{name}: expected about {p:.3f}, got {value:.3f} (tolerance {tol:.3f})")

    near("fraction of eligible tokens selected", n_sel / n_eligible, 0.15, n_eligible)
    to_mask = selected & (corrupted == mask_id)
    kept = selected & (corrupted == ids)
    other = selected & (corrupted != mask_id) & (corrupted != ids)
    near("fraction of selected tokens replaced by mask_id", int(to_mask.sum()) / n_sel, 0.8, n_sel)
    near("fraction of selected tokens left unchanged", int(kept.sum()) / n_sel, 0.1, n_sel)
    near("fraction of selected tokens replaced by a random token", int(other.sum()) / n_sel, 0.1, n_sel)
    if len(torch.unique(corrupted[other])) < V // 2:
        raise CheckFailed(f"the random replacements use only {len(torch.unique(corrupted[other]))} "
                          f"distinct tokens; draw them uniformly from the vocabulary")
    # Reproducible from the seed alone (the global RNG must not matter).
    small = ids[:64]
    torch.manual_seed(0)
    a = _ch12_mlm_call(mlm_mask, small, 7, **kwargs)
    torch.manual_seed(1)
    b = _ch12_mlm_call(mlm_mask, small, 7, **kwargs)
    if not (torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])):
        raise CheckFailed("the same seed gave different results: draw every random number from "
                          "torch.Generator().manual_seed(seed), not from torch's global RNG")
    c = _ch12_mlm_call(mlm_mask, small, 8, **kwargs)
    if torch.equal(a[1], c[1]):
        raise CheckFailed("different seeds gave the same selection: draw from a generator seeded with `seed`")
    # Edge probabilities: all eligible tokens, or none.
    corrupted, labels = _ch12_mlm_call(mlm_mask, small, 9, **{**kwargs, "select_prob": 1.0})
    if not torch.equal(labels != -100, eligible[:64]):
        raise CheckFailed("with select_prob=1.0 every non-special token must be selected")
    corrupted, labels = _ch12_mlm_call(mlm_mask, small, 9, **{**kwargs, "select_prob": 0.0})
    if (labels != -100).any() or not torch.equal(corrupted, small):
        raise CheckFailed("with select_prob=0.0 nothing is selected: labels all -100, ids unchanged")
    return (f"{n_sel / n_eligible:.1%} selected: {int(to_mask.sum()) / n_sel:.1%} mask, "
            f"{int(other.sum()) / n_sel:.1%} random, {int(kept.sum()) / n_sel:.1%} kept")


@exercise_check
def check_mlm_shares(mlm_shares: Callable) -> str:
    """``mlm_shares(vocab_size, mask_prob=0.8, random_prob=0.1)`` -> the expected share of the
    *selected* positions whose corrupted token is ``<mask>``, a different token than the original
    (not ``<mask>``), or the original token, when the random replacement is drawn uniformly from
    the whole vocabulary (so it may hit ``<mask>`` or the original)."""
    cases = [(20, 0.8, 0.1), (30522, 0.8, 0.1), (2 + 3, 0.8, 0.1), (20, 0.5, 0.3), (100, 0.0, 1.0)]
    for vocab_size, mask_prob, random_prob in cases:
        keep = 1.0 - mask_prob - random_prob
        expected = {"mask": mask_prob + random_prob / vocab_size,
                    "random": random_prob * (vocab_size - 2) / vocab_size,
                    "unchanged": keep + random_prob / vocab_size}
        got = mlm_shares(vocab_size, mask_prob=mask_prob, random_prob=random_prob)
        if not isinstance(got, dict) or set(got) != set(expected):
            raise CheckFailed(f"vocab_size={vocab_size}: return a dict with keys {sorted(expected)}, got {got!r}")
        for key, value in expected.items():
            if not is_close_number(finite_number(got[key], repr(key)), value, atol=1e-12):
                raise CheckFailed(f"vocab_size={vocab_size}, mask_prob={mask_prob}, random_prob={random_prob}: "
                                  f"{key!r} expected {value:.6f}, got {float(got[key]):.6f}")
    return f"{len(cases)} vocabularies and rules, BERT's included"
