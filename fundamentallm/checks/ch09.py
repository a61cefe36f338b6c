"""Checks for the exercises of chapter 9: training."""

from __future__ import annotations

import importlib.util
import math
import sys
from typing import Any, Callable

import numpy as np
import torch

from .core import _STUDENT, CheckFailed, _frame_kind, assert_same, check_shape, exercise_check, rng
from .predict import number, require_prediction


def _ch09_logits_cases(seed: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    g = rng(seed)
    big = torch.tensor([[1e4, 0.0, -1e4], [-1e4, -1e4, 1e4], [500.0, 500.0, 499.0]])
    return [
        ("(8, 5) logits", torch.randn(8, 5, generator=g), torch.randint(5, (8,), generator=g)),
        ("(16, 100) float64 logits", 3 * torch.randn(16, 100, generator=g, dtype=torch.float64),
         torch.randint(100, (16,), generator=g)),
        ("one row", torch.randn(1, 7, generator=g), torch.tensor([6])),
        ("(6, 9) float64 logits near 1000", 1000 + torch.randn(6, 9, generator=g, dtype=torch.float64),
         torch.randint(9, (6,), generator=g)),
        ("huge logits (1e4: exp overflows unless you subtract the row max)", big,
         torch.tensor([0, 1, 2])),
        ("very negative logits (-1e4: exp underflows to 0, log(0) = -inf)", big - 2e4,
         torch.tensor([2, 0, 1])),
    ]


def _ch09_finite(got: Any, name: str) -> torch.Tensor:
    if got is None:
        raise CheckFailed(f"loss for {name}: got None -- did you forget to return a value?")
    got = torch.as_tensor(got)
    if got.numel() != 1:
        raise CheckFailed(f"loss for {name}: expected a scalar (the mean over tokens), got shape "
                          f"{tuple(got.shape)}")
    if not torch.isfinite(got).all():
        raise CheckFailed(f"loss for {name}: got {got.item()} -- compute log-sum-exp stably: "
                          f"m + log(sum(exp(z - m))) with m the row max")
    return got.reshape(())


_CH09_NO_AUTOGRAD = ("torch.autograd.backward", "torch.autograd.grad")


@exercise_check(forbidden=_CH09_NO_AUTOGRAD + ("torch.nn.functional.cross_entropy", "torch.log_softmax",
                                               "torch.softmax", "torch.logsumexp",
                                               "torch.nn.functional.nll_loss"), by_hand=True)
def check_cross_entropy_grad(cross_entropy_grad: Callable) -> str:
    """``cross_entropy_grad(logits, targets, ignore_index=-100)`` -> the ``(N, V)`` gradient of the
    mean cross-entropy over the targets that are not ``ignore_index``, by the formula (no autograd);
    compared with autograd through ``F.cross_entropy``."""
    cases = [(name, z, y, {}) for name, z, y in _ch09_logits_cases(900)]
    g = rng(901)
    z, y = torch.randn(10, 6, generator=g, dtype=torch.float64), torch.randint(6, (10,), generator=g)
    y[[1, 4, 5]] = -100
    cases.append(("targets holding -100 (padding: left out of the mean)", z, y, {}))
    y2 = y.clone()
    y2[y2 == -100] = 0
    y2[[0, 2, 7]] = -1
    cases.append(("ignore_index=-1", z, y2, {"ignore_index": -1}))
    for name, logits, targets, kwargs in cases:
        z_in, y_in = logits.clone(), targets.clone()
        got = cross_entropy_grad(z_in, y_in, **kwargs)
        if not (torch.equal(z_in, logits) and torch.equal(y_in, targets)):
            raise CheckFailed(f"for {name}: you modified the inputs in place")
        if got is None:
            raise CheckFailed(f"for {name}: got None -- return the (N, V) gradient")
        got = torch.as_tensor(got)
        check_shape(got, tuple(logits.shape), what=f"gradient for {name}")
        if not torch.isfinite(got).all():
            raise CheckFailed(f"gradient for {name}: not finite -- the probabilities in it must be "
                              f"computed stably (what can you subtract from every logit of a row?)")
        leaf = logits.clone().requires_grad_(True)
        torch.nn.functional.cross_entropy(leaf, targets, **kwargs).backward()
        expected = leaf.grad
        got = got.to(expected.dtype)
        ignore = kwargs.get("ignore_index", -100)
        keep = targets != ignore
        tol = dict(atol=1e-6, rtol=1e-4)
        if (~keep).any() and not torch.allclose(got[~keep], torch.zeros_like(got[~keep]), **tol):
            raise CheckFailed(f"gradient for {name}: the rows of ignored targets are not zero -- does "
                              f"an ignored position change the loss at all?")
        n, m = len(targets), int(keep.sum())
        if m < n and torch.allclose(got, expected * m / n, **tol):
            raise CheckFailed(f"gradient for {name}: every row is off by the same factor -- what is "
                              f"the mean taken over?")
        if torch.allclose(got, -expected, **tol):
            raise CheckFailed(f"gradient for {name}: the sign is reversed -- you return the direction "
                              f"that lowers the loss, not the gradient")
        if not torch.allclose(got.sum(-1), torch.zeros(n, dtype=got.dtype), atol=1e-5):
            raise CheckFailed(f"gradient for {name}: its rows do not sum to zero -- differentiate both "
                              f"terms of eq. (ch09-ce): what does -z_y contribute?")
        assert_same(got, expected, what=f"gradient for {name} (vs autograd through F.cross_entropy)",
                    atol=1e-6, rtol=1e-4)
        if logits.dtype == torch.float64 and not torch.allclose(got, expected, atol=1e-13, rtol=1e-10):
            err = (got - expected).abs().max().item()
            raise CheckFailed(f"gradient for {name}: close (largest error {err:.1e}) but not equal to float64 "
                              f"rounding, which the formula you derived reaches (about 1e-16): is it computed in "
                              f"float32, or approximated by a difference quotient? Derive it and keep the "
                              f"input's dtype")
    return f"equal to autograd's gradient on {len(cases)} cases, huge logits and ignored targets included"


def _ch09_smoothing_floor(V: int, eps: float) -> float:
    """The entropy of q = (1 - eps) one_hot + eps / V: the minimum of eq. (ch09-smooth)."""
    q = torch.full((V,), eps / V, dtype=torch.float64)
    q[0] += 1 - eps
    return float(-torch.special.xlogy(q, q).sum())


class _LineBudget(Exception):
    """The student's code ran more lines of Python than the closed form needs."""


def _ch09_call_with_line_budget(fn: Callable, args: tuple, budget: int):
    """``fn(*args)``, stopped with :class:`_LineBudget` once the student's frames have run more than
    ``budget`` lines of Python (a search over the logits, where a closed form takes a few)."""
    count = [0]

    def local(frame, event, arg):
        if event == "line":
            count[0] += 1
            if count[0] > budget:
                raise _LineBudget
        return local

    def tracer(frame, event, arg):
        return local if _frame_kind(frame.f_code) == _STUDENT else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        return fn(*args)
    finally:
        sys.settrace(previous)


# SciPy (on Colab, not a dependency of the course): its minimisers and fits are other names for what
# the exercises ask to derive; forbidden only where it is installed
_CH09_SCIPY = ("scipy",) if importlib.util.find_spec("scipy") is not None else ()


@exercise_check(forbidden=_CH09_NO_AUTOGRAD + ("torch.optim", "torch.nn.functional.cross_entropy",
                                               "torch.nn.functional.nll_loss") + _CH09_SCIPY, by_hand=True)
def check_smoothed_loss_floor(smoothed_loss_floor: Callable) -> str:
    """``smoothed_loss_floor(V, eps)`` -> the smallest value of the label-smoothed loss of one
    position over all logits (the entropy of the smoothed target), derived, not minimised."""
    g = rng(920)
    cases = [(2, 0.1), (10, 0.0), (10, 1.0), (65, 0.1), (2, 0.5)]
    cases += [(int(torch.randint(3, 300, (1,), generator=g)), float(torch.rand(1, generator=g)) * 0.4 + 0.01)
              for _ in range(4)]
    for V, eps in cases:
        what = f"smoothed_loss_floor(V={V}, eps={eps:.4g})"
        budget = 6 * V + 60  # a closed form runs a few lines; a loop over the V classes, a few per class
        try:
            got = _ch09_call_with_line_budget(smoothed_loss_floor, (V, eps), budget)
        except _LineBudget:
            raise CheckFailed(f"{what}: your function ran more than {budget:,} lines of Python. A search over "
                              f"the logits (a grid, a bisection, a golden-section search) is a numerical "
                              f"minimisation, not a derivation: the floor has a closed form in V and eps") from None
        if isinstance(got, torch.Tensor):
            got = got.item()
        if got is None or isinstance(got, bool) or not isinstance(got, (int, float, np.floating)):
            raise CheckFailed(f"{what}: return a float, got {got!r}")
        got = float(got)
        if not math.isfinite(got):
            raise CheckFailed(f"{what} = {got}: not finite -- what is the limit of x log x as x -> 0?")
        expected = _ch09_smoothing_floor(V, eps)
        if math.isclose(got, expected, rel_tol=1e-11, abs_tol=1e-13):  # a closed form is exact to rounding
            continue
        spread = torch.full((V,), eps / max(V - 1, 1), dtype=torch.float64)
        spread[0] = 1 - eps
        other_rule = float(-torch.special.xlogy(spread, spread).sum())
        if math.isclose(got, expected, rel_tol=1e-4):
            why = ("close, but not equal to rounding, which the closed form reaches: a search over the logits "
                   "(a grid, a bisection) only approaches the minimum. Derive its value")
        elif eps > 0 and abs(got) < 1e-9:
            why = ("the smoothed target is not one-hot, so no p makes the loss zero: which p minimises "
                   "-sum_k q_k log p_k, and what is its value there?")
        elif math.isclose(got, other_rule, rel_tol=1e-6):
            why = "where does eq. (ch09-smooth) put the smoothing mass? Every one of the V classes gets eps / V"
        else:
            why = ("write the loss as a cross-entropy between q and p; it is smallest where p = q, and all "
                   "V classes contribute to what is left")
        raise CheckFailed(f"{what} = {got:.6g}, not the minimum of the smoothed loss: {why}")
    return f"the floor on {len(cases)} (V, eps), eps = 0 and eps = 1 included: the entropy of the smoothed target"


@exercise_check(forbidden=("numpy.polyfit", "numpy.polynomial.polynomial.polyfit", "numpy.polynomial.Polynomial.fit",
                           "numpy.linalg.lstsq", "numpy.linalg.pinv", "torch.linalg.lstsq", "torch.linalg.pinv",
                           "statistics.linear_regression") + _CH09_SCIPY)
def check_fit_power_law(fit_power_law: Callable) -> str:
    """``fit_power_law(sizes, losses)`` -> ``(a, alpha)`` of ``loss ~ a * size ** -alpha``, fitted by
    least squares on ``log loss = log a - alpha log size`` (a straight line in log-log axes), with the
    line written by hand (no fitting routine); compared with ``np.polyfit``."""
    g = rng(900)
    a0, alpha0 = 5.0 + 20.0 * float(torch.rand(1, generator=g)), 0.05 + 0.4 * float(torch.rand(1, generator=g))
    cases = [("an exact power law", np.array([1e3, 1e4, 1e5, 1e6]), None, (a0, alpha0)),
             ("an exact power law, floats in a list", [2e4, 5e4, 1.5e5], None, (8.0, 0.3))]
    sizes = np.array([3e3, 8e3, 2.4e4, 7e4, 2e5])
    noise = torch.randn(len(sizes), generator=g, dtype=torch.float64).numpy() * 0.02
    noisy = 12.0 * sizes ** -0.12 * np.exp(noise)
    cases.append(("noisy losses (least squares in log-log axes)", sizes, noisy, None))
    for what, n, losses, exact in cases:
        n_arr = np.asarray(n, dtype=np.float64)
        if losses is None:
            losses = exact[0] * n_arr ** -exact[1]
        slope, intercept = np.polyfit(np.log(n_arr), np.log(np.asarray(losses, dtype=np.float64)), 1)
        expected = (float(np.exp(intercept)), float(-slope))
        got = fit_power_law(n if isinstance(n, list) else torch.as_tensor(n_arr),
                            [float(v) for v in losses] if isinstance(n, list) else torch.as_tensor(losses))
        if got is None or not isinstance(got, (tuple, list)) or len(got) != 2:
            raise CheckFailed(f"{what}: return the pair (a, alpha), got {got!r}")
        a, alpha = float(got[0]), float(got[1])
        if not (math.isfinite(a) and math.isfinite(alpha)):
            raise CheckFailed(f"{what}: (a, alpha) = ({a}, {alpha}) is not finite")
        if math.isclose(alpha, -expected[1], rel_tol=1e-6):
            raise CheckFailed(f"{what}: alpha has the wrong sign -- the law is a * N ** -alpha, and the "
                              f"loss falls as N grows")
        if not np.isclose(alpha, expected[1], rtol=1e-6, atol=1e-9):
            raise CheckFailed(f"{what}: alpha = {alpha:.6g} is not the least-squares exponent "
                              f"(fit a straight line to log loss against log size, both natural logs)")
        if not np.isclose(a, expected[0], rtol=1e-6):
            raise CheckFailed(f"{what}: alpha is right, a = {a:.6g} is not: the intercept of the line is "
                              f"log a, in natural logarithms")
    return f"{len(cases)} cases, exact and noisy, equal to the least-squares line in log-log axes"


_CH09_NO_FIT = ("numpy.polyfit", "numpy.polynomial.polynomial.polyfit", "numpy.polynomial.Polynomial.fit",
                "numpy.linalg.lstsq", "numpy.linalg.pinv", "torch.linalg.lstsq", "torch.linalg.pinv",
                "statistics.linear_regression", "fundamentallm.scaling") + _CH09_SCIPY


def _ch09_isoflop_reference(runs, budget):
    """Approach 2, written here with np.polyfit (the check's own reference)."""
    by_budget = {}
    for r in runs:
        by_budget.setdefault(float(r["budget"]), []).append(r)
    log_c, log_n = [], []
    for C, rs in sorted(by_budget.items()):
        x = np.log([float(r["n_non_embedding"]) for r in rs])
        p, q, _ = np.polyfit(x, [float(r["val_loss"]) for r in rs], 2)
        log_c.append(math.log(C))
        log_n.append(-q / (2 * p))
    a, ln_k = np.polyfit(log_c, log_n, 1)
    return math.exp(ln_k + a * math.log(budget))


def _ch09_isoflop_cases():
    """(what, runs, budgets): an exact law, the stored sweep, and the stored sweep shuffled."""
    from fundamentallm.results import load

    exact = []
    for C in (1e9, 1e10, 1e11):  # N_opt = 0.3 C^0.45; each profile an exact parabola in ln N
        n_opt = 0.3 * C ** 0.45
        for f in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0):
            x = math.log(n_opt * f)
            exact.append({"budget": C, "n_non_embedding": n_opt * f, "tokens": C / (6 * n_opt * f),
                          "val_loss": 2.0 + 0.05 * (x - math.log(n_opt)) ** 2})
    stored = [r for r in load("scaling")["runs"] if r["role"] == "sweep" and r["lr_mult"] == 1.0 and r["seed"] == 0]
    order = torch.randperm(len(stored), generator=rng(9)).tolist()
    return [("an exact law (N_opt = 0.3 C^0.45)", exact, (1e12, 3e9)),
            ("the stored sweep", stored, (3e11, 1e12)),
            ("the stored sweep, runs shuffled", [dict(stored[i]) for i in order], (3e11,))]


