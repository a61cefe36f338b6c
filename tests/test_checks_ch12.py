"""The chapter 12 checks beyond the package's wrong-answer table (fundamentallm/checks/ch12.py, run
by tests/test_catches.py): malformed framings are named before anything is trained, the book's
framing is the operation-last one, and the predicted MLM shares match a simulation. (Every book
solution passes and every answer stub counts as not attempted: tests/test_course.py.)"""

from __future__ import annotations

import pytest
import torch
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

frame = book_solution("ch12-ex2", "frame")


@pytest.mark.parametrize("answer,message", [
    (lambda op, digits: " ".join([op, *map(str, digits)]), "list of token strings"),
    (lambda op, digits: [op, "[", *map(str, digits)], "not a token of DIGIT_VOCAB"),
    (lambda op, digits: [op, *map(str, digits)] * 3, "use 1 to 16"),
])
def test_malformed_framings_are_named(answer, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_decoder_framing(answer)


def test_the_book_framing_is_op_last():
    assert frame("Max", [3, 1]) == ["(", "3", "1", ")", "Max"]


def test_exact_masking_edge_rows():
    """Rows with no eligible token select nothing; a select_prob of 1 selects every eligible token."""
    mlm_mask_exact = book_solution("ch12-ex4", "mlm_mask_exact")
    ids = torch.tensor([[1, 0, 0, 0], [1, 7, 8, 0], [1, 7, 8, 9]])
    _, labels = mlm_mask_exact(ids, 0, special_ids=(0, 1))
    assert (labels[0] == -100).all() and (labels[1:] != -100).sum(1).tolist() == [1, 1]
    _, labels = mlm_mask_exact(ids, 0, special_ids=(0, 1), select_prob=1.0)
    assert torch.equal(labels != -100, ~torch.isin(ids, torch.tensor([0, 1])))


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


sum_examples = book_solution("ch12-ex6", "sum_examples")


def test_sum_examples_solution_passes_under_fresh_grading_seeds():
    """The grader's seeds change the seeds and lengths the check asks for; the solution passes them all."""
    from fundamentallm.checks.core import grading_seed

    with checks.strict():
        for seed in range(4):
            with grading_seed(seed):
                checks.check_sum_examples(sum_examples)


def test_sum_examples_solution_labels_and_format():
    examples = sum_examples(300, 7, min_len=2, max_len=3)
    assert len({tuple(e) for e in examples}) == 300
    for e in examples:
        assert e[:2] == ["Sum", "("] and e[-2] == ")" and 2 <= len(e) - 4 <= 3
        assert int(e[-1]) == sum(map(int, e[2:-2])) % 10


def _fixed_list(n, seed, min_len=2, max_len=6):
    return sum_examples(n, 0, min_len, max_len)  # ignores the seed


def _global_rng(n, seed, min_len=2, max_len=6):
    # torch's global generator: a new list every call (Python's global one is refused earlier)
    return sum_examples(n, int(torch.randint(0, 10 ** 6, (1,))), min_len, max_len)


@pytest.mark.parametrize("answer,message", [
    (_fixed_list, "different seeds gave the same examples"),
    (_global_rng, "same seed gave two different lists"),
    (lambda n, seed, min_len=2, max_len=6: [" ".join(e) for e in sum_examples(n, seed, min_len, max_len)],
     "list of token strings"),
    (lambda n, seed, min_len=2, max_len=6: sum_examples(n, seed, min_len, max_len)[:-1], "a list of"),
    (lambda n, seed, min_len=2, max_len=6: [["Max", *e[1:]] for e in sum_examples(n, seed, min_len, max_len)],
     "the format is the chapter's decoder framing"),
])
def test_sum_examples_names_what_is_wrong(answer, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_sum_examples(answer)
