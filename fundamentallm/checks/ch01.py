"""Checks for the exercises of chapter 1: why attention."""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check
from .predict import answer_given


def _rnn_params(d_in: int, d_h: int, seed: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    W_x = torch.randn(d_h, d_in, generator=g, dtype=dtype) / d_in ** 0.5
    W_h = torch.randn(d_h, d_h, generator=g, dtype=dtype) / d_h ** 0.5
    b = torch.randn(d_h, generator=g, dtype=dtype) * 0.1
    return W_x, W_h, b


def _reference_rnn(W_x, W_h, b) -> torch.nn.RNN:
    """``torch.nn.RNN`` (tanh, batch_first) holding the given weights; its second bias is zero."""
    d_h, d_in = W_x.shape
    rnn = torch.nn.RNN(d_in, d_h, batch_first=True).to(W_x.dtype)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_x)
        rnn.weight_hh_l0.copy_(W_h)
        rnn.bias_ih_l0.copy_(b)
        rnn.bias_hh_l0.zero_()
    return rnn


@exercise_check
def check_rnn_step(rnn_step: Callable) -> str:
    """``rnn_step(x_t, h_prev, W_x, W_h, b)`` -> ``tanh(x_t W_xᵀ + h_prev W_hᵀ + b)``, shape (B, d_h)."""
    cases = [(3, 4, 5, 0, 1.0), (1, 2, 2, 1, 1.0), (4, 6, 3, 2, 5.0)]  # (B, d_in, d_h, seed, scale)
    for B, d_in, d_h, seed, scale in cases:
        W_x, W_h, b = _rnn_params(d_in, d_h, seed)
        g = torch.Generator().manual_seed(100 + seed)
        x_t = torch.randn(B, d_in, generator=g, dtype=torch.float64) * scale  # (B, d_in)
        h_prev = torch.randn(B, d_h, generator=g, dtype=torch.float64)  # (B, d_h)
        with torch.no_grad():
            _, h_ref = _reference_rnn(W_x, W_h, b)(x_t[:, None, :], h_prev[None])  # (1, B, d_h)
        h = rnn_step(x_t.clone(), h_prev.clone(), W_x.clone(), W_h.clone(), b.clone())
        check_shape(h, (B, d_h), what=f"h_t for B={B}, d_in={d_in}, d_h={d_h}")
        assert_same(h, h_ref[0], what=f"h_t for B={B}, d_in={d_in}, d_h={d_h} (vs torch.nn.RNN)")
    return f"matches torch.nn.RNN on {len(cases)} cases"


def _spectral_radius_np(W: torch.Tensor) -> float:
    return float(np.abs(np.linalg.eigvals(W.detach().double().numpy())).max())


@exercise_check
def check_gradient_norm_through_time(gradient_norm_through_time: Callable) -> str:
    """``gradient_norm_through_time(W_h, num_steps)`` -> ``‖∂h_{t+k}/∂h_t‖₂`` for k = 0..num_steps
    in the linear RNN ``h_t = W_h h_{t-1} + W_x x_t + b``; compared with autograd Jacobians."""
    cases = [(4, 0.9, 6, 0), (5, 1.1, 8, 1), (3, 1.0, 0, 2)]  # (d, rho, num_steps, seed)
    for d, rho, num_steps, seed in cases:
        g = torch.Generator().manual_seed(400 + seed)
        W = torch.randn(d, d, generator=g, dtype=torch.float64)
        W_h = W * (rho / _spectral_radius_np(W))  # non-normal: ‖W^k‖ differs from rho^k
        x = torch.randn(d, generator=g, dtype=torch.float64)  # constant input term W_x x_t + b

        def run_k(h, k, W_h=W_h, x=x):  # k steps of the recurrence, from h
            for _ in range(k):
                h = W_h @ h + x
            return h

        h0 = torch.zeros(d, dtype=torch.float64)
        expected = torch.stack([
            torch.linalg.matrix_norm(
                torch.autograd.functional.jacobian(functools.partial(run_k, k=k), h0), ord=2)
            for k in range(num_steps + 1)])  # (num_steps + 1,)
        got = gradient_norm_through_time(W_h.clone(), num_steps)
        what = f"gradient norms for d={d}, rho={rho}, num_steps={num_steps}"
        check_shape(got, (num_steps + 1,), what=what + " (one norm for each k = 0..num_steps)")
        assert_same(torch.as_tensor(got).double(), expected, what=what + " (vs autograd)",
                    rtol=1e-6, atol=1e-9)
    return "matches the autograd Jacobians"


