"""Chapter 11's wrong answers that skip the derivation by a method (finite differences, autograd
under another name, complex steps, extrapolation ...): the second half of :mod:`.ch11`'s table, kept
apart so that each module stays short. Imported by :mod:`.ch11`."""

from ..wrong import wrong_answer

_FD = """
def _fd(f, x, h=1e-6):
    x = x.copy()
    g = np.zeros_like(x)
    fx, fg = x.reshape(-1), g.reshape(-1)
    for i in range(fx.size):
        old = fx[i]
        fx[i] = old + h
        a = f(x)
        fx[i] = old - h
        b = f(x)
        fx[i] = old
        fg[i] = (a - b) / (2 * h)
    return g
"""

wrong_answer("check_rmsnorm_backward", "method", "a hand-written central finite difference of the loss", _FD + """
def rmsnorm_backward(x, gamma, dy, eps=1e-6):
    def loss(x, gamma):
        return float((x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps) * gamma * dy).sum())
    return _fd(lambda v: loss(v, gamma), x), _fd(lambda v: loss(x, v), gamma)
""", call="rmsnorm_backward", message=r"dgamma for x of shape|dx for x of shape")

wrong_answer("check_rmsnorm_backward", "method", "the package's numerical_gradient", """
def rmsnorm_backward(x, gamma, dy, eps=1e-6):
    from fundamentallm.gradcheck import numerical_gradient
    def loss(x, gamma):
        return float((x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps) * gamma * dy).sum())
    return numerical_gradient(lambda v: loss(v, gamma), x), numerical_gradient(lambda v: loss(x, v), gamma)
""", call="rmsnorm_backward", message=r"a finite difference is a test, not a derivation")

wrong_answer("check_rmsnorm_backward", "value", "eps left out of the root: right to about 1e-7, not to 1e-11", """
def rmsnorm_backward(x, gamma, dy, eps=1e-6):
    C = x.shape[-1]
    r = 1.0 / np.sqrt((x ** 2).mean(axis=-1, keepdims=True))
    xhat, g = x * r, dy * gamma
    return r * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True)), (dy * xhat).reshape(-1, C).sum(axis=0)
""", call="rmsnorm_backward", message=r"expected -?\d\.\d{7,}, got -?\d\.\d{7,}")

wrong_answer("check_smoothed_ce_backward", "mistake", "the correct class's target 1 - eps (forgets its share "
             "eps / V of the smoothing)", """
def smoothed_ce_backward(z, targets, smoothing):
    N, V = z.shape
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    q = np.full_like(p, smoothing / V)
    q[np.arange(N), targets] = 1 - smoothing
    return (p - q) / N
""", call="smoothed_ce_backward", message=r"smoothed target distribution q")

wrong_answer("check_smoothed_ce_backward", "method", "a hand-written central finite difference of the loss", _FD + """
def smoothed_ce_backward(z, targets, smoothing):
    N, V = z.shape
    q = np.full(z.shape, smoothing / V)
    q[np.arange(N), targets] += 1 - smoothing
    def loss(z):
        m = z.max(axis=-1, keepdims=True)
        lse = (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))[:, 0]
        return float((lse - (q * z).sum(axis=-1)).mean())
    return _fd(loss, z)
""", call="smoothed_ce_backward", message=r"dz for N=")

wrong_answer("check_swiglu_backward", "method", "an elementwise five-point finite difference of silu for da", """
def swiglu_backward(a, b, dy):
    silu = lambda a: a / (1.0 + np.exp(-a))
    h = 1e-3
    d = (-silu(a + 2 * h) + 8 * silu(a + h) - 8 * silu(a - h) + silu(a - 2 * h)) / (12 * h)
    return dy * b * d, dy * silu(a)
""", call="swiglu_backward", message=r"da for shape")

