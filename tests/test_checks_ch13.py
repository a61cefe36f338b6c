"""The chapter 13 checks beyond the package's wrong-answer table (fundamentallm/checks/ch13.py, run
by tests/test_catches.py): right answers written other ways pass, the colleague's model shows the
leak the book describes, and the checks leave the global random state alone. (Every book solution
passes and every answer stub counts as not attempted: tests/test_course.py.)"""

from __future__ import annotations

import torch
from book_solutions import book_solution

from fundamentallm import Transformer, TransformerConfig, checks
from fundamentallm.checks import wrong

find_nan_or_inf = book_solution("ch13-ex1", "find_nan_or_inf")
first_divergence = book_solution("ch13-ex4", "first_divergence")


def _table_namespace(check: str, what: str) -> dict:
    row = next(w for w in wrong.WRONG_ANSWERS if w.check == check and w.what.startswith(what))
    import math

    import numpy as np
    from torch import nn
    from torch.nn import functional as F

    import fundamentallm
    ns = {"torch": torch, "np": np, "math": math, "nn": nn, "F": F, "fundamentallm": fundamentallm}
    exec(row.source, ns)
    return ns


def test_a_fix_written_as_a_subclass_passes():
    ns = _table_namespace("check_fixed_model", "hands back")
    assert checks.check_fixed_model(ns["model_class"](diagonal=0)) is True


def test_the_colleague_model_reads_one_token_ahead_per_layer():
    """The book's reading of the leak test on the colleague's two-layer model (ch13-ex6's
    solution): position s moves when token s + 1 or s + 2 changes, never further ahead."""
    ns = _table_namespace("check_fixed_model", "hands back")
    config = TransformerConfig(vocab_size=30, d_model=32, num_heads=4, num_layers=2, max_seq_len=10)
    torch.manual_seed(0)
    model = ns["Colleague"](config).eval()
    model.load_state_dict(Transformer(config).state_dict())
    ids = torch.randint(0, 30, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        base = model(ids)
        for t in range(1, 10):
            changed = ids.clone()
            changed[:, t] = (changed[:, t] + 1) % 30
            moved = (model(changed) - base).abs().amax(dim=(0, 2))
            assert moved[t - 1] > 1e-7  # position t - 1 reads token t
            if t >= 2:
                assert moved[t - 2] > 1e-7  # and, through the second layer, position t - 2
            if t >= 3:  # nothing further back reads it
                assert moved[:t - 2].max() < 1e-6


def test_source_token_handles_huge_shapes_by_formula():
    source = book_solution("ch13-ex5", "source_token")
    assert checks.check_source_token(source, [2, 2, 3, 3]) is True


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    checks.check_find_nan_or_inf(find_nan_or_inf)
    checks.check_first_divergence(first_divergence)
    checks.check_fixed_train(book_solution("ch13-ex7", "fixed_train"))
    assert torch.equal(torch.rand(3), expected)
