"""The chapter 14 exercise checks: they pass correct answers (including the package's own
functions) and fail, with CheckFailed, a stub, plausible wrong answers and the forbidden shortcut."""

from __future__ import annotations

import pytest
import torch
from check_tables import table_tests

from fundamentallm import checks
from fundamentallm.attention import allowed_keys
from fundamentallm.checks import CheckFailed
from fundamentallm.moe import load_balancing_loss as pkg_load_balancing_loss

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


def influence(model, x, t):
    x = x.clone().requires_grad_(True)
    model(x)[:, t].sum().backward()
    return x.grad.abs().sum(dim=(0, 2)) != 0


def influence_by_perturbation(model, x, t):
    with torch.no_grad():
        base = model(x)[:, t]
        out = []
        for j in range(x.shape[1]):
            nudged = x.clone()
            nudged[:, j] += 1.0
            out.append(not torch.equal(model(nudged)[:, t], base))
    return torch.tensor(out)


def one_window(model, x, t):  # only the last layer's window: misses the layers below
    w = model[-1].attention.sliding_window or x.shape[1]
    j = torch.arange(x.shape[1])
    return (j <= t) & (j > t - w)


CORRECT = {
    "check_repeat_kv": [repeat_kv, repeat_kv_index],
    "check_window_mask_at": [window_mask_at, allowed_keys],
    "check_load_balancing_loss": [load_balancing_loss, pkg_load_balancing_loss],
    "check_influence": [influence, influence_by_perturbation],
}

WRONG = {
    "check_repeat_kv": [
        lambda x, g: x.repeat_interleave(g, dim=1),               # the forbidden shortcut
        lambda x, g: torch.repeat_interleave(x, g, dim=1),        # the same, as a function
        lambda x, g: x.repeat(1, g, 1, 1),                        # tiles heads: 0,1,0,1 not 0,0,1,1
        lambda x, g: x,                                           # forgets to repeat
    ],
    "check_window_mask_at": [
        lambda q, k, s, W: torch.ones(q, k, dtype=torch.bool).tril(s),              # plain causal
        lambda q, k, s, W: window_mask_at(q, k, s, W + 1),                          # off by one
        lambda q, k, s, W: window_mask_at(q, k, s, W).float(),                      # not boolean
        lambda q, k, s, W: window_mask_at(q, k, 0, W),                              # ignores start
        lambda q, k, s, W: torch.ones(k, k, dtype=torch.bool).tril().triu(1 - W)[-q:],  # square
    ],
    "check_load_balancing_loss": [
        lambda p, i, E: E * (torch.zeros_like(p).scatter(1, i, 1.0).mean(0) * p.mean(0)).sum().detach(),
        lambda p, i, E: (torch.zeros_like(p).scatter(1, i, 1.0).mean(0) * p.mean(0)).sum(),  # no E
        lambda p, i, E: E * (p.mean(0) * p.mean(0)).sum(),        # probabilities for f
        lambda p, i, E: E * (torch.zeros_like(p).scatter(1, i, p).mean(0) * p.mean(0)).sum(),  # grad via f
    ],
    "check_influence": [
        one_window,
        lambda m, x, t: torch.arange(x.shape[1]) <= t,                        # every earlier token
        lambda m, x, t: influence(m, x, t).float(),                           # not boolean
        lambda m, x, t: torch.ones(x.shape[1], dtype=torch.bool),             # looks ahead
        lambda m, x, t: influence(m, x.mul_(2), t),                           # changes x
    ],
}


test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \
    table_tests(CORRECT, WRONG)


def test_forbidden_shortcut_is_named_and_restored():
    with pytest.raises(CheckFailed, match="repeat_interleave"):
        checks.check_repeat_kv(lambda x, g: x.repeat_interleave(g, dim=1))
    x = torch.arange(4.0).view(1, 2, 2, 1)  # the shortcut works again after the check
    assert torch.equal(x.repeat_interleave(2, dim=1), repeat_kv(x, 2))
    assert torch.equal(torch.repeat_interleave(x, 2, dim=1), repeat_kv(x, 2))
