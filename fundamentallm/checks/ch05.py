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
    rng,
)


def _ch05_rng(seed: int) -> torch.Generator:
    return rng(500 + seed)


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


# Every normalization routine of torch and of the package: each of them, reshaped, computes the
# others (LayerNorm is GroupNorm with one group, or BatchNorm of the transpose; a group of GroupNorm
# is LayerNorm of that group), so the norm exercises refuse the whole family.
_NORM_ROUTINES = tuple(f"torch.{n}" for n in (
    "layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "batch_norm", "native_batch_norm",
    "instance_norm", "rms_norm") if hasattr(torch, n)) + tuple(
    f"torch.nn.functional.{n}" for n in ("layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm")
    if hasattr(torch.nn.functional, n)) + ("fundamentallm.norms.LayerNorm.forward", "fundamentallm.norms.RMSNorm.forward") \
    + tuple(f"torch.ops.aten.{n}" for n in ("_native_batch_norm_legit", "_batch_norm_impl_index", "_fused_rms_norm")
            if hasattr(torch.ops.aten, n))  # the kernels no public name leads to (torch.ops.aten.layer_norm ... are refused with theirs)


@exercise_check(forbidden=_NORM_ROUTINES)
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


@exercise_check
def check_dropout_covariance(dropout_covariance: Callable) -> str:
    """``dropout_covariance(W, x, p)`` -> the ``(m, m)`` covariance of ``y = W (z * x) / (1 - p)``
    over the dropout mask ``z`` (independent Bernoulli(1 - p) entries); compared with the exact
    covariance and with a Monte-Carlo estimate, for up to n = 40 inputs (2^40 masks)."""
    cases = [(3, 5, 0.5, 0), (4, 2, 0.1, 1), (2, 6, 0.9, 2), (3, 3, 0.0, 3), (3, 40, 0.3, 4)]  # (m, n, p, seed)
    for m, n, p, seed in cases:
        g = rng(560 + seed)
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
            if not torch.isfinite(got).all():
                raise CheckFailed(f"{what}: not finite; a covariance of finite outputs is finite")
            if not ((got - measured).diagonal().abs().max() <= 0.05 * scale):
                raise CheckFailed(f"{what}: the variances (diagonal) differ from the measured covariance "
                                  f"of 200,000 masks by {(got - measured).diagonal().abs().max():.3g} -- "
                                  "what is the variance of one term z_j x_j / (1 - p)?")
            if not ((got - measured).abs().max() <= 0.05 * scale):
                raise CheckFailed(f"{what}: the covariances between outputs (off the diagonal) differ "
                                  f"from the measured covariance of 200,000 masks by "
                                  f"{(got - measured).abs().max():.3g} -- which mask entries do two "
                                  "outputs share, and which pairs of entries are independent?")
        off = (got - expected).abs().max()
        if p > 0 and 1e-6 * expected.abs().max() < off < 0.05 * expected.abs().max():
            raise CheckFailed(f"{what}: within a few percent of the truth but not exact (off by "
                              f"{off:.2g}): an estimate from sampled masks is not a derivation; which "
                              "pairs of mask entries are independent, and what is Var(z_j)?")
        assert_same(got, expected, what=what, rtol=1e-6, atol=1e-12)
    return f"matches the formula and the measurement on {len(cases)} layers"


def _ch05_not_approximate(got: torch.Tensor, expected: torch.Tensor, what: str,
                          scale: torch.Tensor | None = None) -> None:
    """Reject an answer that is close to the derivative but not equal to it in float64. The error
    is measured against ``scale``, the size of the terms the derivative is made of (default: the
    derivative's own largest entry): when the terms cancel (dx of a batch of two rows is nearly 0)
    an exact formula's rounding is tiny next to the terms, not next to the result, while a finite
    difference's error (at best about eps^(2/3) ~ 4e-11 of the terms) stays far above it."""
    if got.shape != expected.shape or not torch.isfinite(got).all():
        return
    size = expected.abs().max() if scale is None else torch.maximum(expected.abs().max(), scale)
    rel = float((got - expected).abs().max() / size.clamp_min(1e-300))
    if 1e-12 < rel < 1e-3:
        raise CheckFailed(f"{what}: close (relative error {rel:.1e}) but not exact: a numerical "
                          "approximation (a finite difference) is not the derivative; derive every term")


# The backward kernels torch runs for BatchNorm, callable directly (torch.ops.aten, and two under torch).
_BN_BACKWARD_KERNELS = tuple(f"torch.ops.aten.{n}" for n in (
    "native_batch_norm_backward", "batch_norm_backward", "_batch_norm_impl_index_backward",
    "miopen_batch_norm_backward", "cudnn_batch_norm_backward", "batch_norm_backward_reduce",
    "batch_norm_backward_elemt") if hasattr(torch.ops.aten, n)) + tuple(
    f"torch.{n}" for n in ("batch_norm_backward_reduce", "batch_norm_backward_elemt") if hasattr(torch, n))


