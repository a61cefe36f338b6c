"""The chapter 14 exercise checks: they pass correct answers (including the package's own
functions) and fail, with CheckFailed, a stub, plausible wrong answers and the forbidden shortcut."""

from __future__ import annotations

import pytest
import torch

from fundamentallm import checks
from fundamentallm.attention import sliding_window_mask as pkg_sliding_window_mask
from fundamentallm.checks import CheckFailed
from fundamentallm.moe import load_balancing_loss as pkg_load_balancing_loss

# --- correct answers ---------------------------------------------------------------------------


def repeat_kv(x, groups):
    B, G, T, D = x.shape
    return x[:, :, None].expand(B, G, groups, T, D).reshape(B, G * groups, T, D)


def repeat_kv_index(x, groups):
    return x[:, torch.arange(x.shape[1] * groups) // groups]


def sliding_window_mask(T, W):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (i - j >= 0) & (i - j < W)


def load_balancing_loss(probs, idx, E):
    f = torch.zeros_like(probs).scatter(1, idx, 1.0).mean(0)
    return E * (f * probs.mean(0)).sum()


def stub(*args, **kwargs):
    raise NotImplementedError


CORRECT = {
    "check_repeat_kv": [repeat_kv, repeat_kv_index],
    "check_sliding_window_mask": [sliding_window_mask, pkg_sliding_window_mask],
    "check_load_balancing_loss": [load_balancing_loss, pkg_load_balancing_loss],
}

WRONG = {
    "check_repeat_kv": [
        lambda x, g: x.repeat_interleave(g, dim=1),               # the forbidden shortcut
        lambda x, g: torch.repeat_interleave(x, g, dim=1),        # the same, as a function
        lambda x, g: x.repeat(1, g, 1, 1),                        # tiles heads: 0,1,0,1 not 0,0,1,1
        lambda x, g: x,                                           # forgets to repeat
    ],
    "check_sliding_window_mask": [
        lambda T, W: torch.ones(T, T, dtype=torch.bool).tril(),             # plain causal
        lambda T, W: sliding_window_mask(T, W + 1),                         # off by one
        lambda T, W: sliding_window_mask(T, W).float(),                     # not boolean
        lambda T, W: sliding_window_mask(T, W).T,                           # looks ahead
    ],
    "check_load_balancing_loss": [
        lambda p, i, E: E * (torch.zeros_like(p).scatter(1, i, 1.0).mean(0) * p.mean(0)).sum().detach(),
        lambda p, i, E: (torch.zeros_like(p).scatter(1, i, 1.0).mean(0) * p.mean(0)).sum(),  # no E
        lambda p, i, E: E * (p.mean(0) * p.mean(0)).sum(),        # probabilities for f
        lambda p, i, E: E * (torch.zeros_like(p).scatter(1, i, p).mean(0) * p.mean(0)).sum(),  # grad via f
    ],
}


@pytest.mark.parametrize("name,i", [(n, i) for n in sorted(CORRECT) for i in range(len(CORRECT[n]))])
def test_check_passes_on_correct_answer(name, i, capsys):
    assert checks.CHECKS[name](CORRECT[name][i]) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_check_fails_on_stub(name):
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.CHECKS[name](stub)


@pytest.mark.parametrize("name,i", [(n, i) for n in sorted(WRONG) for i in range(len(WRONG[n]))])
def test_check_fails_on_wrong_answer(name, i):
    with pytest.raises(CheckFailed, match=name):
        checks.CHECKS[name](WRONG[name][i])


def test_forbidden_shortcut_is_named_and_restored():
    with pytest.raises(CheckFailed, match="repeat_interleave"):
        checks.check_repeat_kv(lambda x, g: x.repeat_interleave(g, dim=1))
    x = torch.arange(4.0).view(1, 2, 2, 1)  # the shortcut works again after the check
    assert torch.equal(x.repeat_interleave(2, dim=1), repeat_kv(x, 2))
    assert torch.equal(torch.repeat_interleave(x, 2, dim=1), repeat_kv(x, 2))
