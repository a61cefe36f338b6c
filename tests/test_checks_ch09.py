"""The chapter 9 exercise checks: they pass correct answers and fail, with CheckFailed, a stub and
plausible wrong answers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from book_solutions import book_solution
from check_tables import table_tests

from fundamentallm import checks
from fundamentallm.checks import CheckFailed
from fundamentallm.training import TrainConfig, lr_at

# --- correct answers ---------------------------------------------------------------------------


cross_entropy = book_solution("ch09-ex1", "cross_entropy")


label_smoothed_cross_entropy = book_solution("ch09-ex2", "label_smoothed_cross_entropy")


cosine_lr = book_solution("ch09-ex3", "cosine_lr")


def cosine_lr_package(step, max_lr, min_lr, warmup_steps, max_steps):
    """The package's schedule: also a correct answer."""
    return lr_at(step, TrainConfig(lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps,
                                   max_steps=max_steps, progress=False))


clip_grad_norm = book_solution("ch09-ex4", "clip_grad_norm")


CORRECT = {
    "check_cross_entropy": [cross_entropy],
    "check_label_smoothed_cross_entropy": [label_smoothed_cross_entropy],
    "check_cosine_lr": [cosine_lr],
    "check_clip_grad_norm": [clip_grad_norm,
                             lambda grads, m: ([g * min(1.0, m / torch.stack([g.norm() for g in grads]).norm().item())
                                                if torch.stack([g.norm() for g in grads]).norm() > 0 else g.clone()
                                                for g in grads], torch.stack([g.norm() for g in grads]).norm())],
}


