"""The chapter 10 exercise checks, as a table: each wrong answer and the message it must get.
(Every book solution passes and every answer stub counts as not attempted: tests/test_course.py.)"""

from __future__ import annotations

import pytest
import torch
from book_solutions import book_solution
from check_tables import wrong_call_tests

from fundamentallm import checks, generation
from fundamentallm.checks import CheckFailed

top_k_filter = book_solution("ch10-ex1", "top_k_filter")
top_p_filter = book_solution("ch10-ex2", "top_p_filter")
greedy_decode = book_solution("ch10-ex3", "greedy_decode")
min_p_filter = book_solution("ch10-ex4", "min_p_filter")


def _top_k_strict(logits, k):
    """Breaks ties by index: keeps exactly k tokens."""
    k = min(k, logits.shape[-1])
    idx = torch.topk(logits, k, dim=-1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)
    return logits.masked_fill(~keep, float("-inf"))


def _top_p_inclusive(logits, p):
    """Off by one: drops the token whose own probability carries the mass past p."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    remove_sorted = torch.cumsum(torch.softmax(sorted_logits, -1), -1) > p
    return logits.masked_fill(remove_sorted.scatter(-1, order, remove_sorted), float("-inf"))


def _top_p_unsorted_marks(logits, p):
    """Forgets to scatter the marks back to vocabulary order."""
    sorted_logits, _ = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, -1)
    return logits.masked_fill(torch.cumsum(probs, -1) - probs >= p, float("-inf"))


def _top_p_ascending(logits, p):
    """Sorts in ascending order: keeps the least likely tokens."""
    return logits.masked_fill(torch.isneginf(top_p_filter(-logits, p)), float("-inf"))


def _greedy_in_place(table, ids, n):
    """Right tokens, but overwrites the caller's prompt."""
    out = greedy_decode(table, ids, n)
    ids[0, 0] = (ids[0, 0] + 1) % 11
    return out


def _min_p_probabilities(logits, min_p):
    """Returns probabilities instead of logits."""
    return torch.softmax(min_p_filter(logits, min_p), -1)


def _min_p_on_logits(logits, min_p):
    """Compares logits instead of probabilities: z >= min_p * z_max."""
    return logits.masked_fill(logits < min_p * logits.amax(-1, keepdim=True), float("-inf"))


def _positions_processed(prompt_len, n_new, use_cache):
    if use_cache:
        return prompt_len + n_new - 1 if n_new else 0
    return n_new * prompt_len + n_new * (n_new - 1) // 2


ROWS = [
    ("check_top_k_filter", (_top_k_strict,), r"should be kept"),
    ("check_top_k_filter", (lambda z, k: top_k_filter(z, k).nan_to_num(neginf=0.0),), r"-inf"),
    ("check_top_p_filter", (_top_p_inclusive,), r"kept|removed"),
    ("check_top_p_filter", (_top_p_unsorted_marks,), r"kept|removed"),
    ("check_top_p_filter", (_top_p_ascending,), r"kept|removed"),
    ("check_greedy_decode", (lambda t, ids, n: greedy_decode(t, ids, n)[:, ids.shape[1]:],),
     r"expected shape"),
    ("check_greedy_decode", (lambda t, ids, n: greedy_decode(t.T, ids, n),), r"argmax of the row"),
    ("check_greedy_decode", (_greedy_in_place,), r"modified"),
    ("check_min_p_filter", (lambda z, m: z.masked_fill(torch.softmax(z, -1) < m, float("-inf")),),
     r"min_p=0\.3"),
    ("check_min_p_filter", (_min_p_on_logits,), r"kept|removed"),
    ("check_min_p_filter", (_min_p_probabilities,), r"-inf|logits"),
    ("check_positions_processed", (_positions_processed, None, 20), r"not attempted yet"),
    ("check_positions_processed", (_positions_processed, False, 20), r"cache_saves_more: count both sides"),
    ("check_positions_processed", (_positions_processed, True, 10.5), r"limit_factor: 10.5 is not the limit"),
    ("check_positions_processed", (_positions_processed, "yes", 20), r"True or False"),
    ("check_positions_processed", (lambda p, n, c: n if c else n * (n + 1) // 2, True, 20),
     r"expected \d+ positions"),
    ("check_positions_processed", (lambda p, n, c: p + n if c else _positions_processed(p, n, False), True, 20),
     r"use_cache=True: expected"),
]

test_wrong_answers_get_their_message = wrong_call_tests(ROWS)


def test_min_p_filter_keeps_what_its_definition_says():
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    probs = torch.softmax(logits, 0)
    assert torch.equal(~torch.isneginf(min_p_filter(logits, 0.3)), probs >= 0.3 * probs.max())


def test_top_p_reference_equals_the_package_on_unambiguous_rows():
    from fundamentallm.checks.ch10 import _ch10_top_p_reference

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(20, 30, generator=g) * 2
    for p in (0.2, 0.5, 0.9):
        keep, ambiguous = _ch10_top_p_reference(logits, p)
        assert not ambiguous.all()
        pkg = ~torch.isneginf(generation.top_p_filter(logits, p))
        assert torch.equal(keep[~ambiguous], pkg[~ambiguous])


def test_top_k_message_names_the_wrong_index():
    with pytest.raises(CheckFailed, match="should be kept"):
        checks.check_top_k_filter(_top_k_strict)


def test_positions_processed_matches_the_package():
    """The formula the check expects is what fundamentallm.generation.generate runs."""
    from fundamentallm import Transformer, TransformerConfig

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=1,
                                          max_seq_len=32)).eval()
    counted = []
    hook = model.token_embedding.register_forward_hook(lambda m, i, o: counted.append(i[0].shape[1]))
    try:
        for prompt_len, n_new in [(1, 5), (4, 7)]:
            for use_cache in (False, True):
                counted.clear()
                generation.generate(model, torch.zeros(1, prompt_len, dtype=torch.long), n_new,
                                    greedy=True, use_cache=use_cache)
                assert sum(counted) == _positions_processed(prompt_len, n_new, use_cache)
    finally:
        hook.remove()
