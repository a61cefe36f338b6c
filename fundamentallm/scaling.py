"""Fitting scaling laws to training runs: Hoffmann et al. 2022's approaches 2 and 3.

A *run* is a dict with at least ``budget`` (training FLOPs, ``C = 6·N·D``), ``n_non_embedding``
(N), ``tokens`` (D) and ``val_loss``; ``benchmarks/scaling.py`` stores such runs in
``fundamentallm/results/scaling.json``.

* **Approach 2 (IsoFLOP profiles).** At each budget, fit a parabola to the loss against ``ln N``;
  its minimum is the compute-optimal size ``N_opt(C)`` (and ``D_opt = C / (6·N_opt)``). Then fit
  power laws ``N_opt = k·C^a`` and ``D_opt = k'·C^b`` by least squares in log-log axes (``a + b = 1``
  because ``D = C/(6N)``).
* **Approach 3 (a parametric loss).** Fit ``L(N, D) = E + A/N^α + B/D^β`` by minimising the Huber
  loss (``δ = 10⁻³``) between the predicted and the measured *log* loss, with L-BFGS from a grid
  of starting points, as the paper does. The compute-optimal size under ``C = 6ND`` is then
  ``N_opt = G·(C/6)^(β/(α+β))`` with ``G = (αA/(βB))^(1/(α+β))``.

Intervals are bootstrap percentiles (10th to 90th, as the paper reports): runs resampled with
replacement (within each budget for approach 2) and everything refitted.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np
import torch

# Published values, for comparison (Hoffmann et al. 2022, Table 2 and eq. 10; Kaplan et al. 2020).
PUBLISHED = {
    "chinchilla_approach2": {"a": 0.49, "b": 0.51},
    "chinchilla_approach3": {"a": 0.46, "b": 0.54, "E": 1.69, "A": 406.4, "B": 410.7,
                             "alpha": 0.34, "beta": 0.28},
    "kaplan": {"a": 0.73, "b": 0.27, "alpha_N": 0.076, "alpha_D": 0.095},
}
CI = (10.0, 90.0)


def _check_runs(runs) -> list[dict]:
    need = ("budget", "n_non_embedding", "tokens", "val_loss")
    if not isinstance(runs, (list, tuple)) or not runs:
        raise ValueError("runs must be a non-empty list of dicts with keys " + ", ".join(need))
    for r in runs:
        if not isinstance(r, dict) or any(k not in r for k in need):
            raise ValueError(f"every run must be a dict with keys {need}, got {r!r}")
    return list(runs)


def power_law(x, k: float, a: float):
    """``k·x^a``."""
    return k * np.asarray(x, dtype=float) ** a if np.ndim(x) else k * float(x) ** a


def fit_power_law(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """``(k, a)`` of ``y ≈ k·x^a``, least squares on ``ln y = ln k + a·ln x``."""
    lx, ly = np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float))
    if lx.size < 2 or np.ptp(lx) == 0:
        raise ValueError("fit_power_law needs at least two distinct x values")
    a, lnk = np.polyfit(lx, ly, 1)
    return float(math.exp(lnk)), float(a)


def isoflop_minimum(n_params: Sequence[float], losses: Sequence[float]) -> tuple[float, float]:
    """``(N_opt, L_min)``: the minimum of the parabola ``L = p·x² + q·x + r`` in ``x = ln N``
    fitted by least squares. Raises ``ValueError`` if the parabola opens downwards (no minimum)
    or there are fewer than three distinct sizes."""
    x, y = np.log(np.asarray(n_params, dtype=float)), np.asarray(losses, dtype=float)
    if np.unique(x).size < 3:
        raise ValueError("isoflop_minimum needs at least three distinct sizes")
    p, q, r = np.polyfit(x, y, 2)
    if p <= 0:
        raise ValueError("the IsoFLOP parabola has no minimum (it opens downwards)")
    x_opt = -q / (2 * p)
    return float(math.exp(x_opt)), float(r - q * q / (4 * p))


def _by_budget(runs) -> dict[float, list[dict]]:
    groups: dict[float, list[dict]] = {}
    for r in runs:
        groups.setdefault(float(r["budget"]), []).append(r)
    return dict(sorted(groups.items()))


def _approach2_point(groups) -> dict:
    budgets, n_opt, l_min = [], [], []
    for C, rs in groups.items():
        n, loss = isoflop_minimum([r["n_non_embedding"] for r in rs], [r["val_loss"] for r in rs])
        budgets.append(C)
        n_opt.append(n)
        l_min.append(loss)
    if min(l_min) <= 0:  # a resample whose parabola dips below zero loss: no usable minimum
        raise ValueError("an IsoFLOP parabola's minimum loss is not positive")
    d_opt = [C / (6 * n) for C, n in zip(budgets, n_opt)]
    return {"budgets": budgets, "n_opt_at": n_opt, "d_opt_at": d_opt, "loss_min_at": l_min,
            "n_opt": {"coef": fit_power_law(budgets, n_opt)},
            "d_opt": {"coef": fit_power_law(budgets, d_opt)},
            "loss_min": {"coef": fit_power_law(budgets, l_min)}}


def approach2(runs, n_boot: int = 200, seed: int = 0) -> dict:
    """IsoFLOP minima and the power laws ``N_opt(C)``, ``D_opt(C)`` (``coef = (k, exponent)``),
    with bootstrap intervals (``ci``) of the exponents. ``loss_min`` is a power law through the
    parabolas' minima, ``L_min ≈ k·C^γ``, used only to extrapolate the loss."""
    groups = _by_budget(_check_runs(runs))
    if len(groups) < 2:
        raise ValueError("approach2 needs runs at two or more budgets")
    fit = _approach2_point(groups)
    rng = np.random.default_rng(seed)
    samples, rejected = [], 0
    while len(samples) < n_boot and rejected < 20 * n_boot + 100:
        drawn = {C: [rs[i] for i in rng.integers(0, len(rs), len(rs))] for C, rs in groups.items()}
        try:
            b = _approach2_point(drawn)
        except ValueError:  # a resample with < 3 sizes or no minimum
            rejected += 1
            continue
        samples.append((b["n_opt"]["coef"][1], b["d_opt"]["coef"][1], b["loss_min"]["coef"][1]))
    if samples:
        s = np.array(samples)
        for j, name in enumerate(("n_opt", "d_opt", "loss_min")):
            fit[name]["ci"] = tuple(float(v) for v in np.percentile(s[:, j], CI))
    fit["n_boot"], fit["rejected"] = len(samples), rejected
    return fit