@exercise_check(forbidden=_CH09_NO_FIT)
def check_compute_optimal_size(compute_optimal_size: Callable) -> str:
    """``compute_optimal_size(runs, budget)`` -> the compute-optimal N at ``budget`` by Hoffmann et
    al.'s approach 2: a parabola in ``ln N`` per budget (its vertex), then a straight line through
    ``(ln C, ln N_opt)``, with no fitting routine; compared with the same procedure by ``np.polyfit``."""
    cases = _ch09_isoflop_cases()
    for what, runs, budgets in cases:
        for budget in budgets:
            expected = _ch09_isoflop_reference(runs, budget)
            got = compute_optimal_size([dict(r) for r in runs], budget)
            try:
                got = float(got)
            except (TypeError, ValueError):
                raise CheckFailed(f"{what}, budget {budget:.0e}: return one number (N_opt), got {got!r}") from None
            if not math.isfinite(got) or got <= 0:
                raise CheckFailed(f"{what}, budget {budget:.0e}: N_opt = {got} is not a positive number")
            if math.isclose(got, math.log(expected), rel_tol=1e-6):
                raise CheckFailed(f"{what}, budget {budget:.0e}: {got:.6g} is ln N_opt; return N_opt itself")
            if not math.isclose(got, expected, rel_tol=1e-6):
                ratio = got / expected
                raise CheckFailed(f"{what}, budget {budget:.0e}: N_opt = {got:,.6g} is {ratio:.4g} times the "
                                  f"approach-2 value. Is each budget's optimum the vertex of a parabola in ln N "
                                  f"(not the best run, not a parabola in N), and the line fitted to ln N_opt "
                                  f"against ln C?")
    return (f"{len(cases)} sets of runs, an exact law and the stored sweep: N_opt equal to approach 2's "
            f"to 1e-6")


