"""The chapter 12 exercise checks: they pass correct answers and fail, with CheckFailed, a stub
and plausible wrong answers."""

from __future__ import annotations

import pytest
import torch
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

# --- correct answers -----------------------------------------------------------------------------


apply_operation = book_solution("ch12-ex1", "apply_operation")


accuracy_by_operation = book_solution("ch12-ex2", "accuracy_by_operation")


mean_pool = book_solution("ch12-ex3", "mean_pool")


mlm_mask = book_solution("ch12-ex4", "mlm_mask")


def mlm_mask_bert_style(input_ids, generator, mask_id=2, vocab_size=20, special_ids=(0, 1),
                        select_prob=0.15):
    """The Hugging Face order of draws (three Bernoulli masks), random tokens from all ids."""
    labels, inputs = input_ids.clone(), input_ids.clone()
    p = torch.full(labels.shape, float(select_prob))
    p[torch.isin(input_ids, torch.tensor(special_ids))] = 0.0
    selected = torch.bernoulli(p, generator=generator).bool()
    labels[~selected] = -100
    masked = torch.bernoulli(torch.full(labels.shape, 0.8), generator=generator).bool() & selected
    inputs[masked] = mask_id
    rand = torch.bernoulli(torch.full(labels.shape, 0.5), generator=generator).bool() & selected & ~masked
    words = torch.randint(vocab_size, labels.shape, generator=generator)
    inputs[rand] = words[rand]
    return inputs, labels


# --- wrong answers -------------------------------------------------------------------------------

def stub(*args, **kwargs):
    raise NotImplementedError


def apply_operation_sorts_in_place(op, digits):
    if op in ("Max", "Min"):
        digits.sort()  # changes the caller's list
        return digits[-1] if op == "Max" else digits[0]
    return apply_operation(op, digits)


def apply_operation_second_is_index_2(op, digits):
    return digits[2] if op == "Second" and len(digits) > 2 else apply_operation(op, digits)


def apply_operation_silent_unknown(op, digits):
    table = {"First": 0, "Second": 1, "Last": -1}
    if op == "Max":
        return max(digits)
    if op == "Min":
        return min(digits)
    return digits[table.get(op, 0)]  # an unknown operation quietly answers the first digit


def accuracy_overall_everywhere(preds, labels, operations):
    acc = (torch.as_tensor(preds) == torch.as_tensor(labels)).float().mean().item()
    return {op: acc for op in set(operations)}


def accuracy_divides_by_all(preds, labels, operations):
    correct = (torch.as_tensor(preds) == torch.as_tensor(labels)).float()
    return {op: (correct * torch.tensor([o == op for o in operations])).sum().item() / len(operations)
            for op in set(operations)}


def accuracy_counts(preds, labels, operations):
    correct = (torch.as_tensor(preds) == torch.as_tensor(labels))
    return {op: int(correct[torch.tensor([o == op for o in operations])].sum()) for op in set(operations)}


def mean_pool_with_padding(hidden, attention_mask):
    return hidden.mean(dim=1)  # averages the padding vectors too


def mean_pool_sum(hidden, attention_mask):
    return (hidden * attention_mask.to(hidden.dtype).unsqueeze(-1)).sum(1)


def mean_pool_divides_by_T(hidden, attention_mask):
    return (hidden * attention_mask.to(hidden.dtype).unsqueeze(-1)).sum(1) / hidden.shape[1]


def mlm_mask_selects_specials(input_ids, generator, mask_id=2, vocab_size=20, special_ids=(0, 1),
                              select_prob=0.15):
    return mlm_mask(input_ids, generator, mask_id, vocab_size, (), select_prob)


def mlm_mask_always_mask(input_ids, generator, mask_id=2, vocab_size=20, special_ids=(0, 1),
                         select_prob=0.15):
    selectable = ~torch.isin(input_ids, torch.tensor(special_ids))
    selected = (torch.rand(input_ids.shape, generator=generator) < select_prob) & selectable
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
    return torch.where(selected, torch.full_like(input_ids, mask_id), input_ids), labels


def mlm_mask_no_random(input_ids, generator, mask_id=2, vocab_size=20, special_ids=(0, 1),
                       select_prob=0.15):
    corrupted, labels = mlm_mask(input_ids, generator, mask_id, vocab_size, special_ids, select_prob)
    replaced = (labels != -100) & (corrupted != mask_id)
    return torch.where(replaced, input_ids, corrupted), labels  # 80% mask, 20% kept


def mlm_mask_labels_corrupted(input_ids, generator, mask_id=2, vocab_size=20, special_ids=(0, 1),
                              select_prob=0.15):
    corrupted, labels = mlm_mask(input_ids, generator, mask_id, vocab_size, special_ids, select_prob)
    return corrupted, torch.where(labels != -100, corrupted, labels)


