"""The chapter 14 exercise checks pass correct answers (several ways of writing them) and restore
the functions they forbid. Their wrong answers are the package's table
(fundamentallm/checks/ch14.py, run by tests/test_catches.py)."""

from __future__ import annotations

import math

import pytest
import torch

from fundamentallm import checks
from fundamentallm.checks import CheckFailed


def repeat_kv(x, groups):
    B, G, T, D = x.shape
    return x[:, :, None].expand(B, G, groups, T, D).reshape(B, G * groups, T, D)


def repeat_kv_index(x, groups):
    return x[:, torch.arange(x.shape[1] * groups) // groups]


def rolling_window_step(q, k, v, cache_k, cache_v, pos):
    W = cache_k.shape[2]
    cache_k, cache_v = cache_k.clone(), cache_v.clone()
    cache_k[:, :, pos % W], cache_v[:, :, pos % W] = k[:, :, 0], v[:, :, 0]
    scores = q @ cache_k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~(torch.arange(W) <= pos), float("-inf"))
    return scores.softmax(-1) @ cache_v, cache_k, cache_v


def rolling_in_place(q, k, v, cache_k, cache_v, pos):  # writes into the buffers given, rolls them into order
    W = cache_k.shape[2]
    cache_k[:, :, pos % W], cache_v[:, :, pos % W] = k[:, :, 0], v[:, :, 0]
    n = min(pos + 1, W)
    order = [(pos - n + 1 + i) % W for i in range(n)]
    keys, values = cache_k[:, :, order], cache_v[:, :, order]
    w = (q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)
    return w @ values, cache_k, cache_v


def balancing_grad(logits, idx, E):
    N = logits.shape[0]
    p = logits.softmax(-1)
    f = torch.zeros_like(p).scatter(1, idx, 1.0).mean(0)
    return E * (f * p.mean(0)).sum(), E / N * p * (f - (p * f).sum(-1, keepdim=True))


def build(layers, d_model):
    """The attention layers a check hands over as data, built."""
    from fundamentallm import MultiHeadAttention

    built = []
    for spec in layers:
        layer = MultiHeadAttention(d_model, spec["num_heads"], causal=True, sliding_window=spec["window"])
        layer.double().load_state_dict(spec["weights"])
        built.append(layer.eval())
    return built


def influence(layers, T, t, d_model):
    x = torch.randn(1, T, d_model, generator=torch.Generator().manual_seed(0), dtype=torch.float64,
                    requires_grad=True)
    h = x
    for layer in build(layers, d_model):
        h = h + layer(h)
    h[:, t].sum().backward()
    return x.grad.abs().sum(dim=(0, 2)) != 0


def influence_by_perturbation(layers, T, t, d_model):  # a measurement without gradients
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, T, d_model, generator=g, dtype=torch.float64)

    built = build(layers, d_model)

    def out(x):
        h = x
        for layer in built:
            h = h + layer(h)
        return h[0, t]

    with torch.no_grad():
        base = out(x)
        moved = []
        for j in range(T):
            y = x.clone()
            y[0, j] += 1.0
            moved.append(bool((out(y) - base).abs().max() > 1e-12))
    return torch.tensor(moved)


def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, bytes_per_number=2, window=None, chunk=1):
    """The positions held by chunk: the chunk's start s, its length l, the window's reach into the
    past; written by position ranges rather than a min."""
    if window is None:
        return 2 * num_layers * num_kv_heads * head_dim * bytes_per_number * seq_len
    held = 0
    for start in range(0, seq_len, chunk):
        stop = min(start + chunk, seq_len)  # the chunk is positions start .. stop - 1
        first_read = max(0, start - (window - 1))  # the earliest key its first query reads
        held = max(held, stop - first_read)
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_number * held


WINDOWED, MIXED = list(range(6, 16)), list(range(16))


@pytest.mark.parametrize("name,args", [
    ("check_repeat_kv", (repeat_kv,)), ("check_repeat_kv", (repeat_kv_index,)),
    ("check_rolling_window_step", (rolling_window_step,)), ("check_rolling_window_step", (rolling_in_place,)),
    ("check_balancing_grad", (balancing_grad,)),
    ("check_influence", (influence, WINDOWED, MIXED)),
    ("check_influence", (influence_by_perturbation, WINDOWED, MIXED)),
    ("check_kv_cache_bytes", (kv_cache_bytes, 1.0)),
])
def test_right_answers_pass(name, args):
    assert checks.CHECKS[name](*args) is True


def test_forbidden_shortcut_is_named_and_restored():
    with pytest.raises(CheckFailed, match="repeat_interleave"):
        checks.check_repeat_kv(lambda x, g: x.repeat_interleave(g, dim=1))
    x = torch.arange(4.0).view(1, 2, 2, 1)  # the shortcut works again after the check
    assert torch.equal(x.repeat_interleave(2, dim=1), repeat_kv(x, 2))
    assert torch.equal(torch.repeat_interleave(x, 2, dim=1), repeat_kv(x, 2))


def test_stubs_are_not_attempted():
    with pytest.raises(Exception, match="not attempted"):
        checks.check_influence(influence, None, MIXED)
