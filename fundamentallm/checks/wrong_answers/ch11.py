"""Chapter 11's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch11`
must reject, run live by ``python -m fundamentallm.course catches --chapter 11`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_rmsnorm_backward", "mistake", "LayerNorm's backward: subtracts the mean, a term RMSNorm "
             "does not have", """
def rmsnorm_backward(x, gamma, dy, eps=1e-6):
    C = x.shape[-1]
    rstd = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    xhat = (x - x.mean(axis=-1, keepdims=True)) * rstd
    g = dy * gamma
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).reshape(-1, C).sum(axis=0)
""", call="rmsnorm_backward", message=r"dgamma for x of shape")

wrong_answer("check_rmsnorm_backward", "mistake", "treats r as a constant: forgets that r depends on x", """
def rmsnorm_backward(x, gamma, dy, eps=1e-6):
    C = x.shape[-1]
    rstd = 1.0 / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps)
    return dy * gamma * rstd, (dy * x * rstd).reshape(-1, C).sum(axis=0)
""", call="rmsnorm_backward", message=r"coupling term")

wrong_answer("check_rmsnorm_backward", "edge", "dgamma summed over the first axis only (right for 2-D x, "
             "wrong for (B, T, C))", """
def rmsnorm_backward(x, gamma, dy, eps=1e-6):
    rstd = 1.0 / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat, g = x * rstd, dy * gamma
    dx = rstd * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, (dy * xhat).sum(axis=0)
""", call="rmsnorm_backward", message=r"dgamma .*expected shape")

wrong_answer("check_rmsnorm_backward", "method", "autograd: the forward in torch, then backward()", """
def rmsnorm_backward(x, gamma, dy, eps=1e-6):
    xt, gt = torch.tensor(x, requires_grad=True), torch.tensor(gamma, requires_grad=True)
    y = xt / torch.sqrt(xt.pow(2).mean(-1, keepdim=True) + eps) * gt
    y.backward(torch.tensor(dy))
    return xt.grad.numpy(), gt.grad.numpy()
""", call="rmsnorm_backward", message=r"asks you not to use torch\.(Tensor\.backward|autograd)")

wrong_answer("check_smoothed_ce_backward", "mistake", "the gradient of the summed loss (forgets the mean's 1/N)", """
def smoothed_ce_backward(z, targets, smoothing):
    N, V = z.shape
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    q = np.full_like(p, smoothing / V)
    q[np.arange(N), targets] += 1 - smoothing
    return p - q
""", call="smoothed_ce_backward", message=r"mean over the N rows")

wrong_answer("check_smoothed_ce_backward", "mistake", "smooths over the V - 1 wrong classes (eps / (V - 1)), "
             "not over all V as PyTorch does", """
def smoothed_ce_backward(z, targets, smoothing):
    N, V = z.shape
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    q = np.full_like(p, smoothing / (V - 1))
    q[np.arange(N), targets] = 1 - smoothing
    return (p - q) / N
""", call="smoothed_ce_backward", message=r"smoothing=0\.")

wrong_answer("check_smoothed_ce_backward", "edge", "no max subtraction: exp overflows on large logits "
             "(right on small ones)", """
def smoothed_ce_backward(z, targets, smoothing):
    N, V = z.shape
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    q = np.full_like(p, smoothing / V)
    q[np.arange(N), targets] += 1 - smoothing
    return (p - q) / N
""", call="smoothed_ce_backward", message=r"large logits")

wrong_answer("check_smoothed_ce_backward", "method", "autograd of F.cross_entropy", """
def smoothed_ce_backward(z, targets, smoothing):
    zt = torch.tensor(z, requires_grad=True)
    loss = F.cross_entropy(zt, torch.tensor(targets), label_smoothing=smoothing)
    (g,) = torch.autograd.grad(loss, zt)
    return g.numpy()
""", call="smoothed_ce_backward", message=r"asks you not to use")

wrong_answer("check_swiglu_backward", "mistake", "no product rule: silu'(a) taken as sigmoid(a)", """
def swiglu_backward(a, b, dy):
    s = 1.0 / (1.0 + np.exp(-a))
    return dy * b * s, dy * a * s
