"""Checks for the exercises of chapter 1: why attention."""

from __future__ import annotations

import math
import sys
from decimal import Decimal, localcontext
from typing import Callable

import torch

from .core import _STUDENT, CheckFailed, _frame_kind, assert_same, check_shape, exercise_check, rng
from .predict import answer_given

# Ways around "derive it by hand": autograd, computer algebra (W^n in closed form) and
# high-precision numerics are refused by by_hand=True; the library routines that compute a matrix
# power or a spectral norm numerically are listed here.
# numpy.linalg as a whole: every function of the module (norm, matrix_power, svd, eig, ...).
_NO_LINALG = ("torch.linalg.matrix_power", "torch.matrix_power", "torch.linalg.matrix_norm", "torch.linalg.norm",
              "torch.linalg.svdvals", "torch.linalg.svd", "torch.linalg.eigvalsh", "torch.linalg.eigh",
              "torch.linalg.eigvals", "torch.linalg.eig", "numpy.linalg")


def _rnn_params(d_in: int, d_h: int, g: torch.Generator, dtype=torch.float64):
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


@exercise_check(forbidden=("torch.rnn_tanh_cell", "torch.rnn_tanh", "torch.nn.RNN.forward", "torch.nn.RNNCell.forward"))
def check_rnn_step(rnn_step: Callable) -> str:
    """``rnn_step(x_t, h_prev, W_x, W_h, b)`` -> ``tanh(x_t W_xᵀ + h_prev W_hᵀ + b)``, shape (B, d_h),
    without PyTorch's RNN (cell) routines."""
    g = rng(100)
    cases = [(3, 4, 5, 1.0), (1, 2, 2, 1.0), (4, 6, 3, 5.0)]  # (B, d_in, d_h, scale)
    for B, d_in, d_h, scale in cases:
        W_x, W_h, b = _rnn_params(d_in, d_h, g)
        x_t = torch.randn(B, d_in, generator=g, dtype=torch.float64) * scale  # (B, d_in)
        h_prev = torch.randn(B, d_h, generator=g, dtype=torch.float64)  # (B, d_h)
        with torch.no_grad():
            _, h_ref = _reference_rnn(W_x, W_h, b)(x_t[:, None, :], h_prev[None])  # (1, B, d_h)
        h = rnn_step(x_t.clone(), h_prev.clone(), W_x.clone(), W_h.clone(), b.clone())
        check_shape(h, (B, d_h), what=f"h_t for B={B}, d_in={d_in}, d_h={d_h}")
        assert_same(h, h_ref[0], what=f"h_t for B={B}, d_in={d_in}, d_h={d_h} (vs torch.nn.RNN; with one "
                                      "sequence per row, which side of each weight matrix does a row multiply, "
                                      "and is every term inside the tanh?)")
    return f"matches torch.nn.RNN on {len(cases)} cases"


def _jordan_norm_reference(lam: float, c: float, k: int) -> float:
    W = torch.tensor([[lam, c], [0.0, lam]], dtype=torch.float64)
    return float(torch.linalg.matrix_norm(torch.linalg.matrix_power(W, k), ord=2))


def _jordan_norm_exact(lam: float, c: float, k: int) -> float:
    """``||W^k||_2`` from the closed form, in 60-digit decimal arithmetic: the reference where
    ``k`` is far too large for ``matrix_power`` to stay exact (its repeated squaring, like any
    product of ``2 x 2`` matrices, piles up one rounding error per multiplication)."""
    with localcontext() as ctx:
        ctx.prec = 60
        L, C = Decimal(lam), Decimal(c)
        a = L ** k
        b = abs(k * C * L ** (k - 1)) if k else Decimal(0)
        return float((b + (b * b + 4 * a * a).sqrt()) / 2)


class _LineBudget(Exception):
    """The student's code ran more lines of Python than a closed form needs."""


def _call_with_line_budget(fn: Callable, args: tuple, budget: int):
    """``fn(*args)``, stopped with :class:`_LineBudget` once the student's frames have run more than
    ``budget`` lines of Python (a loop over the ``k`` steps, where a closed form takes a few)."""
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


