"""The chapter 15 exercise checks: they pass correct answers (the package's own functions among
them) and fail, with CheckFailed, a stub and plausible wrong answers."""

from __future__ import annotations

import pytest
import torch
from check_tables import table_tests

from fundamentallm import checks
from fundamentallm.checks import CheckFailed
from fundamentallm.posttrain import group_advantages as pkg_group_advantages

# --- correct answers ---------------------------------------------------------------------------


def assistant_mask(ids, assistant_id, end_id):
    B, T = ids.shape
    mask = torch.zeros(B, T - 1)
    for b in range(B):
        inside = False
        for t in range(T - 1):
            inside = inside or int(ids[b, t]) == assistant_id
            mask[b, t] = float(inside)
            if int(ids[b, t + 1]) == end_id:
                inside = False
    return mask


def assistant_mask_cumsum(ids, assistant_id, end_id):
    # opened by an assistant marker at position <= t, not yet closed by an end at position <= t
    opened = (ids == assistant_id).long().cumsum(1)[:, :-1]
    closed = (ids == end_id).long().cumsum(1)[:, :-1]
    return (opened > closed).float()


def lora_trainable(shapes, rank):
    return sum(rank * (out + inp) for out, inp in shapes)


def clip_stops_gradient(ratio, advantage, clip_eps):
    return ((advantage > 0) & (ratio > 1 + clip_eps)) | ((advantage < 0) & (ratio < 1 - clip_eps)) | (advantage == 0)


def clip_stops_gradient_autograd(ratio, advantage, clip_eps):
    x = ratio.clone().requires_grad_(True)
    torch.min(x * advantage, x.clamp(1 - clip_eps, 1 + clip_eps) * advantage).sum().backward()
    return x.grad == 0


def dpo_gradients(beta, margin):
    weight = torch.sigmoid(-margin)  # how wrong the pair is still ranked
    return -beta * weight, beta * weight


def dpo_gradients_exp(beta, margin):
    # sigmoid(-m) = 1 / (1 + e^m), written out (a derivation needs no log, only the loss does);
    # torch.no_grad is not autograd and is allowed
    with torch.no_grad():
        weight = 1 / (1 + torch.exp(margin))
    return -beta * weight, beta * weight


def clip_stops_gradient_where(ratio, advantage, clip_eps):
    outside = torch.where(advantage > 0, ratio > 1 + clip_eps, ratio < 1 - clip_eps)
    return outside | (advantage == 0)


def group_advantages(rewards, group):
    out = torch.empty_like(rewards)
    for g in group.unique():
        r = rewards[group == g]
        out[group == g] = (r - r.mean()) / (r.std() + 1e-4)
    return out


def group_advantages_scatter(rewards, group):
    _, idx = group.unique(return_inverse=True)
    n = torch.zeros(int(idx.max()) + 1).index_add_(0, idx, torch.ones_like(rewards))
    mean = torch.zeros_like(n).index_add_(0, idx, rewards) / n
    var = torch.zeros_like(n).index_add_(0, idx, (rewards - mean[idx]) ** 2) / (n - 1)
    return (rewards - mean[idx]) / (var.sqrt()[idx] + 1e-4)


# The wrong answers each check rejects are the package's table (fundamentallm/checks/ch15.py,
# run by tests/test_catches.py).
CORRECT = {
    "check_assistant_mask": [assistant_mask, assistant_mask_cumsum],
    "check_lora_trainable": [lora_trainable],
    "check_dpo_gradients": [dpo_gradients, dpo_gradients_exp],
    "check_group_advantages": [group_advantages, group_advantages_scatter],
    "check_clip_stops_gradient": [clip_stops_gradient, clip_stops_gradient_where],
}

test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \
    table_tests(CORRECT, {})


def test_the_methods_the_statements_forbid_are_refused():
    """ex3 and ex5 are worked out on paper, ex4 without the package's function: autograd and the
    package's group_advantages fail even when their answer is right."""
    with pytest.raises(CheckFailed, match="not to use"):
        checks.check_clip_stops_gradient(clip_stops_gradient_autograd)

    def wrapped(rewards, group):
        out = torch.empty_like(rewards)
        for g in group.unique():
            out[group == g] = pkg_group_advantages(rewards[group == g][None])[0]
        return out

    with pytest.raises(CheckFailed, match="not to use fundamentallm.posttrain.group_advantages"):
        checks.check_group_advantages(wrapped)
