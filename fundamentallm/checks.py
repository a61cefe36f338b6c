"""Exercise checks: each ``check_*`` runs a student's function on known inputs, compares it with
an independent reference, and says exactly what is wrong (which output, the first mismatching
element, expected vs got). A check prints one line when it passes -- giving feedback is its job --
and raises :class:`CheckFailed` (an ``AssertionError``) when it does not.

Every check is registered in :data:`CHECKS`; the tests run each one against the book's reference
solution (must pass) and against an unimplemented stub (must fail with a helpful message).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import numpy as np
import torch

CHECKS: dict[str, Callable[..., bool]] = {}


class CheckFailed(AssertionError):
    """Raised by a ``check_*`` function when the student's answer is wrong."""


def exercise_check(fn: Callable[..., Optional[str]]) -> Callable[..., bool]:
    """Turn ``fn`` (which raises :class:`CheckFailed` or returns an optional detail string) into
    a student-facing check: stubs and crashes become clear messages; success prints one line."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> bool:
        try:
            detail = fn(*args, **kwargs)
        except NotImplementedError:
            raise CheckFailed(f"{fn.__name__}: your function raises NotImplementedError -- "
                              f"replace the stub with your implementation first") from None
        except CheckFailed as e:
            raise CheckFailed(f"{fn.__name__} failed: {e}") from None
        except Exception as e:  # the student's code crashed: say where, keep the traceback chained
            raise CheckFailed(f"{fn.__name__}: your code raised {type(e).__name__}: {e}") from e
        print(f"✓ {fn.__name__} passed" + (f": {detail}" if detail else ""))
        return True

    CHECKS[fn.__name__] = wrapper
    return wrapper


def _as_tensor(x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return torch.as_tensor(x)


def assert_same(actual: Any, expected: Any, what: str = "output", rtol: Optional[float] = None,
                atol: Optional[float] = None) -> None:
    """Like ``torch.testing.assert_close`` (dtype-aware default tolerances; NumPy arrays and
    numbers accepted), but the message names ``what``, the shapes, and the first mismatch."""
    if actual is None:
        raise CheckFailed(f"{what}: got None -- did you forget to return a value?")
    a, e = _as_tensor(actual), _as_tensor(expected)
    if a.shape != e.shape:
        raise CheckFailed(f"{what}: expected shape {tuple(e.shape)}, got {tuple(a.shape)}")
    if a.dtype != e.dtype:
        if not (a.is_floating_point() or a.is_complex()) and e.is_floating_point():
            a = a.to(e.dtype)
        else:
            common = torch.promote_types(a.dtype, e.dtype)
            a, e = a.to(common), e.to(common)
    try:
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=False)
    except AssertionError:
        if a.is_floating_point():
            tol_a = atol if atol is not None else (1e-7 if a.dtype == torch.float64 else 1e-5)
            tol_r = rtol if rtol is not None else (1e-7 if a.dtype == torch.float64 else 1.3e-6)
            bad = ~torch.isclose(a, e, rtol=tol_r, atol=tol_a)
        else:
            bad = a != e
        idx = tuple(int(i) for i in bad.nonzero()[0]) if bad.any() else ()
        diff = (a.double() - e.double()).abs()
        raise CheckFailed(
            f"{what}: {int(bad.sum())} of {a.numel()} elements differ; first mismatch at index "
            f"{idx}: expected {e[idx].item():.6g}, got {a[idx].item():.6g} "
            f"(max abs difference {diff.max().item():.3g})"
        ) from None


def check_shape(x: Any, expected: tuple, what: str = "output") -> None:
    """Raise :class:`CheckFailed` unless ``x`` has shape ``expected``."""
    shape = tuple(getattr(x, "shape", ()))
    if shape != tuple(expected):
        raise CheckFailed(f"{what}: expected shape {tuple(expected)}, got {shape}")


# ----------------------------------------------------------------------------------------------
# Gradient checking (chapter 11 derives it; any chapter may use it).
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# Chapter checks. Each section belongs to one chapter; keep them in chapter order.
# ----------------------------------------------------------------------------------------------

# --- Chapter 01: why attention ------------------------------------------------

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


@exercise_check
def check_unroll_rnn(unroll_rnn: Callable) -> str:
    """``unroll_rnn(xs, h0, W_x, W_h, b)`` -> all hidden states ``h_1..h_T``, shape (B, T, d_h)."""
    cases = [(2, 7, 3, 4, 0), (1, 1, 2, 2, 1), (3, 12, 5, 3, 2)]  # (B, T, d_in, d_h, seed)
    for B, T, d_in, d_h, seed in cases:
        W_x, W_h, b = _rnn_params(d_in, d_h, seed)
        g = torch.Generator().manual_seed(200 + seed)
        xs = torch.randn(B, T, d_in, generator=g, dtype=torch.float64)  # (B, T, d_in)
        h0 = torch.randn(B, d_h, generator=g, dtype=torch.float64)  # (B, d_h)
        with torch.no_grad():
            hs_ref, _ = _reference_rnn(W_x, W_h, b)(xs, h0[None])  # (B, T, d_h)
        hs = unroll_rnn(xs.clone(), h0.clone(), W_x.clone(), W_h.clone(), b.clone())
        what = f"hidden states for B={B}, T={T}, d_in={d_in}, d_h={d_h}"
        check_shape(hs, (B, T, d_h), what=what + " (return h_1..h_T stacked on dim 1)")
        if T > 1 and torch.allclose(torch.as_tensor(hs)[:, 0].double(), h0):
            raise CheckFailed(f"{what}: hs[:, 0] equals h0 -- return h_1..h_T, not h_0..h_(T-1)")
        assert_same(hs, hs_ref, what=what + " (vs torch.nn.RNN)")
    return f"matches torch.nn.RNN on {len(cases)} sequences"


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


# --- Chapter 02: attention by hand --------------------------------------------

@exercise_check
def check_softmax_rows(softmax_rows: Callable) -> str:
    """``softmax_rows(x)``: softmax over the last dimension, stable for large scores."""
    g = torch.Generator().manual_seed(500)
    cases = {
        "a (3, 4) matrix": torch.randn(3, 4, generator=g),
        "a 1-D vector": torch.randn(5, generator=g),
        "a (2, 3, 5) batch": torch.randn(2, 3, 5, generator=g, dtype=torch.float64),
        "large scores (~1000; exp overflows unless you subtract the row max)":
            torch.tensor([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -999.0]]),
        "rows holding -inf (masked keys)":
            torch.tensor([[0.5, float("-inf"), 1.5], [float("-inf"), 2.0, float("-inf")]]),
    }
    for name, x in cases.items():
        x_in = x.clone()
        got = softmax_rows(x_in)
        if not torch.equal(x_in, x):
            raise CheckFailed(f"for {name}: you modified the input in place; return a new tensor")
        if got is not None and torch.isnan(torch.as_tensor(got)).any():
            raise CheckFailed(f"for {name}: the result contains NaN -- subtract each row's max "
                              f"before exp to keep exp from overflowing")
        assert_same(got, torch.softmax(x, dim=-1), what=f"softmax of {name}")
    return f"matches torch.softmax on {len(cases)} inputs, including large scores"


def _qkv(shape_q: tuple, shape_k: tuple, d_v: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape_q, generator=g, dtype=torch.float64)
    k = torch.randn(*shape_k, generator=g, dtype=torch.float64)
    v = torch.randn(*shape_k[:-1], d_v, generator=g, dtype=torch.float64)
    return q, k, v


@exercise_check
def check_scaled_scores(scaled_scores: Callable) -> str:
    """``scaled_scores(q, k)`` -> ``q kᵀ / √d_k``: (..., T_q, D), (..., T_k, D) -> (..., T_q, T_k)."""
    worked = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    cases = [("the worked example Q = K", worked, worked.clone())]
    for i, (sq, sk) in enumerate([((4, 8), (4, 8)), ((3, 16), (5, 16)), ((2, 3, 6, 4), (2, 3, 7, 4))]):
        q, k, _ = _qkv(sq, sk, 1, 600 + i)
        cases.append((f"q of shape {sq} and k of shape {sk}", q, k))
    for name, q, k in cases:
        # independent reference: an explicit sum over the shared dimension
        expected = (q[..., :, None, :] * k[..., None, :, :]).sum(-1) / q.shape[-1] ** 0.5
        got = scaled_scores(q.clone(), k.clone())
        check_shape(got, tuple(expected.shape), what=f"scores for {name}")
        assert_same(got, expected, what=f"scaled scores for {name} (divide by sqrt(d_k))")
    return f"correct on {len(cases)} inputs, including batched ones with T_q != T_k"


@exercise_check
def check_make_causal_mask(make_causal_mask: Callable) -> str:
    """``make_causal_mask(T)`` -> boolean (T, T), True where key j <= query i."""
    for T in (1, 2, 5, 9):
        got = make_causal_mask(T)
        check_shape(got, (T, T), what=f"mask for T={T}")
        got = torch.as_tensor(got)
        if got.dtype != torch.bool:
            raise CheckFailed(f"mask for T={T}: expected dtype torch.bool, got {got.dtype} "
                              f"(True = may attend)")
        expected = torch.tensor([[j <= i for j in range(T)] for i in range(T)])
        assert_same(got, expected, what=f"mask for T={T} (row = query, column = key; "
                                        f"True on and below the diagonal)")
    return "lower-triangular boolean masks for T = 1, 2, 5, 9"


def _reference_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    w = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a fully masked row gets zero weights
    return w @ v, w


@exercise_check
def check_attention(attention: Callable) -> str:
    """``attention(q, k, v, mask=None)`` -> ``(output, weights)``. A boolean mask keeps True keys,
    a float mask is added to the scores; a query with every key masked gets zeros, not NaN."""
    cases = []
    q, k, v = _qkv((3, 2), (3, 2), 2, 700)
    cases.append(("unmasked (T=3, D=2)", q, k, v, None))
    q, k, v = _qkv((2, 6, 4), (2, 6, 4), 3, 701)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    cases.append(("a boolean causal mask (B=2, T=6)", q, k, v, causal))
    additive = torch.zeros(6, 6, dtype=torch.float64).masked_fill(~causal, float("-inf"))
    cases.append(("a float (additive, 0/-inf) causal mask (B=2, T=6)", q, k, v, additive))
    q, k, v = _qkv((2, 3, 4, 8), (2, 3, 5, 8), 6, 702)
    g = torch.Generator().manual_seed(703)
    m = torch.rand(2, 1, 4, 5, generator=g) > 0.5
    m[..., 0] = True  # every query keeps at least one key
    cases.append(("a random boolean mask with T_q=4 != T_k=5", q, k, v, m))
    cases.append(("no mask with T_q=4 != T_k=5, D_v=6", q, k, v, None))
    bias = torch.randn(4, 5, generator=g, dtype=torch.float64)
    cases.append(("a finite float mask (a bias added to the scores)", q, k, v, bias))
    q, k, v = _qkv((3, 4), (3, 4), 2, 704)
    dead = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    cases.append(("a mask whose second row is all False (that query sees no key)", q, k, v, dead))
    for name, q, k, v, mask in cases:
        out_ref, w_ref = _reference_attention(q, k, v, mask)
        args = (q.clone(), k.clone(), v.clone())
        res = attention(*args) if mask is None else attention(*args, mask=mask.clone())
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise CheckFailed(f"for {name}: return a pair (output, weights), got {type(res).__name__}")
        out, w = res
        if torch.isnan(torch.as_tensor(w)).any() or torch.isnan(torch.as_tensor(out)).any():
            raise CheckFailed(f"for {name}: NaN in your result -- a query whose keys are all masked "
                              f"must get all-zero weights and a zero output")
        assert_same(w, w_ref, what=f"weights for {name}")
        assert_same(out, out_ref, what=f"output for {name}")
        if not torch.isinf(torch.as_tensor(mask if mask is not None else 0.0)).all(-1).any():
            sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            assert_same(out, sdpa, what=f"output for {name} (vs F.scaled_dot_product_attention)")
    return f"correct on {len(cases)} cases (boolean, float and fully masked rows)"


# --- Chapter 03: multi-head attention -----------------------------------------

def _ref_split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.reshape(B, T, num_heads, C // num_heads).permute(0, 2, 1, 3)  # (B, H, T, D)


@exercise_check
def check_split_heads(split_heads: Callable) -> str:
    """``split_heads(x, num_heads)``: ``(B, T, C)`` -> ``(B, H, T, D)`` with ``D = C // H``; head
    ``h`` holds channels ``h·D .. (h+1)·D - 1``; ``ValueError`` when ``num_heads`` does not
    divide ``C``."""
    g = torch.Generator().manual_seed(3)
    cases = [(2, 5, 8, 2), (1, 3, 12, 3), (3, 1, 6, 1), (2, 4, 16, 16), (2, 6, 12, 4)]
    for B, T, C, H in cases:
        x = torch.randn(B, T, C, generator=g)
        out = split_heads(x.clone(), H)
        what = f"split_heads(x of shape {(B, T, C)}, num_heads={H})"
        check_shape(out, (B, H, T, C // H), what=what)
        D = C // H
        for h in range(H):
            assert_same(out[:, h], x[..., h * D:(h + 1) * D],
                        what=f"{what}[:, {h}] (head {h} must hold channels {h * D}..{(h + 1) * D - 1} "
                             f"of every token; a view to (B, H, T, D) without a transpose mixes tokens)")
    try:
        split_heads(torch.zeros(1, 2, 10), 3)
    except ValueError as e:
        if "num_heads" not in str(e):
            raise CheckFailed(f"the ValueError for num_heads=3, C=10 should name num_heads; got: {e}") from None
    except NotImplementedError:
        raise
    except Exception as e:
        raise CheckFailed(f"split_heads(x with C=10, num_heads=3) should raise ValueError, "
                          f"got {type(e).__name__}: {e}") from None
    else:
        raise CheckFailed("split_heads(x with C=10, num_heads=3) should raise ValueError "
                          "(3 does not divide 10) instead of returning")
    return f"{len(cases)} shapes and the num_heads validation"


@exercise_check
def check_merge_heads(merge_heads: Callable) -> str:
    """``merge_heads(x)``: ``(B, H, T, D)`` -> ``(B, T, H·D)``, the inverse of ``split_heads``."""
    g = torch.Generator().manual_seed(4)
    cases = [(2, 2, 5, 4), (1, 3, 4, 4), (3, 1, 2, 6), (2, 4, 3, 1)]
    for B, H, T, D in cases:
        x = torch.randn(B, T, H * D, generator=g)
        # A view of x (as split_heads returns it) and a contiguous copy (as attention outputs are):
        # after the transpose back, only the first can be .view()-ed without .contiguous().
        for layout, heads in (("a view", _ref_split_heads(x, H)),
                              ("contiguous", _ref_split_heads(x, H).contiguous())):
            what = f"merge_heads(x of shape {(B, H, T, D)}, {layout})"
            out = merge_heads(heads)
            check_shape(out, (B, T, H * D), what=what)
            assert_same(out, x, what=f"{what} (it must undo split_heads exactly: token t's "
                                     f"channels h·D..(h+1)·D-1 come from head h)")
    return f"{len(cases)} shapes, as views and as contiguous tensors"


@exercise_check
def check_attention_entropy(attention_entropy: Callable) -> str:
    """``attention_entropy(weights)``: ``(..., T_q, T_k)`` rows of probabilities -> ``(..., T_q)``
    entropies in nats, with ``0·log 0 = 0``."""
    g = torch.Generator().manual_seed(5)
    uniform = torch.full((3, 4), 0.25)
    one_hot = torch.eye(5)
    causal = torch.softmax(torch.randn(6, 6, generator=g).masked_fill(
        ~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf")), dim=-1)
    batched = torch.softmax(torch.randn(2, 3, 4, 7, generator=g), dim=-1)
    cases = {"uniform rows over 4 keys": uniform, "one-hot rows": one_hot,
             "causal weights (with exact zeros)": causal, "(B, H, T, T) weights": batched}
    for name, w in cases.items():
        out = attention_entropy(w.clone())
        what = f"attention_entropy on {name}"
        check_shape(out, w.shape[:-1], what=what)
        if torch.isnan(_as_tensor(out)).any():
            raise CheckFailed(f"{what}: got NaN -- 0·log(0) must count as 0 (log(0) is -inf and "
                              f"0·(-inf) is NaN); skip or mask the zero weights")
        assert_same(out, torch.special.entr(w).sum(-1), what=f"{what} (entropy in nats: "
                    f"-sum p·ln p; uniform over n keys gives ln n)")
    return "uniform, one-hot, causal (zeros) and batched weights"


def _ref_mha(x, w_q, w_k, w_v, w_o, num_heads, causal):
    C = x.shape[-1]
    ref = torch.nn.MultiheadAttention(C, num_heads, bias=False, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([w_q, w_k, w_v]))
        ref.out_proj.weight.copy_(w_o)
    T = x.shape[1]
    # nn.MultiheadAttention's boolean mask is True where attention is NOT allowed.
    blocked = ~torch.ones(T, T, dtype=torch.bool).tril() if causal else None
    with torch.no_grad():
        return ref(x, x, x, attn_mask=blocked, need_weights=False)[0]


@exercise_check
def check_multi_head_attention(multi_head_attention: Callable) -> str:
    """``multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, causal=False)`` with ``(C, C)``
    weights in ``nn.Linear`` layout (``q = x @ w_q.T``), compared with ``nn.MultiheadAttention``."""
    g = torch.Generator().manual_seed(6)
    cases = [(2, 5, 8, 2, False), (2, 5, 8, 2, True), (1, 4, 12, 3, True), (2, 3, 6, 1, False),
             (1, 6, 8, 4, True)]
    for B, T, C, H, causal in cases:
        x = torch.randn(B, T, C, generator=g)
        w_q, w_k, w_v, w_o = (torch.randn(C, C, generator=g) / C ** 0.5 for _ in range(4))
        out = multi_head_attention(x, w_q, w_k, w_v, w_o, H, causal=causal)
        what = f"multi_head_attention(x {(B, T, C)}, num_heads={H}, causal={causal})"
        check_shape(out, (B, T, C), what=what)
        assert_same(out, _ref_mha(x, w_q, w_k, w_v, w_o, H, causal), what=what, atol=1e-5, rtol=1e-4)
    return f"{len(cases)} cases equal to nn.MultiheadAttention"


# --- Chapter 04: tokens to vectors (positions) --------------------------------

def _expect_value_error(call: Callable[[], Any], what: str, must_name: str) -> None:
    """Raise CheckFailed unless ``call()`` raises a ValueError whose message names ``must_name``."""
    try:
        call()
    except ValueError as e:
        if must_name not in str(e):
            raise CheckFailed(f"{what}: the ValueError should name {must_name!r}; got: {e}") from None
    except NotImplementedError:
        raise
    except Exception as e:
        raise CheckFailed(f"{what} should raise ValueError, got {type(e).__name__}: {e}") from None
    else:
        raise CheckFailed(f"{what} should raise ValueError instead of returning")


@exercise_check
def check_embedding_lookup(embedding_lookup: Callable) -> str:
    """``embedding_lookup(ids, weight)``: integer ids of any shape ``S`` and a ``(V, C)`` table ->
    ``S + (C,)`` rows, differentiable in ``weight``; ``ValueError`` for ids outside ``[0, V)``."""
    g = torch.Generator().manual_seed(7)
    V, C = 10, 4
    cases = {"ids of shape (5,)": torch.tensor([3, 1, 3, 0, 9]),
             "ids of shape (2, 3)": torch.randint(0, V, (2, 3), generator=g),
             "a single id, shape ()": torch.tensor(7)}
    for name, ids in cases.items():
        weight = torch.randn(V, C, generator=g, requires_grad=True)
        out = embedding_lookup(ids, weight)
        what = f"embedding_lookup({name})"
        check_shape(out, tuple(ids.shape) + (C,), what=what)
        assert_same(out, torch.nn.functional.embedding(ids, weight), what=what)
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            raise CheckFailed(f"{what}: the result must be differentiable with respect to weight "
                              f"(build it from weight with torch operations, not from a copy)")
        upstream = torch.randn(out.shape, generator=g)
        (out * upstream).sum().backward()
        expected = torch.zeros(V, C).index_add_(0, ids.reshape(-1), upstream.reshape(-1, C))
        assert_same(weight.grad, expected, what=f"{what}: gradient of weight (each row should "
                    f"receive the sum of the gradients of every position holding that id)")
    w = torch.randn(V, C, generator=g)
    _expect_value_error(lambda: embedding_lookup(torch.tensor([1, V]), w),
                        f"embedding_lookup(ids containing {V}, weight with V={V} rows)", "ids")
    _expect_value_error(lambda: embedding_lookup(torch.tensor([-1, 2]), w),
                        "embedding_lookup(ids containing -1, ...)", "ids")
    return "values, shapes, the accumulated gradient and out-of-range ids"


def _ref_sinusoidal(max_seq_len: int, d_model: int, base: float) -> torch.Tensor:
    import math
    pe = torch.zeros(max_seq_len, d_model, dtype=torch.float64)
    for pos in range(max_seq_len):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


@exercise_check
def check_sinusoidal_encoding(sinusoidal_encoding: Callable) -> str:
    """``sinusoidal_encoding(max_seq_len, d_model, base=10000.0)``: the ``(max_seq_len, d_model)``
    table ``PE[pos, 2i] = sin(pos / base^(2i/d_model))``, ``PE[pos, 2i+1] = cos(...)``;
    ``ValueError`` for an odd ``d_model``."""
    cases = [(8, 4, 10000.0), (50, 16, 10000.0), (5, 6, 10000.0), (3, 2, 10000.0), (20, 8, 100.0)]
    for T, d, base in cases:
        out = sinusoidal_encoding(T, d) if base == 10000.0 else sinusoidal_encoding(T, d, base=base)
        what = f"sinusoidal_encoding(max_seq_len={T}, d_model={d}, base={base:g})"
        check_shape(out, (T, d), what=what)
        assert_same(_as_tensor(out).double(), _ref_sinusoidal(T, d, base), atol=1e-5, rtol=1e-5,
                    what=f"{what} (even columns sin, odd columns cos, column pair i uses "
                         f"frequency base^(-2i/d_model))")
    _expect_value_error(lambda: sinusoidal_encoding(4, 5), "sinusoidal_encoding(4, d_model=5)", "d_model")
    return f"{len(cases)} tables (two bases) and the odd-d_model validation"


@exercise_check
def check_rotate_half(rotate_half: Callable) -> str:
    """``rotate_half(x)``: ``(x1, x2) -> (-x2, x1)`` on the two halves of the last dimension;
    ``ValueError`` for an odd last dimension."""
    g = torch.Generator().manual_seed(8)
    x = torch.arange(1.0, 7.0)
    out = rotate_half(x.clone())
    assert_same(out, torch.tensor([-4.0, -5.0, -6.0, 1.0, 2.0, 3.0]),
                what="rotate_half([1, 2, 3, 4, 5, 6]) (halves, not interleaved pairs)")
    for shape in [(2, 8), (2, 3, 5, 4), (1, 2)]:
        x = torch.randn(shape, generator=g)
        half = shape[-1] // 2
        expected = torch.empty_like(x)
        expected[..., :half], expected[..., half:] = -x[..., half:], x[..., :half]
        assert_same(rotate_half(x.clone()), expected, what=f"rotate_half(x of shape {shape})")
    _expect_value_error(lambda: rotate_half(torch.zeros(2, 5)), "rotate_half(x with last dimension 5)", "5")
    return "known answer, batched shapes and the odd-size validation"


def _ref_rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """RoPE through complex numbers: channel pair (i, i + D/2) is z = x_i + j·x_{i+D/2}, and
    rotating it by angle a is multiplying by e^{j·a}."""
    D = x.shape[-1]
    x64 = x.double()
    z = torch.complex(x64[..., : D // 2], x64[..., D // 2:])  # (..., T, D/2)
    freqs = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angles = positions.double()[:, None] * freqs  # (T, D/2)
    z = z * torch.polar(torch.ones_like(angles), angles)
    return torch.cat([z.real, z.imag], dim=-1)


@exercise_check
def check_apply_rope(apply_rope: Callable) -> str:
    """``apply_rope(x, positions, base=10000.0)``: rotate each pair ``(x_i, x_{i+D/2})`` of the
    ``(..., T, D)`` tensor by ``positions[t] · base^(-2i/D)``; ``positions`` is a ``(T,)`` tensor."""
    g = torch.Generator().manual_seed(9)
    cases = [((1, 4, 8), torch.arange(4), 10000.0, "positions 0..3"),
             ((2, 3, 5, 6), torch.arange(5) + 7, 10000.0, "positions 7..11"),
             ((2, 3, 16), torch.tensor([9, 0, 4]), 10000.0, "positions [9, 0, 4] in any order"),
             ((6, 4), torch.arange(6), 100.0, "base 100")]
    for shape, pos, base, name in cases:
        x = torch.randn(shape, generator=g)
        out = apply_rope(x.clone(), pos, base) if base != 10000.0 else apply_rope(x.clone(), pos)
        what = f"apply_rope(x of shape {shape}, {name})"
        check_shape(out, shape, what=what)
        assert_same(_as_tensor(out).double(), _ref_rope(x, pos, base), atol=1e-5, rtol=1e-4,
                    what=f"{what} (pair channel i with i + D/2, angle = position · base^(-2i/D), "
                         f"x·cos + rotate_half(x)·sin)")
    return f"{len(cases)} cases equal to a complex-number reference"


# --- Chapter 05: normalization and residuals ----------------------------------

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


@exercise_check
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
def check_rms_norm(rms_norm: Callable) -> str:
    """``rms_norm(x, weight, eps)``: ``x / sqrt(mean(x²) + eps) * weight`` over the last
    dimension; outputs and gradients equal to ``F.rms_norm``."""
    F = torch.nn.functional
    cases = _ch05_norm_cases(1) + [("an all-zero row, eps=1e-6", torch.zeros(1, 4), 1e-6)]
    for i, (name, x, eps) in enumerate(cases):
        g = _ch05_rng(20 + i)
        C = x.shape[-1]
        weight = torch.randn(C, generator=g, dtype=x.dtype)
        ins = [t.clone().requires_grad_(True) for t in (x, weight)]
        refs = [t.clone().requires_grad_(True) for t in (x, weight)]
        what = f"rms_norm({name})"
        out = rms_norm(ins[0], ins[1], eps)
        expected = F.rms_norm(refs[0], (C,), refs[1], eps)
        check_shape(out, tuple(x.shape), what=what)
        assert_same(out, expected.detach(), what=f"{what} (no mean subtraction: divide by "
                    f"sqrt(mean of squares + eps), then * weight)", atol=1e-5, rtol=1e-4)
        upstream = torch.randn(x.shape, generator=g, dtype=x.dtype)
        got = _ch05_grads(out, ins, upstream, what)
        want = torch.autograd.grad((expected * upstream).sum(), refs)
        for label, a, e in zip(("x", "weight"), got, want):
            if a is None:
                raise CheckFailed(f"{what}: the result does not depend on {label}")
            assert_same(a, e, what=f"{what}: gradient with respect to {label}", atol=1e-4, rtol=1e-3)
    return "outputs and gradients equal to F.rms_norm (incl. large eps and an all-zero row)"


@exercise_check
def check_inverted_dropout(inverted_dropout: Callable) -> str:
    """``inverted_dropout(x, p, generator)``: zero each element independently with probability
    ``p``, scale the kept ones by ``1/(1-p)``, draw randomness only from ``generator``;
    ``p=0`` is the identity; ``ValueError`` for ``p`` outside ``[0, 1)``."""
    x = torch.randn(200, 200, generator=_ch05_rng(30))
    x_before = x.clone()
    out = inverted_dropout(x, 0.0, torch.Generator().manual_seed(0))
    assert_same(out, x_before, what="inverted_dropout(x, p=0.0) (nothing dropped, nothing scaled)")
    for p in (0.1, 0.5, 0.8):
        what = f"inverted_dropout(x of shape (200, 200), p={p})"
        out = inverted_dropout(x, p, torch.Generator().manual_seed(1))
        check_shape(out, tuple(x.shape), what=what)
        if not torch.equal(x, x_before):
            raise CheckFailed(f"{what} modified its input in place; return a new tensor")
        out = _as_tensor(out)
        kept = out != 0
        rows, cols = kept.any(dim=1) & ~kept.all(dim=1), kept.any(dim=0) & ~kept.all(dim=0)
        if not (rows.all() and cols.all()):
            raise CheckFailed(f"{what}: whole rows or columns are dropped together; draw one "
                              f"independent decision per element (a mask of x's shape)")
        frac = 1.0 - kept.double().mean().item()
        tol = 5 * (p * (1 - p) / x.numel()) ** 0.5 + 1e-3
        if abs(frac - p) > tol:
            raise CheckFailed(f"{what}: {frac:.3f} of the elements are zero, expected about p={p} "
                              f"(each element is dropped with probability p, kept with 1 - p)")
        assert_same(out[kept], x[kept] / (1 - p), what=f"{what}: the kept elements "
                    f"(they must be scaled by 1/(1-p) so that the expectation is unchanged)")
    ones = torch.ones(100_000)
    mean = _as_tensor(inverted_dropout(ones, 0.5, torch.Generator().manual_seed(2))).mean().item()
    if abs(mean - 1.0) > 0.02:
        raise CheckFailed(f"inverted_dropout(ones, p=0.5): the mean is {mean:.4f}, expected about 1 "
                          f"(inverted dropout preserves the expectation)")
    a = inverted_dropout(x, 0.3, torch.Generator().manual_seed(3))
    b = inverted_dropout(x, 0.3, torch.Generator().manual_seed(3))
    c = inverted_dropout(x, 0.3, torch.Generator().manual_seed(4))
    if not torch.equal(_as_tensor(a), _as_tensor(b)):
        raise CheckFailed("two calls with generators seeded alike gave different masks: draw the "
                          "random numbers from `generator` (e.g. torch.rand(x.shape, generator=generator))")
    if torch.equal(_as_tensor(a), _as_tensor(c)):
        raise CheckFailed("generators with different seeds gave the same mask: use `generator`")
    x64 = torch.randn(3, 4, generator=_ch05_rng(31), dtype=torch.float64)
    out64 = _as_tensor(inverted_dropout(x64, 0.5, torch.Generator().manual_seed(5)))
    if out64.dtype != torch.float64:
        raise CheckFailed(f"inverted_dropout(float64 x): the result has dtype {out64.dtype}; "
                          f"keep x's dtype")
    g = torch.Generator().manual_seed(6)
    for bad in (1.0, -0.1, 1.5):
        _expect_value_error(lambda bad=bad: inverted_dropout(x, bad, g), f"inverted_dropout(x, p={bad})", "p")
    return "drop rate, 1/(1-p) scaling, unchanged mean, seeded masks, dtype and bad p"


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


# --- Chapter 06: pre-LN vs post-LN --------------------------------------------

def _ch06_block(norm_position: str, norm: str, seed: int, d_model: int = 16, num_heads: int = 2):
    """A package ``TransformerBlock`` with random weights, norm gains and biases included (so that
    swapping norm1 and norm2 shows), in eval mode."""
    from .config import TransformerConfig
    from .model import TransformerBlock

    torch.manual_seed(600 + seed)
    config = TransformerConfig(vocab_size=8, d_model=d_model, num_heads=num_heads, num_layers=1,
                               max_seq_len=16, norm=norm, norm_position=norm_position)
    block = TransformerBlock(config).eval()
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name.startswith("norm"):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape) if name.endswith("weight") else 0.5 * torch.randn(p.shape))
    return block


def _ch06_check_block(student_fn: Callable, norm_position: str, formula: str) -> str:
    cases = [("layernorm", (2, 5, 16), 2), ("rmsnorm", (1, 7, 16), 4), ("layernorm", (3, 1, 8), 1)]
    for seed, (norm, shape, heads) in enumerate(cases):
        block = _ch06_block(norm_position, norm, seed, d_model=shape[-1], num_heads=heads)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(610 + seed))
        with torch.no_grad():
            expected = block(x)
            got = student_fn(x.clone(), block.attn, block.ff, block.norm1, block.norm2)
        what = f"{student_fn.__name__}(x of shape {shape}, {norm}, {heads} heads)"
        check_shape(got, shape, what=what)
        assert_same(got, expected, what=f"{what} (expected {formula})", atol=1e-5, rtol=1e-4)
    return f"{len(cases)} blocks equal to fundamentallm.TransformerBlock(norm_position={norm_position!r})"


@exercise_check
def check_pre_ln_block(pre_ln_block: Callable) -> str:
    """``pre_ln_block(x, attn, ff, norm1, norm2)``: ``h = x + attn(norm1(x))``,
    ``h + ff(norm2(h))``; compared with the package's pre-LN ``TransformerBlock``."""
    return _ch06_check_block(pre_ln_block, "pre", "h = x + attn(norm1(x)); h + ff(norm2(h))")