wrong_answer("check_swiglu_backward", "method", "a hand-written central finite difference of the summed loss",
             _FD + """
def swiglu_backward(a, b, dy):
    loss = lambda a, b: float((a / (1.0 + np.exp(-a)) * b * dy).sum())
    return _fd(lambda v: loss(v, b), a), _fd(lambda v: loss(a, v), b)
""", call="swiglu_backward", message=r"(da|db) for shape")

wrong_answer("check_gelu_backward", "method", "sympy.diff of the forward, lambdified", """
def gelu_backward(x, dy):
    import sympy
    s = sympy.Symbol("x")
    y = s / 2 * (1 + sympy.tanh(sympy.sqrt(2 / sympy.pi) * (s + sympy.Rational(44715, 10 ** 6) * s ** 3)))
    return dy * sympy.lambdify(s, sympy.diff(y, s), "numpy")(x)
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"not to use sympy")

wrong_answer("check_gelu_backward", "method", "mpmath.diff at 30 digits", """
def gelu_backward(x, dy):
    import mpmath
    mpmath.mp.dps = 30
    f = lambda t: t / 2 * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (t + mpmath.mpf("0.044715") * t ** 3)))
    return dy * np.vectorize(lambda v: float(mpmath.diff(f, v)))(x)
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"not to use mpmath")

wrong_answer("check_alibi_slope_grad", "method", "complex-step differentiation: the loss evaluated at "
             "slope + i h, dL/dslope read off the imaginary part (exact to rounding, not a derivation)", """
def alibi_slope_grad(q, k, v, dout, slope):
    T, D = q.shape[-2], q.shape[-1]
    i = np.arange(T)
    d = (i[:, None] - i[None, :]).astype(float)
    def loss(m):
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(D) - m * d
        s = s - s.real.max(axis=-1, keepdims=True)
        p = np.where(d >= 0, np.exp(s), 0.0)
        p = p / p.sum(axis=-1, keepdims=True)
        return ((p @ v) * dout).sum()
    h = 1e-30
    return float(loss(slope + 1j * h).imag / h)
""", call="alibi_slope_grad", message=r"complex-step differentiation")

wrong_answer("check_gelu_backward", "method", "complex-step differentiation: GELU evaluated at x + i h, "
             "dy/dx read off the imaginary part (exact to rounding, not a derivation)", """
def gelu_backward(x, dy):
    z = x.astype(complex) + 1e-30j
    y = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    return dy * y.imag / 1e-30
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"complex-step differentiation")

wrong_answer("check_gelu_backward", "method", "complex-step differentiation through cmath, one scalar at a "
             "time, no complex array stored", """
import cmath
def gelu_backward(x, dy):
    c = math.sqrt(2 / math.pi)
    g = [(0.5 * (t + 1e-30j) * (1 + cmath.tanh(c * ((t + 1e-30j) + 0.044715 * (t + 1e-30j) ** 3)))).imag / 1e-30
         for t in x.ravel().tolist()]
    return dy * np.array(g).reshape(x.shape)
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"complex-step|cmath")