# (lam, c, k) with k far beyond any loop: the closed form is exact to rounding there, a product of
# 2 x 2 matrices (even by repeated squaring, 40-odd multiplications) is off by 1e-8 or more.
_JORDAN_HUGE_K = ((1.0 - 1e-12, 1.3, 10 ** 13), (1.0 - 1e-9, -0.7, 3 * 10 ** 10))


@exercise_check(forbidden=_NO_LINALG, by_hand=True)
def check_jordan_gradient_norm(jordan_gradient_norm: Callable) -> str:
    """``jordan_gradient_norm(lam, c, k)`` -> ``||W^k||_2`` for ``W = [[lam, c], [0, lam]]``, in
    closed form (no matrix power, norm or SVD routine, no autograd); compared with
    ``matrix_power`` + ``matrix_norm`` on fresh ``(lam, c, k)``, including ``c < 0`` and ``k = 0``,
    and with the exact closed form to 1e-12 at ``k = 10^13`` (where a product of matrices, even by
    repeated squaring, is off by 1e-8); a loop over the ``k`` steps is stopped after 20,000 lines."""
    g = rng(410)
    u = torch.rand(8, 3, generator=g, dtype=torch.float64)
    cases = [(0.5 + 0.45 * float(a), (4 * float(b) - 2) or 0.5, int(3 + 60 * float(n))) for a, b, n in u]
    cases += [(0.9, -1.5 - float(u[0, 1]), 25), (0.8, 1.0 + float(u[1, 1]), 0), (0.95, 2.0, 1),
              (1.0 - 1e-5, 0.5 + float(u[2, 1]), 200_000)]
    cases += list(_JORDAN_HUGE_K)
    for lam, c, k in cases:
        what = f"jordan_gradient_norm(lam={lam:.4g}, c={c:.4g}, k={k})"
        try:
            got = _call_with_line_budget(jordan_gradient_norm, (lam, c, k), 20_000)
        except _LineBudget:
            raise CheckFailed(f"{what}: your function ran more than 20,000 lines of Python for one k. A "
                              "loop over the steps (or over the powers of W) computes W^k; the exercise asks "
                              "for ||W^k||_2 as a formula in lam, c and k: derive W^k's entries by induction "
                              "on k") from None
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise CheckFailed(f"{what}: return one number, got {type(got).__name__}") from None
        huge = (lam, c, k) in _JORDAN_HUGE_K
        expected = _jordan_norm_exact(lam, c, k) if huge else _jordan_norm_reference(lam, c, k)
        if math.isclose(got, expected, rel_tol=1e-12 if huge else 1e-6, abs_tol=1e-300):
            continue
        if huge and math.isclose(got, expected, rel_tol=1e-4):
            raise CheckFailed(f"{what} = {got:.12g}: off by {abs(got / expected - 1):.1e} relative, where a "
                              "closed form is exact to about 1e-16. A product of 2 x 2 matrices, even by "
                              "repeated squaring, piles up one rounding error per multiplication; write "
                              "W^k's entries as formulas in k (derive them by induction), then its norm")
        if math.isclose(got, lam ** k, rel_tol=1e-6):
            raise CheckFailed(f"{what} = {got:.6g}: that is rho^k, the eigenvalues' rule. W is not normal: "
                              "work out W^k entry by entry and see what its off-diagonal entry does")
        if c < 0 and k > 0:
            raise CheckFailed(f"{what} = {got:.6g} is not ||W^k||_2 (here c < 0): a norm cannot depend "
                              "on the sign of the off-diagonal entry; where does your formula use it?")
        raise CheckFailed(f"{what} = {got:.6g} is not ||W^k||_2: derive W^k by induction on k, then the "
                          "largest singular value of an upper-triangular 2x2 matrix from the eigenvalues "
                          "of M^T M")
    return f"||W^k||_2 in closed form on {len(cases)} fresh (lam, c, k), k up to 10^13"