def _ch09_wsd_reference(step, max_lr, min_lr, warmup_steps, max_steps, cooldown_steps):
    s = step + 1
    if s <= warmup_steps:
        return max_lr * s / warmup_steps
    start = max(warmup_steps, max_steps - cooldown_steps)
    if cooldown_steps == 0 or s <= start:
        return max_lr
    progress = min(1.0, (s - start) / (max_steps - start))
    return max_lr + progress * (min_lr - max_lr)


@exercise_check(forbidden=("fundamentallm.training.lr_at",))
def check_wsd_lr(wsd_lr: Callable) -> str:
    """``wsd_lr(step, max_lr, min_lr, warmup_steps, max_steps, cooldown_steps)`` -> the
    warmup-stable-decay rate: linear warmup (``s = step + 1``), ``max_lr`` held, then a linear
    decay to ``min_lr`` over the last ``cooldown_steps`` steps, reached at ``s = max_steps``."""
    cases = [(1e-3, 1e-4, 10, 100, 20), (3e-3, 0.0, 0, 50, 10), (1.0, 0.1, 5, 20, 0),
             (2e-3, 2e-4, 10, 40, 40), (1e-2, 1e-3, 1, 10, 1)]
    for max_lr, min_lr, warmup, max_steps, cooldown in cases:
        for step in range(max_steps + 5):
            expected = _ch09_wsd_reference(step, max_lr, min_lr, warmup, max_steps, cooldown)
            got = wsd_lr(step, max_lr, min_lr, warmup, max_steps, cooldown)
            if isinstance(got, torch.Tensor):
                got = got.item()
            if not isinstance(got, (int, float)) or not math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-12):
                phase = ("warmup" if step + 1 <= warmup else
                         "the stable phase" if cooldown == 0 or step + 1 <= max(warmup, max_steps - cooldown)
                         else "the cooldown" if step + 1 <= max_steps else "after max_steps")
                raise CheckFailed(
                    f"max_lr={max_lr}, min_lr={min_lr}, warmup_steps={warmup}, max_steps={max_steps}, "
                    f"cooldown_steps={cooldown}: at step {step} ({phase}) expected {expected:.6g}, got {got}")
    return f"{len(cases)} schedules, every step, cooldown of 0 and of the whole run included"


