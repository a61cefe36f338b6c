"""Checks for the exercises of chapter 11: backprop by hand."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from .core import CheckFailed, _mixed_seed, assert_same, exercise_check
from .predict import number, require_prediction

# The exercises compute gradients by hand: autograd in any form is forbidden -- reverse mode
# (torch.autograd.grad, Tensor.backward, torch.autograd.functional), forward mode
# (torch.autograd.forward_ad) and the function transforms of torch.func (torch._functorch, all of it).
# The package's finite-difference helper and computer algebra (sympy, mpmath) are forbidden too.
# A hand-written finite difference is not a call that can be forbidden: every check compares at a
# tolerance (1e-11 or tighter) that a derived formula meets and an ordinary float64 finite
# difference does not, on inputs where such a difference loses its digits to rounding (a loss made
# large by entries that do not affect the gradient being compared, or a large offset that cancels).
# The complex step or extended precision would meet it: by_hand=True refuses any complex number or
# long double the answer computes with. The instructor's reading of the code is the final judge.
# torch's derivative kernels, the functions autograd itself runs (torch.ops.aten.gelu_backward ...),
# called directly, are autograd without the tape. by_hand=True refuses the rest: torch.autograd's
# functions, Tensor.backward, torch.func's transforms, the package's finite differences, sympy, mpmath.
_DERIVATIVE_KERNELS = tuple(f"torch.ops.aten.{n}" for n in (
    "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward", "log_sigmoid_backward",
    "_softmax_backward_data", "_log_softmax_backward_data", "nll_loss_backward", "nll_loss2d_backward",
    "native_layer_norm_backward", "_fused_rms_norm_backward", "mul_backward", "div_backward",
    "pow_backward", "sqrt_backward", "rsqrt_backward", "exp_backward") if hasattr(torch.ops.aten, n))
_AUTOGRAD = _DERIVATIVE_KERNELS + ("torch.autograd", "torch._functorch")
_TOL = 1e-11  # a derivation is exact to about 1e-15 relative; a float64 difference quotient is not


def _ch11_rng(seed: int) -> np.random.Generator:
    """NumPy inputs: the book's seed in a notebook, mixed with the grader's secret seed when grading."""
    return np.random.default_rng(_mixed_seed(1100 + seed))


def _ch11_arrays(out: Any, n: int, what: str) -> list[np.ndarray]:
    """A student's tuple of ``n`` gradients, each converted to a float64 NumPy array."""
    if not isinstance(out, (tuple, list)) or len(out) != n:
        raise CheckFailed(f"{what}: expected a tuple of {n} arrays, got {type(out).__name__}"
                          + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    return [o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else o for o in out]


def _ch11_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().copy()


@exercise_check(forbidden=_AUTOGRAD, by_hand=True)
def check_rmsnorm_backward(rmsnorm_backward: Callable) -> str:
    """``rmsnorm_backward(x, gamma, dy, eps)`` -> ``(dx, dgamma)`` for
    ``y = x / sqrt(mean(x**2) + eps) * gamma`` over the last axis, compared with autograd in float64."""
    cases = [((5,), 1.0), ((3, 4), 1.0), ((2, 3, 6), 3.0), ((4, 8), 0.01), ((2, 5), 0.0), ((3, 6), "big")]
    for seed, (shape, scale) in enumerate(cases):
        rng = _ch11_rng(20 + seed)
        big = scale == "big"
        x = torch.tensor(rng.standard_normal(shape) * (1.0 if big else scale), requires_grad=True)
        gamma = torch.tensor(rng.standard_normal(shape[-1]) + 1.0, requires_grad=True)
        dy = torch.tensor(rng.standard_normal(shape))
        if big:  # the last row's upstream gradient is huge: the loss is ~1e8, the other rows' dx stay O(1)
            dy[-1] *= 1e8
        eps = 1e-6
        y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma
        expected = torch.autograd.grad((y * dy).sum(), (x, gamma))
        got = _ch11_arrays(rmsnorm_backward(_ch11_np(x), _ch11_np(gamma), _ch11_np(dy), eps), 2,
                           f"rmsnorm_backward for x of shape {shape}")
        what = f"x of shape {shape}" + (" (all zeros)" if scale == 0 else "") + (
            " whose last row has an upstream gradient of size 1e8 (the loss is about 1e8; a finite "
            "difference of it loses its digits, a derivation does not)" if big else "")
        assert_same(got[1], expected[1], what=f"dgamma for {what} (sum over every axis but the last)",
                    rtol=_TOL, atol=_TOL)
        assert_same(got[0], expected[0], what=f"dx for {what} (the mean of x**2 depends on every "
                                              f"entry of the row, so dx has a coupling term)", rtol=_TOL, atol=_TOL)
    return f"{len(cases)} shapes, a row of zeros and a loss of size 1e8 included, match autograd to 1e-11"


@exercise_check(forbidden=_AUTOGRAD + ("torch.nn.functional.cross_entropy",), by_hand=True)
def check_smoothed_ce_backward(smoothed_ce_backward: Callable) -> str:
    """``smoothed_ce_backward(z, targets, smoothing)`` -> ``dz`` of the mean label-smoothed
    cross-entropy of ``(N, V)`` logits (``F.cross_entropy(..., label_smoothing=smoothing)``)."""
    cases = [(1, 5, 0.0, 0), (4, 7, 0.1, 0), (6, 3, 0.5, 0), (3, 10, 1.0, 0), (5, 6, 0.2, 0), (3, 5, 0.1, 1000),
             (4, 6, 0.1, 1e6)]
    for seed, (N, V, eps, offset) in enumerate(cases):
        rng = _ch11_rng(30 + seed)
        z = torch.tensor(rng.standard_normal((N, V)) * 2 + offset, requires_grad=True)
        targets = torch.tensor(rng.integers(0, V, N))
        loss = torch.nn.functional.cross_entropy(z, targets, label_smoothing=eps)
        (expected,) = torch.autograd.grad(loss, z)
        got = smoothed_ce_backward(_ch11_np(z), targets.numpy().copy(), eps)
        what = f"dz for N={N}, V={V}, smoothing={eps}"
        if offset == 1000:
            what += " and large logits (exp overflows unless the softmax is computed stably)"
        elif offset:
            what += (" and logits near 1e6 (the loss is a difference of two numbers near 1e6, so a finite "
                     "difference of it loses its digits to rounding; a derived gradient does not)")
        else:
            g = np.asarray(got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else got, dtype=float) \
                if isinstance(got, (np.ndarray, torch.Tensor)) else None
            e = expected.numpy()
            if N > 1 and g is not None and g.shape == e.shape and np.allclose(g / N, e, rtol=1e-9, atol=1e-12):
                what += " (off by a factor N: the loss is a mean over the N rows)"
            else:
                what += " (check the smoothed target distribution q that p is compared with, class by class)"
        assert_same(got, expected, what=what, rtol=_TOL, atol=_TOL)
    return (f"{len(cases)} cases, smoothing 0 to 1 and logits of size 1000 and 1e6 included, match autograd "
            f"to 1e-11")


@exercise_check(forbidden=_AUTOGRAD + ("torch.nn.functional.silu",), by_hand=True)
def check_swiglu_backward(swiglu_backward: Callable) -> str:
    """``swiglu_backward(a, b, dy)`` -> ``(da, db)`` for ``y = silu(a) * b`` elementwise,
    ``silu(a) = a * sigmoid(a)``, compared with autograd in float64."""
    cases = [((5,), 1.0), ((3, 4), 2.0), ((2, 3, 6), 5.0), ((4,), 30.0), ((12,), "big")]
    for seed, (shape, scale) in enumerate(cases):
        rng = _ch11_rng(40 + seed)
        big = scale == "big"
        a = rng.standard_normal(shape) * (2.0 if big else scale)
        b = rng.standard_normal(shape)
        if big:  # silu(±700) is huge or tiny, and one b of 1e8 makes the summed loss about 1e8
            a[0], a[1], b[2] = 700.0, -700.0, 1e8
        a, b = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        dy = torch.tensor(rng.standard_normal(shape))
        y = a * torch.sigmoid(a) * b
        expected = torch.autograd.grad((y * dy).sum(), (a, b))
        got = _ch11_arrays(swiglu_backward(_ch11_np(a), _ch11_np(b), _ch11_np(dy)), 2,
                           f"swiglu_backward for shape {shape}")
        where = f"shape {shape}" + (" with a = ±700 and one b = 1e8 (a finite difference loses its "
                                    "digits there, a derivation does not)" if big else "")
        assert_same(got[1], expected[1], what=f"db for {where}", rtol=_TOL, atol=_TOL)
        assert_same(got[0], expected[0], what=f"da for {where} (silu' = s + a·s·(1 - s), "
                                              f"s = sigmoid(a))", rtol=_TOL, atol=_TOL)
    return f"{len(cases)} shapes, large |a| and a loss of size 1e8 included, match autograd to 1e-11"


def _ch11_alibi_loss(q, k, v, dout, slope):
    T, D = q.shape[-2], q.shape[-1]
    i = torch.arange(T)
    distance = (i[:, None] - i[None, :]).double()  # (T, T): i - j
    scores = q @ k.transpose(-2, -1) / D ** 0.5 - slope * distance
    scores = scores.masked_fill(distance < 0, float("-inf"))
    return ((torch.softmax(scores, dim=-1) @ v) * dout).sum()


def _ch11_slope_grad(got: Any, shape: tuple) -> float:
    if isinstance(got, (np.ndarray, torch.Tensor)) and np.size(got) != 1:
        raise CheckFailed(f"inputs of shape {shape}: the slope is one number, so its gradient is "
                          f"one number (sum over every query, key and leading axis); got shape "
                          f"{tuple(np.shape(got))}")
    try:
        value = float(np.asarray(got, dtype=np.float64).reshape(()))
    except (TypeError, ValueError):
        raise CheckFailed(f"inputs of shape {shape}: return one float, got {type(got).__name__}") from None
    if not math.isfinite(value):
        raise CheckFailed(f"inputs of shape {shape}: the gradient is {value}; it is finite for "
                          f"finite inputs (masked scores have P = 0, so their dS is 0, not NaN)")
    return value


def _ch11_far_key(rng: np.random.Generator, T: int, slope: float) -> tuple:
    """(q, k, v, dout) of shape (T, 2) where every query i weighs two keys alike: itself (score B)
    and key 0, whose score is raised by exactly the penalty slope·i it pays (plus N(0, 1)). The
    loss then changes over steps of the slope of about 1/i, so a finite difference must take steps
    far below 1/T, or extrapolate from coarse ones: at T = 160, 6 Richardson levels from a step of
    0.05 are off by 3e-10 or more (300 seeds); the derivation is exact to rounding (4e-14 or less)."""
    i, B = np.arange(T), 10.0
    q = np.stack([np.sqrt(2) * (slope * i + B + rng.standard_normal(T)), np.full(T, np.sqrt(2) * B)], -1)
    k = np.zeros((T, 2))
    k[0, 0], k[1:, 1] = 1.0, 1.0
    return tuple(torch.tensor(a) for a in (q, k, rng.standard_normal((T, 2)), rng.standard_normal((T, 2))))


@exercise_check(forbidden=_AUTOGRAD, by_hand=True)
def check_alibi_slope_grad(alibi_slope_grad: Callable) -> str:
    """``alibi_slope_grad(q, k, v, dout, slope)`` -> the scalar dL/dslope for causal attention
    with ALiBi scores ``q·k / sqrt(D) - slope·(i - j)``, given the upstream gradient ``dout``.

    Derived by hand, not measured: autograd is forbidden, and a float64 finite difference of the
    loss fails. On plain inputs the check compares at 1e-11 (a derivation is exact to about 1e-15; a
    float64 central or five-point difference is off by more than that on some case; the complex
    step or extended precision would not be, and the check refuses them). One case has T = 160 and a
    far key that every query weighs like its own (:func:`_ch11_far_key`): the loss changes over
    steps of the slope of about 1/160, and a finite difference extrapolated from fixed steps
    (Richardson, 6 levels from h = 0.05: 1e-13 on the plain cases) is off by 3e-10 or more. Then
    every value row gets the same large offset c (v_j + c for every key j): out = P v + c, so the
    loss gains sum(c · dout), a constant that does not depend on the slope, and the exact gradient
    is unchanged (the softmax backward removes it); a finite difference of the loss, whose value is
    now about 1e6, loses its digits to rounding (1e-7 or worse at every step size). No special
    object is handed over: the same inputs and tolerances judge an answer in a reader's kernel and
    in the grader's worker. (A difference quotient whose step is fitted to each input and
    extrapolated, on values centred over the keys, can still come close: the instructor's reading
    of the code decides there.)"""
    cases = [((4, 3), 0.5), ((2, 6, 4), 0.25), ((2, 2, 5, 3), 1.0), ((1, 3), 0.0), ((8, 2), 2.0), ((160, 2), 2.0)]
    for seed, (shape, slope) in enumerate(cases):
        rng = _ch11_rng(50 + seed)
        far = shape[-2] > 64
        q, k, v, dout = _ch11_far_key(rng, shape[-2], slope) if far else \
            (torch.tensor(rng.standard_normal(shape)) for _ in range(4))
        m = torch.tensor(slope, dtype=torch.float64, requires_grad=True)
        (expected,) = torch.autograd.grad(_ch11_alibi_loss(q, k, v, dout, m), m)
        got = _ch11_slope_grad(alibi_slope_grad(*(t.numpy().copy() for t in (q, k, v, dout)), slope), shape)
        where = (" where a far key competes with the nearest, so the loss changes over slope steps of about "
                 "1/T (a finite difference must resolve them, a derivation need not)") if far else ""
        assert_same(np.float64(got), expected, what=f"dL/dslope for inputs of shape {shape}, slope={slope}{where} "
                    f"(compared to 1e-11: a derivation is exact to rounding)", rtol=1e-11, atol=1e-11)
        if shape[-2] == 1:
            continue
        offset = 1e6 * torch.tensor(rng.standard_normal(shape[-1]))  # the same for every key
        got = _ch11_slope_grad(alibi_slope_grad(*(t.numpy().copy() for t in (q, k, v + offset, dout)), slope), shape)
        if not abs(got - expected.item()) <= 3e-8 * (1 + abs(expected.item())):
            raise CheckFailed(f"inputs of shape {shape} whose value rows all share one large offset c: "
                              f"your dL/dslope moved by {abs(got - expected.item()):.1e}, but c adds to "
                              f"the loss only sum(c·dout), which does not depend on the slope; a "
                              f"derived gradient stays put (the softmax backward cancels c), a finite "
                              f"difference of the loss loses its digits to rounding -- derive it")
    return (f"{len(cases)} cases, a zero slope, extra leading axes and 160 tokens with a far key included, "
            f"match autograd to 1e-11, and stay put under a large offset shared by the value rows")


def _ch11_gelu_grad(x: np.ndarray) -> np.ndarray:
    """dy/dx of the tanh GELU, by autograd of F.gelu in float64 (the check's reference)."""
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    (dx,) = torch.autograd.grad(torch.nn.functional.gelu(xt, approximate="tanh").sum(), xt)
    return dx.numpy()


@exercise_check(forbidden=_AUTOGRAD, by_hand=True)
def check_gelu_backward(gelu_backward: Callable, limits: Any, extremes: Any) -> str:
    """``gelu_backward(x, dy)`` -> ``dx`` for GPT-2's tanh GELU, eq. (ch07: the feed-forward layer),
    ``y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``; NumPy float64 in and out, compared with
    PyTorch's autograd of ``F.gelu(x, approximate="tanh")`` at a tolerance (5e-14 absolute) that
    the derived formula meets and an ordinary float64 finite difference does not (its best step
    leaves 1e-11 or more, and 1e-9 where |x| is large); the complex step or extended precision
    would meet it, and the check refuses them (``by_hand``). ``limits``: the predicted limits of dy/dx as
    x -> -inf, at x = 0 and as x -> +inf; ``extremes``: its predicted (minimum, maximum)."""
    require_prediction(limits, "limits", "three numbers: dy/dx as x -> -inf, at 0, as x -> +inf")
    require_prediction(extremes, "extremes", "two numbers: the minimum and the maximum of dy/dx")
    if not (isinstance(limits, (tuple, list)) and len(limits) == 3):
        raise CheckFailed(f"limits must be three numbers (x -> -inf, x = 0, x -> +inf), got {limits!r}")
    if not (isinstance(extremes, (tuple, list)) and len(extremes) == 2):
        raise CheckFailed(f"extremes must be two numbers (minimum, maximum), got {extremes!r}")
    lim = [number(v, f"limits[{i}]") for i, v in enumerate(limits)]
    ext = [number(v, f"extremes[{i}]") for i, v in enumerate(extremes)]
    for value, expected, where, why in (
            (lim[0], 0.0, "x -> -inf", "what tanh u tends to, and whether x (1 - tanh^2 u) du/dx can "
                                       "stay large when 1 - tanh^2 u falls like exp(-2|u|)"),
            (lim[1], 0.5, "x = 0", "which terms of the product rule survive at x = 0"),
            (lim[2], 1.0, "x -> +inf", "what tanh u tends to, and whether x (1 - tanh^2 u) du/dx can "
                                       "stay large when 1 - tanh^2 u falls like exp(-2|u|)")):
        if not abs(value - expected) <= 1e-6:
            raise CheckFailed(f"limits: your value at {where} is not the limit of dy/dx there; "
                              f"rethink {why}")
    grid = np.linspace(-6.0, 6.0, 120001)
    g = _ch11_gelu_grad(grid)
    true = (float(g.min()), float(g.max()))
    if not (abs(ext[0] - true[0]) <= 2e-3 and abs(ext[1] - true[1]) <= 2e-3):
        raise CheckFailed("extremes: your (minimum, maximum) of dy/dx are not within 0.002 of the "
                          "tanh GELU's; does dy/dx go above 1 or below 0, and where (set the second "
                          "derivative to zero, or evaluate your gelu_backward on a fine grid)? "
                          "gelu(x) - gelu(-x) = x also ties the minimum to the maximum")
    rng = _ch11_rng(60)
    cases = [("a (4, 5) batch", rng.normal(size=(4, 5)) * 2),
             ("large |x| (saturated tanh)", np.array([-40.0, -12.0, -6.0, -3.0, 0.0, 3.0, 6.0, 12.0, 40.0])),
             ("around 0", np.linspace(-1, 1, 11)),
             ("three axes", rng.normal(size=(2, 3, 4))),
             ("the curved region, 50 points", rng.uniform(-3, 3, size=50))]
    for what, x in cases:
        dy = rng.normal(size=x.shape)
        (dx,) = _ch11_arrays((gelu_backward(x.copy(), dy.copy()),), 1, what)
        dx = np.asarray(dx, dtype=np.float64)
        if not np.isfinite(dx).all():
            raise CheckFailed(f"{what}: dx has NaN or inf; the derivative is finite everywhere "
                              f"(1 - tanh^2 u underflows to 0 at large |u|, which is fine)")
        assert_same(dx, dy * _ch11_gelu_grad(x), f"{what}: dx (compared to 5e-14: a derived formula is exact "
                    f"to rounding, an ordinary float64 difference quotient is not)", rtol=5e-13, atol=5e-14)
    zero = grid[int(np.nonzero(np.diff(np.sign(g)) > 0)[0][0])]  # where gelu turns from falling to rising
    return (f"{len(cases)} cases equal to autograd of F.gelu(approximate='tanh') to 5e-14; dy/dx "
            f"ranges from {true[0]:.4f} to {true[1]:.4f} (at x = {grid[g.argmin()]:.3f} and "
            f"{grid[g.argmax()]:.3f}) and is 0 at x = {zero:.3f}")
