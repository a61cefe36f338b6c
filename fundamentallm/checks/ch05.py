"""Checks for the exercises of chapter 5: normalization and residuals."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .core import (
    CheckFailed,
    _as_tensor,
    _expect_value_error,
    assert_same,
    check_shape,
    exercise_check,
)


def _ch05_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(500 + seed)


def _ch05_norm_cases(seed: int) -> list[tuple[str, torch.Tensor, float]]:
    """(name, x, eps): shapes, dtypes, a large eps (tells eps inside the root from eps outside)
    and constant rows (zero variance: the result must be finite)."""
    g = _ch05_rng(seed)
    return [
        ("x of shape (4, 8), eps=1e-5", 3 * torch.randn(4, 8, generator=g) + 2, 1e-5),
        ("x of shape (2, 3, 16) in float64, eps=1e-5",
         torch.randn(2, 3, 16, generator=g, dtype=torch.float64), 1e-5),
        ("x of shape (3, 5) with small values and a large eps=0.5",
         0.1 * torch.randn(3, 5, generator=g), 0.5),
        ("constant rows (zero variance), eps=1e-5", torch.full((2, 6), 3.0), 1e-5),
    ]


def _ch05_grads(out: Any, inputs: list[torch.Tensor], upstream: torch.Tensor, what: str):
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise CheckFailed(f"{what}: the result is not differentiable -- compute it from the "
                          f"inputs with torch operations (no .detach(), .item() or NumPy)")
    return torch.autograd.grad((out * upstream).sum(), inputs, allow_unused=True)


@exercise_check(forbidden=("fundamentallm.norms.LayerNorm.forward",))
def check_layer_norm(layer_norm: Callable) -> str:
    """``layer_norm(x, weight, bias, eps)``: normalise the last dimension with the biased
    variance, eps inside the square root, then scale and shift; outputs and gradients equal to
    ``F.layer_norm``."""
    F = torch.nn.functional
    for i, (name, x, eps) in enumerate(_ch05_norm_cases(0)):
        g = _ch05_rng(10 + i)
        C = x.shape[-1]
        weight = torch.randn(C, generator=g, dtype=x.dtype)
        bias = torch.randn(C, generator=g, dtype=x.dtype)
        ins = [t.clone().requires_grad_(True) for t in (x, weight, bias)]
        refs = [t.clone().requires_grad_(True) for t in (x, weight, bias)]
        what = f"layer_norm({name})"
        out = layer_norm(ins[0], ins[1], ins[2], eps)
        expected = F.layer_norm(refs[0], (C,), refs[1], refs[2], eps)
        check_shape(out, tuple(x.shape), what=what)
        assert_same(out, expected.detach(), what=f"{what} (subtract the mean, divide by "
                    f"sqrt(biased variance + eps), then * weight + bias)", atol=1e-5, rtol=1e-4)
        upstream = torch.randn(x.shape, generator=g, dtype=x.dtype)
        got = _ch05_grads(out, ins, upstream, what)
        want = torch.autograd.grad((expected * upstream).sum(), refs)
        for label, a, e in zip(("x", "weight", "bias"), got, want):
            if a is None:
                raise CheckFailed(f"{what}: the result does not depend on {label}")
            assert_same(a, e, what=f"{what}: gradient with respect to {label}", atol=1e-4, rtol=1e-3)
    return "outputs and gradients equal to F.layer_norm (float32/64, large eps, constant rows)"


def _ch05_blocks(num_layers: int, width: int, norm: bool, seed: int) -> torch.nn.ModuleList:
    from torch import nn
    torch.manual_seed(540 + seed)
    return nn.ModuleList(
        nn.Sequential(*([nn.LayerNorm(width)] if norm else []), nn.Linear(width, 2 * width),
                      nn.Tanh(), nn.Linear(2 * width, width))
        for _ in range(num_layers))


def _ch05_reference_grad_norms(blocks, x: torch.Tensor, residual: bool) -> torch.Tensor:
    h = x
    for block in blocks:
        h = h + block(h) if residual else block(h)
    params = [list(b.parameters()) for b in blocks]
    grads = torch.autograd.grad(h.mean(), [p for ps in params for p in ps])
    out, i = [], 0
    for ps in params:
        out.append(torch.sqrt(sum(gr.pow(2).sum() for gr in grads[i:i + len(ps)])))
        i += len(ps)
    return torch.stack(out).detach()


@exercise_check
def check_residual_gradient_norms(residual_gradient_norms: Callable) -> str:
    """``residual_gradient_norms(blocks, x, residual)``: run ``h = h + block(h)`` (or
    ``h = block(h)``) through the blocks, backpropagate ``h.mean()``, and return, per block, the
    L2 norm of all its parameters' gradients together, as a 1-D tensor."""
    cases = [(6, 8, False, True), (6, 8, False, False), (4, 6, True, True), (5, 6, True, False),
             (1, 4, False, True)]
    for seed, (L, C, norm, residual) in enumerate(cases):
        blocks = _ch05_blocks(L, C, norm, seed)
        x = torch.randn(5, C, generator=_ch05_rng(40 + seed))
        what = (f"residual_gradient_norms({L} blocks of width {C}"
                f"{' with LayerNorm' if norm else ''}, residual={residual})")
        expected = _ch05_reference_grad_norms(blocks, x, residual)
        got = residual_gradient_norms(blocks, x.clone(), residual)
        if isinstance(got, (list, tuple)):
            got = torch.tensor([float(v) for v in got])
        check_shape(got, (L,), what=what)
        assert_same(_as_tensor(got).float(), expected, what=f"{what} (entry l: sqrt of the summed "
                    f"squared gradients of every parameter of block l, loss = output.mean())",
                    rtol=1e-4, atol=1e-7)
        again = residual_gradient_norms(blocks, x.clone(), residual)
        if isinstance(again, (list, tuple)):
            again = torch.tensor([float(v) for v in again])
        assert_same(_as_tensor(again).float(), expected, what=f"{what}, called a second time on the "
                    f"same blocks (gradients must not accumulate: zero them, or use "
                    f"torch.autograd.grad)", rtol=1e-4, atol=1e-7)
    return f"{len(cases)} stacks with and without residuals and norms"