@exercise_check
def check_bptt_jacobian(bptt_jacobian: Callable) -> str:
    """``bptt_jacobian(hs, W_h)`` -> ``∂h_T/∂h_0 = J_T ⋯ J_1`` with ``J_k = diag(1 - h_k²) W_h``
    for a tanh RNN whose states ``h_0..h_T`` are the rows of ``hs``; compared with autograd."""
    cases = [(4, 3, 5, 0), (3, 2, 1, 1), (5, 4, 9, 2)]  # (d_h, d_in, T, seed)
    for d_h, d_in, T, seed in cases:
        W_x, W_h, b = _rnn_params(d_in, d_h, seed)
        W_h = W_h * 1.5  # strong recurrence: the states spread over tanh's curved range
        g = torch.Generator().manual_seed(450 + seed)
        xs = torch.randn(T, d_in, generator=g, dtype=torch.float64)  # (T, d_in)
        h0 = torch.randn(d_h, generator=g, dtype=torch.float64) * 0.5  # (d_h,)

        def run(h, xs=xs, W_x=W_x, W_h=W_h, b=b):  # h_0 -> h_T
            states = [h]
            for x_t in xs:
                states.append(torch.tanh(W_h @ states[-1] + W_x @ x_t + b))
            return states

        with torch.no_grad():
            hs = torch.stack(run(h0))  # (T + 1, d_h): h_0..h_T
        expected = torch.autograd.functional.jacobian(lambda h, run=run: run(h)[-1], h0)
        got = bptt_jacobian(hs.clone(), W_h.clone())
        what = f"dh_T/dh_0 for d_h={d_h}, T={T}"
        check_shape(got, (d_h, d_h), what=what)
        assert_same(torch.as_tensor(got).double(), expected, what=what + " (vs autograd)")
    return f"matches autograd on {len(cases)} sequences"


def _bound_reference(hs: torch.Tensor, W_h: torch.Tensor) -> torch.Tensor:
    """prod_k max_i (1 - h_k,i^2) * sigma_max(W_h) over k = 1..T, from the states h_0..h_T."""
    sigma = torch.linalg.matrix_norm(W_h, ord=2)
    slopes = (1 - hs[1:] ** 2).max(dim=-1).values  # (T,): ||diag(1 - h_k^2)||_2
    return (slopes * sigma).prod()