def loss_at_budget(budget: float, fit2: dict) -> float:
    """Approach 2's extrapolated minimum loss ``k·C^γ`` at ``budget``."""
    return float(power_law(budget, *fit2["loss_min"]["coef"]))


def chinchilla_loss(n, d, params: dict):
    """``E + A/N^α + B/D^β`` (Hoffmann et al. 2022, eq. 2)."""
    n, d = np.asarray(n, dtype=float), np.asarray(d, dtype=float)
    out = params["E"] + params["A"] / n ** params["alpha"] + params["B"] / d ** params["beta"]
    return float(out) if out.ndim == 0 else out


def chinchilla_optimum(budget: float, params: dict) -> tuple[float, float]:
    """``(N_opt, D_opt)`` minimising ``L(N, D)`` subject to ``6·N·D = budget`` (eq. 4)."""
    al, be = params["alpha"], params["beta"]
    G = (al * params["A"] / (be * params["B"])) ** (1 / (al + be))
    return G * (budget / 6) ** (be / (al + be)), (budget / 6) ** (al / (al + be)) / G


def _huber_objective(theta, ln_n, ln_d, ln_l, delta):
    """The summed Huber loss of ``LSE(a - α ln N, b - β ln D, e) - ln L`` at ``θ = (a, b, e, α, β)``."""
    a, b, e, al, be = theta
    pred = torch.logsumexp(torch.stack([a - al * ln_n, b - be * ln_d, e.expand_as(ln_n)]), 0)
    return torch.nn.functional.huber_loss(pred, ln_l, delta=delta, reduction="sum")


def _lbfgs(start, ln_n, ln_d, ln_l, delta) -> tuple[np.ndarray, float]:
    theta = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=200, tolerance_grad=1e-10,
                            tolerance_change=1e-14, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = _huber_objective(theta, ln_n, ln_d, ln_l, delta)
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return theta.detach().numpy().copy(), _huber_objective(theta, ln_n, ln_d, ln_l, delta).item()


def _huber_fit(ln_n, ln_d, ln_l, starts, delta) -> tuple[np.ndarray, float]:
    """Minimise the Huber objective by L-BFGS from each start; the best ``θ`` and its objective."""
    ln_n, ln_d, ln_l = (torch.as_tensor(v, dtype=torch.float64) for v in (ln_n, ln_d, ln_l))
    best, best_obj = None, math.inf
    for start in starts:
        theta, obj = _lbfgs(start, ln_n, ln_d, ln_l, delta)
        if math.isfinite(obj) and obj < best_obj:
            best, best_obj = theta, obj
    return best, best_obj


