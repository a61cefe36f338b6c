"""Gradient checking by finite differences: chapter 11 derives it; any chapter or test may use it."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch


def _float64_copy(x: Any) -> Any:
    """A float64 copy of a NumPy array or torch tensor (a torch tensor is detached)."""
    if isinstance(x, torch.Tensor):
        return x.detach().to(torch.float64).clone()
    if isinstance(x, (np.ndarray, np.generic, float, int, list, tuple)):
        return np.array(x, dtype=np.float64)
    raise TypeError(f"gradient checking needs NumPy arrays or torch tensors, got {type(x).__name__}")


def _scalar(value: Any, what: str = "f") -> float:
    """``f``'s output as a Python float; it must be a scalar (one element)."""
    arr = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"{what} must return a scalar, got an output of shape {arr.shape}; "
                         f"check a scalar such as (f(x) * g).sum() for a fixed random g instead")
    return float(arr.reshape(()))


def numerical_gradient(f: Callable[[Any], Any], x: Any, eps: float = 1e-6) -> Any:
    """Central-difference gradient of a scalar function, in float64.

    ``df/dx[i] ≈ (f(x + eps·e_i) - f(x - eps·e_i)) / (2·eps)`` for every element ``i`` of ``x``.
    The truncation error is O(eps²) and the rounding error O(1e-16 / eps): ``eps=1e-6`` in float64
    is accurate to about 1e-9 relative. ``x`` is a NumPy array or a torch tensor; ``f`` is called
    with a float64 copy of the same kind (``x`` itself is never modified) and must return a scalar.
    Returns the gradient with the shape and kind of ``x``, in float64.

    Example: ``numerical_gradient(lambda v: (v ** 2).sum(), np.array([1.0, -2.0]))`` is about
    ``array([ 2., -4.])``. It costs two calls of ``f`` per element: use small inputs.
    """
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
        raise ValueError(f"eps={eps!r} must be a positive float (1e-6 suits float64)")
    x = _float64_copy(x)
    is_torch = isinstance(x, torch.Tensor)
    grad = torch.zeros_like(x) if is_torch else np.zeros_like(x)
    flat_x, flat_g = x.reshape(-1), grad.reshape(-1)  # views: writing to them writes to x, grad
    with torch.no_grad():
        for i in range(flat_x.shape[0]):
            old = float(flat_x[i])
            flat_x[i] = old + eps
            f_plus = _scalar(f(x))
            flat_x[i] = old - eps
            f_minus = _scalar(f(x))
            flat_x[i] = old
            flat_g[i] = (f_plus - f_minus) / (2 * eps)
    return grad


def _relative_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    """``‖a - n‖ / max(‖a‖ + ‖n‖, 1e-30)``: 0 when equal, 1 when opposite, scale-free."""
    diff = np.linalg.norm((analytic - numeric).ravel())
    scale = np.linalg.norm(analytic.ravel()) + np.linalg.norm(numeric.ravel())
    return float(diff / max(scale, 1e-30))


def gradient_check(f: Callable[..., Any], inputs: Any, eps: float = 1e-6, *, grads: Any = None,
                   zero_tol: float = 1e-7, return_all: bool = False) -> Any:
    """Compare analytic gradients with central differences; return the max relative error.

    ``f(*inputs)`` must return a scalar. ``inputs`` is one array/tensor or a list/tuple of them
    (NumPy arrays or torch tensors). Everything is done in float64 on copies of the inputs.

    * ``grads=None``: the analytic gradients come from PyTorch autograd, so ``f`` must be written
      with torch operations (it receives float64 tensors with ``requires_grad=True``).
    * ``grads=[dx1, dx2, ...]`` (one per input; a single array for a single input): the gradients
      your own backward pass computed, e.g. in NumPy -- ``f`` may then be any NumPy function.

    For each input the error is ``‖analytic - numerical‖ / (‖analytic‖ + ‖numerical‖)`` (norms
    over all elements, so tiny entries do not blow it up). Correct float64 gradients give about
    1e-8 or less; a wrong formula gives 1e-2 to 1. Returns the largest error over the inputs, or
    with ``return_all=True`` the list of per-input errors.

    subtle: a gradient that is exactly zero (the key bias of attention, say: it shifts every score
    of a row equally, which softmax ignores) would compare rounding noise with rounding noise and
    report an error near 1. So when both gradients of an input have norm below ``zero_tol``, the
    input counts as matching (error 0).

    Example::

        x, W = np.random.randn(4, 3), np.random.randn(2, 3)
        f = lambda x, W: (x @ W.T).sum()
        gradient_check(f, [x, W], grads=[np.ones((4, 2)) @ W, np.ones((4, 2)).T @ x])  # ~1e-10

    To check a function with a non-scalar output ``y = g(x)`` and your backward ``dx = g_backward(x, dy)``,
    check the scalar ``(g(x) * dy).sum()`` with ``grads=[g_backward(x, dy)]`` for a fixed random ``dy``.
    """
    single = not isinstance(inputs, (list, tuple))
    xs = [_float64_copy(x) for x in ([inputs] if single else inputs)]
    if not xs:
        raise ValueError("inputs is empty: pass at least one array or tensor")
    if grads is None:
        xs = [torch.as_tensor(x, dtype=torch.float64) for x in xs]  # f is a torch function
        leaves = [x.clone().requires_grad_(True) for x in xs]
        out = f(*leaves)
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            raise TypeError("with grads=None, f must compute its output with torch operations (autograd "
                            "finds the analytic gradient); for a NumPy function pass grads=[...] from "
                            "your own backward pass")
        _scalar(out)
        analytic = list(torch.autograd.grad(out, leaves, allow_unused=True))
        analytic = [np.zeros(tuple(x.shape)) if g is None else g.detach().cpu().numpy()
                    for g, x in zip(analytic, xs)]
    else:
        analytic = [grads] if single else list(grads)
        if len(analytic) != len(xs):
            raise ValueError(f"grads has {len(analytic)} entries but there are {len(xs)} inputs")
        analytic = [np.asarray(_float64_copy(g).cpu().numpy() if isinstance(g, torch.Tensor) else _float64_copy(g))
                    for g in analytic]
    errors = []
    for i, (x, g) in enumerate(zip(xs, analytic)):
        if tuple(g.shape) != tuple(x.shape):
            raise ValueError(f"grads[{i}] has shape {tuple(g.shape)} but input {i} has shape {tuple(x.shape)}")

        def f_i(xi, i=i):
            return f(*xs[:i], xi, *xs[i + 1:])

        num = numerical_gradient(f_i, x, eps)
        num = num.cpu().numpy() if isinstance(num, torch.Tensor) else num
        if np.linalg.norm(g.ravel()) < zero_tol and np.linalg.norm(num.ravel()) < zero_tol:
            errors.append(0.0)  # both zero up to rounding
        else:
            errors.append(_relative_error(g, num))
    return errors if return_all else max(errors)