def mlm_mask_global_rng(input_ids, generator, mask_id=2, vocab_size=20, special_ids=(0, 1),
                        select_prob=0.15):
    return mlm_mask(input_ids, None, mask_id, vocab_size, special_ids, select_prob)


def mlm_mask_in_place(input_ids, generator, mask_id=2, vocab_size=20, special_ids=(0, 1),
                      select_prob=0.15):
    corrupted, labels = mlm_mask(input_ids, generator, mask_id, vocab_size, special_ids, select_prob)
    input_ids.copy_(corrupted)
    return input_ids, labels


# --- tests ---------------------------------------------------------------------------------------

CORRECT = [
    (checks.check_apply_operation, apply_operation),
    (checks.check_accuracy_by_operation, accuracy_by_operation),
    (checks.check_mean_pool, mean_pool),
    (checks.check_mlm_mask, mlm_mask),
    (checks.check_mlm_mask, mlm_mask_bert_style),
]

WRONG = [
    (checks.check_apply_operation, apply_operation_sorts_in_place, "modified its argument 2 in place"),
    (checks.check_apply_operation, apply_operation_second_is_index_2, "Second"),
    (checks.check_apply_operation, apply_operation_silent_unknown, "ValueError"),
    (checks.check_accuracy_by_operation, accuracy_overall_everywhere, "accuracy of"),
    (checks.check_accuracy_by_operation, accuracy_divides_by_all, "accuracy of"),
    (checks.check_accuracy_by_operation, accuracy_counts, "accuracy of"),
    (checks.check_mean_pool, mean_pool_with_padding, "differ"),
    (checks.check_mean_pool, mean_pool_sum, "differ"),
    (checks.check_mean_pool, mean_pool_divides_by_T, "differ"),
    (checks.check_mlm_mask, mlm_mask_selects_specials, "special token"),
    (checks.check_mlm_mask, mlm_mask_always_mask, "replaced by mask_id"),
    (checks.check_mlm_mask, mlm_mask_no_random, "left unchanged"),
    (checks.check_mlm_mask, mlm_mask_labels_corrupted, "ORIGINAL"),
    (checks.check_mlm_mask, mlm_mask_global_rng, "generator"),
    (checks.check_mlm_mask, mlm_mask_in_place, "in place"),
]


@pytest.mark.parametrize("check, fn", CORRECT, ids=[f.__name__ for _, f in CORRECT])
def test_check_passes_a_correct_answer(check, fn, capsys):
    assert check(fn) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("check", sorted({c for c, _ in CORRECT}, key=lambda c: c.__name__),
                         ids=lambda c: c.__name__)
def test_check_fails_a_stub(check):
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        check(stub)


@pytest.mark.parametrize("check, fn, message", WRONG, ids=[f.__name__ for _, f, _ in WRONG])
def test_check_fails_a_wrong_answer(check, fn, message):
    with pytest.raises(CheckFailed, match=message):
        check(fn)


# --- mlm_shares: predict the measured shares ------------------------------------------------------


def _mlm_shares(vocab_size, mask_prob=0.8, random_prob=0.1):
    hit = random_prob / vocab_size  # a random draw that lands on <mask>, or on the original
    return {"mask": mask_prob + hit, "random": random_prob - 2 * hit,
            "unchanged": 1 - mask_prob - random_prob + hit}


def test_mlm_shares_correct(capsys):
    assert checks.check_mlm_shares(_mlm_shares) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [
    lambda v, mask_prob=0.8, random_prob=0.1: {"mask": mask_prob, "random": random_prob,
                                               "unchanged": 1 - mask_prob - random_prob},
    lambda v, mask_prob=0.8, random_prob=0.1: {**_mlm_shares(v, mask_prob, random_prob),
                                               "random": random_prob * (v - 1) / v},
])
def test_mlm_shares_wrong(wrong):
    with pytest.raises(CheckFailed, match="check_mlm_shares"):
        checks.check_mlm_shares(wrong)


def test_mlm_shares_match_a_simulation():
    """The exact shares agree with the chapter's corruption rule, simulated on many positions."""
    g = torch.Generator().manual_seed(0)
    V, n = 20, 400_000
    original = torch.randint(3, V, (n,), generator=g)  # ordinary tokens (not <mask> = 2)
    u = torch.rand(n, generator=g)
    corrupted = torch.where(u < 0.8, torch.tensor(2), original)
    random_ids = torch.randint(V, (n,), generator=g)
    corrupted = torch.where((u >= 0.8) & (u < 0.9), random_ids, corrupted)
    measured = {"mask": (corrupted == 2).float().mean().item(),
                "random": ((corrupted != 2) & (corrupted != original)).float().mean().item(),
                "unchanged": (corrupted == original).float().mean().item()}
    for key, value in _mlm_shares(V).items():
        assert abs(measured[key] - value) < 0.003, key
