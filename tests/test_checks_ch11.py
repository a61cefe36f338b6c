"""Chapter 11: the gradient-check helpers (``numerical_gradient``, ``gradient_check``) and the
exercise checks, which pass correct NumPy backward passes and fail, with CheckFailed, a stub and
plausible wrong answers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from book_solutions import book_solution
from check_tables import wrong_answer_tests

from fundamentallm.gradcheck import gradient_check, numerical_gradient

# --- numerical_gradient and gradient_check ------------------------------------------------------


def test_numerical_gradient_of_a_quadratic_numpy():
    x = np.array([1.0, -2.0, 0.5])
    g = numerical_gradient(lambda v: (v ** 2).sum(), x)
    assert isinstance(g, np.ndarray) and g.dtype == np.float64
    np.testing.assert_allclose(g, 2 * x, rtol=1e-8, atol=1e-8)
    np.testing.assert_array_equal(x, [1.0, -2.0, 0.5])  # the input is not modified


def test_numerical_gradient_torch_keeps_kind_and_shape():
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))  # float32 in, float64 out
    g = numerical_gradient(lambda v: torch.sin(v).sum(), x)
    assert isinstance(g, torch.Tensor) and g.dtype == torch.float64 and g.shape == (2, 3)
    torch.testing.assert_close(g, torch.cos(x.double()), rtol=1e-8, atol=1e-8)


def test_gradient_check_with_autograd_is_tiny():
    rng = np.random.default_rng(0)
    x, W = rng.standard_normal((4, 3)), rng.standard_normal((2, 3))
    err = gradient_check(lambda x, W: (torch.tanh(x @ W.T) ** 2).sum(), [x, W])
    assert err < 1e-8
    errs = gradient_check(lambda x, W: (torch.tanh(x @ W.T) ** 2).sum(), [x, W], return_all=True)
    assert len(errs) == 2 and max(errs) == err


def test_gradient_check_with_given_grads():
    rng = np.random.default_rng(1)
    x, W = rng.standard_normal((4, 3)), rng.standard_normal((2, 3))
    dy = rng.standard_normal((4, 2))

    def f(x, W):
        return (x @ W.T * dy).sum()

    assert gradient_check(f, [x, W], grads=[dy @ W, dy.T @ x]) < 1e-8
    # a wrong gradient (a factor 2 off in dW) is caught
    assert gradient_check(f, [x, W], grads=[dy @ W, 2 * dy.T @ x]) > 0.1
    # a single input needs no list
    assert gradient_check(lambda x: (x ** 3).sum(), x, grads=3 * x ** 2) < 1e-8


def test_gradient_check_exactly_zero_gradient():
    # A shift added to every logit does not change softmax: its gradient is exactly zero, and
    # the numerical one is rounding noise. zero_tol makes that count as a match.
    rng = np.random.default_rng(2)
    z, c, G = rng.standard_normal((3, 4)), np.array([0.3]), rng.standard_normal((3, 4))

    def f(z, c):
        return (torch.softmax(torch.as_tensor(z + c), dim=-1) * torch.as_tensor(G)).sum()

    y = torch.softmax(torch.tensor(z + c), dim=-1).numpy()
    dz = y * (G - (G * y).sum(-1, keepdims=True))
    assert gradient_check(f, [z, c], grads=[dz, np.zeros(1)]) < 1e-8
    assert gradient_check(f, [z, c]) < 1e-8  # autograd route
    assert gradient_check(f, [z, c], grads=[dz, np.zeros(1)], zero_tol=0.0) > 0.5
    assert gradient_check(f, [z, c], grads=[dz, np.ones(1)]) > 0.5  # a nonzero answer is caught


def test_gradient_check_bad_inputs():
    x = np.ones(3)
    with pytest.raises(ValueError, match="scalar"):
        gradient_check(lambda x: x * 2, x, grads=np.ones(3))
    with pytest.raises(ValueError, match="grads has 1 entries"):
        gradient_check(lambda x, y: (x * y).sum(), [x, x], grads=[x])
    with pytest.raises(ValueError, match="shape"):
        gradient_check(lambda x: (x ** 2).sum(), x, grads=np.ones(4))
    with pytest.raises(ValueError, match="eps"):
        numerical_gradient(lambda x: x.sum(), x, eps=0.0)
    with pytest.raises(TypeError, match="NumPy arrays or torch tensors"):
        numerical_gradient(lambda x: 0.0, "abc")
    with pytest.raises(TypeError, match="torch operations"):
        gradient_check(lambda x: float(np.sum(np.asarray(x.detach()) ** 2)), x)


# --- correct answers -----------------------------------------------------------------------------


rmsnorm_backward = book_solution("ch11-ex1", "rmsnorm_backward")
smoothed_ce_backward = book_solution("ch11-ex2", "smoothed_ce_backward")
swiglu_backward = book_solution("ch11-ex3", "swiglu_backward")
alibi_slope_grad = book_solution("ch11-ex4", "alibi_slope_grad")
gelu_backward = book_solution("ch11-ex5", "gelu_backward")


def _rmsnorm_as_layernorm(x, gamma, dy, eps=1e-6):
    """LayerNorm's backward (subtracts the mean): the term RMSNorm does not have."""
    C = x.shape[-1]
    rstd = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    xhat = (x - x.mean(axis=-1, keepdims=True)) * rstd
    g = dy * gamma
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).reshape(-1, C).sum(axis=0)