ADAM_FIRST_STEP_GRADS = (1e3, 1e-6, 1e-9)


@exercise_check
def check_adam_first_step(predicted_changes: Any) -> str:
    """``predicted_changes``: the change ``w_new - w_old`` of three weights after one step of
    ``torch.optim.AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)`` whose gradients
    are 1e3, 1e-6 and 1e-9; within 0.5% (forgetting eps where the gradient is 1e-6 is 1% off)."""
    require_prediction(predicted_changes, "predicted_changes", "three numbers, one per gradient")
    if not isinstance(predicted_changes, (list, tuple)) or len(predicted_changes) != 3:
        raise CheckFailed(f"predicted_changes must be a list of 3 numbers, got {str(predicted_changes)[:60]}")
    got = [number(v, f"predicted_changes[{i}]") for i, v in enumerate(predicted_changes)]
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.AdamW([w], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    w.grad = torch.tensor(ADAM_FIRST_STEP_GRADS, dtype=torch.float64)
    opt.step()
    truth = w.detach().tolist()
    for g, p, t in zip(ADAM_FIRST_STEP_GRADS, got, truth):
        if p * t < 0 or (p == 0) != (t == 0):
            raise CheckFailed(f"gradient {g:g}: the sign is wrong: a positive gradient makes the weight "
                              f"decrease, so the change is negative")
        if not math.isclose(p, t, rel_tol=0.005):
            ratio = p / t
            hint = ("the step does not scale with the gradient the way you assumed: what are m-hat and "
                    "v-hat after one step?" if abs(math.log10(abs(ratio))) > 1.5 else
                    "where does eps = 1e-8 matter, and by how much?" if abs(g) < 1e-4 else
                    "eps is negligible here: rethink the bias correction of m and v at t = 1")
            size = "too large" if abs(ratio) > 1 else "too small"
            band = max(abs(ratio), 1 / abs(ratio))
            off = ("by more than a factor of 10" if band > 10 else "by a factor between 2 and 10" if band > 2
                   else "by less than a factor of 2 but more than 0.5%")
            raise CheckFailed(f"gradient {g:g}: predicted change {p:.4g} is {size} {off} ({hint})")
    return "changes " + ", ".join(f"{t:.3g}" for t in truth) + ": about lr·sign(g) until |g| nears eps"