@exercise_check
def check_post_ln_block(post_ln_block: Callable) -> str:
    """``post_ln_block(x, attn, ff, norm1, norm2)``: ``h = norm1(x + attn(x))``,
    ``norm2(h + ff(h))``; compared with the package's post-LN ``TransformerBlock``."""
    return _ch06_check_block(post_ln_block, "post", "h = norm1(x + attn(x)); norm2(h + ff(h))")


@exercise_check
def check_per_layer_grad_norms(per_layer_grad_norms: Callable) -> str:
    """``per_layer_grad_norms(model)``: after ``backward()``, the L2 norm of all gradients of each
    block in ``model.blocks`` (``None`` gradients count as zero), as a 1-D tensor; the gradients
    themselves are left unchanged."""
    from .config import TransformerConfig
    from .model import Transformer

    cases = [(3, "pre", None), (2, "post", None), (1, "pre", None), (3, "pre", "blocks.1.attn.qkv.bias")]
    for seed, (L, position, frozen) in enumerate(cases):
        torch.manual_seed(620 + seed)
        model = Transformer(TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=L,
                                              max_seq_len=8, norm_position=position))
        if frozen is not None:
            model.get_parameter(frozen).requires_grad_(False)
        ids = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(630 + seed))
        _, loss = model(ids, ids)
        loss.backward()
        before = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        expected = torch.stack([
            torch.sqrt(sum((p.grad.double().pow(2).sum() for p in b.parameters() if p.grad is not None),
                           torch.zeros((), dtype=torch.float64)))
            for b in model.blocks]).float()
        what = (f"per_layer_grad_norms({L}-layer {position}-LN model"
                f"{f' whose {frozen} has no gradient' if frozen else ''})")
        got = per_layer_grad_norms(model)
        if isinstance(got, (list, tuple)):
            got = torch.tensor([float(v) for v in got])
        check_shape(got, (L,), what=what)
        assert_same(_as_tensor(got).float(), expected, what=f"{what} (entry l: sqrt of the sum of "
                    f"squared gradient entries over every parameter of model.blocks[l])",
                    rtol=1e-4, atol=1e-8)
        for n, p in model.named_parameters():
            if n in before and (p.grad is None or not torch.equal(p.grad, before[n])):
                raise CheckFailed(f"{what} changed the gradient of {n}; only read .grad")
    return f"{len(cases)} models, pre- and post-LN, one with a parameter without gradient"


