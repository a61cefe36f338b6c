"""Checks for the exercises of chapter 9: training."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from .core import CheckFailed, assert_same, exercise_check
from .predict import number, require_prediction


def _ch09_logits_cases(seed: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    big = torch.tensor([[1e4, 0.0, -1e4], [-1e4, -1e4, 1e4], [500.0, 500.0, 499.0]])
    return [
        ("(8, 5) logits", torch.randn(8, 5, generator=g), torch.randint(5, (8,), generator=g)),
        ("(16, 100) float64 logits", 3 * torch.randn(16, 100, generator=g, dtype=torch.float64),
         torch.randint(100, (16,), generator=g)),
        ("one row", torch.randn(1, 7, generator=g), torch.tensor([6])),
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


@exercise_check(forbidden=("torch.nn.functional.cross_entropy", "torch.logsumexp",
                           "torch.log_softmax", "torch.nn.functional.nll_loss"))
def check_cross_entropy(cross_entropy: Callable) -> str:
    """``cross_entropy(logits, targets, ignore_index=-100)``: ``(N, V)`` logits and ``(N,)``
    targets -> the mean of ``logsumexp(z) - z_y`` over the targets that are not ``ignore_index``."""
    cases = [(name, z, y, {}) for name, z, y in _ch09_logits_cases(900)]
    g = torch.Generator().manual_seed(901)
    z, y = torch.randn(10, 6, generator=g), torch.randint(6, (10,), generator=g)
    y[[1, 4, 5]] = -100
    cases.append(("targets holding -100 (padding: left out of the mean)", z, y, {}))
    y2 = y.clone()
    y2[y2 == -100] = 0
    y2[[0, 2]] = -1
    cases.append(("ignore_index=-1", z, y2, {"ignore_index": -1}))
    for name, logits, targets, kwargs in cases:
        z_in, y_in = logits.clone(), targets.clone()
        got = _ch09_finite(cross_entropy(z_in, y_in, **kwargs), name)
        if not (torch.equal(z_in, logits) and torch.equal(y_in, targets)):
            raise CheckFailed(f"for {name}: you modified the inputs in place")
        expected = torch.nn.functional.cross_entropy(logits, targets, **kwargs)
        assert_same(got.to(expected.dtype), expected, what=f"loss for {name} (vs F.cross_entropy)")
    return f"matches F.cross_entropy on {len(cases)} cases, huge logits and ignored targets included"


@exercise_check(forbidden=("torch.nn.functional.cross_entropy",))
def check_label_smoothed_cross_entropy(label_smoothed_cross_entropy: Callable) -> str:
    """``label_smoothed_cross_entropy(logits, targets, smoothing)`` -> the mean cross-entropy against
    the target ``(1 - smoothing)·one_hot(y) + smoothing / V`` (as ``F.cross_entropy``'s
    ``label_smoothing``)."""
    cases = []
    for i, (name, z, y) in enumerate(_ch09_logits_cases(910)):
        cases.append((name, z, y, (0.1, 0.0, 0.3, 0.1, 0.05)[i]))
    g = torch.Generator().manual_seed(911)
    cases.append(("V=2, smoothing=0.5", torch.randn(6, 2, generator=g),
                  torch.randint(2, (6,), generator=g), 0.5))
    for name, logits, targets, eps in cases:
        z_in, y_in = logits.clone(), targets.clone()
        got = _ch09_finite(label_smoothed_cross_entropy(z_in, y_in, eps), name)
        if not (torch.equal(z_in, logits) and torch.equal(y_in, targets)):
            raise CheckFailed(f"for {name}: you modified the inputs in place")
        expected = torch.nn.functional.cross_entropy(logits, targets, label_smoothing=eps)
        assert_same(got.to(expected.dtype), expected,
                    what=f"loss for {name}, smoothing={eps} (vs F.cross_entropy(label_smoothing=...); "
                         f"smoothing / V goes to every class, the true one included)")
    return f"matches F.cross_entropy(label_smoothing=...) on {len(cases)} cases"


@exercise_check
def check_fit_power_law(fit_power_law: Callable) -> str:
    """``fit_power_law(sizes, losses)`` -> ``(a, alpha)`` of ``loss ~ a * size ** -alpha``, fitted by
    least squares on ``log loss = log a - alpha log size`` (a straight line in log-log axes)."""
    rng = np.random.default_rng(900)
    cases = [("an exact power law", np.array([1e3, 1e4, 1e5, 1e6]), None, (20.0, 0.076)),
             ("an exact power law, floats in a list", [2e4, 5e4, 1.5e5], None, (8.0, 0.3))]
    sizes = np.array([3e3, 8e3, 2.4e4, 7e4, 2e5])
    noisy = 12.0 * sizes ** -0.12 * np.exp(rng.normal(0.0, 0.02, len(sizes)))
    cases.append(("noisy losses (least squares in log-log axes)", sizes, noisy, None))
    for what, n, losses, exact in cases:
        n_arr = np.asarray(n, dtype=np.float64)
        if losses is None:
            losses = exact[0] * n_arr ** -exact[1]
        slope, intercept = np.polyfit(np.log(n_arr), np.log(np.asarray(losses, dtype=np.float64)), 1)
        expected = (float(np.exp(intercept)), float(-slope))
        got = fit_power_law(n if isinstance(n, list) else torch.as_tensor(n_arr),
                            [float(v) for v in losses] if isinstance(n, list) else torch.as_tensor(losses))
        if got is None or len(got) != 2:
            raise CheckFailed(f"{what}: return the pair (a, alpha), got {got!r}")
        a, alpha = float(got[0]), float(got[1])
        if not np.isclose(alpha, expected[1], rtol=1e-6, atol=1e-9):
            raise CheckFailed(f"{what}: alpha expected {expected[1]:.6g}, got {alpha:.6g} "
                              f"(alpha is minus the slope of log loss against log size)")
        if not np.isclose(a, expected[0], rtol=1e-6):
            raise CheckFailed(f"{what}: a expected {expected[0]:.6g}, got {a:.6g} "
                              f"(a = exp(intercept), natural logarithms)")
    return f"{len(cases)} cases, exact and noisy, equal to np.polyfit in log-log axes"


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
    are 1e3, 1e-6 and 1e-9; within 2%."""
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
        if not math.isclose(p, t, rel_tol=0.02):
            ratio = p / t
            hint = ("the step does not scale with the gradient: after bias correction the first "
                    "m-hat is g and v-hat is g**2" if abs(math.log10(abs(ratio))) > 1.5 else
                    "where does eps = 1e-8 matter?")
            raise CheckFailed(f"gradient {g:g}: predicted change {p:.4g} is off by a factor {ratio:.3g} "
                              f"({hint})")
    return "changes " + ", ".join(f"{t:.3g}" for t in truth) + ": about lr·sign(g) until |g| nears eps"
