"""The chapter 12 exercise checks, as a table: each wrong answer and the message it must get.
(Every book solution passes and every answer stub counts as not attempted: tests/test_course.py.)"""

from __future__ import annotations

import torch
from book_solutions import book_solution
from check_tables import wrong_answer_tests

# --- correct answers -----------------------------------------------------------------------------


apply_operation = book_solution("ch12-ex1", "apply_operation")


frame = book_solution("ch12-ex2", "frame")


mean_pool = book_solution("ch12-ex3", "mean_pool")


mlm_mask = book_solution("ch12-ex4", "mlm_mask")


# --- wrong answers -------------------------------------------------------------------------------

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


def frame_without_op(op, digits):
    return ["(", *map(str, digits), ")"]


def frame_smuggles_the_answer(op, digits):
    answer = {"First": digits[0], "Second": digits[1], "Last": digits[-1], "Max": max(digits),
              "Min": min(digits)}[op]
    return [op, "(", *map(str, digits), ")", str(answer)]


def frame_sorted(op, digits):
    return [op, "(", *map(str, sorted(digits)), ")"]


def mean_pool_with_padding(hidden, attention_mask):
    return hidden.mean(dim=1)  # averages the padding vectors too


def mean_pool_sum(hidden, attention_mask):
    return (hidden * attention_mask.to(hidden.dtype).unsqueeze(-1)).sum(1)


def mean_pool_divides_by_T(hidden, attention_mask):
    return (hidden * attention_mask.to(hidden.dtype).unsqueeze(-1)).sum(1) / hidden.shape[1]


def mlm_mask_selects_specials(input_ids, seed, mask_id=2, vocab_size=20, special_ids=(0, 1),
                              select_prob=0.15):
    return mlm_mask(input_ids, seed, mask_id, vocab_size, (), select_prob)


def mlm_mask_always_mask(input_ids, seed, mask_id=2, vocab_size=20, special_ids=(0, 1),
                         select_prob=0.15):
    selectable = ~torch.isin(input_ids, torch.tensor(special_ids))
    generator = torch.Generator().manual_seed(seed)
    selected = (torch.rand(input_ids.shape, generator=generator) < select_prob) & selectable
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
    return torch.where(selected, torch.full_like(input_ids, mask_id), input_ids), labels


def mlm_mask_no_random(input_ids, seed, mask_id=2, vocab_size=20, special_ids=(0, 1),
                       select_prob=0.15):
    corrupted, labels = mlm_mask(input_ids, seed, mask_id, vocab_size, special_ids, select_prob)
    replaced = (labels != -100) & (corrupted != mask_id)
    return torch.where(replaced, input_ids, corrupted), labels  # 80% mask, 20% kept


def mlm_mask_labels_corrupted(input_ids, seed, mask_id=2, vocab_size=20, special_ids=(0, 1),
                              select_prob=0.15):
    corrupted, labels = mlm_mask(input_ids, seed, mask_id, vocab_size, special_ids, select_prob)
    return corrupted, torch.where(labels != -100, corrupted, labels)


def mlm_mask_global_rng(input_ids, seed, mask_id=2, vocab_size=20, special_ids=(0, 1),
                        select_prob=0.15):
    """Ignores the seed: draws from torch's global generator."""
    return mlm_mask(input_ids, int(torch.randint(0, 2 ** 31, (1,))), mask_id, vocab_size, special_ids,
                    select_prob)


def mlm_mask_in_place(input_ids, seed, mask_id=2, vocab_size=20, special_ids=(0, 1),
                      select_prob=0.15):
    corrupted, labels = mlm_mask(input_ids, seed, mask_id, vocab_size, special_ids, select_prob)
    input_ids.copy_(corrupted)
    return input_ids, labels


ROWS = [
    ("check_apply_operation", apply_operation_sorts_in_place, "modified its argument 2 in place"),
    ("check_apply_operation", apply_operation_second_is_index_2, "Second"),
    ("check_apply_operation", apply_operation_silent_unknown, "ValueError"),
    ("check_decoder_framing", frame_without_op, "must name the operation"),
    ("check_decoder_framing", frame_smuggles_the_answer, "nothing computed from them"),
    ("check_decoder_framing", frame_sorted, "digits in order"),
    ("check_decoder_framing", lambda op, digits: " ".join([op, *map(str, digits)]), "list of token strings"),
    ("check_decoder_framing", lambda op, digits: [op, "[", *map(str, digits)], "not a token of DIGIT_VOCAB"),
    ("check_decoder_framing", lambda op, digits: [op, *map(str, digits)] * 3, "use 1 to 16"),
    ("check_mean_pool", mean_pool_with_padding, "differ"),
    ("check_mean_pool", mean_pool_sum, "differ"),
    ("check_mean_pool", mean_pool_divides_by_T, "differ"),
    ("check_mlm_mask", mlm_mask_selects_specials, "special token"),
    ("check_mlm_mask", mlm_mask_always_mask, "replaced by mask_id"),
    ("check_mlm_mask", mlm_mask_no_random, "left unchanged"),
    ("check_mlm_mask", mlm_mask_labels_corrupted, "ORIGINAL"),
    ("check_mlm_mask", mlm_mask_global_rng, "same seed gave different results"),
    ("check_mlm_mask", mlm_mask_in_place, "in place"),
    ("check_mlm_shares", lambda v, mask_prob=0.8, random_prob=0.1: {
        "mask": mask_prob, "random": random_prob, "unchanged": 1 - mask_prob - random_prob}, "check_mlm_shares"),
]

test_wrong_answer_gets_its_message = wrong_answer_tests(ROWS)


def test_the_book_framing_passes_and_is_op_last():
    assert frame("Max", [3, 1]) == ["(", "3", "1", ")", "Max"]


# --- mlm_shares: predict the measured shares ------------------------------------------------------


def _mlm_shares(vocab_size, mask_prob=0.8, random_prob=0.1):
    hit = random_prob / vocab_size  # a random draw that lands on <mask>, or on the original
    return {"mask": mask_prob + hit, "random": random_prob - 2 * hit,
            "unchanged": 1 - mask_prob - random_prob + hit}


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