@exercise_check
def check_dropout_covariance(dropout_covariance: Callable) -> str:
    """``dropout_covariance(W, x, p)`` -> the ``(m, m)`` covariance of ``y = W (z * x) / (1 - p)``
    over the dropout mask ``z`` (independent Bernoulli(1 - p) entries); compared with the formula
    ``p / (1 - p) W diag(x^2) W^T`` and with a Monte-Carlo estimate."""
    cases = [(3, 5, 0.5, 0), (4, 2, 0.1, 1), (2, 6, 0.9, 2), (3, 3, 0.0, 3)]  # (m, n, p, seed)
    for m, n, p, seed in cases:
        g = torch.Generator().manual_seed(560 + seed)
        W = torch.randn(m, n, generator=g, dtype=torch.float64)
        x = torch.randn(n, generator=g, dtype=torch.float64)
        got = _as_tensor(dropout_covariance(W.clone(), x.clone(), p)).double()
        what = f"the covariance for W ({m}, {n}), p={p}"
        check_shape(got, (m, m), what=what)
        expected = p / (1 - p) * W @ torch.diag(x ** 2) @ W.T
        if p > 0:
            z = (torch.rand(200_000, n, generator=g, dtype=torch.float64) >= p).double()
            ys = (z * x / (1 - p)) @ W.T  # (samples, m)
            measured = torch.cov(ys.T)
            scale = measured.diagonal().max()
            if (got - measured).abs().max() > 0.05 * scale:
                raise CheckFailed(f"{what}: differs from the measured covariance of 200,000 masks by "
                                  f"{(got - measured).abs().max():.3g} -- is your formula missing "
                                  "the off-diagonal terms, or the 1/(1-p)?")
        assert_same(got, expected, what=what, rtol=1e-6, atol=1e-12)
    return f"matches the formula and the measurement on {len(cases)} layers"


@exercise_check(forbidden=("torch.autograd.grad", "torch.Tensor.backward", "torch.func"))
def check_batch_norm_backward(batch_norm_backward: Callable) -> str:
    """``batch_norm_backward(x, gamma, dy, eps=1e-5)`` -> ``(dx, dgamma, dbeta)`` for training-mode
    BatchNorm of ``x`` (N, C) with batch statistics (biased variance), given the upstream gradient
    ``dy`` (N, C); compared with autograd through ``F.batch_norm``, without autograd on your side."""
    g = _ch05_rng(60)
    cases = [(8, 3, 1e-5), (2, 5, 1e-5), (16, 4, 0.5), (5, 1, 1e-3)]  # (N, C, eps)
    for N, C, eps in cases:
        x = (2 * torch.randn(N, C, generator=g, dtype=torch.float64) + 1).requires_grad_(True)
        gamma = (1 + 0.5 * torch.randn(C, generator=g, dtype=torch.float64)).requires_grad_(True)
        beta = torch.randn(C, generator=g, dtype=torch.float64, requires_grad=True)
        dy = torch.randn(N, C, generator=g, dtype=torch.float64)
        y = torch.nn.functional.batch_norm(x, None, None, gamma, beta, training=True, eps=eps)
        ref = torch.autograd.grad((y * dy).sum(), (x, gamma, beta))
        got = batch_norm_backward(x.detach().clone(), gamma.detach().clone(), dy.clone(), eps)
        what = f"batch_norm_backward(x of shape ({N}, {C}), eps={eps})"
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise CheckFailed(f"{what}: return the tuple (dx, dgamma, dbeta)")
        dx, dgamma, dbeta = got
        for name, value, expected in (("dbeta", dbeta, ref[2]), ("dgamma", dgamma, ref[1])):
            check_shape(value, tuple(expected.shape), what=f"{what}: {name}")
            assert_same(_as_tensor(value).double(), expected, what=f"{what}: {name}", rtol=1e-6, atol=1e-8)
        check_shape(dx, (N, C), what=f"{what}: dx")
        dx = _as_tensor(dx).double()
        sigma = torch.sqrt(x.detach().var(dim=0, unbiased=False) + eps)
        if N > 1 and torch.allclose(dx, dy * gamma.detach() / sigma, rtol=1e-6, atol=1e-8):
            raise CheckFailed(f"{what}: dx treats the batch mean and variance as constants; they are "
                              "computed from every row of x, so each x_n also moves the others' "
                              "outputs (subtract the mean of dy_hat and of dy_hat * x_hat)")
        assert_same(dx, ref[0], what=f"{what}: dx", rtol=1e-6, atol=1e-8)
    return f"dx, dgamma and dbeta equal autograd's on {len(cases)} batches"