@exercise_check
def check_warmup_lr(warmup_lr: Callable) -> str:
    """``warmup_lr(step, base_lr, warmup_steps)``: with ``s = step + 1``, ``base_lr · s /
    warmup_steps`` while ``s <= warmup_steps``, then ``base_lr``; ``warmup_steps=0`` means no
    warmup; ``ValueError`` for a negative ``step`` or ``warmup_steps``."""
    n = 0
    for base_lr, warmup in ((1e-3, 10), (0.5, 1), (3e-2, 0), (2.0, 7)):
        for step in range(3 * max(warmup, 3)):
            s = step + 1
            expected = base_lr * s / warmup if s <= warmup else base_lr
            got = warmup_lr(step, base_lr, warmup)
            if got is None:
                raise CheckFailed("got None -- did you forget to return the learning rate?")
            phase = "warmup" if s <= warmup else "after warmup"
            assert_same(torch.tensor(float(got), dtype=torch.float64),
                        torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-15,
                        what=f"warmup_lr(step={step}, base_lr={base_lr}, warmup_steps={warmup}) ({phase}; "
                             f"step is 0-based, so step 0 already gets base_lr / warmup_steps)")
            n += 1
    _expect_value_error(lambda: warmup_lr(-1, 1e-3, 10), "warmup_lr(step=-1, ...)", "step")
    _expect_value_error(lambda: warmup_lr(0, 1e-3, -5), "warmup_lr(0, 1e-3, warmup_steps=-5)", "warmup_steps")
    return f"correct at {n} steps of 4 schedules, and bad arguments rejected"


