"""Scaling-law fits (fundamentallm/scaling.py) on synthetic runs with known exponents."""

import math

import numpy as np
import pytest

from fundamentallm import scaling
from fundamentallm.results import load

TRUE = {"E": 1.2, "A": 30.0, "B": 60.0, "alpha": 0.4, "beta": 0.3}


def synthetic_runs(params=TRUE, noise=0.0, seed=0, budgets=(1e10, 3e10, 1e11, 3e11)):
    """Five sizes per budget, 0.25x to 4x the true optimum, losses from L(N, D) with
    multiplicative noise."""
    rng = np.random.default_rng(seed)
    runs = []
    for C in budgets:
        n0 = scaling.chinchilla_optimum(C, params)[0]
        for f in (0.25, 0.5, 1.0, 2.0, 4.0):
            n = n0 * f
            d = C / (6 * n)
            loss = scaling.chinchilla_loss(n, d, params) * math.exp(rng.normal(0, noise))
            runs.append({"budget": C, "n_non_embedding": n, "tokens": d, "val_loss": loss})
    return runs


def test_chinchilla_optimum_minimises_the_loss_on_the_budget():
    C = 1e12
    n_opt, d_opt = scaling.chinchilla_optimum(C, TRUE)
    assert 6 * n_opt * d_opt == pytest.approx(C)
    best = scaling.chinchilla_loss(n_opt, d_opt, TRUE)
    for f in (0.9, 1.1):
        assert scaling.chinchilla_loss(n_opt * f, d_opt / f, TRUE) > best


def test_isoflop_minimum_of_an_exact_parabola():
    x = np.log([1e3, 2e3, 4e3, 8e3, 16e3])
    losses = 2.0 + 0.1 * (x - math.log(5e3)) ** 2
    n, loss = scaling.isoflop_minimum(np.exp(x), losses)
    assert n == pytest.approx(5e3, rel=1e-9) and loss == pytest.approx(2.0, abs=1e-12)
    with pytest.raises(ValueError, match="no minimum"):
        scaling.isoflop_minimum(np.exp(x), -losses)
    with pytest.raises(ValueError, match="three distinct sizes"):
        scaling.isoflop_minimum([1e3, 1e3, 2e3], [1.0, 1.0, 2.0])


def test_approach2_recovers_the_exponent_of_a_known_law():
    """The true N_opt ∝ C^(β/(α+β)) = C^0.4286. A parabola in ln N only approximates each
    IsoFLOP curve, so the exponent is recovered to 0.02, not exactly; a + b = 1 exactly."""
    fit = scaling.approach2(synthetic_runs(noise=0.002), n_boot=50)
    a, b = fit["n_opt"]["coef"][1], fit["d_opt"]["coef"][1]
    assert a == pytest.approx(0.3 / 0.7, abs=0.02) and a + b == pytest.approx(1.0)
    lo, hi = fit["n_opt"]["ci"]
    assert lo <= a <= hi and fit["n_boot"] == 50


def test_approach3_recovers_the_parameters_of_a_known_law():
    fit = scaling.approach3(synthetic_runs(), n_boot=0)
    p = fit["params"]
    for name in ("E", "A", "B", "alpha", "beta"):
        assert p[name] == pytest.approx(TRUE[name], rel=1e-3), name
    assert p["a"] == pytest.approx(0.3 / 0.7, rel=1e-3)


def test_approach3_intervals_cover_the_truth_with_noise():
    fit = scaling.approach3(synthetic_runs(noise=0.003, seed=1), n_boot=30, starts=5)
    for name in ("alpha", "beta"):
        lo, hi = fit["ci"][name]
        assert lo < hi and abs(fit["params"][name] - TRUE[name]) < 0.05, name


def test_fit_power_law_is_exact_on_a_power_law():
    k, a = scaling.fit_power_law([1, 10, 100], [3 * x ** 0.5 for x in (1, 10, 100)])
    assert k == pytest.approx(3) and a == pytest.approx(0.5)


@pytest.mark.parametrize("call,message", [
    (lambda: scaling.approach2([], n_boot=0), "runs must be a non-empty list"),
    (lambda: scaling.approach2([{"budget": 1}], n_boot=0), "every run must be a dict with keys"),
    (lambda: scaling.approach2(synthetic_runs(budgets=(1e10,)), n_boot=0), "two or more budgets"),
    (lambda: scaling.approach3(synthetic_runs()[:4], n_boot=0), "at least 5 runs"),
    (lambda: scaling.fit_power_law([2, 2], [1, 3]), "two distinct x values"),
])
def test_bad_inputs(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_stored_sweep_has_an_interior_minimum_at_every_budget():
    store = load("scaling")
    sweep = [r for r in store["runs"] if r["role"] == "sweep" and r["lr_mult"] == 1.0 and r["seed"] == 0]
    budgets = sorted({r["budget"] for r in sweep})
    assert len(budgets) >= 4
    for C in budgets:
        rs = sorted((r for r in sweep if r["budget"] == C), key=lambda r: r["n_non_embedding"])
        losses = [r["val_loss"] for r in rs]
        assert len(rs) >= 5 and 0 < losses.index(min(losses)) < len(rs) - 1, C
        for r in rs:  # each run spent its budget: C = 6 N D to within one step's rounding
            assert r["flops_6nd"] == pytest.approx(C, rel=0.5 * 6 * r["n_non_embedding"] * 512 / C + 1e-9)


def test_approach2_bootstrap_rejects_resamples_without_a_positive_minimum():
    """With N counted with the embedding, some resamples of the stored sweep give a parabola whose
    minimum loss is negative: they are rejected (no log of a negative number), and the intervals
    stay finite."""
    runs = [dict(r, n_non_embedding=r["n_total"]) for r in load("scaling")["runs"]
            if r["role"] == "sweep" and r["lr_mult"] == 1.0 and r["seed"] == 0]
    with np.errstate(invalid="raise"):
        fit = scaling.approach2(runs, n_boot=200, seed=0)
    assert fit["n_boot"] == 200 and fit["rejected"] > 0
    assert all(math.isfinite(v) for name in ("n_opt", "d_opt", "loss_min") for v in fit[name]["ci"])
    with pytest.raises(ValueError, match="not positive"):
        scaling.approach2([dict(r, val_loss=r["val_loss"] - 3.0) for r in runs], n_boot=0)
