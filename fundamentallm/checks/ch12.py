"""Checks for the exercises of chapter 12: capstone, digit operations."""

from __future__ import annotations

import numbers
import random
from typing import Any, Callable

import torch

from .core import (
    CheckFailed,
    assert_same,
    check_shape,
    exercise_check,
    finite_number,
    is_close_number,
    rng,
)
from .predict import number, require_prediction


def _ch12_rng(seed: int) -> torch.Generator:
    return rng(1200 + seed)


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
        if not isinstance(got, numbers.Integral) or isinstance(got, bool):
            raise CheckFailed(f"{op} ( {' '.join(map(str, digits))} ): got {got!r} of type {type(got).__name__}; "
                              f"the answer is a digit as an int, not a token string, a float or a tensor")
        if int(got) != expected:
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
        missing = [name for name in ("Median", *_CH12_OPS) if name not in str(e)]
        if missing:
            raise CheckFailed(f"the ValueError for an unknown operation should name it ('Median') and the "
                              f"allowed operations; the message was {str(e)!r}, without "
                              f"{', '.join(map(repr, missing))}") from None
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
    ``<pad>``), the answer excluded. It must be lossless: different examples give different
    framings, the digit tokens in order are the digits (repeated whole, if at all), the only
    operation token is ``op`` itself, and every token that is not a digit, and where the digits
    stand, depends only on ``op`` and the number of digits (so no answer can be smuggled in, in a
    digit or in a bracket or special token). Then it is measured:
    the chapter's decoder, trained with the chapter's recipe on the framing, must reach 97%
    validation accuracy on every operation, which the chapter's ``op ( d1 … dk )`` does not."""
    from ..data import DIGIT_VOCAB, OPERATIONS

    g = _ch12_rng(5)
    seen: dict = {}
    allowed = set(DIGIT_VOCAB) - {"<pad>"}
    skeletons: dict = {}
    n = 300
    # every (operation, length) at least three times, then random examples
    cases = [(op, k) for op in OPERATIONS for k in range(2, 7) for _ in range(3)]
    cases += [(OPERATIONS[int(torch.randint(0, 5, (1,), generator=g))],
               int(torch.randint(2, 7, (1,), generator=g))) for _ in range(n)]
    for op, k in cases:
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
        skeleton = tuple("<digit>" if t.isdigit() else t for t in tokens)
        first = skeletons.setdefault((op, k), (skeleton, digits))
        if first[0] != skeleton:
            raise CheckFailed(f"{what} and frame({op!r}, {first[1]}) differ in a token that is not a digit, or "
                              f"in where the digits stand: every token that is not a digit must depend only "
                              f"on the operation and the number of digits, not on the digits' values")
        key = tuple(tokens)
        if key in seen and seen[key] != (op, tuple(digits)):
            raise CheckFailed(f"{what} and frame{seen[key]} give the same tokens {tokens}: the "
                              f"model could not tell them apart")
        seen[key] = (op, tuple(digits))
    accuracy = _ch12_framed_accuracy(frame)
    weak = [op for op, a in accuracy.items() if not a >= _CH12_FRAMING_TARGET]
    table = ", ".join(f"{op} {a:.1%}" for op, a in accuracy.items())
    if weak:
        raise CheckFailed(f"lossless, but the decoder trained on your framing reaches only {table} "
                          f"validation accuracy ({', '.join(weak)} below {_CH12_FRAMING_TARGET:.0%}). "
                          f"Which position predicts the answer, and what can its query know, in layer 0, "
                          f"about the operation and about where the digits end?")
    return f"{len(cases)} examples lossless; the decoder trained on it: {table} (validation)"


_CH12_FRAMING_TARGET = 0.97


