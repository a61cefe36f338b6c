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


@exercise_check(forbidden=_AUTOGRAD)
def check_softmax_backward(softmax_backward: Callable) -> str:
    """``softmax_backward(y, dy)`` -> ``dz`` for ``y = softmax(z)`` over the last axis, compared
    with PyTorch autograd in float64 (shapes (5,), (3, 4), (2, 3, 6); saturated and masked rows)."""
    cases = [((5,), 1.0, False), ((3, 4), 1.0, False), ((2, 3, 6), 3.0, False),
             ((4, 7), 30.0, False), ((4, 4), 1.0, True)]
    for seed, (shape, scale, masked) in enumerate(cases):
        rng = _ch11_rng(seed)
        z = torch.tensor(rng.standard_normal(shape) * scale)
        if masked:  # a causal mask: exact zeros in y
            z = z.masked_fill(~torch.ones(shape, dtype=torch.bool).tril(), float("-inf"))
        dy = torch.tensor(rng.standard_normal(shape))
        z.requires_grad_(True)
        y = torch.softmax(z, dim=-1)
        (expected,) = torch.autograd.grad((y * dy).sum(), z)
        got = softmax_backward(y.detach().numpy().copy(), dy.numpy().copy())
        assert_same(got, expected, what=f"dz for y of shape {shape}" + (" (masked)" if masked else ""))
    return f"{len(cases)} cases match autograd"


@exercise_check(forbidden=_AUTOGRAD)
def check_linear_backward(linear_backward: Callable) -> str:
    """``linear_backward(x, W, dy)`` -> ``(dx, dW, db)`` for ``y = x @ W.T + b``, compared with
    autograd of ``F.linear`` in float64 (one row, a batch, and extra leading axes)."""
    cases = [((1, 3), 2), ((5, 4), 3), ((2, 3, 6), 4), ((7, 2), 5)]
    for seed, (x_shape, d_out) in enumerate(cases):
        rng = _ch11_rng(seed)
        x = torch.tensor(rng.standard_normal(x_shape), requires_grad=True)
        W = torch.tensor(rng.standard_normal((d_out, x_shape[-1])), requires_grad=True)
        b = torch.tensor(rng.standard_normal(d_out), requires_grad=True)
        dy = torch.tensor(rng.standard_normal((*x_shape[:-1], d_out)))
        expected = torch.autograd.grad((torch.nn.functional.linear(x, W, b) * dy).sum(), (x, W, b))
        got = _ch11_arrays(linear_backward(x.detach().numpy().copy(), W.detach().numpy().copy(),
                                           dy.numpy().copy()), 3, "linear_backward")
        for name, g, e in zip(("dx", "dW", "db"), got, expected):
            assert_same(g, e, what=f"{name} for x of shape {x_shape}, W of shape {tuple(W.shape)}")
    return f"{len(cases)} cases match autograd"


@exercise_check(forbidden=_AUTOGRAD)
def check_layernorm_backward(layernorm_backward: Callable) -> str:
    """``layernorm_backward(x, gamma, dy, eps=1e-5)`` -> ``(dx, dgamma, dbeta)``, compared with
    autograd of ``F.layer_norm`` in float64 (incl. a constant row and a large offset)."""
    cases = [((4, 8), 1e-5, "normal"), ((2, 3, 5), 1e-5, "normal"), ((3, 6), 1e-5, "constant row"),
             ((3, 6), 1e-3, "large offset"), ((1, 2), 1e-5, "normal")]
    for seed, (shape, eps, kind) in enumerate(cases):
        rng = _ch11_rng(seed)
        x = rng.standard_normal(shape)
        if kind == "constant row":
            x[0] = 0.7  # zero variance: only eps keeps the division finite
        if kind == "large offset":
            x = x + 100.0
        C = shape[-1]
        xt = torch.tensor(x, requires_grad=True)
        gamma = torch.tensor(rng.standard_normal(C) + 1.0, requires_grad=True)
        beta = torch.tensor(rng.standard_normal(C), requires_grad=True)
        dy = torch.tensor(rng.standard_normal(shape))
        y = torch.nn.functional.layer_norm(xt, (C,), gamma, beta, eps=eps)
        expected = torch.autograd.grad((y * dy).sum(), (xt, gamma, beta))
        got = _ch11_arrays(layernorm_backward(x.copy(), gamma.detach().numpy().copy(), dy.numpy().copy(),
                                              eps=eps), 3, "layernorm_backward")
        for name, g, e in zip(("dx", "dgamma", "dbeta"), got, expected):
            assert_same(g, e, what=f"{name} for x of shape {shape} ({kind}, eps={eps})")
    return f"{len(cases)} cases match autograd"


@exercise_check(forbidden=_AUTOGRAD)
def check_attention_backward(attention_backward: Callable) -> str:
    """``attention_backward(q, k, v, dout, causal=True)`` -> ``(dq, dk, dv)`` for
    ``softmax(q kᵀ/√D + mask) v``, compared with autograd in float64 (causal and not; (T, D),
    (B, H, T, D), a single token)."""
    cases = [((4, 3), True), ((4, 3), False), ((2, 3, 5, 4), True), ((1, 2), True), ((6, 8), True)]
    for seed, (shape, causal) in enumerate(cases):
        rng = _ch11_rng(seed)
        q, k, v = (torch.tensor(rng.standard_normal(shape), requires_grad=True) for _ in range(3))
        dout = torch.tensor(rng.standard_normal(shape))
        T, D = shape[-2], shape[-1]
        scores = q @ k.transpose(-2, -1) / float(np.sqrt(D))  # (..., T, T)
        if causal:
            scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        expected = torch.autograd.grad((out * dout).sum(), (q, k, v))
        got = _ch11_arrays(attention_backward(q.detach().numpy().copy(), k.detach().numpy().copy(),
                                              v.detach().numpy().copy(), dout.numpy().copy(), causal=causal),
                           3, "attention_backward")
        for name, g, e in zip(("dq", "dk", "dv"), got, expected):
            assert_same(g, e, what=f"{name} for inputs of shape {shape}, causal={causal}")
    return f"{len(cases)} cases match autograd"


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