def _grid_starts(ln_n, ln_d, ln_l, delta, keep: int) -> list[tuple]:
    """Hoffmann et al.'s grid of initialisations, ranked by the Huber objective; the best ``keep``."""
    grid = torch.tensor(list(itertools.product(range(0, 26, 5), range(0, 26, 5), (-1.0, -0.5, 0.0, 0.5, 1.0),
                                               (0.0, 0.5, 1.0, 1.5, 2.0), (0.0, 0.5, 1.0, 1.5, 2.0))),
                        dtype=torch.float64)  # (S, 5)
    n, d, y = (torch.as_tensor(v, dtype=torch.float64) for v in (ln_n, ln_d, ln_l))
    a, b, e, al, be = grid.T[..., None]  # (S, 1) each
    pred = torch.logsumexp(torch.stack([a - al * n, b - be * d, e.expand(-1, n.numel())]), 0)  # (S, R)
    obj = torch.nn.functional.huber_loss(pred, y.expand_as(pred), delta=delta, reduction="none").sum(1)
    return [tuple(grid[i].tolist()) for i in obj.argsort()[:keep]]


def _params(theta) -> dict:
    a, b, e, al, be = (float(v) for v in theta)
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": al, "beta": be,
            "a": be / (al + be), "b": al / (al + be)}


def approach3(runs, n_boot: int = 200, seed: int = 0, delta: float = 1e-3, starts: int = 20) -> dict:
    """``L(N, D) = E + A/N^α + B/D^β`` fitted by Huber loss on the log loss (``params``, with the
    implied exponents ``a = β/(α+β)`` of ``N_opt ∝ C^a`` and ``b = α/(α+β)``), and bootstrap
    intervals (``ci``) of every parameter; each resample starts from the full fit."""
    runs = _check_runs(runs)
    if len(runs) < 5:
        raise ValueError(f"approach3 fits 5 parameters: it needs at least 5 runs, got {len(runs)}")
    ln_n = np.log([float(r["n_non_embedding"]) for r in runs])
    ln_d = np.log([float(r["tokens"]) for r in runs])
    ln_l = np.log([float(r["val_loss"]) for r in runs])
    theta, obj = _huber_fit(ln_n, ln_d, ln_l, _grid_starts(ln_n, ln_d, ln_l, delta, starts), delta)
    fit = {"params": _params(theta), "objective": obj, "theta": [float(v) for v in theta]}
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n_boot):
        i = rng.integers(0, len(runs), len(runs))
        th, _ = _huber_fit(ln_n[i], ln_d[i], ln_l[i], [tuple(theta)], delta)
        if th is not None:
            samples.append(_params(th))
    if samples:
        fit["ci"] = {k: tuple(float(v) for v in np.percentile([s[k] for s in samples], CI))
                     for k in samples[0]}
    fit["n_boot"] = len(samples)
    return fit


def describe(fit2: dict, fit3: dict) -> str:
    """The fitted exponents beside the published ones, as printable lines."""
    def ci(f, name):
        lo, hi = f.get("ci", (float("nan"),) * 2) if name is None else f.get("ci", {}).get(name, (math.nan,) * 2)
        return f"[{lo:.3f}, {hi:.3f}]"
    p3 = fit3["params"]
    k2 = PUBLISHED["chinchilla_approach2"]
    k3 = PUBLISHED["chinchilla_approach3"]
    lines = [
        f"approach 2: N_opt ∝ C^{fit2['n_opt']['coef'][1]:.3f} {ci(fit2['n_opt'], None)}, "
        f"D_opt ∝ C^{fit2['d_opt']['coef'][1]:.3f} {ci(fit2['d_opt'], None)} "
        f"(Chinchilla: {k2['a']}, {k2['b']}; Kaplan: {PUBLISHED['kaplan']['a']}, {PUBLISHED['kaplan']['b']})",
        f"approach 3: E={p3['E']:.3f} {ci(fit3, 'E')} A={p3['A']:.3g} B={p3['B']:.3g} "
        f"alpha={p3['alpha']:.3f} {ci(fit3, 'alpha')} beta={p3['beta']:.3f} {ci(fit3, 'beta')}; "
        f"a={p3['a']:.3f} {ci(fit3, 'a')} (Chinchilla: alpha={k3['alpha']}, beta={k3['beta']}, a={k3['a']})",
    ]
    return "\n".join(lines)