def _ch12_framed_accuracy(frame: Callable) -> dict:
    """Train the chapter's decoder (2 layers, 4 heads, d = 64, d_ff = 128) with the chapter's recipe
    (200 steps of 96, lr 5e-3, warmup 30) on ``frame``'s framing of the chapter's training split;
    return its validation accuracy per operation."""
    from torch.utils.data import TensorDataset

    from ..config import TransformerConfig
    from ..data import (
        DIGIT_OFFSET,
        DIGIT_PAD,
        DIGIT_STOI,
        DIGIT_VOCAB,
        OPERATIONS,
        digit_operations,
    )
    from ..model import Transformer
    from ..training import TrainConfig, Trainer

    task = digit_operations(n_train=6000, n_val=500, n_test=0, min_len=2, max_len=6, seed=0)

    def framed(split):
        rows = [[DIGIT_STOI[t] for t in frame(op, list(d))] + [DIGIT_OFFSET + int(y)]
                for op, d, y in zip(split.operations, split.digits, split.labels)]
        ids = torch.full((len(rows), max(map(len, rows))), DIGIT_PAD)
        targets = torch.full_like(ids, -100)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row)
            targets[i, len(row) - 2] = row[-1]  # predicted at the framing's last token
        return ids, targets

    config = TransformerConfig(vocab_size=len(DIGIT_VOCAB), d_model=64, num_heads=4, num_layers=2, d_ff=128,
                               max_seq_len=17, causal=True)
    recipe = TrainConfig(lr=5e-3, warmup_steps=30, max_steps=200, batch_size=96, weight_decay=0.01,
                         device="cpu", mixed_precision="off", progress=False, seed=0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Transformer(config)
        Trainer(model, TensorDataset(*framed(task.train)), config=recipe).fit(steps=200)
    ids, targets = framed(task.val)
    model.eval()
    with torch.no_grad():
        preds = model(ids)[0][targets != -100].argmax(-1) - DIGIT_OFFSET
    correct = (preds == task.val.labels).float()
    return {op: correct[torch.tensor([o == op for o in task.val.operations])].mean().item() for op in OPERATIONS}


def _ch12_padding_weight() -> float:
    """The weight ``hidden.mean(dim=1)`` gives the padding, averaged over the chapter's test split."""
    from ..data import digit_operations

    test = digit_operations(n_train=6000, n_val=500, n_test=1000, min_len=2, max_len=6, seed=0).test
    T = test.attention_mask.shape[1]
    return float((T - test.attention_mask.sum(1)).double().mean() / T)


@exercise_check
def check_mean_pool(mean_pool: Callable, predicted_padding: Any) -> str:
    """``predicted_padding``: the weight that ``hidden.mean(dim=1)`` gives the padding positions,
    averaged over the chapter's 1,000 test examples (padded to 10 tokens), within 0.002.
    ``mean_pool(hidden, attention_mask)`` -> ``(B, C)`` mean of the non-padding vectors,
    compared with a per-row loop."""
    require_prediction(predicted_padding, "predicted_padding", "a number between 0 and 1")
    guess = number(predicted_padding, "predicted_padding")
    truth = _ch12_padding_weight()
    if not abs(guess - truth) <= 0.002:
        raise CheckFailed(f"predicted_padding: {guess:g} is not right. Write hidden.mean(dim=1) of one row as "
                          f"a weighted sum of its real and its padding vectors: how many of a k-digit "
                          f"example's positions are real, and how many examples of each k does the test "
                          f"split hold?")
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
    return (f"{len(cases)} masks: every row's mean over its real tokens matches; hidden.mean(dim=1) would "
            f"give the padding {truth:.4f} of the weight, averaged over the test split")


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
def check_mlm_mask_exact(mlm_mask_exact: Callable, predicted_empty: Any) -> str:
    """``predicted_empty``: under the per-token rule (each eligible token selected independently
    with probability 0.15), the fraction of rows with 5 eligible tokens that have none selected.
    ``mlm_mask_exact(input_ids, seed, mask_id, vocab_size, special_ids, select_prob)`` ->
    ``(corrupted_ids, labels)``: each row selects exactly the nearest integer to
    ``select_prob × n`` of its ``n`` eligible tokens (at least one when ``select_prob > 0`` and
    ``n > 0``), uniformly without replacement; 80/10/10 among them. Structure and counts checked
    exactly, uniformity and the 80/10/10 shares statistically (5 standard deviations), and
    reproducibility from the seed alone."""
    import math

    require_prediction(predicted_empty, "predicted_empty", "a number between 0 and 1")
    guess = number(predicted_empty, "predicted_empty")
    if not (abs(guess - 0.85 ** 5) <= 0.005):
        raise CheckFailed(f"predicted_empty: {guess:g} is not right; each of the 5 tokens is selected "
                          f"independently: what is the chance that none of them is?")
    V, mask_id, pad, cls = 30, 5, 0, 1
    special = (pad, cls, mask_id)
    kwargs = dict(mask_id=mask_id, vocab_size=V, special_ids=special, select_prob=0.15)
    g = _ch12_rng(3)
    B, T = 2000, 24
    ids = torch.randint(6, V, (B, T), generator=g)  # ordinary tokens are 6..29
    ids[:, 0] = cls
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    ids[torch.arange(T)[None, :] >= lengths[:, None]] = pad
    corrupted, labels = _ch12_mlm_call(mlm_mask_exact, ids, int(torch.randint(0, 10 ** 6, (1,), generator=g)),
                                       **kwargs)
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
    for b in range(B):
        n, k = int(eligible[b].sum()), int(selected[b].sum())
        x = 0.15 * n  # the nearest integer (either one at a tie), at least one, at most n
        allowed = {max(1, min(n, c)) for c in (math.floor(x + 0.5 + 1e-9), math.ceil(x - 0.5 - 1e-9))} if n else {0}
        if k not in allowed:
            raise CheckFailed(f"row {b} has {n} eligible tokens and {k} selected; this rule selects a "
                              f"fixed number per row, not a random one: the nearest integer to "
                              f"select_prob × n (at least one)")
    n_sel = int(selected.sum())

    def near(name, value, p, n, slack=0.005):
        tol = 5 * (p * (1 - p) / n) ** 0.5 + slack
        if not is_close_number(value, p, atol=tol):
            raise CheckFailed(f"{name}: expected about {p:.3f}, got {value:.3f} (tolerance {tol:.3f})")

    to_mask = selected & (corrupted == mask_id)
    kept = selected & (corrupted == ids)
    other = selected & (corrupted != mask_id) & (corrupted != ids)
    near("fraction of selected tokens replaced by mask_id", int(to_mask.sum()) / n_sel, 0.8, n_sel)
    near("fraction of selected tokens left unchanged", int(kept.sum()) / n_sel, 0.1, n_sel, 0.01)
    near("fraction of selected tokens replaced by a random token", int(other.sum()) / n_sel, 0.1, n_sel, 0.01)
    # The replacement is drawn from all of range(vocab_size), the original token included: with a
    # vocabulary of 4 (one ordinary token) a quarter of the random draws leave the token unchanged.
    tiny = torch.full((4000, 21), 3)
    tiny[:, 0] = cls
    tiny_out, tiny_lab = _ch12_mlm_call(mlm_mask_exact, tiny, 5, mask_id=2, vocab_size=4, special_ids=(0, 1, 2),
                                        select_prob=0.15)
    tiny_sel = tiny_lab != -100
    n_tiny = int(tiny_sel.sum())
    kept_share = int((tiny_sel & (tiny_out == tiny)).sum()) / n_tiny
    if not abs(kept_share - 0.125) <= 5 * math.sqrt(0.125 * 0.875 / n_tiny):
        raise CheckFailed(f"vocab_size=4, every ordinary token 3: {kept_share:.3f} of the selected tokens are "
                          f"unchanged. Is your random replacement drawn uniformly from all of "
                          f"range(vocab_size), as the statement asks, whatever the original token is?")
    # Uniform over the eligible positions: rows of 20 eligible tokens, 3 selected each.
    full = torch.randint(6, V, (3000, 21), generator=g)
    full[:, 0] = cls
    _, lab = _ch12_mlm_call(mlm_mask_exact, full, 11, **kwargs)
    rate = (lab[:, 1:] != -100).double().mean(0)
    tol = 5 * math.sqrt(0.15 * 0.85 / 3000)
    worst = int((rate - 0.15).abs().argmax())
    if not (abs(float(rate[worst]) - 0.15) <= tol):
        raise CheckFailed(f"with 20 eligible tokens per row, position {worst + 1} is selected in "
                          f"{float(rate[worst]):.1%} of the rows, where every position should be "
                          f"equally likely: choose the positions uniformly, without replacement")
    small = ids[:64]
    torch.manual_seed(0)
    a = _ch12_mlm_call(mlm_mask_exact, small, 7, **kwargs)
    torch.manual_seed(1)
    b2 = _ch12_mlm_call(mlm_mask_exact, small, 7, **kwargs)
    if not (torch.equal(a[0], b2[0]) and torch.equal(a[1], b2[1])):
        raise CheckFailed("the same seed gave different results: draw every random number from "
                          "torch.Generator().manual_seed(seed), not from torch's global RNG")
    c = _ch12_mlm_call(mlm_mask_exact, small, 8, **kwargs)
    if torch.equal(a[1], c[1]):
        raise CheckFailed("different seeds gave the same selection: draw from a generator seeded with `seed`")
    return (f"exact counts in all {B} rows, uniform positions; {int(to_mask.sum()) / n_sel:.1%} mask, "
            f"{int(other.sum()) / n_sel:.1%} random, {int(kept.sum()) / n_sel:.1%} kept; under the "
            f"per-token rule {0.85 ** 5:.1%} of 5-token rows would have been scored nowhere")


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
                                  f"the share {key!r} = {float(got[key]):.6f} is not right. Follow a selected "
                                  f"token through the rule: the random replacement is drawn from the whole "
                                  f"vocabulary, so which tokens can it land on, and with what chance each?")
    noise = (0.09 * 0.91 / 6504) ** 0.5
    return (f"{len(cases)} vocabularies and rules, BERT's included; for the chapter's 6,504 selected "
            f"tokens the sampling noise of a share near 0.1 is sqrt(p(1-p)/n) = {noise:.4f}")


