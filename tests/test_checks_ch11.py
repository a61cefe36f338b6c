"""Chapter 11: the gradient-check helpers (``numerical_gradient``, ``gradient_check``) and the
exercise checks, which pass correct NumPy backward passes and fail, with CheckFailed, a stub and
plausible wrong answers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed
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


def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


softmax_backward = book_solution("ch11-ex1", "softmax_backward")


linear_backward = book_solution("ch11-ex2", "linear_backward")


layernorm_backward = book_solution("ch11-ex3", "layernorm_backward")


def _attention_parts(q, k, v, causal):
    T, D = q.shape[-2], q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(D)
    if causal:
        s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    return _softmax(s), D


attention_backward = book_solution("ch11-ex4", "attention_backward")


def attention_backward_torch(q, k, v, dout, causal=True):
    """Right numbers, but autograd does the work: the exercise forbids it."""
    q, k, v = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    T, D = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-2, -1) / D ** 0.5
    if causal:
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    out = torch.softmax(s, -1) @ v
    return torch.autograd.grad((out * torch.tensor(dout)).sum(), (q, k, v))


# --- wrong answers -------------------------------------------------------------------------------

def stub(*args, **kwargs):
    raise NotImplementedError


def softmax_backward_diagonal(y, dy):
    return y * (1 - y) * dy  # only the diagonal of the Jacobian


def softmax_backward_identity(y, dy):
    return dy


def linear_backward_transposed(x, W, dy):
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    return dy @ W, x2.T @ dy2, dy2.sum(axis=0)  # dW as (d_in, d_out)


def linear_backward_mean_bias(x, W, dy):
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    return dy @ W, dy2.T @ x2, dy2.mean(axis=0)


def layernorm_backward_no_mean_terms(x, gamma, dy, eps=1e-5):
    C = x.shape[-1]
    rstd = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    xhat = (x - x.mean(axis=-1, keepdims=True)) * rstd
    return dy * gamma * rstd, (dy * xhat).reshape(-1, C).sum(0), dy.reshape(-1, C).sum(0)


def layernorm_backward_no_eps(x, gamma, dy, eps=1e-5):
    return layernorm_backward(x, gamma, dy, eps=0.0)


def attention_backward_unscaled(q, k, v, dout, causal=True):
    dq, dk, dv = attention_backward(q, k, v, dout, causal)
    return dq * np.sqrt(q.shape[-1]), dk * np.sqrt(q.shape[-1]), dv


def attention_backward_ignores_mask(q, k, v, dout, causal=True):
    return attention_backward(q, k, v, dout, causal=False)


def attention_backward_two_values(q, k, v, dout, causal=True):
    return attention_backward(q, k, v, dout, causal)[:2]


# --- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("check, fn", [
    (checks.check_softmax_backward, softmax_backward),
    (checks.check_linear_backward, linear_backward),
    (checks.check_layernorm_backward, layernorm_backward),
    (checks.check_attention_backward, attention_backward),
])
def test_correct_answers_pass(check, fn, capsys):
    assert check(fn) is True
    assert "passed" in capsys.readouterr().out


def test_autograd_is_forbidden():
    with pytest.raises(CheckFailed, match="asks you not to use torch.autograd.grad"):
        checks.check_attention_backward(attention_backward_torch)


def _linear_backward_with_backward(x, W, dy):
    x, W = torch.tensor(x, requires_grad=True), torch.tensor(W, requires_grad=True)
    b = torch.zeros(W.shape[0], dtype=W.dtype, requires_grad=True)
    (x @ W.T + b).backward(torch.tensor(dy))
    return x.grad, W.grad, b.grad


def test_backward_is_forbidden():
    with pytest.raises(CheckFailed, match="asks you not to use torch.Tensor.backward"):
        checks.check_linear_backward(_linear_backward_with_backward)


@pytest.mark.parametrize("check", [checks.check_softmax_backward, checks.check_linear_backward,
                                   checks.check_layernorm_backward, checks.check_attention_backward])
def test_stub_fails_with_a_clear_message(check):
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        check(stub)


@pytest.mark.parametrize("check, fn, message", [
    (checks.check_softmax_backward, softmax_backward_diagonal, "dz"),
    (checks.check_softmax_backward, softmax_backward_identity, "dz"),
    (checks.check_linear_backward, linear_backward_transposed, "dW"),
    (checks.check_linear_backward, linear_backward_mean_bias, "db"),
    (checks.check_layernorm_backward, layernorm_backward_no_mean_terms, "dx"),
    (checks.check_layernorm_backward, layernorm_backward_no_eps, "eps"),
    (checks.check_attention_backward, attention_backward_unscaled, "dq"),
    (checks.check_attention_backward, attention_backward_ignores_mask, "causal=True"),
    (checks.check_attention_backward, attention_backward_two_values, "tuple of 3"),
])
def test_wrong_answers_fail(check, fn, message):
    with pytest.raises(CheckFailed, match=message):
        check(fn)


def test_checks_are_registered():
    for name in ("check_softmax_backward", "check_linear_backward", "check_layernorm_backward",
                 "check_attention_backward"):
        assert name in checks.CHECKS


# --- gelu_backward: the backward pass the chapter skipped ------------------------------------------


def _gelu_backward(x, dy):
    c = np.sqrt(2 / np.pi)
    u = c * (x + 0.044715 * x ** 3)
    t = np.tanh(u)
    return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * c * (1 + 3 * 0.044715 * x ** 2))


def _gelu_backward_no_product_rule(x, dy):
    c = np.sqrt(2 / np.pi)
    return dy * 0.5 * (1 + np.tanh(c * (x + 0.044715 * x ** 3)))


def _gelu_backward_exact_erf(x, dy):
    """The derivative of the exact (erf) GELU: close, but not the tanh form's."""
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.gelu(xt).backward(torch.tensor(dy))
    return xt.grad.numpy()


def test_gelu_backward_correct(capsys):
    assert checks.check_gelu_backward(_gelu_backward) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [_gelu_backward_no_product_rule, _gelu_backward_exact_erf,
                                   lambda x, dy: _gelu_backward(x, np.ones_like(dy))])
def test_gelu_backward_wrong(wrong):
    with pytest.raises(CheckFailed, match="check_gelu_backward"):
        checks.check_gelu_backward(wrong)