def _rmsnorm_no_coupling(x, gamma, dy, eps=1e-6):
    """Treats r as a constant: forgets that r depends on x."""
    C = x.shape[-1]
    rstd = 1.0 / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps)
    return dy * gamma * rstd, (dy * x * rstd).reshape(-1, C).sum(axis=0)


def _smoothed_sum_not_mean(z, targets, smoothing):
    return smoothed_ce_backward(z, targets, smoothing) * z.shape[0]


def _smoothed_ignores_smoothing(z, targets, smoothing):
    return smoothed_ce_backward(z, targets, 0.0)


def _swiglu_no_product_rule(a, b, dy):
    s = 1.0 / (1.0 + np.exp(-a))
    return dy * b * s, dy * a * s


def _alibi_without_softmax_jacobian(q, k, v, dout, slope):
    """Uses dP instead of dS: skips the softmax backward."""
    T = q.shape[-2]
    i = np.arange(T)
    distance = (i[:, None] - i[None, :]).astype(float)
    dp = np.where(distance >= 0, dout @ np.swapaxes(v, -1, -2), 0.0)
    return float((dp * -distance).sum())


def _alibi_per_row(q, k, v, dout, slope):
    """Returns one gradient per query instead of the sum."""
    return np.full(q.shape[-2], alibi_slope_grad(q, k, v, dout, slope) / q.shape[-2])


def _gelu_backward_no_product_rule(x, dy):
    c = np.sqrt(2 / np.pi)
    return dy * 0.5 * (1 + np.tanh(c * (x + 0.044715 * x ** 3)))


def _gelu_backward_exact_erf(x, dy):
    """The derivative of the exact (erf) GELU: close, but not the tanh form's."""
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.gelu(xt).backward(torch.tensor(dy))
    return xt.grad.numpy()


def _rmsnorm_with_autograd(x, gamma, dy, eps=1e-6):
    xt, gt = torch.tensor(x, requires_grad=True), torch.tensor(gamma, requires_grad=True)
    y = xt / torch.sqrt(xt.pow(2).mean(-1, keepdim=True) + eps) * gt
    y.backward(torch.tensor(dy))
    return xt.grad.numpy(), gt.grad.numpy()


ROWS = [
    ("check_rmsnorm_backward", _rmsnorm_as_layernorm, r"dgamma for x of shape"),
    ("check_rmsnorm_backward", _rmsnorm_no_coupling, r"dx for .*coupling term"),
    ("check_rmsnorm_backward", lambda x, gamma, dy, eps=1e-6: rmsnorm_backward(x, gamma, dy)[0],
     r"expected a tuple of 2 arrays"),
    ("check_rmsnorm_backward", lambda x, gamma, dy, eps=1e-6: (
        rmsnorm_backward(x, gamma, dy, eps)[0], (dy * x).sum(axis=tuple(range(x.ndim - 1)))),
     r"dgamma"),
    ("check_rmsnorm_backward", _rmsnorm_with_autograd, r"asks you not to use torch.Tensor.backward"),
    ("check_smoothed_ce_backward", _smoothed_sum_not_mean, r"mean over the N rows"),
    ("check_smoothed_ce_backward", _smoothed_ignores_smoothing, r"smoothing=0.1"),
    ("check_swiglu_backward", _swiglu_no_product_rule, r"da for shape .*product|silu'"),
    ("check_swiglu_backward", lambda a, b, dy: swiglu_backward(a, b, dy)[::-1], r"db for shape"),
    ("check_alibi_slope_grad", _alibi_without_softmax_jacobian, r"dL/dslope for inputs of shape"),
    ("check_alibi_slope_grad", _alibi_per_row, r"one number"),
    ("check_alibi_slope_grad", lambda q, k, v, dout, slope: -alibi_slope_grad(q, k, v, dout, slope),
     r"dL/dslope"),
    ("check_gelu_backward", _gelu_backward_no_product_rule, r"check_gelu_backward"),
    ("check_gelu_backward", _gelu_backward_exact_erf, r"check_gelu_backward"),
    ("check_gelu_backward", lambda x, dy: gelu_backward(x, np.ones_like(dy)), r"check_gelu_backward"),
]

test_wrong_answer_gets_its_message = wrong_answer_tests(ROWS)


def test_alibi_slope_gradient_is_zero_for_one_token():
    rng = np.random.default_rng(0)
    q, k, v, dout = (rng.standard_normal((1, 4)) for _ in range(4))
    assert alibi_slope_grad(q, k, v, dout, 0.5) == 0.0
