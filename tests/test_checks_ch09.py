"""Chapter 9 checks beyond their wrong-answer tables (those live next to the checks, in
fundamentallm/checks/ch09.py, and run in tests/test_catches.py; every book solution passes and
every answer stub counts as not attempted: tests/test_course.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed
from fundamentallm.checks.ch09 import _ch09_smoothing_floor
from fundamentallm.training import TrainConfig, lr_at

wsd_lr = book_solution("ch09-ex3", "wsd_lr")
fit_power_law = book_solution("ch09-ex5", "fit_power_law")
cross_entropy_grad = book_solution("ch09-ex1", "cross_entropy_grad")
smoothed_loss_floor = book_solution("ch09-ex2", "smoothed_loss_floor")


def wsd_package(step, max_lr, min_lr, warmup_steps, max_steps, cooldown_steps):
    return lr_at(step, TrainConfig(lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, max_steps=max_steps,
                                   schedule="wsd", cooldown_fraction=cooldown_steps / max_steps))


def test_package_schedule_equals_the_book_solution():
    for step in range(60):
        assert abs(wsd_lr(step, 1e-3, 1e-4, 5, 50, 10) - wsd_package(step, 1e-3, 1e-4, 5, 50, 10)) < 1e-12


def test_fit_power_law_recovers_an_exact_law():
    a, alpha = fit_power_law([10, 100, 1000], [5.0 * n ** -0.3 for n in (10, 100, 1000)])
    assert abs(a - 5.0) < 1e-9 and abs(alpha - 0.3) < 1e-12
    with pytest.raises(CheckFailed):
        checks.check_fit_power_law(lambda sizes, losses: (1.0, 0.0))


def test_cross_entropy_grad_is_autograds():
    g = torch.Generator().manual_seed(0)
    z, y = torch.randn(7, 5, generator=g, dtype=torch.float64), torch.tensor([0, 4, -100, 2, 2, -100, 1])
    leaf = z.clone().requires_grad_(True)
    F.cross_entropy(leaf, y).backward()
    torch.testing.assert_close(cross_entropy_grad(z, y), leaf.grad)


@pytest.mark.parametrize("V,eps", [(2, 0.1), (65, 0.1), (10, 0.0), (10, 1.0)])
def test_smoothing_floor_is_the_minimum_of_the_smoothed_loss(V, eps):
    """The reference floor equals F.cross_entropy(label_smoothing=eps) at the logits log q, and
    nearby logits give more."""
    q = torch.full((1, V), eps / V, dtype=torch.float64)
    q[0, 0] += 1 - eps
    logits = q.clamp_min(1e-300).log()
    at_q = F.cross_entropy(logits, torch.tensor([0]), label_smoothing=eps).item()
    assert math.isclose(at_q, _ch09_smoothing_floor(V, eps), rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(smoothed_loss_floor(V, eps), at_q, rel_tol=1e-9, abs_tol=1e-12)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        nearby = logits + 0.1 * torch.randn(1, V, generator=g, dtype=torch.float64)
        assert F.cross_entropy(nearby, torch.tensor([0]), label_smoothing=eps).item() >= at_q - 1e-12


compute_optimal_size = book_solution("ch09-ex6", "compute_optimal_size")


def test_compute_optimal_size_recovers_an_exact_law():
    """Exact parabolas in ln N whose vertices lie on N_opt = 0.3 C^0.45: the book's solution
    returns the law's N_opt at a budget none of the runs used."""
    runs = []
    for C in (1e9, 1e10, 1e11):
        n_opt = 0.3 * C ** 0.45
        for f in (0.5, 1.0, 2.0, 4.0):
            runs.append({"budget": C, "n_non_embedding": n_opt * f, "val_loss": 2.0 + 0.1 * math.log(f) ** 2})
    assert compute_optimal_size(runs, 1e13) == pytest.approx(0.3 * 1e13 ** 0.45, rel=1e-9)


def test_compute_optimal_size_equals_the_package_on_the_stored_sweep():
    from fundamentallm import scaling
    from fundamentallm.results import load

    sweep = [r for r in load("scaling")["runs"] if r["role"] == "sweep" and r["lr_mult"] == 1.0 and r["seed"] == 0]
    k, a = scaling.approach2(sweep, n_boot=0)["n_opt"]["coef"]
    assert compute_optimal_size(sweep, 1e12) == pytest.approx(k * 1e12 ** a, rel=1e-6)