# --- Chapter 07: the full model -----------------------------------------------

def _ch07_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(700 + seed)


@exercise_check
def check_feed_forward(feed_forward: Callable) -> str:
    """``feed_forward(x, w_up, b_up, w_down, b_down)`` = ``down(gelu_tanh(up(x)))`` with
    ``nn.Linear`` layouts, compared with ``F.linear`` + ``F.gelu(approximate="tanh")``."""
    act = torch.nn.functional.gelu
    cases = [((2, 3, 8), 32), ((5, 4), 16), ((1, 1, 6), 6), ((2, 7, 4), 12)]
    for seed, (shape, d_ff) in enumerate(cases):
        g = _ch07_rng(seed)
        d_model = shape[-1]
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 2.0  # wide range: tails matter
        w_up = torch.randn(d_ff, d_model, generator=g, dtype=torch.float64)
        b_up = torch.randn(d_ff, generator=g, dtype=torch.float64)
        w_down = torch.randn(d_model, d_ff, generator=g, dtype=torch.float64) / d_ff ** 0.5
        b_down = torch.randn(d_model, generator=g, dtype=torch.float64)
        expected = torch.nn.functional.linear(
            act(torch.nn.functional.linear(x, w_up, b_up), approximate="tanh"), w_down, b_down)
        got = feed_forward(x.clone(), w_up.clone(), b_up.clone(), w_down.clone(), b_down.clone())
        check_shape(got, tuple(expected.shape), what=f"output for x of shape {shape}, d_ff={d_ff}")
        assert_same(got, expected, what=f"output for x of shape {shape}, d_ff={d_ff}")
    return f"{len(cases)} cases equal F.linear + F.gelu(approximate='tanh')"


@exercise_check
def check_swiglu(swiglu: Callable) -> str:
    """``swiglu(x, w_gate, w_up, w_down)`` = ``down(silu(gate(x)) * up(x))`` (no biases),
    compared with a reference written with ``F.silu``."""
    F_ = torch.nn.functional
    cases = [((2, 3, 8), 24), ((4, 6), 16), ((1, 1, 4), 8)]
    for seed, (shape, d_ff) in enumerate(cases):
        g = _ch07_rng(10 + seed)
        d_model = shape[-1]
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 2.0
        w_gate, w_up = (torch.randn(d_ff, d_model, generator=g, dtype=torch.float64) for _ in range(2))
        w_down = torch.randn(d_model, d_ff, generator=g, dtype=torch.float64) / d_ff ** 0.5
        expected = F_.linear(F_.silu(F_.linear(x, w_gate)) * F_.linear(x, w_up), w_down)
        got = swiglu(x.clone(), w_gate.clone(), w_up.clone(), w_down.clone())
        check_shape(got, tuple(expected.shape), what=f"output for x of shape {shape}, d_ff={d_ff}")
        assert_same(got, expected, what=f"output for x of shape {shape}, d_ff={d_ff}")
    return f"{len(cases)} cases equal down(silu(gate(x)) * up(x))"


# GPT-2 small with tied embeddings, as reported for the published checkpoint.
_GPT2_SMALL_PARAMETERS = 124_439_808


@exercise_check
def check_count_parameters(count_parameters: Callable) -> str:
    """``count_parameters(config_dict)`` -> int, compared with ``Transformer(...).num_parameters()``
    on configurations varying every field that changes the count, and with GPT-2 small's
    published 124,439,808."""
    from .config import TransformerConfig
    from .model import Transformer

    base = dict(vocab_size=50, d_model=32, num_heads=4, num_layers=2, max_seq_len=16)
    variants = [
        {}, {"tie_weights": False}, {"d_ff": 48}, {"activation": "relu"}, {"activation": "swiglu"},
        {"activation": "swiglu", "d_ff": 40}, {"bias": False}, {"norm": "rmsnorm"},
        {"pos_encoding": "rope"}, {"pos_encoding": "sinusoidal"}, {"pos_encoding": "none"},
        {"num_layers": 5, "d_model": 48, "num_heads": 6, "max_seq_len": 40, "vocab_size": 97},
        {"activation": "swiglu", "bias": False, "norm": "rmsnorm", "pos_encoding": "rope",
         "tie_weights": False, "d_model": 40, "num_heads": 5},
    ]
    for overrides in variants:
        cfg = {**base, **overrides}
        expected = Transformer(TransformerConfig(**cfg)).num_parameters()
        got = count_parameters(dict(cfg))
        if got is None:
            raise CheckFailed(f"config {overrides or 'base'}: got None -- did you forget to return?")
        if int(got) != expected:
            raise CheckFailed(f"config {cfg}: expected {expected:,} parameters, got {int(got):,} "
                              f"(difference {int(got) - expected:+,})")
    gpt2 = dict(vocab_size=50257, d_model=768, num_heads=12, num_layers=12, max_seq_len=1024)
    got = count_parameters(dict(gpt2))
    if got is None or int(got) != _GPT2_SMALL_PARAMETERS:
        raise CheckFailed(f"GPT-2 small {gpt2}: expected {_GPT2_SMALL_PARAMETERS:,}, got {got}")
    return f"{len(variants)} configurations and GPT-2 small ({_GPT2_SMALL_PARAMETERS:,})"


def _ch07_leak_reference(model_fn: Callable, input_ids: torch.Tensor, vocab_size: int,
                         atol: float) -> torch.Tensor:
    base = model_fn(input_ids)
    T = input_ids.shape[1]
    changed = torch.zeros(T, T, dtype=torch.bool)
    for t in range(T):
        ids = input_ids.clone()
        ids[0, t] = (ids[0, t] + 1) % vocab_size
        diff = (model_fn(ids) - base).abs().amax(dim=-1)[0]  # (T,)
        changed[t] = diff > atol
    return changed


@exercise_check
def check_causal_leak_test(causal_leak_test: Callable) -> str:
    """``causal_leak_test(model_fn, input_ids, vocab_size, atol=1e-6)`` -> bool ``(T, T)`` with
    ``[t, s]`` True when changing token t changes the logits at position s. Run on a causal model,
    a bidirectional one, and a model that leaks one future token into one position."""
    from .config import TransformerConfig
    from .model import Transformer

    torch.manual_seed(7)
    cfg = dict(vocab_size=16, d_model=32, num_heads=4, num_layers=2, max_seq_len=16)
    causal = Transformer(TransformerConfig(**cfg)).eval()
    bidirectional = Transformer(TransformerConfig(**cfg, causal=False)).eval()

    def run(model):
        return lambda ids: model(ids)[0].detach()

    def one_leak(ids):  # position 2 sees token 5: a bug hiding in the middle of the sequence
        logits = run(causal)(ids).clone()
        logits[:, 2] += 0.1 * ids[:, 5:6].to(logits.dtype)
        return logits

    models = {"a causal model": run(causal), "a bidirectional model": run(bidirectional),
              "a model where position 2 sees token 5": one_leak}
    for seed, T in ((0, 8), (1, 1), (2, 12)):
        ids = torch.randint(0, 16, (1, T), generator=_ch07_rng(20 + seed))
        for name, fn in models.items():
            if T < 6 and name.startswith("a model where"):
                continue
            expected = _ch07_leak_reference(fn, ids, 16, 1e-6)
            before = ids.clone()
            got = causal_leak_test(fn, ids, 16, atol=1e-6)
            if not torch.equal(ids, before):
                raise CheckFailed("your function changed the caller's input_ids: clone before editing")
            check_shape(got, (T, T), what=f"result for {name}, T={T}")
            got = torch.as_tensor(np.asarray(got) if not isinstance(got, torch.Tensor) else got)
            if got.dtype != torch.bool:
                raise CheckFailed(f"result for {name}: expected a boolean tensor, got dtype {got.dtype}")
            if not torch.equal(got, expected):
                t, s = (int(i) for i in (got != expected).nonzero()[0])
                raise CheckFailed(f"{name}, T={T}: entry [t={t}, s={s}] (does changing token {t} "
                                  f"change the logits at position {s}?) should be "
                                  f"{bool(expected[t, s])}, got {bool(got[t, s])}")
    return "causal, bidirectional and single-leak models classified correctly"


# --- Chapter 08: tokens and data ----------------------------------------------

def _ch08_int_list(got: Any, what: str) -> list[int]:
    """The student's sequence of token ids as a list of Python ints (tensor, list or tuple)."""
    if got is None:
        raise CheckFailed(f"{what}: got None -- did you forget to return a value?")
    if isinstance(got, torch.Tensor):
        got = got.tolist()
    if not isinstance(got, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                     for i in got):
        raise CheckFailed(f"{what}: expected a list of integer ids, got {type(got).__name__} "
                          f"{str(got)[:60]}")
    return list(got)


def _ch08_compare_ids(got: list[int], expected: list[int], what: str) -> None:
    if got != expected:
        if len(got) != len(expected):
            raise CheckFailed(f"{what}: expected {len(expected)} ids, got {len(got)} "
                              f"(expected {expected[:12]}..., got {got[:12]}...)")
        i = next(j for j, (a, b) in enumerate(zip(got, expected)) if a != b)
        raise CheckFailed(f"{what}: first mismatch at position {i}: expected {expected[i]}, "
                          f"got {got[i]} (expected {expected[max(0, i - 3):i + 4]} around it, "
                          f"got {got[max(0, i - 3):i + 4]})")


@exercise_check
def check_char_encode(char_encode: Callable) -> str:
    """``char_encode(text, stoi, unk_id)`` -> one id per character; characters missing from
    ``stoi`` become ``unk_id``."""
    base = {c: i for i, c in enumerate("abc ", start=2)}
    cases = [
        ("'a cab' (all characters known)", "a cab", base, 1),
        ("'a zebra' (z, e, r are unknown)", "a zebra", base, 1),
        ("the empty string", "", base, 1),
        ("unicode text with unk_id=99", "café → ok", {c: i for i, c in enumerate("acfé ok")}, 99),
        ("a vocabulary built from 'hello world'", "hello, world!",
         {c: i for i, c in enumerate(sorted(set("hello world")), start=2)}, 1),
    ]
    for name, text, stoi, unk_id in cases:
        stoi_copy = dict(stoi)
        got = _ch08_int_list(char_encode(text, stoi_copy, unk_id), f"ids for {name}")
        if stoi_copy != stoi:
            raise CheckFailed(f"for {name}: you changed stoi; encoding must not add characters")
        expected = [stoi[c] if c in stoi else unk_id for c in text]
        _ch08_compare_ids(got, expected, f"ids for {name} (unknown characters -> unk_id={unk_id})")
    return f"correct on {len(cases)} texts, unknown characters included"