def _leaky_case(d_h: int, d_in: int, T: int, alpha: float, g: torch.Generator, w_scale: float = 1.5):
    W_x, W_h, b = _rnn_params(d_in, d_h, g)
    W_h = W_h * w_scale  # 1.5, a strong recurrence: the states spread over tanh's curved range
    xs = torch.randn(T, d_in, generator=g, dtype=torch.float64)  # (T, d_in)
    h0 = torch.randn(d_h, generator=g, dtype=torch.float64) * 0.5  # (d_h,)

    def run(h):  # h_0 -> [h_0, ..., h_T]
        states = [h]
        for x_t in xs:
            states.append((1 - alpha) * states[-1] + alpha * torch.tanh(W_h @ states[-1] + W_x @ x_t + b))
        return states

    with torch.no_grad():
        hs = torch.stack(run(h0))  # (T + 1, d_h)
    expected = torch.autograd.functional.jacobian(lambda h: run(h)[-1], h0)
    return hs, W_h, expected


@exercise_check(by_hand=True)
def check_leaky_bptt_jacobian(leaky_bptt_jacobian: Callable) -> str:
    """``leaky_bptt_jacobian(hs, W_h, alpha)`` -> ``∂h_T/∂h_0`` of the leaky tanh RNN
    ``h_k = (1 - alpha) h_{k-1} + alpha tanh(W_h h_{k-1} + W_x x_k + b)`` from its states ``hs``
    ``(T + 1, d_h)``, without autograd; compared with autograd on fresh sequences."""
    g = rng(450)
    alphas = [0.1 + 0.8 * float(a) for a in torch.rand(3, generator=g)]
    cases = [(4, 3, 6, alphas[0]), (3, 2, 1, alphas[1]), (5, 4, 9, alphas[2]), (4, 2, 5, 1.0), (3, 3, 0, 0.5)]
    for d_h, d_in, T, alpha in cases:
        hs, W_h, expected = _leaky_case(d_h, d_in, T, alpha, g)
        what = f"dh_T/dh_0 for d_h={d_h}, T={T}, alpha={alpha:.3g}"
        got = leaky_bptt_jacobian(hs.clone(), W_h.clone(), alpha)
        check_shape(got, (d_h, d_h), what=what)
        got = torch.as_tensor(got).double()
        if not torch.isfinite(got).all():
            raise CheckFailed(f"{what}: your matrix has NaN or infinite entries")
        if T == 0 and not torch.allclose(got, expected):
            raise CheckFailed(f"{what}: with T = 0 no step was taken (hs holds h_0 only): what is "
                              "dh_0/dh_0?")
        assert_same(got, expected, what=what + " (vs autograd; rethink one step's Jacobian: which "
                    "paths lead from h_(k-1) to h_k, and at which point is tanh's slope taken?)")
    # A Jacobian that vanishes (a weak recurrence, little leak, 16 steps): its entries are about
    # 1e-13 while h_T's are O(1). The product of the step Jacobians stays exact to a few ulps
    # relative to its own size; a difference quotient of h_T loses its digits to rounding (its
    # error is about 1e-16 / step, far above the Jacobian itself at any usable step).
    hs, W_h, expected = _leaky_case(3, 2, 16, 0.9, g, w_scale=0.05)
    what = f"dh_T/dh_0 for d_h=3, T=16, alpha=0.9 and a weak recurrence (entries ~{expected.abs().max():.0e})"
    got = leaky_bptt_jacobian(hs.clone(), W_h.clone(), 0.9)
    check_shape(got, (3, 3), what=what)
    got = torch.as_tensor(got).double()
    rel = float((got - expected).abs().max() / expected.abs().max())
    if not rel <= 1e-8:
        raise CheckFailed(f"{what}: your matrix is off by {rel:.1e} relative to its largest entry. A product "
                          f"of derived step Jacobians is exact to rounding however small it gets; a "
                          f"difference quotient of h_T is not, once the Jacobian is far below h_T's "
                          f"rounding error -- derive J_k and multiply")
    return (f"matches autograd on {len(cases) + 1} fresh sequences, alpha = 1, T = 0 and a vanishing "
            f"Jacobian included")


def _saturated_case(a: float, k: int, s: float):
    """(bound, true norm) at the fixed point h* = (0, tanh s) of h <- tanh(W h + x), W = a[[1,1],[-1,-1]]."""
    W = a * torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    c = math.tanh(s)
    h_star = torch.tensor([0.0, c], dtype=torch.float64)
    x = torch.tensor([-a * c, s + a * c], dtype=torch.float64)

    def run(h):
        for _ in range(k):
            h = torch.tanh(W @ h + x)
        return h

    true = float(torch.linalg.matrix_norm(torch.autograd.functional.jacobian(run, h_star), ord=2))
    bound = float(torch.linalg.matrix_norm(W, ord=2)) ** k  # max slope 1 (unit 1 sits at 0)
    return bound, true


