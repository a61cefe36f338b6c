"""The chapter 13 exercise checks, as a table: each wrong answer and the message it must get.
(Every book solution passes and every answer stub counts as not attempted: tests/test_course.py.)"""

from __future__ import annotations

import math

import torch
from book_solutions import book_solution
from check_tables import wrong_call_tests

from fundamentallm import Transformer, TransformerConfig, checks

find_nan_or_inf = book_solution("ch13-ex1", "find_nan_or_inf")
detect_loss_spike = book_solution("ch13-ex2", "detect_loss_spike")
bad_attention_rows = book_solution("ch13-ex3", "bad_attention_rows")
first_divergence = book_solution("ch13-ex4", "first_divergence")
scrambled_tokens = book_solution("ch13-ex5", "scrambled_tokens")


def _spike_vs_previous(losses, factor=2.0, window=10):
    """Compares with the previous step only."""
    return [i for i, x in enumerate(losses)
            if not math.isfinite(x) or (i and math.isfinite(losses[i - 1]) and x > factor * losses[i - 1])]


def _spike_nan_blind(losses, factor=2.0, window=10):
    """Never flags NaN (NaN > anything is False) and lets NaN into the window."""
    out = []
    for i, x in enumerate(losses):
        prev = losses[max(0, i - window):i]
        if prev and x > factor * sum(prev) / len(prev):
            out.append(i)
    return out


def _outputs(config, state, ids):
    model = Transformer(TransformerConfig(**config)).eval()
    model.load_state_dict(state)
    out, handles = [], []
    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(lambda m, i, o, name=name: out.append((name, o))))
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    return [(n, o) for n, o in out if isinstance(o, torch.Tensor)]


def _first_divergence_last(config, state_a, state_b, input_ids, atol=1e-5):
    """Returns the LAST differing submodule."""
    b = dict(_outputs(config, state_b, input_ids))
    names = [n for n, o in _outputs(config, state_a, input_ids)
             if n in b and (o.shape != b[n].shape or (o - b[n]).abs().max() > atol)]
    return names[-1] if names else None


def _first_divergence_params(config, state_a, state_b, input_ids, atol=1e-5):
    """Compares parameters instead of outputs."""
    for n, p in state_a.items():
        if (p - state_b[n]).abs().max() > atol:
            return n.rsplit(".", 1)[0]
    return None


ROWS = [
    ("check_find_nan_or_inf", (lambda pairs: [n for n, t in pairs if t is not None and torch.isnan(t).any()],),
     r"expected"),
    ("check_find_nan_or_inf", (lambda pairs: [n for n, t in pairs if t is not None and torch.isinf(t).any()],),
     r"expected"),
    ("check_find_nan_or_inf", (lambda pairs: len(find_nan_or_inf(pairs)),), r"check_find_nan_or_inf"),
    ("check_detect_loss_spike", (_spike_vs_previous,), r"expected"),
    ("check_detect_loss_spike", (_spike_nan_blind,), r"expected"),
    ("check_detect_loss_spike", (lambda losses, factor=2.0, window=10: detect_loss_spike(
        losses, factor, window=len(losses) + 1),), r"expected"),
    ("check_bad_attention_rows", (lambda w, atol=1e-5: (w.sum(-1) - 1).abs() > atol,), r"check_bad_attention_rows"),
    ("check_bad_attention_rows", (lambda w, atol=1e-5: ~bad_attention_rows(w, atol),), r"check_bad_attention_rows"),
    ("check_first_divergence", (_first_divergence_last,), r"expected 'blocks\.1\.ff\.up', got"),
    ("check_first_divergence", (_first_divergence_params,), r"compare outputs, not parameters"),
    ("check_first_divergence", (lambda c, a, b, ids, atol=1e-5: first_divergence(c, a, b, ids, atol=1e-3),),
     r"above atol=1e-5\): expected 'blocks\.0\.norm1', got None"),
    ("check_scrambled_tokens", (scrambled_tokens, [1]), r"predicted_row: \[1\] is not what row t = 1"),
    ("check_scrambled_tokens", (scrambled_tokens, None), r"not attempted yet"),
    ("check_scrambled_tokens", (scrambled_tokens, "2"), r"must be a list of ints"),
    ("check_scrambled_tokens", (lambda T, C, H: torch.arange(T)[None, :, None].expand(H, T, C // H), [2]),
     r"expected token"),
    ("check_scrambled_tokens", (lambda T, C, H: scrambled_tokens(T, C, H).flip(0), [2]), r"expected token"),
]

test_wrong_answers_get_their_message = wrong_call_tests(ROWS)


def test_spike_reference_agrees_with_hand_computed_cases():
    from fundamentallm.checks.ch13 import _ch13_spikes_reference

    assert _ch13_spikes_reference([3.0, 2.9, 2.8, 2.7, 6.5, 2.6], 2.0, 3) == [4]
    assert _ch13_spikes_reference([1.0, float("nan"), 2.5, 1.0], 2.0, 2) == [1, 2]
    assert _ch13_spikes_reference([], 2.0, 3) == []


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    checks.check_find_nan_or_inf(find_nan_or_inf)
    checks.check_first_divergence(first_divergence)
    assert torch.equal(torch.rand(3), expected)