wrong_answer("check_gelu_backward", "method", "a central difference in NumPy's long double with one "
             "Richardson step (extended precision: close to float64 exactness, not a derivation)", """
def gelu_backward(x, dy):
    X = x.astype(np.longdouble)
    c = np.sqrt(np.longdouble(2) / np.longdouble(np.pi))
    f = lambda t: t / 2 * (1 + np.tanh(c * (t + np.longdouble(0.044715) * t ** 3)))
    d = lambda h: (f(X + h) - f(X - h)) / (2 * h)
    h = np.longdouble(1e-4)
    return dy * ((4 * d(h / 2) - d(h)) / 3).astype(np.float64)
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"extended precision")

wrong_answer("check_swiglu_backward", "method", "complex-step differentiation inline on Python scalars, "
             "the complex temporaries reset to 0.0 before returning (no complex variable left to see)", """
def swiglu_backward(a, b, dy):
    h, ds = 1e-30, []
    for t in np.asarray(a, float).ravel().tolist():
        z = t + h * 1j
        e = math.exp(-z.real) * (math.cos(-z.imag) + 1j * math.sin(-z.imag))
        ds.append((z / (1 + e)).imag / h)
        z = e = 0.0
    silu = a / (1 + np.exp(-a))
    return dy * b * np.array(ds).reshape(np.shape(a)), dy * silu
""", call="swiglu_backward", message=r"complex literal")

wrong_answer("check_gelu_backward", "method", "dual numbers: a hand-written class carrying (value, "
             "derivative) through + and * (forward-mode autodiff, not a derivation)", """
class Dual:
    def __init__(self, a, b=0.0):
        self.a, self.b = a, b
    def __add__(self, o):
        o = o if isinstance(o, Dual) else Dual(o)
        return Dual(self.a + o.a, self.b + o.b)
    __radd__ = __add__
    def __mul__(self, o):
        o = o if isinstance(o, Dual) else Dual(o)
        return Dual(self.a * o.a, self.a * o.b + self.b * o.a)
    __rmul__ = __mul__
def gelu_backward(x, dy):
    c = np.sqrt(2 / np.pi)
    z = Dual(x, np.ones_like(x))
    u = c * (z + 0.044715 * z * z * z)
    t = Dual(np.tanh(u.a), (1 - np.tanh(u.a) ** 2) * u.b)
    return dy * (0.5 * z * (1 + t)).b
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"overloads arithmetic")

wrong_answer("check_alibi_slope_grad", "method", "complex-step differentiation in NumPy, the complex "
             "arrays deleted before returning", """
def alibi_slope_grad(q, k, v, dout, slope):
    T, D = q.shape[-2], q.shape[-1]
    i = np.arange(T)
    d = (i[:, None] - i[None, :]).astype(float)
    m = slope + 1e-30j
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(D) - m * d
    s = np.where(d >= 0, s, -1e300)
    p = np.exp(s - s.real.max(axis=-1, keepdims=True))
    p = p / p.sum(axis=-1, keepdims=True)
    r = float(((p @ v) * dout).sum().imag / 1e-30)
    del m, s, p
    return r
""", call="alibi_slope_grad", message=r"complex")

