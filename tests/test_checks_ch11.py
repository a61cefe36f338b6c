"""Chapter 11: the gradient-check helpers (``numerical_gradient``, ``gradient_check``) and the
exercise checks, which pass correct NumPy backward passes and fail, with CheckFailed, a stub and
plausible wrong answers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from book_solutions import book_solution

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


# --- the exercises: wrong answers live in fundamentallm/checks/ch11.py (tests/test_catches.py) ---


alibi_slope_grad = book_solution("ch11-ex4", "alibi_slope_grad")
gelu_backward = book_solution("ch11-ex5", "gelu_backward")


def test_alibi_slope_gradient_is_zero_for_one_token():
    rng = np.random.default_rng(0)
    q, k, v, dout = (rng.standard_normal((1, 4)) for _ in range(4))
    assert alibi_slope_grad(q, k, v, dout, 0.5) == 0.0


def test_alibi_slope_gradient_ignores_a_shared_value_offset():
    """The premise of the check's finite-difference trap: an offset shared by every value row
    leaves dL/dslope unchanged (exactly, in the derivation; to 1e-8 in float64)."""
    rng = np.random.default_rng(1)
    q, k, v, dout = (rng.standard_normal((2, 6, 4)) for _ in range(4))
    base = alibi_slope_grad(q, k, v, dout, 0.5)
    shifted = alibi_slope_grad(q, k, v + 1e6 * rng.standard_normal(4), dout, 0.5)
    assert abs(base - shifted) < 1e-8 * (1 + abs(base))


def test_gelu_derivative_extremes_are_tied():
    """gelu(x) - gelu(-x) = x, so dy/dx at x and -x add up to 1: the minimum is 1 - the maximum."""
    x = np.linspace(-6, 6, 12001)
    g = gelu_backward(x, np.ones_like(x))
    np.testing.assert_allclose(g + g[::-1], 1.0, atol=1e-12)
    assert 1.12 < g.max() < 1.14 and abs(g.min() + g.max() - 1) < 1e-9
