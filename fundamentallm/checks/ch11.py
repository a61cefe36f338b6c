"""Checks for the exercises of chapter 11: backprop by hand."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from .core import CheckFailed, assert_same, exercise_check

# The exercises compute gradients by hand: autograd in any form is forbidden.
_AUTOGRAD = ("torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward",
             "torch.autograd.functional.jacobian", "torch.autograd.functional.vjp",
             "torch.func.grad", "torch.func.vjp", "torch.func.jacrev")


def _ch11_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(1100 + seed)


def _ch11_arrays(out: Any, n: int, what: str) -> list[np.ndarray]:
    """A student's tuple of ``n`` gradients, each converted to a float64 NumPy array."""
    if not isinstance(out, (tuple, list)) or len(out) != n:
        raise CheckFailed(f"{what}: expected a tuple of {n} arrays, got {type(out).__name__}"
                          + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    return [o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else o for o in out]


def _ch11_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().copy()


@exercise_check(forbidden=_AUTOGRAD)
def check_rmsnorm_backward(rmsnorm_backward: Callable) -> str:
    """``rmsnorm_backward(x, gamma, dy, eps)`` -> ``(dx, dgamma)`` for
    ``y = x / sqrt(mean(x**2) + eps) * gamma`` over the last axis, compared with autograd in float64."""
    cases = [((5,), 1.0), ((3, 4), 1.0), ((2, 3, 6), 3.0), ((4, 8), 0.01), ((2, 5), 0.0)]
    for seed, (shape, scale) in enumerate(cases):
        rng = _ch11_rng(20 + seed)
        x = torch.tensor(rng.standard_normal(shape) * scale, requires_grad=True)
        gamma = torch.tensor(rng.standard_normal(shape[-1]) + 1.0, requires_grad=True)
        dy = torch.tensor(rng.standard_normal(shape))
        eps = 1e-6
        y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma
        expected = torch.autograd.grad((y * dy).sum(), (x, gamma))
        got = _ch11_arrays(rmsnorm_backward(_ch11_np(x), _ch11_np(gamma), _ch11_np(dy), eps), 2,
                           f"rmsnorm_backward for x of shape {shape}")
        what = f"x of shape {shape}" + (" (all zeros)" if scale == 0 else "")
        assert_same(got[1], expected[1], what=f"dgamma for {what} (sum over every axis but the last)")
        assert_same(got[0], expected[0], what=f"dx for {what} (the mean of x**2 depends on every "
                                              f"entry of the row, so dx has a coupling term)")
    return f"{len(cases)} shapes, a row of zeros included, match autograd"


@exercise_check(forbidden=_AUTOGRAD + ("torch.nn.functional.cross_entropy",))
def check_smoothed_ce_backward(smoothed_ce_backward: Callable) -> str:
    """``smoothed_ce_backward(z, targets, smoothing)`` -> ``dz`` of the mean label-smoothed
    cross-entropy of ``(N, V)`` logits (``F.cross_entropy(..., label_smoothing=smoothing)``)."""
    cases = [(1, 5, 0.0), (4, 7, 0.1), (6, 3, 0.5), (3, 10, 1.0), (5, 6, 0.2)]
    for seed, (N, V, eps) in enumerate(cases):
        rng = _ch11_rng(30 + seed)
        z = torch.tensor(rng.standard_normal((N, V)) * 2, requires_grad=True)
        targets = torch.tensor(rng.integers(0, V, N))
        loss = torch.nn.functional.cross_entropy(z, targets, label_smoothing=eps)
        (expected,) = torch.autograd.grad(loss, z)
        got = smoothed_ce_backward(_ch11_np(z), targets.numpy().copy(), eps)
        assert_same(got, expected, what=f"dz for N={N}, V={V}, smoothing={eps} (the loss is a mean "
                                        f"over the N rows)")
    return f"{len(cases)} cases, smoothing 0 to 1, match autograd"


@exercise_check(forbidden=_AUTOGRAD + ("torch.nn.functional.silu",))
def check_swiglu_backward(swiglu_backward: Callable) -> str:
    """``swiglu_backward(a, b, dy)`` -> ``(da, db)`` for ``y = silu(a) * b`` elementwise,
    ``silu(a) = a * sigmoid(a)``, compared with autograd in float64."""
    cases = [((5,), 1.0), ((3, 4), 2.0), ((2, 3, 6), 5.0), ((4,), 30.0)]
    for seed, (shape, scale) in enumerate(cases):
        rng = _ch11_rng(40 + seed)
        a = torch.tensor(rng.standard_normal(shape) * scale, requires_grad=True)
        b = torch.tensor(rng.standard_normal(shape), requires_grad=True)
        dy = torch.tensor(rng.standard_normal(shape))
        y = a * torch.sigmoid(a) * b
        expected = torch.autograd.grad((y * dy).sum(), (a, b))
        got = _ch11_arrays(swiglu_backward(_ch11_np(a), _ch11_np(b), _ch11_np(dy)), 2,
                           f"swiglu_backward for shape {shape}")
        assert_same(got[1], expected[1], what=f"db for shape {shape}")
        assert_same(got[0], expected[0], what=f"da for shape {shape} (silu' = s + a·s·(1 - s), "
                                              f"s = sigmoid(a))")
    return f"{len(cases)} shapes, large |a| included, match autograd"


def _ch11_alibi_loss(q, k, v, dout, slope):
    T, D = q.shape[-2], q.shape[-1]
    i = torch.arange(T)
    distance = (i[:, None] - i[None, :]).double()  # (T, T): i - j
    scores = q @ k.transpose(-2, -1) / D ** 0.5 - slope * distance
    scores = scores.masked_fill(distance < 0, float("-inf"))
    return ((torch.softmax(scores, dim=-1) @ v) * dout).sum()


@exercise_check(forbidden=_AUTOGRAD)
def check_alibi_slope_grad(alibi_slope_grad: Callable) -> str:
    """``alibi_slope_grad(q, k, v, dout, slope)`` -> the scalar dL/dslope for causal attention
    with ALiBi scores ``q·k / sqrt(D) - slope·(i - j)``, given the upstream gradient ``dout``."""
    cases = [((4, 3), 0.5), ((2, 6, 4), 0.25), ((2, 2, 5, 3), 1.0), ((1, 3), 0.0), ((8, 2), 2.0)]
    for seed, (shape, slope) in enumerate(cases):
        rng = _ch11_rng(50 + seed)
        q, k, v, dout = (torch.tensor(rng.standard_normal(shape)) for _ in range(4))
        m = torch.tensor(slope, dtype=torch.float64, requires_grad=True)
        (expected,) = torch.autograd.grad(_ch11_alibi_loss(q, k, v, dout, m), m)
        got = alibi_slope_grad(*(t.numpy().copy() for t in (q, k, v, dout)), slope)
        if isinstance(got, (np.ndarray, torch.Tensor)) and np.size(got) != 1:
            raise CheckFailed(f"inputs of shape {shape}: the slope is one number, so its gradient is "
                              f"one number (sum over every query, key and leading axis); got shape "
                              f"{tuple(np.shape(got))}")
        assert_same(np.asarray(got, dtype=np.float64).reshape(()), expected,
                    what=f"dL/dslope for inputs of shape {shape}, slope={slope}")
    return f"{len(cases)} cases, a zero slope and extra leading axes included, match autograd"


@exercise_check
def check_gelu_backward(gelu_backward: Callable) -> str:
    """``gelu_backward(x, dy)`` -> ``dx`` for GPT-2's tanh GELU, eq. (ch07: the feed-forward layer),
    ``y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``; NumPy float64 in and out, compared with
    PyTorch's autograd of ``F.gelu(x, approximate="tanh")``."""
    rng = _ch11_rng(50)
    cases = [("a (4, 5) batch", rng.normal(size=(4, 5)) * 2),
             ("large |x| (saturated tanh)", np.array([-12.0, -6.0, -3.0, 0.0, 3.0, 6.0, 12.0])),
             ("around 0", np.linspace(-1, 1, 11)),
             ("three axes", rng.normal(size=(2, 3, 4)))]
    for what, x in cases:
        dy = rng.normal(size=x.shape)
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        torch.nn.functional.gelu(xt, approximate="tanh").backward(torch.tensor(dy))
        (dx,) = _ch11_arrays((gelu_backward(x.copy(), dy.copy()),), 1, what)
        assert_same(np.asarray(dx, dtype=np.float64), xt.grad.numpy(), f"{what}: dx", rtol=1e-7, atol=1e-9)
    return f"{len(cases)} cases equal to autograd of F.gelu(approximate='tanh')"