def _ch12_sum_call(sum_examples: Callable, n: int, seed: int, min_len: int, max_len: int) -> list:
    got = sum_examples(n, seed, min_len=min_len, max_len=max_len)
    what = f"sum_examples({n}, {seed}, min_len={min_len}, max_len={max_len})"
    if not isinstance(got, (list, tuple)) or len(got) != n:
        raise CheckFailed(f"{what}: expected a list of {n} examples, got "
                          f"{type(got).__name__} of length {len(got) if hasattr(got, '__len__') else '?'}")
    examples = []
    for i, ex in enumerate(got):
        if not isinstance(ex, (list, tuple)) or not all(isinstance(t, str) for t in ex):
            raise CheckFailed(f"{what}, example {i}: expected a list of token strings such as "
                              f"['Sum', '(', '3', '5', ')', ...], got {str(ex)[:60]}")
        ex = list(ex)
        if len(ex) < 5 or ex[:2] != ["Sum", "("] or ex[-2] != ")":
            raise CheckFailed(f"{what}, example {i} = {ex}: the format is the chapter's decoder framing, "
                              f"'Sum', '(', the digits, ')', then the answer")
        digits = ex[2:-2]
        if not all(len(t) == 1 and t.isdigit() for t in digits):
            raise CheckFailed(f"{what}, example {i} = {ex}: between the brackets every token is one digit, "
                              f"'0' to '9'")
        if not min_len <= len(digits) <= max_len:
            raise CheckFailed(f"{what}, example {i} = {ex}: {len(digits)} digits, outside "
                              f"min_len..max_len (are both ends included?)")
        answer = ex[-1]
        values = [int(t) for t in digits]
        if not (len(answer) == 1 and answer.isdigit() and int(answer) == sum(values) % 10):
            raise CheckFailed(f"{what}, example {i} = {ex}: the answer token is wrong for these digits. "
                              f"What does Sum ask for, and is the answer a single digit token?")
        examples.append(tuple(values))
    return examples