@exercise_check
def check_get_pair_counts(get_pair_counts: Callable) -> str:
    """``get_pair_counts(ids)`` -> ``{(a, b): count}`` over adjacent (overlapping) pairs."""
    g = torch.Generator().manual_seed(800)
    cases = [
        ("[1, 2, 3, 1, 2]", [1, 2, 3, 1, 2]),
        ("[5, 5, 5] (overlapping pairs: (5, 5) occurs twice)", [5, 5, 5]),
        ("an empty list", []),
        ("a single id", [7]),
        ("the UTF-8 bytes of 'aaabdaaabac'", list(b"aaabdaaabac")),
        ("300 random ids in [0, 6)", torch.randint(6, (300,), generator=g).tolist()),
    ]
    for name, ids in cases:
        ids_copy = list(ids)
        got = get_pair_counts(ids_copy)
        if ids_copy != ids:
            raise CheckFailed(f"for {name}: you modified ids in place")
        if not isinstance(got, dict):
            raise CheckFailed(f"for {name}: expected a dict {{(a, b): count}}, got {type(got).__name__}")
        expected: dict = {}
        for i in range(len(ids) - 1):  # reference: every adjacent position, overlaps included
            expected[(ids[i], ids[i + 1])] = expected.get((ids[i], ids[i + 1]), 0) + 1
        got = {tuple(k): v for k, v in got.items()}
        for pair in sorted(set(expected) | set(got)):
            if got.get(pair, 0) != expected.get(pair, 0):
                raise CheckFailed(f"for {name}: pair {pair} should be counted "
                                  f"{expected.get(pair, 0)} times, got {got.get(pair, 0)}")
    return f"correct on {len(cases)} id lists, overlapping pairs and empty input included"


@exercise_check
def check_merge_pair(merge_pair: Callable) -> str:
    """``merge_pair(ids, pair, new_id)`` -> a new list, every non-overlapping occurrence of ``pair``
    (scanning left to right) replaced by ``new_id``."""
    g = torch.Generator().manual_seed(801)
    cases = [
        ("[1, 2, 3, 1, 2] with (1, 2) -> 4", [1, 2, 3, 1, 2], (1, 2), 4),
        ("[1, 1, 1] with (1, 1) -> 9 (left to right: [9, 1])", [1, 1, 1], (1, 1), 9),
        ("[1, 1, 1, 1] with (1, 1) -> 9", [1, 1, 1, 1], (1, 1), 9),
        ("[3, 4, 5] with the absent pair (4, 3)", [3, 4, 5], (4, 3), 7),
        ("[3, 4] with (3, 4) -> 256 (the whole list)", [3, 4], (3, 4), 256),
        ("an empty list", [], (1, 2), 3),
        ("200 random ids in [0, 3) with (0, 1) -> 3",
         torch.randint(3, (200,), generator=g).tolist(), (0, 1), 3),
    ]
    for name, ids, pair, new_id in cases:
        ids_copy = list(ids)
        got = _ch08_int_list(merge_pair(ids_copy, pair, new_id), f"result for {name}")
        if ids_copy != ids:
            raise CheckFailed(f"for {name}: you modified ids in place; return a new list")
        expected, i = [], 0
        while i < len(ids):  # reference: a left-to-right scan
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
                expected.append(new_id)
                i += 2
            else:
                expected.append(ids[i])
                i += 1
        _ch08_compare_ids(got, expected, f"result for {name}")
    return f"correct on {len(cases)} cases, overlapping pairs included"


@exercise_check
def check_make_windows(make_windows: Callable) -> str:
    """``make_windows(ids, block_size)`` -> ``(x, y)``, each ``(N, block_size)`` with
    ``N = len(ids) - block_size``: row ``i`` is ``ids[i:i+T]`` and its target ``ids[i+1:i+T+1]``."""
    g = torch.Generator().manual_seed(802)
    cases = [
        ("ids 0..9 with block_size=3", torch.arange(10), 3),
        ("ids 0..9 with block_size=1", torch.arange(10), 1),
        ("5 ids with block_size=4 (exactly one window)", torch.tensor([7, 3, 9, 1, 4]), 4),
        ("100 random ids with block_size=8", torch.randint(50, (100,), generator=g), 8),
    ]
    for name, ids, T in cases:
        ids_copy = ids.clone()
        res = make_windows(ids_copy, T)
        if not torch.equal(ids_copy, ids):
            raise CheckFailed(f"for {name}: you modified ids in place")
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise CheckFailed(f"for {name}: return a pair (x, y), got {type(res).__name__}")
        windows = ids.unfold(0, T + 1, 1)  # (N, T + 1): every window of T + 1 consecutive ids
        N = len(ids) - T
        x, y = (torch.as_tensor(t) for t in res)
        check_shape(x, (N, T), what=f"x for {name} (N = len(ids) - block_size windows)")
        check_shape(y, (N, T), what=f"y for {name}")
        assert_same(x, windows[:, :-1], what=f"x for {name}")
        assert_same(y, windows[:, 1:], what=f"y for {name} (x shifted left by one)")
    return f"correct on {len(cases)} cases"


# --- Chapter 09: training -----------------------------------------------------

def _ch09_logits_cases(seed: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    big = torch.tensor([[1e4, 0.0, -1e4], [-1e4, -1e4, 1e4], [500.0, 500.0, 499.0]])
    return [
        ("(8, 5) logits", torch.randn(8, 5, generator=g), torch.randint(5, (8,), generator=g)),
        ("(16, 100) float64 logits", 3 * torch.randn(16, 100, generator=g, dtype=torch.float64),
         torch.randint(100, (16,), generator=g)),
        ("one row", torch.randn(1, 7, generator=g), torch.tensor([6])),
        ("huge logits (1e4: exp overflows unless you subtract the row max)", big,
         torch.tensor([0, 1, 2])),
        ("very negative logits (-1e4: exp underflows to 0, log(0) = -inf)", big - 2e4,
         torch.tensor([2, 0, 1])),
    ]


def _ch09_finite(got: Any, name: str) -> torch.Tensor:
    if got is None:
        raise CheckFailed(f"loss for {name}: got None -- did you forget to return a value?")
    got = torch.as_tensor(got)
    if got.numel() != 1:
        raise CheckFailed(f"loss for {name}: expected a scalar (the mean over tokens), got shape "
                          f"{tuple(got.shape)}")
    if not torch.isfinite(got).all():
        raise CheckFailed(f"loss for {name}: got {got.item()} -- compute log-sum-exp stably: "
                          f"m + log(sum(exp(z - m))) with m the row max")
    return got.reshape(())


@exercise_check
def check_cross_entropy(cross_entropy: Callable) -> str:
    """``cross_entropy(logits, targets, ignore_index=-100)``: ``(N, V)`` logits and ``(N,)``
    targets -> the mean of ``logsumexp(z) - z_y`` over the targets that are not ``ignore_index``."""
    cases = [(name, z, y, {}) for name, z, y in _ch09_logits_cases(900)]
    g = torch.Generator().manual_seed(901)
    z, y = torch.randn(10, 6, generator=g), torch.randint(6, (10,), generator=g)
    y[[1, 4, 5]] = -100
    cases.append(("targets holding -100 (padding: left out of the mean)", z, y, {}))
    y2 = y.clone()
    y2[y2 == -100] = 0
    y2[[0, 2]] = -1
    cases.append(("ignore_index=-1", z, y2, {"ignore_index": -1}))
    for name, logits, targets, kwargs in cases:
        z_in, y_in = logits.clone(), targets.clone()
        got = _ch09_finite(cross_entropy(z_in, y_in, **kwargs), name)
        if not (torch.equal(z_in, logits) and torch.equal(y_in, targets)):
            raise CheckFailed(f"for {name}: you modified the inputs in place")
        expected = torch.nn.functional.cross_entropy(logits, targets, **kwargs)
        assert_same(got.to(expected.dtype), expected, what=f"loss for {name} (vs F.cross_entropy)")
    return f"matches F.cross_entropy on {len(cases)} cases, huge logits and ignored targets included"


@exercise_check
def check_label_smoothed_cross_entropy(label_smoothed_cross_entropy: Callable) -> str:
    """``label_smoothed_cross_entropy(logits, targets, smoothing)`` -> the mean cross-entropy against
    the target ``(1 - smoothing)·one_hot(y) + smoothing / V`` (as ``F.cross_entropy``'s
    ``label_smoothing``)."""
    cases = []
    for i, (name, z, y) in enumerate(_ch09_logits_cases(910)):
        cases.append((name, z, y, (0.1, 0.0, 0.3, 0.1, 0.05)[i]))
    g = torch.Generator().manual_seed(911)
    cases.append(("V=2, smoothing=0.5", torch.randn(6, 2, generator=g),
                  torch.randint(2, (6,), generator=g), 0.5))
    for name, logits, targets, eps in cases:
        z_in, y_in = logits.clone(), targets.clone()
        got = _ch09_finite(label_smoothed_cross_entropy(z_in, y_in, eps), name)
        if not (torch.equal(z_in, logits) and torch.equal(y_in, targets)):
            raise CheckFailed(f"for {name}: you modified the inputs in place")
        expected = torch.nn.functional.cross_entropy(logits, targets, label_smoothing=eps)
        assert_same(got.to(expected.dtype), expected,
                    what=f"loss for {name}, smoothing={eps} (vs F.cross_entropy(label_smoothing=...); "
                         f"smoothing / V goes to every class, the true one included)")
    return f"matches F.cross_entropy(label_smoothing=...) on {len(cases)} cases"


def _ch09_cosine_reference(step, max_lr, min_lr, warmup_steps, max_steps):
    s = step + 1
    if s <= warmup_steps:
        return max_lr * s / warmup_steps
    progress = min(1.0, (s - warmup_steps) / max(1, max_steps - warmup_steps))
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + np.cos(np.pi * progress))


@exercise_check
def check_cosine_lr(cosine_lr: Callable) -> str:
    """``cosine_lr(step, max_lr, min_lr, warmup_steps, max_steps)``: with ``s = step + 1``, linear
    warmup ``max_lr · s / warmup_steps`` while ``s <= warmup_steps``, then a half cosine from
    ``max_lr`` down to ``min_lr`` at ``s = max_steps``, and ``min_lr`` after."""
    settings = [
        dict(max_lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=100),
        dict(max_lr=0.5, min_lr=0.0, warmup_steps=0, max_steps=50),
        dict(max_lr=3e-4, min_lr=3e-5, warmup_steps=1, max_steps=20),
    ]
    n = 0
    for kw in settings:
        for step in range(kw["max_steps"] + 15):
            got = cosine_lr(step, **kw)
            if got is None:
                raise CheckFailed("got None -- did you forget to return the learning rate?")
            expected = _ch09_cosine_reference(step, **kw)
            phase = ("warmup" if step + 1 <= kw["warmup_steps"] else
                     "after max_steps" if step + 1 >= kw["max_steps"] else "cosine decay")
            assert_same(torch.tensor(float(got), dtype=torch.float64),
                        torch.tensor(float(expected), dtype=torch.float64), rtol=1e-9, atol=1e-12,
                        what=f"lr at step={step} ({phase}) for {kw}")
            n += 1
    return f"correct at {n} steps of {len(settings)} schedules (warmup, decay, after the end)"


