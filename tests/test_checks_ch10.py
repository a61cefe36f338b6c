"""The chapter 10 exercise checks: what the wrong-answer tables (fundamentallm/checks/ch10.py,
tests/test_catches.py) do not cover. (Every book solution passes and every answer stub counts as not
attempted: tests/test_course.py.)"""

from __future__ import annotations

import pytest
import torch
from book_solutions import book_solution

from fundamentallm import checks, generation
from fundamentallm.checks import CheckFailed

top_p_filter = book_solution("ch10-ex2", "top_p_filter")
min_p_filter = book_solution("ch10-ex4", "min_p_filter")
repetition_penalty = book_solution("ch10-ex1", "repetition_penalty")


def _positions_processed(prompt_len, n_new, use_cache):
    if use_cache:
        return prompt_len + n_new - 1 if n_new else 0
    return n_new * prompt_len + n_new * (n_new - 1) // 2


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


def test_repetition_penalty_equals_hugging_face():
    """The book's solution equals transformers' RepetitionPenaltyLogitsProcessor (the check's
    reference is written inside the check; this ties both to the library's rule)."""
    transformers = pytest.importorskip("transformers")
    g = torch.Generator().manual_seed(0)
    logits, ids = torch.randn(3, 20, generator=g) * 3, torch.randint(0, 20, (3, 15), generator=g)
    processor = transformers.RepetitionPenaltyLogitsProcessor(penalty=1.4)
    torch.testing.assert_close(repetition_penalty(logits, ids, 1.4), processor(ids, logits.clone()))


def test_the_buggy_top_p_of_ex2_fails_its_check():
    """The answer cell's buggy function (the debugging exercise's starting point) is rejected."""
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).parents[1] / "book" / "10_sampling.ipynb").read_text())
    cell = next(c for c in nb["cells"] if c.get("id") == "ch10-ex2-answer")
    namespace: dict = {}
    source = "".join(cell["source"]).replace("    raise NotImplementedError", "    pass  #")
    exec(source, namespace)  # noqa: S102 (the book's own cell, its first line deleted as the statement says)
    with pytest.raises(CheckFailed, match="check_top_p_filter"):
        checks.check_top_p_filter(namespace["top_p_filter"])


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
