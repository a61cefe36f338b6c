"""The chapter 9 exercise checks, as a table: each wrong answer and the message it must get.
(Every book solution passes and every answer stub counts as not attempted: tests/test_course.py.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from book_solutions import book_solution
from check_tables import wrong_call_tests

from fundamentallm import checks
from fundamentallm.checks import CheckFailed
from fundamentallm.training import TrainConfig, lr_at

wsd_lr = book_solution("ch09-ex3", "wsd_lr")
fit_power_law = book_solution("ch09-ex5", "fit_power_law")


def _naive_ce(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    p = torch.exp(logits[keep]) / torch.exp(logits[keep]).sum(-1, keepdim=True)
    return -torch.log(p.gather(-1, targets[keep][:, None])).mean()


def _smoothing_over_others(logits, targets, smoothing):
    """Spreads the smoothing mass over the V - 1 wrong classes only."""
    V = logits.shape[-1]
    q = torch.full_like(logits, smoothing / (V - 1)).scatter(-1, targets[:, None], 1 - smoothing)
    return -(q * torch.log_softmax(logits, -1)).sum(-1).mean()


def wsd_package(step, max_lr, min_lr, warmup_steps, max_steps, cooldown_steps):
    """The package's schedule: the exercise forbids it."""
    return lr_at(step, TrainConfig(lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, max_steps=max_steps,
                                   schedule="wsd", cooldown_fraction=cooldown_steps / max_steps))


ROWS = [
    ("check_cross_entropy", (_naive_ce,), r"not finite|nan|inf"),
    ("check_cross_entropy", (lambda z, y, ignore_index=-100: F.nll_loss(torch.log_softmax(z, -1), y),),
     r"asks you not to use .*log_softmax"),
    ("check_label_smoothed_cross_entropy", (_smoothing_over_others,), r"differ|expected"),
    ("check_label_smoothed_cross_entropy", (lambda z, y, eps: (1 - eps) * F.nll_loss(
        torch.log_softmax(z, -1), y),), r"differ|expected"),
    ("check_wsd_lr", (lambda step, M, m, w, T, c: wsd_lr(step + 1, M, m, w, T, c),),
     r"at step 0 \(warmup\) expected"),
    ("check_wsd_lr", (lambda step, M, m, w, T, c: wsd_lr(step, M, 0.0, w, T, c),),
     r"\(the cooldown\) expected"),
    ("check_wsd_lr", (lambda step, M, m, w, T, c: wsd_lr(step, M, m, w, T, c) if step < T else M,),
     r"\(after max_steps\) expected"),
    ("check_wsd_lr", (lambda step, M, m, w, T, c: wsd_lr(step, M, m, w, T, max(c, 1)),),
     r"cooldown_steps=0: at step \d+ \(the stable phase\)"),
    ("check_wsd_lr", (wsd_package,), r"asks you not to use .*lr_at"),
    ("check_adam_first_step", ([1e-3, 1e-3, 1e-3],), r"sign is wrong"),
    ("check_adam_first_step", ([-1.0, -1e-9, -1e-12],), r"does not scale with the gradient"),
    ("check_adam_first_step", ([-1e-3, -1e-3, -1e-3],), r"gradient 1e-09: .*eps"),
    ("check_adam_first_step", ([-1e-3, -1e-3],), r"a list of 3 numbers"),
    ("check_fit_power_law", (lambda sizes, losses: (1.0, 0.0),), r"alpha|a "),
]

test_wrong_answers_get_their_message = wrong_call_tests(ROWS)


def test_package_schedule_equals_the_book_solution():
    for step in range(60):
        assert abs(wsd_lr(step, 1e-3, 1e-4, 5, 50, 10) - wsd_package(step, 1e-3, 1e-4, 5, 50, 10)) < 1e-12


def test_fit_power_law_recovers_an_exact_law():
    a, alpha = fit_power_law([10, 100, 1000], [5.0 * n ** -0.3 for n in (10, 100, 1000)])
    assert abs(a - 5.0) < 1e-9 and abs(alpha - 0.3) < 1e-12
    with pytest.raises(CheckFailed):
        checks.check_fit_power_law(lambda sizes, losses: (1.0, 0.0))