@exercise_check
def check_clip_grad_norm(clip_grad_norm: Callable) -> str:
    """``clip_grad_norm(grads, max_norm)`` -> ``(clipped, total_norm)``: the global L2 norm over
    all tensors, and new tensors scaled by ``min(1, max_norm / total_norm)``."""
    g = torch.Generator().manual_seed(920)
    shapes = [(4, 3), (3,), (2, 2, 2)]
    big = [5 * torch.randn(s, generator=g) for s in shapes]
    small = [0.01 * torch.randn(s, generator=g) for s in shapes]
    each_small = [torch.full((4,), 0.4), torch.full((4,), 0.4), torch.full((4,), 0.4)]  # norms 0.8
    cases = [
        ("three tensors with a large global norm, max_norm=1", big, 1.0),
        ("three tensors with a small global norm (unchanged), max_norm=1", small, 1.0),
        ("tensors each of norm 0.8 < max_norm=1 but of global norm 1.39 > 1", each_small, 1.0),
        ("one tensor, max_norm=0.5", [torch.randn(10, generator=g, dtype=torch.float64)], 0.5),
        ("all-zero gradients (norm 0: nothing to clip, no NaN)", [torch.zeros(3), torch.zeros(2, 2)], 1.0),
    ]
    for name, grads, max_norm in cases:
        inputs = [t.clone() for t in grads]
        res = clip_grad_norm(inputs, max_norm)
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise CheckFailed(f"for {name}: return a pair (clipped_grads, total_norm)")
        clipped, total = res
        if any(not torch.equal(a, b) for a, b in zip(inputs, grads)):
            raise CheckFailed(f"for {name}: you modified the input gradients; return new tensors")
        params = [torch.nn.Parameter(torch.zeros_like(t)) for t in grads]  # reference: torch's own
        for p, t in zip(params, grads):
            p.grad = t.clone()
        expected_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        assert_same(torch.as_tensor(total, dtype=expected_norm.dtype).reshape(()), expected_norm,
                    what=f"total_norm for {name} (the L2 norm of all gradients together)",
                    rtol=1e-5, atol=1e-8)
        if not isinstance(clipped, (list, tuple)) or len(clipped) != len(grads):
            raise CheckFailed(f"for {name}: clipped must be a list of {len(grads)} tensors")
        for i, (c, p) in enumerate(zip(clipped, params)):
            assert_same(c, p.grad, what=f"clipped tensor {i} for {name} (vs "
                                        f"torch.nn.utils.clip_grad_norm_)", rtol=1e-5, atol=1e-8)
    return f"matches torch.nn.utils.clip_grad_norm_ on {len(cases)} cases"


# --- Chapter 10: sampling -----------------------------------------------------

def _ch10_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + seed)


def _ch10_filtered(got: Any, logits: torch.Tensor, what: str) -> torch.Tensor:
    """The student's filtered logits as a tensor of the input's shape; the input unchanged."""
    if got is None:
        raise CheckFailed(f"{what}: got None -- did you forget to return the filtered logits?")
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
    check_shape(got, tuple(logits.shape), what=what)
    if torch.isnan(got).any():
        raise CheckFailed(f"{what}: the result contains NaN; removed tokens should be -inf")
    removed_other = (got != logits) & ~torch.isneginf(got)
    if removed_other.any():
        idx = tuple(int(i) for i in removed_other.nonzero()[0])
        raise CheckFailed(f"{what}: at index {idx} the logit {logits[idx].item():.4g} became "
                          f"{got[idx].item():.4g}; kept logits must be unchanged and removed "
                          f"ones exactly -inf (not 0, not probabilities)")
    return got


def _ch10_compare_kept(got: torch.Tensor, expected_keep: torch.Tensor, what: str) -> None:
    kept = ~torch.isneginf(got)
    if not torch.equal(kept, expected_keep):
        idx = tuple(int(i) for i in (kept != expected_keep).nonzero()[0])
        should = "kept" if bool(expected_keep[idx]) else "removed (-inf)"
        raise CheckFailed(f"{what}: the token at index {idx} should be {should}; you kept "
                          f"{int(kept.sum())} tokens, the reference keeps {int(expected_keep.sum())}")


@exercise_check
def check_top_k_filter(top_k_filter: Callable) -> str:
    """``top_k_filter(logits, k)`` for ``(..., V)`` logits: keep each row's logits >= its k-th
    largest (ties kept), -inf elsewhere; compared with a reference built on ``torch.sort``."""
    g = _ch10_rng(0)
    cases = [("(4, 50) logits, k=5", torch.randn(4, 50, generator=g), 5),
             ("(2, 3, 20) logits, k=1 (greedy)", torch.randn(2, 3, 20, generator=g), 1),
             ("one row (30,), k=7", torch.randn(30, generator=g) * 4, 7),
             ("(3, 10) logits, k=V=10", torch.randn(3, 10, generator=g), 10),
             ("(3, 10) logits, k=15 > V", torch.randn(3, 10, generator=g), 15),
             ("float64 (2, 40) logits, k=12", torch.randn(2, 40, generator=g, dtype=torch.float64), 12),
             ("ties: [1, 3, 3, 2, 0], k=2 (both 3s are kept)",
              torch.tensor([[1.0, 3.0, 3.0, 2.0, 0.0]]), 2),
             ("ties: [1, 3, 3, 2, 0], k=3", torch.tensor([[1.0, 3.0, 3.0, 2.0, 0.0]]), 3),
             ("ties: [5, 5, 5, 1], k=1 (all three 5s are kept)", torch.tensor([5.0, 5.0, 5.0, 1.0]), 1)]
    for what, logits, k in cases:
        before = logits.clone()
        got = top_k_filter(logits, k)
        if not torch.equal(logits, before):
            raise CheckFailed(f"{what}: your function modified its input; return a new tensor")
        got = _ch10_filtered(got, logits, what)
        r = min(k, logits.shape[-1])
        kth = torch.sort(logits, dim=-1, descending=True).values[..., r - 1:r]  # (..., 1)
        _ch10_compare_kept(got, logits >= kth, what)
    return f"{len(cases)} cases (batches, k = 1, k >= V, float64, ties) equal the reference"