def _naive_ce(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    p = torch.exp(logits[keep]) / torch.exp(logits[keep]).sum(-1, keepdim=True)
    return -torch.log(p.gather(-1, targets[keep][:, None])).mean()


def _smoothing_over_others(logits, targets, smoothing):
    """Spreads the smoothing mass over the V - 1 wrong classes only."""
    V = logits.shape[-1]
    q = torch.full_like(logits, smoothing / (V - 1)).scatter(-1, targets[:, None], 1 - smoothing)
    return -(q * torch.log_softmax(logits, -1)).sum(-1).mean()


def _clip_each(grads, max_norm):
    """Clips every tensor on its own instead of by the global norm."""
    total = torch.sqrt(sum((g ** 2).sum() for g in grads))
    return [g * min(1.0, max_norm / (g.norm().item() + 1e-6)) for g in grads], total


def _clip_in_place(grads, max_norm):
    clipped, total = clip_grad_norm(grads, max_norm)
    for g, c in zip(grads, clipped):
        g.copy_(c)
    return grads, total


WRONG = {
    "check_cross_entropy": [
        _naive_ce,  # overflows
        lambda z, y, ignore_index=-100: F.cross_entropy(z, y.clamp(min=0)),  # ignores nothing
        lambda z, y, ignore_index=-100: F.cross_entropy(z, y, ignore_index=ignore_index,
                                                        reduction="sum"),  # sum, not mean
        lambda z, y, ignore_index=-100: F.cross_entropy(z, y, ignore_index=-100),  # fixed -100
    ],
    "check_label_smoothed_cross_entropy": [
        _smoothing_over_others,
        lambda z, y, eps: F.cross_entropy(z, y),  # no smoothing
        lambda z, y, eps: (1 - eps) * F.cross_entropy(z, y),  # drops the uniform term
    ],
    "check_cosine_lr": [
        lambda step, *a: cosine_lr(step - 1, *a) if step > 0 else 0.0,  # warmup starts at 0
        lambda step, M, m, w, T: cosine_lr(step, M, 0.0, w, T),  # ignores min_lr
        lambda step, M, m, w, T: (M * (step + 1) / w if step + 1 <= w else m + 0.5 * (M - m) * (
            1 + math.cos(math.pi * (step + 1 - w) / max(1, T - w)))),  # no clamp: rises again
    ],
    "check_clip_grad_norm": [
        _clip_each,
        _clip_in_place,
        lambda grads, m: ([g * m / clip_grad_norm(grads, m)[1].item() if
                           clip_grad_norm(grads, m)[1] > 0 else g for g in grads],
                          clip_grad_norm(grads, m)[1]),  # also scales small gradients up
        lambda grads, m: clip_grad_norm(grads, m)[0],  # returns only the gradients
    ],
}


test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \
    table_tests(CORRECT, WRONG)


FORBIDDEN = [  # (check, answer, the call the exercise forbids)
    ("check_cross_entropy", lambda z, y, ignore_index=-100: F.nll_loss(
        torch.log_softmax(z, -1), y, ignore_index=ignore_index), "torch.log_softmax"),
    ("check_cross_entropy", lambda z, y, ignore_index=-100: F.cross_entropy(
        z, y, ignore_index=ignore_index), "torch.nn.functional.cross_entropy"),
    ("check_cross_entropy", lambda z, y, ignore_index=-100: torch.nn.CrossEntropyLoss(
        ignore_index=ignore_index)(z, y), "torch.nn.functional.cross_entropy"),
    ("check_label_smoothed_cross_entropy", lambda z, y, s: F.cross_entropy(z, y, label_smoothing=s),
     "torch.nn.functional.cross_entropy"),
    ("check_cosine_lr", cosine_lr_package, "fundamentallm.training.lr_at"),
    ("check_clip_grad_norm", lambda grads, m: _clip_with_torch(grads, m), "clip_grad_norm_"),
]


def _clip_with_torch(grads, max_norm):
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return [p.grad for p in params], total


@pytest.mark.parametrize("name,fn,call", FORBIDDEN, ids=[f"{n}-{c}" for n, _, c in FORBIDDEN])
def test_forbidden_call_fails(name, fn, call):
    with pytest.raises(CheckFailed, match=f"asks you not to use .*{call}"):
        checks.CHECKS[name](fn)


def test_overflow_message_explains_log_sum_exp():
    with pytest.raises(CheckFailed, match="log-sum-exp"):
        checks.check_cross_entropy(_naive_ce)


def test_cosine_reference_equals_the_package_schedule():
    from fundamentallm.checks.ch09 import _ch09_cosine_reference

    for w, T in ((0, 30), (5, 30), (30, 30)):
        cfg = TrainConfig(lr=1.0, min_lr=0.1, warmup_steps=w, max_steps=T, progress=False)
        for step in range(T + 5):
            assert _ch09_cosine_reference(step, 1.0, 0.1, w, T) == pytest.approx(lr_at(step, cfg), abs=1e-12)


# --- fit_power_law (the scaling-law section) ---------------------------------------------------


def _fit_power_law(sizes, losses):
    x = torch.log(torch.as_tensor(sizes, dtype=torch.float64))
    y = torch.log(torch.as_tensor(losses, dtype=torch.float64))
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    return math.exp(y.mean() - slope * x.mean()), -slope.item()


def _fit_linear_space(sizes, losses):
    """Fits a straight line to the raw values: wrong."""
    x = torch.as_tensor(sizes, dtype=torch.float64)
    y = torch.as_tensor(losses, dtype=torch.float64)
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    return (y.mean() - slope * x.mean()).item(), -slope.item()


def test_fit_power_law_correct(capsys):
    assert checks.check_fit_power_law(_fit_power_law) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [
    _fit_linear_space,
    lambda n, y: (_fit_power_law(n, y)[0], -_fit_power_law(n, y)[1]),          # sign of alpha
    lambda n, y: (math.log(_fit_power_law(n, y)[0]), _fit_power_law(n, y)[1]),  # log a, not a
])
def test_fit_power_law_wrong(wrong):
    with pytest.raises(CheckFailed, match="check_fit_power_law"):
        checks.check_fit_power_law(wrong)