@exercise_check(forbidden=_BN_BACKWARD_KERNELS, by_hand=True)  # by_hand: autograd in every form is refused too
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
            value = _as_tensor(value).double()
            _ch05_not_approximate(value, expected, f"{what}: {name}")
            assert_same(value, expected, what=f"{what}: {name}", rtol=1e-10, atol=1e-12)
        check_shape(dx, (N, C), what=f"{what}: dx")
        dx = _as_tensor(dx).double()
        sigma = torch.sqrt(x.detach().var(dim=0, unbiased=False) + eps)
        if N > 1 and torch.allclose(dx, dy * gamma.detach() / sigma, rtol=1e-6, atol=1e-8):
            raise CheckFailed(f"{what}: dx treats the batch mean and variance as constants; they are "
                              "computed from every row of x, so each x_n also moves the others' "
                              "outputs: differentiate through mu_B and sigma_B too")
        _ch05_not_approximate(dx, ref[0], f"{what}: dx", scale=(dy.abs() * gamma.detach().abs() / sigma).max())
        assert_same(dx, ref[0], what=f"{what}: dx", rtol=1e-10, atol=1e-12)
    return f"dx, dgamma and dbeta equal autograd's on {len(cases)} batches"


@exercise_check(may_return_none=True, self_check=True)
def check_norm_ablation_prediction(growth_prediction) -> str:
    """``growth_prediction``: ``{"with_norm": ..., "without_norm": ...}``, how the scale of the
    residual stream grows with the number of blocks ``L`` in ``h <- h + f(norm(h))`` and in
    ``h <- h + f(h)`` (random ReLU MLP blocks at initialization)."""
    from .predict import choice_answers

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


@exercise_check(forbidden=_NORM_ROUTINES)
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


def _ch05_stream_std(num_layers: int, scale: float, d: int = 64, seed: int = 0) -> float:
    """Std of the stream after ``num_layers`` pre-LN ReLU MLP blocks (He initialization), each
    branch multiplied by ``scale``: h <- h + scale * W2 relu(W1 LN(h))."""
    g = rng(seed)
    h = torch.randn(256, d, generator=g)
    for _ in range(num_layers):
        W1 = torch.randn(4 * d, d, generator=g) * (2 / d) ** 0.5
        W2 = torch.randn(d, 4 * d, generator=g) * (1 / (4 * d)) ** 0.5
        h = h + scale * torch.relu(torch.nn.functional.layer_norm(h, (d,)) @ W1.T) @ W2.T
    return h.std().item()


@exercise_check
def check_branch_scale(branch_scale: Callable) -> str:
    """``branch_scale(num_layers)`` -> the factor for every residual branch of a pre-LN stack of
    ``num_layers`` blocks such that the stream's final std neither grows nor fades with depth (the
    blocks still contribute); measured on random ReLU MLP stacks of 2 to 128 blocks (three per depth). Judged
    by the variance the blocks add, ``std^2 - 1``: it must stay within a factor 1.3 across the depths
    (that pins the exponent of a power law ``L^-a`` to 0.5 within about 0.04) and above 0.3."""
    import math

    depths = (2, 8, 32, 128)
    scales = [branch_scale(L) for L in depths]
    for L, s in zip(depths, scales):
        if isinstance(s, bool) or not isinstance(s, (int, float, torch.Tensor)):
            raise CheckFailed(f"branch_scale({L}) should return a number, got {s!r}")
        if not math.isfinite(float(s)):
            raise CheckFailed(f"branch_scale({L}) = {float(s)}: not a finite number")
    scales = [float(s) for s in scales]
    # three random stacks per depth: the variance the blocks added to the unit-variance input
    stds = [[_ch05_stream_std(L, s, seed=10 * i + k) for k in range(3)] for i, (L, s) in enumerate(zip(depths, scales))]
    added = [sum(v * v - 1 for v in per) / 3 for per in stds]
    stds = [(1 + a) ** 0.5 for a in added]  # the rms final std over the three stacks
    table = ", ".join(f"L={L}: {v:.2f}" for L, v in zip(depths, stds))
    if not min(added) >= 0.3:
        raise CheckFailed(f"the stream's final std ({table}) stays near the input's 1 at some depth: "
                          "the blocks add almost nothing there; a fading branch scale switches the "
                          "network off as it deepens")
    if not max(added) / min(added) <= 1.3:
        trend = "grows" if added[-1] > added[0] else "fades"
        raise CheckFailed(f"the variance the blocks add (final std^2 - 1) {trend} with depth by a factor "
                          f"{max(added) / min(added):.2f} (final std {table}); how does the variance "
                          "added by L blocks depend on L and on s, when each block reads a normalized "
                          "copy of the stream?")
    return f"final std {table}: independent of depth"