def _ch10_top_p_reference(logits: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Row by row in float64: the keep mask, and which rows sit within 1e-5 of a boundary."""
    rows = logits.reshape(-1, logits.shape[-1]).double()
    keep = torch.zeros(rows.shape, dtype=torch.bool)
    ambiguous = torch.zeros(rows.shape[0], dtype=torch.bool)
    for r, row in enumerate(rows):
        probs = torch.softmax(row, dim=-1)
        mass = 0.0
        for i in torch.argsort(row, descending=True).tolist():
            if abs(mass - p) < 1e-5:
                ambiguous[r] = True
            if mass >= p:
                break
            keep[r, i] = True
            mass += probs[i].item()
    return keep.reshape(logits.shape), ambiguous.reshape(logits.shape[:-1])


@exercise_check
def check_top_p_filter(top_p_filter: Callable) -> str:
    """``top_p_filter(logits, p)`` for ``(..., V)`` logits: nucleus filtering of each row, compared
    with a row-by-row float64 reference (rows within 1e-5 of a boundary are not compared)."""
    g = _ch10_rng(1)
    three = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    peaked = torch.zeros(2, 25)
    peaked[:, 3] = 20.0
    cases = [("[0.5, 0.3, 0.2], p=0.75 (keeps two)", three, 0.75),
             ("[0.5, 0.3, 0.2], p=0.85 (keeps three)", three, 0.85),
             ("[0.5, 0.3, 0.2], p=0.3 (keeps the most likely only)", three, 0.3),
             ("[0.5, 0.3, 0.2] in reverse order, p=0.75", three.flip(0), 0.75),
             ("(4, 30) logits, p=0.9", torch.randn(4, 30, generator=g) * 2, 0.9),
             ("(2, 3, 12) logits, p=0.5", torch.randn(2, 3, 12, generator=g) * 2, 0.5),
             ("one row (40,), p=0.1", torch.randn(40, generator=g) * 3, 0.1),
             ("(3, 16) logits, p=1.0 (keeps everything)", torch.randn(3, 16, generator=g), 1.0),
             ("(2, 25) peaked rows, p=0.9", peaked, 0.9),
             ("float64 (5, 50) logits, p=0.95", torch.randn(5, 50, generator=g, dtype=torch.float64), 0.95)]
    for what, logits, p in cases:
        before = logits.clone()
        got = top_p_filter(logits, p)
        if not torch.equal(logits, before):
            raise CheckFailed(f"{what}: your function modified its input; return a new tensor")
        got = _ch10_filtered(got, logits, what)
        keep, ambiguous = _ch10_top_p_reference(logits, p)
        clear = ~ambiguous
        _ch10_compare_kept(got[clear], keep[clear], what)
    return f"{len(cases)} cases (a worked example, batches, p = 1, peaked rows) equal the reference"


def _ch10_greedy_reference(model_fn: Callable, ids: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        ids = torch.cat([ids, model_fn(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


@exercise_check
def check_greedy_decode(greedy_decode: Callable) -> str:
    """``greedy_decode(model_fn, ids, n)`` -> ``(B, T + n)``, compared with a reference loop, on
    a bigram model and on a model whose prediction depends on the whole context."""
    V = 11
    table = torch.randn(V, V, generator=_ch10_rng(2))

    def bigram(ids):  # (B, T) -> (B, T, V): depends on the last token only
        return table[ids]

    def whole_context(ids):  # position t looks at the sum of tokens 0..t
        return table[ids.cumsum(dim=1) % V]

    models = {"a bigram model": bigram, "a model that reads the whole context": whole_context}
    prompts = [torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]]), torch.tensor([[3]]),
               torch.tensor([[0, 10, 5, 5]])]
    for name, fn in models.items():
        for ids, n in zip(prompts, (6, 10, 0)):
            before = ids.clone()
            got = greedy_decode(fn, ids, n)
            if not torch.equal(ids, before):
                raise CheckFailed("your function modified the prompt ids; build a new tensor")
            what = f"{name}, prompt of shape {tuple(ids.shape)}, n={n}"
            if not isinstance(got, torch.Tensor):
                raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
            expected = _ch10_greedy_reference(fn, ids, n)
            check_shape(got, tuple(expected.shape), what=what)
            if not torch.equal(got[:, :ids.shape[1]], ids):
                raise CheckFailed(f"{what}: the result must start with the prompt")
            if not torch.equal(got.long(), expected):
                t = int((got.long() != expected).any(0).nonzero()[0])
                raise CheckFailed(f"{what}: position {t} should be {expected[:, t].tolist()}, got "
                                  f"{got[:, t].tolist()} (does the model see the whole sequence "
                                  f"so far at every step?)")
    return "bigram and whole-context models decoded like the reference"


@exercise_check
def check_cached_attention(cached_attention: Callable) -> str:
    """``cached_attention(q, k_new, v_new, cache)`` -> ``(out, (k, v))``, fed in chunks and
    compared with ``F.scaled_dot_product_attention(..., is_causal=True)`` on the whole sequence."""
    g = _ch10_rng(3)
    B, H, T, D = 2, 3, 9, 4
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    for chunks in ([9], [4, 1, 1, 3], [1] * 9, [2, 5, 2]):
        what = f"chunks of {chunks}"
        cache, outs, start = None, [], 0
        for size in chunks:
            end = start + size
            res = cached_attention(q[:, :, start:end], k[:, :, start:end], v[:, :, start:end], cache)
            if not isinstance(res, (tuple, list)) or len(res) != 2:
                raise CheckFailed(f"{what}: return a pair (out, (k, v))")
            out, cache = res
            if not isinstance(cache, (tuple, list)) or len(cache) != 2:
                raise CheckFailed(f"{what}: the new cache must be a pair (k, v)")
            step = f"{what}, positions {start}..{end - 1}"
            check_shape(out, (B, H, size, D), what=f"out for {step}")
            assert_same(cache[0], k[:, :, :end], what=f"cached keys after {step}")
            assert_same(cache[1], v[:, :, :end], what=f"cached values after {step}")
            assert_same(out, expected[:, :, start:end],
                        what=f"out for {step} (vs causal attention over the whole sequence)")
            outs.append(out)
            start = end
    return "4 ways of chunking a sequence equal causal attention over the whole sequence"


# --- Chapter 11: backprop by hand ---------------------------------------------

def _ch11_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(1100 + seed)


def _ch11_arrays(out: Any, n: int, what: str) -> list[np.ndarray]:
    """A student's tuple of ``n`` gradients, each converted to a float64 NumPy array."""
    if not isinstance(out, (tuple, list)) or len(out) != n:
        raise CheckFailed(f"{what}: expected a tuple of {n} arrays, got {type(out).__name__}"
                          + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    return [o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else o for o in out]


@exercise_check
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


@exercise_check
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


@exercise_check
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


@exercise_check
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


# --- Chapter 12: capstone, digit operations -----------------------------------

def _ch12_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1200 + seed)


_CH12_OPS = ("First", "Second", "Last", "Max", "Min")


def _ch12_answer(op: str, digits: list[int]) -> int:
    # An independent reference: by sorting and indexing rather than max/min.
    ordered = sorted(digits)
    return {"First": digits[0], "Second": digits[1], "Last": digits[len(digits) - 1],
            "Max": ordered[-1], "Min": ordered[0]}[op]


@exercise_check
def check_apply_operation(apply_operation: Callable) -> str:
    """``apply_operation(op, digits)`` -> the answer digit, on hand-picked cases (ties, two
    digits, the answer at either end), on 500 examples of ``digit_operations`` (compared with
    their labels), and a ``ValueError`` naming an unknown operation."""
    from .data import digit_operations

    cases = [("Max", [3, 5, 1]), ("Min", [3, 5, 1]), ("First", [7, 2]), ("Second", [7, 2]),
             ("Last", [7, 2]), ("Max", [9, 9, 0]), ("Min", [4, 0, 0, 8]), ("Last", [1, 2, 3, 4, 5, 6]),
             ("Max", [0, 1, 2, 3, 9]), ("Min", [0, 5, 5]), ("Second", [5, 5, 6]), ("First", [0, 0])]
    for op, digits in cases:
        given = list(digits)
        got = apply_operation(op, given)
        if given != digits:
            raise CheckFailed(f"{op} {digits}: your function changed the caller's list to {given} "
                              f"(sorting in place?); work on a copy")
        expected = _ch12_answer(op, digits)
        if got is None or isinstance(got, bool) or int(got) != expected:
            raise CheckFailed(f"{op} ( {' '.join(map(str, digits))} ): expected {expected}, got {got!r}")
    task = digit_operations(n_train=500, n_val=0, n_test=0, min_len=2, max_len=8, seed=12)
    split = task.train
    for i, (op, digits) in enumerate(zip(split.operations, split.digits)):
        got = apply_operation(op, list(digits))
        if got is None or int(got) != int(split.labels[i]):
            raise CheckFailed(f"digit_operations example {i}, {op} {digits}: the label is "
                              f"{int(split.labels[i])}, got {got!r}")
    try:
        apply_operation("Median", [1, 2, 3])
    except ValueError as e:
        if "Median" not in str(e):
            raise CheckFailed(f"the ValueError for an unknown operation should name it ('Median'); "
                              f"the message was: {e}") from None
    else:
        raise CheckFailed("apply_operation('Median', [1, 2, 3]) should raise ValueError naming the "
                          "operation and the allowed ones")
    return f"{len(cases)} cases, 500 examples, a bad operation"


def _ch12_per_op_reference(preds, labels, operations) -> dict[str, float]:
    out: dict[str, float] = {}
    for op in dict.fromkeys(operations):  # first-seen order
        idx = [i for i, o in enumerate(operations) if o == op]
        out[op] = sum(int(preds[i]) == int(labels[i]) for i in idx) / len(idx)
    return out


@exercise_check
def check_accuracy_by_operation(accuracy_by_operation: Callable) -> str:
    """``accuracy_by_operation(preds, labels, operations)`` -> ``{op: accuracy}``, compared with
    a loop over the examples, on random predictions, a perfect operation, a hopeless one, a
    single operation and a single example."""
    g = _ch12_rng(1)
    cases = []
    n = 300
    ops = [_CH12_OPS[int(i)] for i in torch.randint(0, 5, (n,), generator=g)]
    labels = torch.randint(0, 10, (n,), generator=g)
    preds = torch.where(torch.rand(n, generator=g) < 0.7, labels, torch.randint(0, 10, (n,), generator=g))
    cases.append(("random predictions, 5 operations", preds, labels, ops))
    fixed = preds.clone()
    for i, op in enumerate(ops):
        if op == "First":
            fixed[i] = labels[i]  # always right
        elif op == "Max":
            fixed[i] = (labels[i] + 1) % 10  # always wrong
    cases.append(("First always right, Max always wrong", fixed, labels, ops))
    cases.append(("one operation", preds[:40], labels[:40], ["Min"] * 40))
    cases.append(("one example", torch.tensor([3]), torch.tensor([3]), ["Last"]))
    cases.append(("uneven counts", torch.tensor([1, 2, 3, 4, 5, 6]), torch.tensor([1, 0, 3, 0, 0, 6]),
                  ["Max", "Max", "Max", "Max", "Min", "Min"]))
    for what, p, y, o in cases:
        got = accuracy_by_operation(p.clone(), y.clone(), list(o))
        expected = _ch12_per_op_reference(p, y, o)
        if not isinstance(got, dict):
            raise CheckFailed(f"{what}: expected a dict {{operation: accuracy}}, got {type(got).__name__}")
        if set(got) != set(expected):
            raise CheckFailed(f"{what}: expected the keys {sorted(expected)} (the operations present), "
                              f"got {sorted(got)}")
        for op, value in expected.items():
            v = got[op]
            v = float(v.item() if isinstance(v, torch.Tensor) else v)
            if abs(v - value) > 1e-6:
                raise CheckFailed(f"{what}: accuracy of {op} should be {value:.4f} (a fraction of that "
                                  f"operation's examples), got {v:.4f}")
    return f"{len(cases)} cases equal a loop over the examples"


@exercise_check
def check_mean_pool(mean_pool: Callable) -> str:
    """``mean_pool(hidden, attention_mask)`` -> ``(B, C)`` mean of the non-padding vectors,
    compared with a per-row loop and with ``TransformerClassifier(pooling="mean")``."""
    from .attention import padding_mask
    from .config import TransformerConfig
    from .model import TransformerClassifier

    g = _ch12_rng(2)
    B, T, C = 4, 7, 5
    hidden = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    lengths = [7, 1, 4, 6]
    bool_mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    cases = [("a bool mask, rows of 7, 1, 4 and 6 tokens", hidden, bool_mask),
             ("a 0/1 integer mask", hidden, bool_mask.long()),
             ("no padding", hidden[:2], torch.ones(2, T, dtype=torch.bool)),
             ("padding in the middle", hidden[:1], torch.tensor([[1, 0, 1, 1, 0, 0, 1]], dtype=torch.bool))]
    for what, h, m in cases:
        h_before, m_before = h.clone(), m.clone()
        got = mean_pool(h, m)
        if not (torch.equal(h, h_before) and torch.equal(m, m_before)):
            raise CheckFailed(f"{what}: your function modified its inputs")
        expected = torch.stack([h[b][m[b].bool()].mean(dim=0) for b in range(h.shape[0])])
        check_shape(got, tuple(expected.shape), what=f"output for {what}")
        assert_same(got, expected, what=f"output for {what}")
    torch.manual_seed(12)
    cfg = TransformerConfig(vocab_size=20, d_model=16, num_heads=2, num_layers=1, max_seq_len=T, causal=False)
    model = TransformerClassifier(cfg, num_classes=10, pooling="mean").eval()
    ids = torch.randint(0, 20, (B, T), generator=g)
    with torch.no_grad():
        expected = model(ids, attention_mask=bool_mask)[0]
        got = model.head(mean_pool(model.hidden_states(ids, mask=padding_mask(bool_mask)), bool_mask))
    assert_same(got, expected, what="TransformerClassifier(pooling='mean') logits through your pooling")
    return f"{len(cases)} per-row means and pooling='mean' logits match"


def _ch12_mlm_call(mlm_mask: Callable, ids: torch.Tensor, seed: int, **kwargs):
    before = ids.clone()
    out = mlm_mask(ids, torch.Generator().manual_seed(seed), **kwargs)
    if not torch.equal(ids, before):
        raise CheckFailed("your function modified input_ids in place; corrupt a copy")
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise CheckFailed(f"expected a pair (corrupted_ids, labels), got {type(out).__name__}")
    corrupted, labels = (torch.as_tensor(t) for t in out)
    for name, t in (("corrupted_ids", corrupted), ("labels", labels)):
        check_shape(t, tuple(ids.shape), what=name)
        if t.is_floating_point() or t.dtype == torch.bool:
            raise CheckFailed(f"{name}: expected integer token ids, got dtype {t.dtype}")
    return corrupted.long(), labels.long()


@exercise_check
def check_mlm_mask(mlm_mask: Callable) -> str:
    """``mlm_mask(input_ids, generator, mask_id, vocab_size, special_ids, select_prob)`` ->
    ``(corrupted_ids, labels)``: structure checked exactly (labels, untouched positions and special
    tokens), the 15% / 80-10-10 rates checked statistically (5 standard deviations) on 2,000
    sequences, and reproducibility from the generator alone."""
    V, mask_id, pad, cls = 30, 5, 0, 1
    special = (pad, cls, mask_id)
    kwargs = dict(mask_id=mask_id, vocab_size=V, special_ids=special, select_prob=0.15)
    g = _ch12_rng(3)
    B, T = 2000, 24
    ids = torch.randint(6, V, (B, T), generator=g)  # ordinary tokens are 6..29
    ids[:, 0] = cls
    lengths = torch.randint(4, T + 1, (B,), generator=g)
    ids[torch.arange(T)[None, :] >= lengths[:, None]] = pad
    corrupted, labels = _ch12_mlm_call(mlm_mask, ids, 0, **kwargs)
    eligible = ~torch.isin(ids, torch.tensor(special))
    selected = labels != -100
    if (selected & ~eligible).any():
        b, t = (int(i) for i in (selected & ~eligible).nonzero()[0])
        raise CheckFailed(f"special token {int(ids[b, t])} at [{b}, {t}] was selected; "
                          f"tokens in special_ids={special} are never selected")
    if not torch.equal(labels[selected], ids[selected]):
        raise CheckFailed("labels must hold the ORIGINAL token at selected positions")
    if not torch.equal(corrupted[~selected], ids[~selected]):
        b, t = (int(i) for i in (corrupted != ids).logical_and(~selected).nonzero()[0])
        raise CheckFailed(f"position [{b}, {t}] is not selected (its label is -100) but its token "
                          f"changed from {int(ids[b, t])} to {int(corrupted[b, t])}")
    if corrupted.min() < 0 or corrupted.max() >= V:
        raise CheckFailed(f"corrupted ids must lie in [0, vocab_size={V})")
    n_eligible, n_sel = int(eligible.sum()), int(selected.sum())

    def near(name, value, p, n, slack=0.005):
        tol = 5 * (p * (1 - p) / n) ** 0.5 + slack
        if abs(value - p) > tol:
            raise CheckFailed(f"{name}: expected about {p:.3f}, got {value:.3f} (tolerance {tol:.3f})")

    near("fraction of eligible tokens selected", n_sel / n_eligible, 0.15, n_eligible)
    to_mask = selected & (corrupted == mask_id)
    kept = selected & (corrupted == ids)
    other = selected & (corrupted != mask_id) & (corrupted != ids)
    near("fraction of selected tokens replaced by mask_id", int(to_mask.sum()) / n_sel, 0.8, n_sel)
    near("fraction of selected tokens left unchanged", int(kept.sum()) / n_sel, 0.1, n_sel)
    near("fraction of selected tokens replaced by a random token", int(other.sum()) / n_sel, 0.1, n_sel)
    if len(torch.unique(corrupted[other])) < V // 2:
        raise CheckFailed(f"the random replacements use only {len(torch.unique(corrupted[other]))} "
                          f"distinct tokens; draw them uniformly from the vocabulary")
    # Reproducible from the generator alone (the global RNG must not matter).
    small = ids[:64]
    torch.manual_seed(0)
    a = _ch12_mlm_call(mlm_mask, small, 7, **kwargs)
    torch.manual_seed(1)
    b = _ch12_mlm_call(mlm_mask, small, 7, **kwargs)
    if not (torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])):
        raise CheckFailed("the same generator seed gave different results: draw every random "
                          "number from `generator`, not from torch's global RNG")
    c = _ch12_mlm_call(mlm_mask, small, 8, **kwargs)
    if torch.equal(a[1], c[1]):
        raise CheckFailed("different generator seeds gave the same selection: use the generator")
    # Edge probabilities: all eligible tokens, or none.
    corrupted, labels = _ch12_mlm_call(mlm_mask, small, 9, **{**kwargs, "select_prob": 1.0})
    if not torch.equal(labels != -100, eligible[:64]):
        raise CheckFailed("with select_prob=1.0 every non-special token must be selected")
    corrupted, labels = _ch12_mlm_call(mlm_mask, small, 9, **{**kwargs, "select_prob": 0.0})
    if (labels != -100).any() or not torch.equal(corrupted, small):
        raise CheckFailed("with select_prob=0.0 nothing is selected: labels all -100, ids unchanged")
    return (f"{n_sel / n_eligible:.1%} selected: {int(to_mask.sum()) / n_sel:.1%} mask, "
            f"{int(other.sum()) / n_sel:.1%} random, {int(kept.sum()) / n_sel:.1%} kept")