@exercise_check(forbidden=_NO_LINALG, by_hand=True)
def check_bound_slack(bound_slack: Callable) -> str:
    """``bound_slack(a, k, s)`` -> the ratio of the step-by-step bound (eq. ch01-bound with each
    step's largest slope) to the true ``||∂h_k/∂h_0||_2`` at the fixed point ``(0, tanh s)`` of the
    tanh RNN with ``W_h = a [[1, 1], [-1, -1]]``; derived by hand, compared with autograd on fresh
    ``(a, k, s)``, k = 400 included, where a loop that simulates the k steps is stopped after 200
    lines of Python."""
    g = rng(470)
    u = torch.rand(6, 3, generator=g, dtype=torch.float64)
    cases = [(0.5 + 2.5 * float(p), int(1 + 30 * float(q)), 0.3 + 2.7 * float(r)) for p, q, r in u]
    cases += [(2.0, 20, 8.0), (1.0 + float(u[0, 0]), 1, 0.5), (0.5, 400, 1.1)]
    for a, k, s in cases:
        what = f"bound_slack(a={a:.4g}, k={k}, s={s:.4g})"
        try:
            got = _call_with_line_budget(bound_slack, (a, k, s), 200)
        except _LineBudget:
            raise CheckFailed(f"{what}: your function ran more than 200 lines of Python: a loop over the k "
                              "steps simulates the Jacobians (a measurement); the exercise asks for the ratio "
                              "as a formula in a, k and s. What is J^k for a rank-one J = u v^T?") from None
        try:
            got = float(got)
        except (TypeError, ValueError):
            raise CheckFailed(f"{what}: return one number, got {type(got).__name__}") from None
        bound, true = _saturated_case(a, k, s)
        expected = bound / true
        if math.isclose(got, expected, rel_tol=1e-6):
            continue
        if not math.isfinite(got) or got <= 0:
            raise CheckFailed(f"{what} = {got!r}: the bound is a product of positive factors and the true "
                              "norm is positive here; with rho(W_h) = 0 in place of sigma_max, would it still "
                              "be a bound?")
        if got < 1:
            raise CheckFailed(f"{what} = {got:.6g} < 1 would make the bound smaller than the norm it bounds")
        raise CheckFailed(f"{what} = {got:.6g} is not bound / true norm: rethink the saturated unit's "
                          "slope (it is small, not zero, when s is small), the rank of one step's Jacobian, "
                          "and the norm of a rank-one matrix")
    return f"bound / true norm derived exactly on {len(cases)} fresh (a, k, s)"


# --- predictions: a value stub (None) is "not attempted yet" ----------------------------------

@exercise_check(may_return_none=True)
def check_orthogonal_rnn_prediction(predicted_norm) -> str:
    """``predicted_norm``: ``||dh_40/dh_0||_2`` of a linear RNN with ``W_h = 0.5 Q``, ``Q`` an 8x8
    orthogonal matrix. Checked within 1% against autograd on a seeded random orthogonal ``Q``."""
    value = answer_given(predicted_norm, "predicted_norm", "a number")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise CheckFailed(f"predicted_norm should be a number, got {predicted_norm!r}") from None
    Q, _ = torch.linalg.qr(torch.randn(8, 8, generator=rng(41), dtype=torch.float64))
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
        raise CheckFailed("that is the norm of one step, of W_h itself; the question is about dh_40/dh_0: "
                          "which matrix is that (eq. ch01-power), and what does Q do to lengths?")
    if abs(value - true * 8 ** 0.5) <= 0.01 * true * 8 ** 0.5:
        raise CheckFailed("that is the Frobenius norm; the question asks for the spectral "
                          "norm (largest singular value)")
    if value == 0.0:
        raise CheckFailed("it does not vanish exactly: W_h^40 is a nonzero matrix; how large is it?")
    raise CheckFailed(f"{value:.3g} is not within 1% of the right value. What does an orthogonal "
                      "matrix do to lengths, and what does that make the singular values of Q^40?")
