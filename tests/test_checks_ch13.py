"""The chapter 13 exercise checks: they pass correct answers and fail, with CheckFailed, a stub and
plausible wrong answers."""

from __future__ import annotations

import math

import pytest
import torch
from book_solutions import book_solution
from check_tables import table_tests

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

# --- correct answers ---------------------------------------------------------------------------


find_nan_or_inf = book_solution("ch13-ex1", "find_nan_or_inf")


detect_loss_spike = book_solution("ch13-ex2", "detect_loss_spike")


def detect_loss_spike_tensor(losses, factor=2.0, window=10):
    """A vectorised answer: also correct."""
    t = torch.tensor(losses, dtype=torch.float64)
    out = []
    for i in range(len(t)):
        w = t[max(0, i - window):i]
        w = w[torch.isfinite(w)]
        if not torch.isfinite(t[i]) or (len(w) and t[i] > factor * w.mean()):
            out.append(i)
    return out


bad_attention_rows = book_solution("ch13-ex3", "bad_attention_rows")


def _outputs(model, ids):
    out, handles = [], []
    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(
                lambda m, i, o, name=name: out.append((name, o))))
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    return [(n, o) for n, o in out if isinstance(o, torch.Tensor)]


first_divergence = book_solution("ch13-ex4", "first_divergence")


CORRECT = {
    "check_find_nan_or_inf": [find_nan_or_inf],
    "check_detect_loss_spike": [detect_loss_spike, detect_loss_spike_tensor],
    "check_bad_attention_rows": [bad_attention_rows],
    "check_first_divergence": [first_divergence],
}


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


def _spike_whole_history(losses, factor=2.0, window=10):
    """Uses every earlier step instead of the last `window`."""
    return detect_loss_spike(losses, factor, window=len(losses) + 1)


def _first_divergence_last(model_a, model_b, input_ids, atol=1e-5):
    """Returns the LAST differing submodule."""
    b = dict(_outputs(model_b, input_ids))
    names = [n for n, o in _outputs(model_a, input_ids)
             if n in b and (o.shape != b[n].shape or (o - b[n]).abs().max() > atol)]
    return names[-1] if names else None


def _first_divergence_params(model_a, model_b, input_ids, atol=1e-5):
    """Compares parameters instead of outputs (returns a parameter's module, in definition order)."""
    pb = dict(model_b.named_parameters())
    for n, p in model_a.named_parameters():
        if (p - pb[n]).abs().max() > atol:
            return n.rsplit(".", 1)[0]
    return None


def _first_divergence_leaves_hooks(model_a, model_b, input_ids, atol=1e-5):
    for m in model_a.modules():
        m.register_forward_hook(lambda *a: None)
    return first_divergence(model_a, model_b, input_ids, atol)


WRONG = {
    "check_find_nan_or_inf": [
        lambda pairs: [n for n, t in pairs if t is not None and torch.isnan(t).any()],  # misses inf
        lambda pairs: [n for n, t in pairs if t is not None and torch.isinf(t).any()],  # misses NaN
        lambda pairs: sorted(find_nan_or_inf(pairs)),                                   # sorted names
        lambda pairs: len(find_nan_or_inf(pairs)),                                      # a count
    ],
    "check_detect_loss_spike": [
        _spike_vs_previous,
        _spike_nan_blind,
        _spike_whole_history,
        lambda losses, factor=2.0, window=10: [i + 1 for i in detect_loss_spike(losses, factor, window)],
    ],
    "check_bad_attention_rows": [
        lambda w, atol=1e-5: (w.sum(-1) - 1).abs() > atol,                  # NaN rows pass
        lambda w, atol=1e-5: (w.sum(-2) - 1).abs() > atol,                  # sums the wrong axis
        lambda w, atol=1e-5: ~torch.isfinite(w).all(-1) | ((w.sum(-1) - 1).abs() > atol),  # negatives
        lambda w, atol=1e-5: ~bad_attention_rows(w, atol),                  # inverted
    ],
    "check_first_divergence": [
        _first_divergence_last,
        _first_divergence_params,
        _first_divergence_leaves_hooks,
        lambda a, b, ids, atol=1e-5: first_divergence(a, b, ids, atol=1e-3),  # ignores atol
    ],
}


test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \
    table_tests(CORRECT, WRONG)


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


# --- scrambled_tokens: predict, then measure the wrong split ----------------------------------------


def _scrambled_tokens(T, C, H):
    D = C // H
    h, t, d = torch.meshgrid(torch.arange(H), torch.arange(T), torch.arange(D), indexing="ij")
    return ((h * T + t) * D + d) // C  # flat position of [h, t, d] in memory, over C per token


def test_scrambled_tokens_correct(capsys):
    assert checks.check_scrambled_tokens(_scrambled_tokens) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [
    lambda T, C, H: torch.arange(T)[None, :, None].expand(H, T, C // H),   # the right split's tokens
    lambda T, C, H: _scrambled_tokens(T, C, H).flip(0),                    # heads reversed
])
def test_scrambled_tokens_wrong(wrong):
    with pytest.raises(CheckFailed, match="check_scrambled_tokens"):
        checks.check_scrambled_tokens(wrong)