# torch's derivative kernels called directly: what autograd would run, without the tape
wrong_answer("check_gelu_backward", "method", "torch's own GELU derivative kernel, torch.ops.aten.gelu_backward", """
def gelu_backward(x, dy):
    return torch.ops.aten.gelu_backward(torch.tensor(dy), torch.tensor(x), approximate="tanh").numpy()
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"not to use torch\.ops\.aten\.gelu_backward")

wrong_answer("check_swiglu_backward", "method", "torch's silu derivative kernel, torch.ops.aten.silu_backward", """
def swiglu_backward(a, b, dy):
    A, B, DY = (torch.tensor(t) for t in (a, b, dy))
    return torch.ops.aten.silu_backward(DY * B, A).numpy(), (DY * A * torch.sigmoid(A)).numpy()
""", call="swiglu_backward", message=r"not to use torch\.ops\.aten\.silu_backward")

wrong_answer("check_smoothed_ce_backward", "method", "torch's log-softmax derivative kernel, "
             "torch.ops.aten._log_softmax_backward_data, fed -q/N", """
def smoothed_ce_backward(z, targets, smoothing):
    N, V = z.shape
    Z = torch.tensor(z)
    q = torch.full_like(Z, smoothing / V)
    q[torch.arange(N), torch.tensor(targets)] += 1 - smoothing
    out = torch.log_softmax(Z, -1)
    return torch.ops.aten._log_softmax_backward_data(-q / N, out, -1, torch.float64).numpy()
""", call="smoothed_ce_backward", message=r"not to use torch\.ops\.aten\._log_softmax_backward_data")

wrong_answer("check_rmsnorm_backward", "method", "torch's RMSNorm derivative kernel, "
             "torch.ops.aten._fused_rms_norm_backward", """
def rmsnorm_backward(x, gamma, dy, eps=1e-6):
    X, Gm, DY = (torch.tensor(t) for t in (x, gamma, dy))
    r = torch.rsqrt((X * X).mean(-1, keepdim=True) + eps)
    out = torch.ops.aten._fused_rms_norm_backward(DY, X, [X.shape[-1]], r, Gm, [True, True])
    return out[0].numpy(), out[1].numpy()
""", call="rmsnorm_backward", message=r"not to use torch\.ops\.aten\._fused_rms_norm_backward")

wrong_answer("check_alibi_slope_grad", "method", "torch's softmax derivative kernel for dS, "
             "torch.ops.aten._softmax_backward_data", """
def alibi_slope_grad(q, k, v, dout, slope):
    T, D = q.shape[-2], q.shape[-1]
    i = np.arange(T)
    dist = (i[:, None] - i[None, :]).astype(float)
    s = np.where(dist >= 0, q @ np.swapaxes(k, -1, -2) / np.sqrt(D) - slope * dist, -np.inf)
    p = torch.softmax(torch.tensor(s), -1)
    dp = torch.tensor(dout @ np.swapaxes(v, -1, -2))
    ds = torch.ops.aten._softmax_backward_data(dp, p, -1, torch.float64).numpy()
    return float((ds * -dist).sum())
""", call="alibi_slope_grad", message=r"not to use torch\.ops\.aten\._softmax_backward_data")

wrong_answer("check_alibi_slope_grad", "method", "central differences extrapolated (Richardson, 6 levels) on "
             "values centred over the keys: 1e-13 on every case, the large offset removed", """
def _loss(q, k, v, dout, m):
    T, D = q.shape[-2], q.shape[-1]
    i = np.arange(T)
    dist = (i[:, None] - i[None, :]).astype(float)
    s = np.where(dist >= 0, q @ np.swapaxes(k, -1, -2) / np.sqrt(D) - m * dist, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return float(((p @ v) * dout).sum())

def alibi_slope_grad(q, k, v, dout, slope):
    v = v - v.mean(axis=-2, keepdims=True)  # out = P v: a shift shared by the keys only adds a constant
    def central(h):
        return (_loss(q, k, v, dout, slope + h) - _loss(q, k, v, dout, slope - h)) / (2 * h)
    table = [[central(0.05 / 2 ** i)] for i in range(6)]
    for i in range(6):
        for j in range(1, i + 1):
            table[i].append(table[i][j - 1] + (table[i][j - 1] - table[i - 1][j - 1]) / (4 ** j - 1))
    return table[5][5]
""", call="alibi_slope_grad", message=r"far key competes with the nearest")

# torch's other names for a forbidden function (core._aliases), each refused under its own name
wrong_answer("check_gelu_backward", "method", "torch.func.grad of the GELU, vmapped over the elements", """
def gelu_backward(x, dy):
    f = lambda z: 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    return (torch.func.vmap(torch.func.grad(f))(torch.tensor(x).reshape(-1)).reshape(x.shape) * torch.tensor(dy)).numpy()
""", call="gelu_backward, (0.0, 0.5, 1.0), (-0.1289, 1.1289)", message=r"not to use torch\.func\.grad")

wrong_answer("check_swiglu_backward", "method", "silu by its aten operator's overload, torch.ops.aten.silu.default, and its derivative written out", """
def swiglu_backward(a, b, dy):
    A, B, DY = (torch.tensor(t) for t in (a, b, dy))
    s = torch.sigmoid(A)
    return (DY * B * (s + A * s * (1 - s))).numpy(), (DY * torch.ops.aten.silu.default(A)).numpy()
""", call="swiglu_backward", message=r"not to use torch\.ops\.aten\.silu\.default \(torch\.nn\.functional\.silu under another name\)")
