"""The chapter 15 exercise checks: they pass correct answers (the package's own functions among
them) and fail, with CheckFailed, a stub and plausible wrong answers."""

from __future__ import annotations

import math

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


# --- wrong answers -----------------------------------------------------------------------------


def mask_first_turn_only(ids, assistant_id, end_id):
    m = assistant_mask(ids, assistant_id, end_id)
    for b in range(ids.shape[0]):
        ends = (ids[b, 1:] == end_id).nonzero()
        if len(ends):
            m[b, int(ends[0]) + 1:] = 0
    return m


def mask_without_end(ids, assistant_id, end_id):
    return assistant_mask(ids, assistant_id, end_id) * (ids[:, 1:] != end_id).float()


def mask_not_shifted(ids, assistant_id, end_id):
    full = torch.cat([assistant_mask(ids, assistant_id, end_id), torch.zeros(ids.shape[0], 1)], 1)
    return full[:, 1:]


def lora_square(shapes, rank):
    return sum(rank * rank for _ in shapes)


def lora_full(shapes, rank):
    return sum(o * i for o, i in shapes)


def advantages_population_std(rewards):
    return (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, unbiased=False, keepdim=True) + 1e-4)


def advantages_no_std(rewards):
    return rewards - rewards.mean(1, keepdim=True)


def advantages_batch_mean(rewards):
    return (rewards - rewards.mean()) / (rewards.std() + 1e-4)


def clip_both_sides(ratio, advantage, clip_eps):
    return (ratio > 1 + clip_eps) | (ratio < 1 - clip_eps)


def clip_forgets_zero_advantage(ratio, advantage, clip_eps):
    return ((advantage > 0) & (ratio > 1 + clip_eps)) | ((advantage < 0) & (ratio < 1 - clip_eps))


def clip_sides_swapped(ratio, advantage, clip_eps):
    return ((advantage > 0) & (ratio < 1 - clip_eps)) | ((advantage < 0) & (ratio > 1 + clip_eps)) | (advantage == 0)


CORRECT = {
    "check_assistant_mask": [assistant_mask, assistant_mask_cumsum],
    "check_lora_trainable": [lora_trainable],
    "check_group_advantages": [pkg_group_advantages, lambda r: (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)],
    "check_clip_stops_gradient": [clip_stops_gradient, clip_stops_gradient_autograd],
}
WRONG = {
    "check_assistant_mask": [mask_first_turn_only, mask_without_end, mask_not_shifted],
    "check_lora_trainable": [lora_square, lora_full],
    "check_group_advantages": [advantages_population_std, advantages_no_std, advantages_batch_mean],
    "check_clip_stops_gradient": [clip_both_sides, clip_forgets_zero_advantage, clip_sides_swapped],
}

test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \
    table_tests(CORRECT, WRONG)


@pytest.mark.parametrize("value,ok", [(math.log(2), True), (0.6931, True), (None, False), (0.0, False),
                                      (0.5 * math.log(2), False), (1.0, False), ("log 2", False)])
def test_dpo_initial_loss_prediction(value, ok, capsys):
    if ok:
        assert checks.check_dpo_initial_loss(value) is True
    else:
        with pytest.raises(CheckFailed, match="check_dpo_initial_loss"):
            checks.check_dpo_initial_loss(value)