@exercise_check
def check_bptt_norm_bound(bptt_norm_bound: Callable) -> str:
    """``bptt_norm_bound(hs, W_h)`` -> the bound ``prod_k ||diag(1 - h_k^2)||_2 * ||W_h||_2`` on
    ``||dh_T/dh_0||_2`` (eq. ch01-bound, factor by factor); compared with a reference, and the
    bound must not fall below the true norm from autograd."""
    cases = [(4, 3, 5, 0, 1.5), (3, 2, 1, 1, 1.0), (5, 4, 9, 2, 2.5), (2, 2, 6, 3, 0.5)]
    for d_h, d_in, T, seed, gain in cases:  # (d_h, d_in, T, seed, gain of W_h)
        W_x, W_h, b = _rnn_params(d_in, d_h, seed)
        W_h = W_h * gain
        g = torch.Generator().manual_seed(470 + seed)
        xs = torch.randn(T, d_in, generator=g, dtype=torch.float64)  # (T, d_in)
        h0 = torch.randn(d_h, generator=g, dtype=torch.float64) * 0.5  # (d_h,)

        def run(h, xs=xs, W_x=W_x, W_h=W_h, b=b):  # h_0 -> [h_0, ..., h_T]
            states = [h]
            for x_t in xs:
                states.append(torch.tanh(W_h @ states[-1] + W_x @ x_t + b))
            return states

        with torch.no_grad():
            hs = torch.stack(run(h0))  # (T + 1, d_h)
        true_norm = torch.linalg.matrix_norm(
            torch.autograd.functional.jacobian(lambda h, run=run: run(h)[-1], h0), ord=2)
        expected = _bound_reference(hs, W_h)
        got = torch.as_tensor(bptt_norm_bound(hs.clone(), W_h.clone())).double()
        what = f"the bound for d_h={d_h}, T={T}"
        check_shape(got, (), what=what + " (return one number)")
        rho = float(np.abs(np.linalg.eigvals(W_h.numpy())).max())
        with_rho = (1 - hs[1:] ** 2).max(dim=-1).values.prod() * rho ** T
        if abs(float(got) - float(with_rho)) < 1e-9 * float(with_rho) and \
                abs(float(with_rho) - float(expected)) > 1e-6 * float(expected):
            raise CheckFailed(f"{what}: you used the spectral radius rho(W_h); the bound needs the "
                              "largest singular value ||W_h||_2, since rho is not submultiplicative")
        if float(got) < float(true_norm) * (1 - 1e-9):
            raise CheckFailed(f"{what}: {float(got):.6g} is below the true norm "
                              f"{float(true_norm):.6g} -- not an upper bound")
        assert_same(got, expected, what=what, rtol=1e-6, atol=1e-12)
    return f"matches the reference on {len(cases)} sequences and bounds the autograd norm"


# --- predictions: a value stub (None) is "not attempted yet" ----------------------------------

@exercise_check(may_return_none=True)
def check_orthogonal_rnn_prediction(predicted_norm) -> str:
    """``predicted_norm``: ``||dh_40/dh_0||_2`` of a linear RNN with ``W_h = 0.5 Q``, ``Q`` an 8x8
    orthogonal matrix. The answer, ``0.5**40``, is checked within 1%, and compared with autograd on a
    seeded random orthogonal ``Q``."""
    value = answer_given(predicted_norm, "predicted_norm", "a number")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise CheckFailed(f"predicted_norm should be a number, got {predicted_norm!r}") from None
    Q, _ = torch.linalg.qr(torch.randn(8, 8, generator=torch.Generator().manual_seed(41), dtype=torch.float64))
    W_h = 0.5 * Q

    def forty_steps(h):
        for _ in range(40):
            h = W_h @ h  # the input term does not depend on h_0
        return h

    J = torch.autograd.functional.jacobian(forty_steps, torch.zeros(8, dtype=torch.float64))
    true = float(torch.linalg.matrix_norm(J, ord=2))
    if abs(value - true) <= 0.01 * true:
        return f"||W_h^40||_2 = 0.5^40 = {true:.3g}: Q keeps every length, so only the factor 0.5 compounds"
    if abs(value - 0.5) < 1e-3:
        raise CheckFailed("0.5 is the norm of one step; the Jacobian over 40 steps is W_h^40 (eq. ch01-power)")
    if abs(value - true * 8 ** 0.5) <= 0.01 * true * 8 ** 0.5:
        raise CheckFailed("that is the Frobenius norm of W_h^40; the question asks for the spectral "
                          "norm (largest singular value)")
    if value == 0.0:
        raise CheckFailed("it does not vanish exactly: W_h^40 = 0.5^40 Q^40 is a nonzero matrix; how "
                          "large is it?")
    raise CheckFailed(f"{value:.3g} is not within 1% of the right value. Hint: an orthogonal Q "
                      "keeps every length, so Q^40 has every singular value equal to 1")