""", call="swiglu_backward", message=r"da for shape")

wrong_answer("check_swiglu_backward", "mistake", "returns (db, da), the order swapped", """
def swiglu_backward(a, b, dy):
    s = 1.0 / (1.0 + np.exp(-a))
    return dy * a * s, dy * b * (s + a * s * (1 - s))
""", call="swiglu_backward", message=r"db for shape")

wrong_answer("check_swiglu_backward", "edge", "forgets the upstream gradient dy in da (right only where dy = 1)", """
def swiglu_backward(a, b, dy):
    s = 1.0 / (1.0 + np.exp(-a))
    return b * (s + a * s * (1 - s)), dy * a * s
""", call="swiglu_backward", message=r"da for shape")

wrong_answer("check_swiglu_backward", "method", "torch.func.grad of the forward", """
def swiglu_backward(a, b, dy):
    from torch.func import vjp
    at, bt, dyt = (torch.tensor(t) for t in (a, b, dy))
    _, pull = vjp(lambda a, b: F.silu(a) * b, at, bt)
    da, db = pull(dyt)
    return da.numpy(), db.numpy()
""", call="swiglu_backward", message=r"asks you not to use")

_ALIBI_LOSS = """
def _loss(q, k, v, dout, m):
    T, D = q.shape[-2], q.shape[-1]
    i = np.arange(T)
    d = (i[:, None] - i[None, :]).astype(float)
    s = np.where(d >= 0, q @ np.swapaxes(k, -1, -2) / np.sqrt(D) - m * d, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return float(((p @ v) * dout).sum())
"""

wrong_answer("check_alibi_slope_grad", "mistake", "skips the softmax backward: uses dP where dS is needed", """
def alibi_slope_grad(q, k, v, dout, slope):
    T = q.shape[-2]
    i = np.arange(T)
    distance = (i[:, None] - i[None, :]).astype(float)
    dp = np.where(distance >= 0, dout @ np.swapaxes(v, -1, -2), 0.0)
    return float((dp * -distance).sum())
""", call="alibi_slope_grad", message=r"dL/dslope for inputs of shape")

wrong_answer("check_alibi_slope_grad", "mistake", "dS/dm taken as +(i - j): the sign of the penalty lost", """
def alibi_slope_grad(q, k, v, dout, slope):
    T, D = q.shape[-2], q.shape[-1]
    i = np.arange(T)
    d = (i[:, None] - i[None, :]).astype(float)
    s = np.where(d >= 0, q @ np.swapaxes(k, -1, -2) / np.sqrt(D) - slope * d, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    dp = dout @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    return float((ds * d).sum())
""", call="alibi_slope_grad", message=r"dL/dslope")

wrong_answer("check_alibi_slope_grad", "edge", "one gradient per query, not the sum over every place the "
             "slope enters", """
def alibi_slope_grad(q, k, v, dout, slope):
    T, D = q.shape[-2], q.shape[-1]
    i = np.arange(T)
    d = (i[:, None] - i[None, :]).astype(float)
    s = np.where(d >= 0, q @ np.swapaxes(k, -1, -2) / np.sqrt(D) - slope * d, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    dp = dout @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
    return (ds * -d).sum(axis=-1).reshape(-1, T).sum(axis=0)  # (T,): one per query
""", call="alibi_slope_grad", message=r"one number")

wrong_answer("check_alibi_slope_grad", "method", "a central finite difference of the loss, step 1e-6", _ALIBI_LOSS + """
def alibi_slope_grad(q, k, v, dout, slope):
    h = 1e-6
    return (_loss(q, k, v, dout, slope + h) - _loss(q, k, v, dout, slope - h)) / (2 * h)
""", call="alibi_slope_grad", message=r"derivation|derive")

wrong_answer("check_alibi_slope_grad", "method", "a central finite difference with a larger step (1e-4), "
             "which beats rounding on plain inputs", _ALIBI_LOSS + """
def alibi_slope_grad(q, k, v, dout, slope):
    h = 1e-4
    return (_loss(q, k, v, dout, slope + h) - _loss(q, k, v, dout, slope - h)) / (2 * h)
""", call="alibi_slope_grad", message=r"derivation|derive")

wrong_answer("check_alibi_slope_grad", "method", "autograd on a torch forward", """
def alibi_slope_grad(q, k, v, dout, slope):
    q, k, v, dout = (torch.tensor(t) for t in (q, k, v, dout))
    m = torch.tensor(float(slope), dtype=torch.float64, requires_grad=True)
    T, D = q.shape[-2], q.shape[-1]
    i = torch.arange(T)
    d = (i[:, None] - i[None, :]).double()
    s = (q @ k.transpose(-2, -1) / D ** 0.5 - m * d).masked_fill(d < 0, float("-inf"))
    ((torch.softmax(s, -1) @ v) * dout).sum().backward()
    return m.grad.item()
""", call="alibi_slope_grad", message=r"asks you not to use")

_GELU_OK = """
def gelu_backward(x, dy):
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * c * (1 + 3 * 0.044715 * x ** 2))
"""

_GELU_FWD = """
def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
"""

wrong_answer("check_gelu_backward", "mistake", "no product rule: only 0.5 (1 + tanh u)", """
def gelu_backward(x, dy):
    return dy * 0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"dx \(compared")

wrong_answer("check_gelu_backward", "mistake", "the exact (erf) GELU's derivative: close, but not the tanh form's", """
def gelu_backward(x, dy):
    phi = np.exp(-x ** 2 / 2) / np.sqrt(2 * np.pi)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))
    return dy * (cdf + x * phi)
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"dx \(compared")

wrong_answer("check_gelu_backward", "value", "a right function, but the derivative predicted never to leave [0, 1]",
             _GELU_OK, call="gelu_backward, (0.0, 0.5, 1.0), (0.0, 1.0)", message=r"extremes: .*rethink|extremes: .*above 1")

wrong_answer("check_gelu_backward", "value", "a right function, but the limit at -inf predicted as the "
             "slope of the negative lobe", _GELU_OK, call="gelu_backward, (-0.1, 0.5, 1.0), (-0.1289, 1.1289)",
             message=r"limits: .*rethink")

wrong_answer("check_gelu_backward", "edge", "1/cosh(u)**2 for 1 - tanh^2 u: right, but NaN where x^3 overflows "
             "cosh at large |x|", """
def gelu_backward(x, dy):
    c = np.sqrt(2 / np.pi)
    u = c * (x + 0.044715 * x ** 3)
    with np.errstate(over="ignore", invalid="ignore"):
        sech2 = np.exp(-np.abs(u)) ** 2 * 4 / (1 + np.exp(-2 * np.abs(u))) ** 2
        sech2 = np.where(np.abs(u) > 300, np.nan, sech2)
    return dy * (0.5 * (1 + np.tanh(u)) + 0.5 * x * sech2 * c * (1 + 3 * 0.044715 * x ** 2))
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"NaN or inf")

wrong_answer("check_gelu_backward", "method", "a central finite difference, step 1e-6", _GELU_FWD + """
def gelu_backward(x, dy):
    h = 1e-6
    return dy * (_gelu(x + h) - _gelu(x - h)) / (2 * h)
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"difference quotient")

wrong_answer("check_gelu_backward", "method", "a five-point finite-difference stencil, step 1e-3 "
             "(fourth-order accurate)", _GELU_FWD + """
def gelu_backward(x, dy):
    h = 1e-3
    g = (-_gelu(x + 2 * h) + 8 * _gelu(x + h) - 8 * _gelu(x - h) + _gelu(x - 2 * h)) / (12 * h)
    return dy * g
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"difference quotient")

wrong_answer("check_gelu_backward", "method", "autograd of F.gelu", """
def gelu_backward(x, dy):
    xt = torch.tensor(x, requires_grad=True)
    F.gelu(xt, approximate="tanh").backward(torch.tensor(dy))
    return xt.grad.numpy()
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"asks you not to use")

from . import ch11_methods  # noqa: E402, F401  (the method rows, registered after these)