@exercise_check(may_return_none=True)
def check_norm_ablation_prediction(growth_prediction) -> str:
    """``growth_prediction``: ``{"with_norm": ..., "without_norm": ...}``, how the scale of the
    residual stream grows with the number of blocks ``L`` in ``h <- h + f(norm(h))`` and in
    ``h <- h + f(h)`` (random ReLU MLP blocks at initialization)."""
    from .ch01 import choice_answers

    options = ("constant", "sqrt", "linear", "exponential")
    answer = choice_answers(growth_prediction, "growth_prediction",
                            {"with_norm": options, "without_norm": options})
    if answer["with_norm"] != "sqrt":
        raise CheckFailed("with_norm: each block reads a unit-scale copy, so it adds a vector of about "
                          "the same size each time, independent of the stream; L roughly independent "
                          "additions of equal variance give a standard deviation like sqrt(L)")
    if answer["without_norm"] != "exponential":
        raise CheckFailed("without_norm: f(h) is now proportional in size to h itself, so each block "
                          "multiplies the stream's variance by about the same factor (1 + c): "
                          "that compounds")
    return "the norm turns a multiplicative growth into an additive one"


@exercise_check(forbidden=("torch.nn.functional.group_norm", "torch.group_norm"))
def check_group_norm(group_norm: Callable) -> str:
    """``group_norm(x, num_groups, weight, bias, eps=1e-5)`` for ``x`` (N, C): normalize each
    sample over each group of ``C // num_groups`` consecutive channels, then the per-channel gain
    and shift; a ``ValueError`` naming ``num_groups`` when it does not divide ``C``."""
    g = _ch05_rng(70)
    cases = [(4, 8, 2), (3, 6, 1), (2, 6, 6), (5, 12, 3), (1, 4, 2)]  # (N, C, num_groups)
    for N, C, G in cases:
        x = 3 * torch.randn(N, C, generator=g, dtype=torch.float64) + torch.randn(C, generator=g, dtype=torch.float64)
        weight = 1 + 0.5 * torch.randn(C, generator=g, dtype=torch.float64)
        bias = 0.5 * torch.randn(C, generator=g, dtype=torch.float64)
        expected = torch.nn.functional.group_norm(x, G, weight, bias, eps=1e-5)
        got = group_norm(x.clone(), G, weight.clone(), bias.clone(), 1e-5)
        what = f"group_norm(x of shape ({N}, {C}), num_groups={G})"
        check_shape(got, (N, C), what=what)
        got = _as_tensor(got).double()
        if G > 1 and torch.allclose(got, torch.nn.functional.layer_norm(x, (C,), weight, bias, 1e-5), atol=1e-6):
            raise CheckFailed(f"{what}: that is LayerNorm over all C channels; each group of "
                              f"{C // G} consecutive channels has its own mean and variance")
        per_channel = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5) * weight + bias
        if N > 1 and torch.allclose(got, per_channel, atol=1e-6):
            raise CheckFailed(f"{what}: that normalizes over the batch (BatchNorm); GroupNorm uses each "
                              "sample's own channels")
        assert_same(got, expected, what=f"{what} (vs F.group_norm)", rtol=1e-6, atol=1e-8)
    _expect_value_error(lambda: group_norm(torch.zeros(2, 6), 4, torch.ones(6), torch.zeros(6), 1e-5),
                        "group_norm with C=6, num_groups=4", "num_groups")
    return f"{len(cases)} cases equal F.group_norm, from LayerNorm-like (1 group) to one channel per group"