@exercise_check(forbidden=("fundamentallm.data.digit_operations",))
def check_sum_examples(sum_examples: Callable) -> str:
    """``sum_examples(n, seed, min_len=2, max_len=6)`` -> ``n`` distinct examples ``Sum ( d1 .. dk ) s``
    as token strings, ``s`` the last digit of the digits' sum. Called with fresh seeds and lengths:
    the format and every label are checked; the lengths must cover ``min_len..max_len`` (both
    included) about uniformly, the digits be uniform (a first digit 0 included), no example repeat,
    and the same seed give the same list while another seed gives another."""
    g = rng(1206)
    seed_a, seed_b = (int(torch.randint(0, 2 ** 31 - 1, (1,), generator=g)) for _ in range(2))
    lo = int(torch.randint(4, 6, (1,), generator=g))  # 4 or 5: not the default, and few repeats
    hi = lo + 3
    n = 2000
    state = random.getstate()
    examples = _ch12_sum_call(sum_examples, n, seed_a, lo, hi)
    if len(set(examples)) != n:
        raise CheckFailed(f"sum_examples({n}, {seed_a}, min_len={lo}, max_len={hi}): "
                          f"{n - len(set(examples))} examples repeat one before them; every example "
                          f"must be new, as in the package's splits")
    lengths = [len(d) for d in examples]
    for k in range(lo, hi + 1):
        share = lengths.count(k) / n
        if not abs(share - 1 / 4) <= 0.06:  # standard deviation about 0.01
            raise CheckFailed(f"min_len={lo}, max_len={hi}: {share:.1%} of the examples have {k} digits; "
                              f"the length should be uniform over min_len..max_len, both ends included")
    digits = [d for ex in examples for d in ex]
    for value in range(10):
        share = digits.count(value) / len(digits)
        if not abs(share - 0.1) <= 0.02:  # standard deviation about 0.003
            raise CheckFailed(f"the digit {value} makes up {share:.1%} of all digits; each digit should be "
                              f"uniform over 0..9, wherever it stands")
    first_zero = sum(ex[0] == 0 for ex in examples) / n
    if not first_zero >= 0.05:  # 0.1 expected, standard deviation about 0.007
        raise CheckFailed(f"only {first_zero:.1%} of the examples start with the digit 0: the digits are a "
                          f"list, not a number, so a 0 may come first as often as any digit")
    again = _ch12_sum_call(sum_examples, n, seed_a, lo, hi)
    if random.getstate() != state:
        random.setstate(state)
        raise CheckFailed("your function changed the state of Python's global random generator (random.seed, "
                          "random.randint ...): draw every number from your own random.Random(seed), which "
                          "leaves the caller's random numbers alone")
    if again != examples:
        raise CheckFailed("the same seed gave two different lists: draw every random number from a "
                          "generator made from the seed, not from a global one")
    if _ch12_sum_call(sum_examples, 200, seed_b, lo, hi) == examples[:200]:
        raise CheckFailed("two different seeds gave the same examples: is the seed used?")
    small = _ch12_sum_call(sum_examples, 50, seed_b, 2, 2)
    if len(set(small)) != 50:
        raise CheckFailed(f"sum_examples(50, {seed_b}, min_len=2, max_len=2): {50 - len(set(small))} "
                          f"examples repeat; with only 100 two-digit lists, repeats come fast unless "
                          f"each new example is compared with those already drawn")
    return (f"{n} examples of {lo} to {hi} digits, 50 of 2: the labels, the lengths, the digits, "
            f"no repeats, and the seed")