# --- Chapter 13: debugging transformers ---------------------------------------

def _ch13_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1300 + seed)


@exercise_check
def check_find_nan_or_inf(find_nan_or_inf: Callable) -> str:
    """``find_nan_or_inf(named_tensors)`` -> the names, in order, of the tensors holding NaN or
    +-inf; ``None`` tensors skipped, integer tensors finite. Includes a model's gradients."""
    g = _ch13_rng(0)
    ok = torch.randn(3, 4, generator=g)
    nan = ok.clone()
    nan[1, 2] = float("nan")
    pinf, ninf = ok.clone(), ok.clone()
    pinf[0, 0], ninf[2, 3] = float("inf"), float("-inf")
    huge = torch.full((2,), 3e38)  # large but finite
    cases = [
        ("all finite", [("a", ok), ("b", ok * 2)], []),
        ("names in the order given, not sorted", [("layer2", nan), ("layer10", pinf)], ["layer2", "layer10"]),
        ("a NaN in the second tensor", [("a", ok), ("b", nan), ("c", ok)], ["b"]),
        ("+inf, -inf and NaN in several tensors", [("w", pinf), ("x", ok), ("y", ninf), ("z", nan)],
         ["w", "y", "z"]),
        ("None entries (parameters without gradients) are skipped",
         [("p", None), ("q", nan), ("r", None)], ["q"]),
        ("integer tensors are finite", [("ids", torch.arange(5)), ("mask", torch.ones(3, dtype=torch.bool))], []),
        ("large finite values are not infinities", [("big", huge), ("f64", nan.double())], ["f64"]),
        ("an empty list", [], []),
    ]
    for what, pairs, expected in cases:
        got = find_nan_or_inf(iter([(n, t) for n, t in pairs]))
        if got is None:
            raise CheckFailed(f"{what}: got None -- return a list of names (an empty list if none)")
        if list(got) != expected:
            raise CheckFailed(f"{what}: expected {expected}, got {list(got)}")
    with torch.random.fork_rng():
        torch.manual_seed(13)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model(torch.tensor([[1.0, float("inf"), 0.0]])).sum().backward()
    grads = [(n, p.grad) for n, p in model.named_parameters()]
    expected = [n for n, gr in grads if not bool(torch.isfinite(gr).all())]
    if not 0 < len(expected) < len(grads):  # guards the case itself
        raise RuntimeError(f"internal: expected some but not all gradients non-finite, got {expected}")
    got = find_nan_or_inf(iter(grads))
    if list(got) != expected:
        raise CheckFailed(f"gradients of a model fed an infinite input: expected {expected}, got {list(got)}")
    return f"{len(cases) + 1} cases, gradients of a model included"


def _ch13_spikes_reference(losses: list, factor: float, window: int) -> list[int]:
    out = []
    for i, loss in enumerate(losses):
        if not np.isfinite(loss):
            out.append(i)
            continue
        before = [x for x in losses[max(0, i - window):i] if np.isfinite(x)]
        if before and loss > factor * (sum(before) / len(before)):
            out.append(i)
    return out


@exercise_check
def check_detect_loss_spike(detect_loss_spike: Callable) -> str:
    """``detect_loss_spike(losses, factor, window)`` -> sorted spike steps, compared with a
    reference on hand-made traces (NaN, inf, short windows, flat) and random noisy ones."""
    cases = [
        ("a smooth decreasing trace", [4.0, 3.5, 3.2, 3.0, 2.9, 2.8], 2.0, 3, []),
        ("one spike at step 4", [3.0, 2.9, 2.8, 2.7, 6.5, 2.6, 2.5], 2.0, 3, [4]),
        ("a spike right after the first step", [1.0, 2.5, 1.0], 2.0, 10, [1]),
        ("NaN and inf are always spikes", [2.0, float("nan"), 2.0, float("inf"), 1.9], 2.0, 2, [1, 3]),
        ("the window skips non-finite values", [1.0, float("nan"), 2.5, 1.0], 2.0, 2, [1, 2]),
        ("only the last `window` steps count", [10.0, 10.0, 1.0, 1.0, 2.5], 2.0, 2, [4]),
        ("a larger factor", [3.0, 2.9, 2.8, 2.7, 6.5, 2.6], 3.0, 3, []),
        ("a flat trace", [2.0] * 8, 1.5, 4, []),
        ("an empty list", [], 2.0, 5, []),
        ("a single value", [5.0], 2.0, 5, []),
    ]
    g = _ch13_rng(1)
    for seed in range(3):
        noisy = (3.0 * torch.exp(-torch.arange(60) / 30.0) + 0.3 * torch.rand(60, generator=g)).tolist()
        noisy[10 + 15 * seed] *= 2.5
        cases.append((f"a noisy decreasing trace #{seed + 1} with a spike", noisy, 1.8, 5, None))
    for what, losses, factor, window, expected in cases:
        reference = _ch13_spikes_reference(losses, factor, window)
        if expected is not None and reference != expected:  # guards the reference itself
            raise RuntimeError(f"internal: reference gives {reference} for {what}, not {expected}")
        before = list(losses)
        got = detect_loss_spike(losses, factor=factor, window=window)
        if [str(x) for x in losses] != [str(x) for x in before]:
            raise CheckFailed(f"{what}: your function modified the list of losses")
        if got is None:
            raise CheckFailed(f"{what}: got None -- return a list of steps (empty if no spike)")
        got = [int(i) for i in got]
        if got != reference:
            raise CheckFailed(f"{what} (factor={factor}, window={window}): expected spikes at "
                              f"{reference}, got {got}")
    return f"{len(cases)} traces (NaN, inf, window edges, noisy traces) match the reference"


@exercise_check
def check_bad_attention_rows(bad_attention_rows: Callable) -> str:
    """``bad_attention_rows(weights, atol)`` -> bool ``(..., T_q)``: rows with a non-finite or
    negative entry, or a sum off 1 by more than ``atol``."""
    g = _ch13_rng(2)
    scores = torch.randn(2, 3, 5, 5, generator=g) * 3
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    masked = scores.masked_fill(~causal, float("-inf"))
    good = torch.softmax(masked, dim=-1)
    wrong_axis = torch.softmax(scores, dim=-2)  # columns sum to one, rows do not
    with_nan = good.clone()
    with_nan[0, 1, 2, 0] = float("nan")
    dead = good.clone()
    dead[1, 0, 3] = 0.0  # a fully masked query's row of zeros
    negative = good.clone()
    negative[0, 2, 4, :2] = torch.tensor([1.2, -0.2])
    negative[0, 2, 4, 2:] = 0.0
    slightly = good.clone()
    slightly[1, 2, 1] *= 1 + 1e-7  # within atol
    cases = [("softmax over the last axis (all rows fine)", good, 1e-5),
             ("softmax over the wrong axis (dim=-2)", wrong_axis, 1e-5),
             ("a NaN in one row", with_nan, 1e-5),
             ("a fully masked row of zeros", dead, 1e-5),
             ("a row with a negative weight that still sums to 1", negative, 1e-5),
             ("a row off by 1e-7 (within atol)", slightly, 1e-5),
             ("2-D weights (T_q, T_k)", torch.softmax(torch.randn(4, 6, generator=g), dim=0), 1e-5),
             ("float64 weights with a tight atol", good.double() * (1 + 1e-9), 1e-12)]
    for what, w, atol in cases:
        before = w.clone()
        got = bad_attention_rows(w, atol=atol)
        if not torch.equal(before.nan_to_num(), w.nan_to_num()):
            raise CheckFailed(f"{what}: your function modified the weights")
        check_shape(got, tuple(w.shape[:-1]), what=f"result for {what}")
        got = torch.as_tensor(got)
        if got.dtype != torch.bool:
            raise CheckFailed(f"{what}: expected a boolean tensor, got dtype {got.dtype}")
        finite = torch.isfinite(w).all(-1)
        clean = w.nan_to_num(0.0, 0.0, 0.0)
        expected = ~(finite & ((clean.sum(-1) - 1).abs() <= atol) & (clean.amin(-1) >= 0))
        if not torch.equal(got, expected):
            idx = tuple(int(i) for i in (got != expected).nonzero()[0])
            raise CheckFailed(f"{what}: row {idx} (sum {w[idx].sum().item():.6g}, smallest entry "
                              f"{w[idx].min().item():.4g}) should be flagged {bool(expected[idx])}, "
                              f"got {bool(got[idx])}")
    return f"{len(cases)} cases (wrong softmax axis, NaN, zero rows, negative weights, tolerance)"


@exercise_check
def check_first_divergence(first_divergence: Callable) -> str:
    """``first_divergence(model_a, model_b, input_ids, atol)`` -> the name of the first submodule
    (in the order submodules finish) whose output differs, or None; on pairs of
    ``fundamentallm.Transformer``s that differ in one place."""
    from .config import TransformerConfig
    from .model import Transformer

    with torch.random.fork_rng():  # the models' initialisation leaves the global RNG alone
        torch.manual_seed(13)
        return _ch13_first_divergence_cases(first_divergence, Transformer, TransformerConfig)


def _ch13_first_divergence_cases(first_divergence: Callable, Transformer, TransformerConfig) -> str:
    cfg = TransformerConfig(vocab_size=20, d_model=16, num_heads=2, num_layers=2, max_seq_len=8)
    base = Transformer(cfg).eval()
    ids = torch.randint(0, 20, (2, 8), generator=_ch13_rng(3))

    def changed(param: str, delta: float = 0.05, constant: bool = False) -> Transformer:
        model = Transformer(cfg).eval()
        model.load_state_dict(base.state_dict())
        with torch.no_grad():
            target = dict(model.named_parameters())[param]
            target.add_(delta if constant else delta * torch.randn(target.shape, generator=_ch13_rng(4)))
        return model

    cases = [("identical models", base, None),
             ("block 1's feed-forward up-projection changed", changed("blocks.1.ff.up.weight"),
              "blocks.1.ff.up"),
             ("block 0's attention output projection changed",
              changed("blocks.0.attn.out_proj.bias"), "blocks.0.attn.out_proj"),
             ("the learned positions changed", changed("pos_encoding.weight"), "pos_encoding"),
             ("the final norm's gain changed", changed("norm_f.weight"), "norm_f"),
             ("block 0's first norm shifted by about 3e-5 (above atol=1e-5)",
              changed("blocks.0.norm1.bias", 3e-5), "blocks.0.norm1"),
             ("block 1's second norm changed by 1e-7 (below atol)",
              changed("blocks.1.norm2.bias", 1e-7), None),
             ("a weight changed in a way no output can see (a constant added to a matrix that "
              "reads a zero-mean LayerNorm output): compare outputs, not parameters",
              changed("blocks.1.ff.up.weight", 0.05, constant=True), None)]
    for what, other, expected in cases:
        copy = Transformer(cfg).eval()
        copy.load_state_dict(base.state_dict())
        got = first_divergence(copy, other, ids, atol=1e-5)
        if got != expected:
            raise CheckFailed(f"{what}: expected {expected!r}, got {got!r}")
        for model in (copy, other):
            if any(m._forward_hooks for m in model.modules()):
                raise CheckFailed("hooks are still registered after your function returned: "
                                  "remove them with handle.remove()")
    return f"{len(cases)} pairs of models: the first differing submodule found each time"
