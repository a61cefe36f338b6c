"""Checks for the exercises of chapter 9: training."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from .core import CheckFailed, assert_same, exercise_check


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


def _ch09_cosine_reference(step, max_lr, min_lr, warmup_steps, max_steps):
    s = step + 1
    if s <= warmup_steps:
        return max_lr * s / warmup_steps
    progress = min(1.0, (s - warmup_steps) / max(1, max_steps - warmup_steps))
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + np.cos(np.pi * progress))


@exercise_check(forbidden=("fundamentallm.training.lr_at",))
def check_cosine_lr(cosine_lr: Callable) -> str:
    """``cosine_lr(step, max_lr, min_lr, warmup_steps, max_steps)``: with ``s = step + 1``, linear
    warmup ``max_lr · s / warmup_steps`` while ``s <= warmup_steps``, then a half cosine from
    ``max_lr`` down to ``min_lr`` at ``s = max_steps``, and ``min_lr`` after."""
    settings = [
        dict(max_lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=100),
        dict(max_lr=0.5, min_lr=0.0, warmup_steps=0, max_steps=50),
        dict(max_lr=3e-4, min_lr=3e-5, warmup_steps=1, max_steps=20),
    ]
    n = 0
    for kw in settings:
        for step in range(kw["max_steps"] + 15):
            got = cosine_lr(step, **kw)
            if got is None:
                raise CheckFailed("got None -- did you forget to return the learning rate?")
            expected = _ch09_cosine_reference(step, **kw)
            phase = ("warmup" if step + 1 <= kw["warmup_steps"] else
                     "after max_steps" if step + 1 >= kw["max_steps"] else "cosine decay")
            assert_same(torch.tensor(float(got), dtype=torch.float64),
                        torch.tensor(float(expected), dtype=torch.float64), rtol=1e-9, atol=1e-12,
                        what=f"lr at step={step} ({phase}) for {kw}")
            n += 1
    return f"correct at {n} steps of {len(settings)} schedules (warmup, decay, after the end)"


@exercise_check(forbidden=("torch.nn.utils.clip_grad_norm_",))
def check_clip_grad_norm(clip_grad_norm: Callable) -> str:
    """``clip_grad_norm(grads, max_norm)`` -> ``(clipped, total_norm)``: the global L2 norm over
    all tensors, and new tensors scaled by ``min(1, max_norm / total_norm)``."""
    g = torch.Generator().manual_seed(920)
    shapes = [(4, 3), (3,), (2, 2, 2)]
    big = [5 * torch.randn(s, generator=g) for s in shapes]
    small = [0.01 * torch.randn(s, generator=g) for s in shapes]
    each_small = [torch.full((4,), 0.4), torch.full((4,), 0.4), torch.full((4,), 0.4)]  # norms 0.8
    cases = [
        ("three tensors with a large global norm, max_norm=1", big, 1.0),
        ("three tensors with a small global norm (unchanged), max_norm=1", small, 1.0),
        ("tensors each of norm 0.8 < max_norm=1 but of global norm 1.39 > 1", each_small, 1.0),
        ("one tensor, max_norm=0.5", [torch.randn(10, generator=g, dtype=torch.float64)], 0.5),
        ("all-zero gradients (norm 0: nothing to clip, no NaN)", [torch.zeros(3), torch.zeros(2, 2)], 1.0),
    ]
    for name, grads, max_norm in cases:
        inputs = [t.clone() for t in grads]
        res = clip_grad_norm(inputs, max_norm)
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise CheckFailed(f"for {name}: return a pair (clipped_grads, total_norm)")
        clipped, total = res
        if any(not torch.equal(a, b) for a, b in zip(inputs, grads)):
            raise CheckFailed(f"for {name}: you modified the input gradients; return new tensors")
        params = [torch.nn.Parameter(torch.zeros_like(t)) for t in grads]  # reference: torch's own
        for p, t in zip(params, grads):
            p.grad = t.clone()
        expected_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        assert_same(torch.as_tensor(total, dtype=expected_norm.dtype).reshape(()), expected_norm,
                    what=f"total_norm for {name} (the L2 norm of all gradients together)",
                    rtol=1e-5, atol=1e-8)
        if not isinstance(clipped, (list, tuple)) or len(clipped) != len(grads):
            raise CheckFailed(f"for {name}: clipped must be a list of {len(grads)} tensors")
        for i, (c, p) in enumerate(zip(clipped, params)):
            assert_same(c, p.grad, what=f"clipped tensor {i} for {name} (vs "
                                        f"torch.nn.utils.clip_grad_norm_)", rtol=1e-5, atol=1e-8)
    return f"matches torch.nn.utils.clip_grad_norm_ on {len(cases)} cases"


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
