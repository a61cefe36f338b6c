"""The chapter 14 exercise checks: they pass correct answers (including the package's own
functions) and fail, with CheckFailed, a stub, plausible wrong answers and the forbidden shortcut."""

from __future__ import annotations

import pytest
import torch
from check_tables import wrong_call_tests

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

# --- correct answers ---------------------------------------------------------------------------


def repeat_kv(x, groups):
    B, G, T, D = x.shape
    return x[:, :, None].expand(B, G, groups, T, D).reshape(B, G * groups, T, D)


def repeat_kv_index(x, groups):
    return x[:, torch.arange(x.shape[1] * groups) // groups]


def window_mask_at(num_queries, num_keys, start, W):
    i = start + torch.arange(num_queries)[:, None]
    j = torch.arange(num_keys)[None, :]
    return (i - j >= 0) & (i - j < W)


def load_balancing_loss(probs, idx, E):
    f = torch.zeros_like(probs).scatter(1, idx, 1.0).mean(0)
    return E * (f * probs.mean(0)).sum()


def influence(windows, T, t):
    from fundamentallm.attention import MultiHeadAttention

    with torch.random.fork_rng():
        torch.manual_seed(0)
        layers = [MultiHeadAttention(16, 4, causal=True, sliding_window=w).double() for w in windows]
        x = torch.randn(1, T, 16, dtype=torch.float64, requires_grad=True)
    h = x
    for layer in layers:
        h = h + layer(h)
    h[:, t].sum().backward()
    return x.grad.abs().sum(dim=(0, 2)) != 0


def one_window(windows, T, t):  # only the last layer's window: misses the layers below
    w = windows[-1] or T
    j = torch.arange(T)
    return (j <= t) & (j > t - w)


WINDOWED, MIXED = list(range(6, 16)), list(range(16))


def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, bytes_per_number=2, window=None):
    kept = seq_len if window is None else min(seq_len, window)
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_number * kept


ROWS = [
    ("check_repeat_kv", (lambda x, g: x.repeat_interleave(g, dim=1),), r"asks you not to use .*repeat_interleave"),
    ("check_repeat_kv", (lambda x, g: x.repeat(1, g, 1, 1),), r"check_repeat_kv"),
    ("check_repeat_kv", (lambda x, g: x,), r"expected shape"),
    ("check_window_mask_at", (lambda q, k, s, W: torch.ones(q, k, dtype=torch.bool).tril(s),), r"check_window_mask_at"),
    ("check_window_mask_at", (lambda q, k, s, W: window_mask_at(q, k, s, W + 1),), r"check_window_mask_at"),
    ("check_window_mask_at", (lambda q, k, s, W: window_mask_at(q, k, 0, W),), r"check_window_mask_at"),
    ("check_load_balancing_loss", (lambda p, i, E: E * (torch.zeros_like(p).scatter(1, i, 1.0).mean(0)
                                                         * p.mean(0)).sum().detach(),), r"check_load_balancing_loss"),
    ("check_load_balancing_loss", (lambda p, i, E: E * (p.mean(0) * p.mean(0)).sum(),), r"check_load_balancing_loss"),
    ("check_influence", (influence, list(range(12, 16)), MIXED), r"predicted_windowed: .* is not right"),
    ("check_influence", (influence, WINDOWED, list(range(3, 16))), r"predicted_mixed: .* is not right"),
    ("check_influence", (influence, None, MIXED), r"not attempted yet"),
    ("check_influence", (one_window, WINDOWED, MIXED), r"input position \d+ can change the output"),
    ("check_influence", (lambda w, T, t: torch.arange(T) <= t, WINDOWED, MIXED), r"cannot change the output"),
    ("check_influence", (lambda w, T, t: influence(w, T, t).float(), WINDOWED, MIXED), r"expected a boolean tensor"),
    ("check_kv_cache_bytes", (kv_cache_bytes, 4.0), r"without the window"),
    ("check_kv_cache_bytes", (kv_cache_bytes, 0.25), r"is not right; count keys and values"),
    ("check_kv_cache_bytes", (kv_cache_bytes, None), r"not attempted yet"),
    ("check_kv_cache_bytes", (lambda L, G, D, n, b=2, w=None: kv_cache_bytes(L, G, D, n, b, None), 0.5),
     r"expected [\d,]+ bytes"),
    ("check_kv_cache_bytes", (lambda L, G, D, n, b=2, w=None: kv_cache_bytes(L, G, D, n, b, w) // 2, 0.5),
     r"expected [\d,]+ bytes"),
]

test_wrong_answers_get_their_message = wrong_call_tests(ROWS)






def test_forbidden_shortcut_is_named_and_restored():
    with pytest.raises(CheckFailed, match="repeat_interleave"):
        checks.check_repeat_kv(lambda x, g: x.repeat_interleave(g, dim=1))
    x = torch.arange(4.0).view(1, 2, 2, 1)  # the shortcut works again after the check
    assert torch.equal(x.repeat_interleave(2, dim=1), repeat_kv(x, 2))
    assert torch.equal(torch.repeat_interleave(x, 2, dim=1), repeat_kv(x, 2))


def test_the_package_functions_pass_their_checks():
    from fundamentallm.attention import allowed_keys
    from fundamentallm.moe import load_balancing_loss

    assert checks.check_window_mask_at(allowed_keys) is True
    assert checks.check_load_balancing_loss(load_balancing_loss) is True
