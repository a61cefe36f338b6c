"""Chapter 1's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch01`
must reject, run live by ``python -m fundamentallm.course catches --chapter 01`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_rnn_step", "mistake", "forgets the tanh", """
def rnn_step(x, h, W_x, W_h, b):
    return x @ W_x.T + h @ W_h.T + b
""", call="rnn_step", message=r"vs torch\.nn\.RNN")

wrong_answer("check_rnn_step", "mistake", "multiplies by W_h instead of its transpose (rows are vectors)", """
def rnn_step(x, h, W_x, W_h, b):
    return torch.tanh(x @ W_x.T + h @ W_h + b)
""", call="rnn_step", message=r"vs torch\.nn\.RNN")

wrong_answer("check_rnn_step", "edge", "keeps only the first row of the batch (B = 1 thinking)", """
def rnn_step(x, h, W_x, W_h, b):
    return torch.tanh(x @ W_x.T + h @ W_h.T + b)[:1]
""", call="rnn_step", message=r"expected shape")

wrong_answer("check_rnn_step", "method", "torch's fused RNN cell", """
def rnn_step(x, h, W_x, W_h, b):
    return torch.rnn_tanh_cell(x, h, W_x, W_h, b, torch.zeros_like(b))
""", call="rnn_step", message=r"rnn_tanh_cell")

wrong_answer("check_rnn_step", "method", "the aten operator behind the RNN cell, torch.ops.aten.rnn_tanh_cell", """
def rnn_step(x, h, W_x, W_h, b):
    return torch.ops.aten.rnn_tanh_cell(x, h, W_x, W_h, b, torch.zeros_like(b))
""", call="rnn_step", message=r"rnn_tanh_cell")

wrong_answer("check_rnn_step", "method", "an nn.RNNCell holding the given weights", """
def rnn_step(x, h, W_x, W_h, b):
    cell = nn.RNNCell(W_x.shape[1], W_x.shape[0]).to(W_x.dtype)
    with torch.no_grad():
        cell.weight_ih.copy_(W_x)
        cell.weight_hh.copy_(W_h)
        cell.bias_ih.copy_(b)
        cell.bias_hh.zero_()
        return cell(x, h)
""", call="rnn_step", message=r"not to use")

wrong_answer("check_orthogonal_rnn_prediction", "mistake", "the norm of one step, 0.5", "p = 0.5",
             call="p", message=r"one step")

wrong_answer("check_orthogonal_rnn_prediction", "mistake", "the Frobenius norm, 0.5^40 * sqrt(8)",
             "p = 0.5 ** 40 * 8 ** 0.5", call="p", message=r"Frobenius")

wrong_answer("check_orthogonal_rnn_prediction", "edge", "exactly 0 (it vanishes)", "p = 0.0",
             call="p", message=r"does not vanish exactly")

wrong_answer("check_orthogonal_rnn_prediction", "value", "a word, not a number", "p = 'tiny'",
             call="p", message=r"should be a number")

wrong_answer("check_jordan_gradient_norm", "mistake", "rho^k: the eigenvalues' rule, wrong for a non-normal W", """
def jordan_gradient_norm(lam, c, k):
    return lam ** k
""", call="jordan_gradient_norm", message=r"eigenvalues' rule")

wrong_answer("check_jordan_gradient_norm", "mistake", "the largest entry of W^k instead of its spectral norm", """
def jordan_gradient_norm(lam, c, k):
    return max(lam ** k, abs(k * c * lam ** (k - 1))) if k else 1.0
""", call="jordan_gradient_norm", message=r"largest singular value")

wrong_answer("check_jordan_gradient_norm", "edge", "right for c > 0, but uses c instead of |c|", """
def jordan_gradient_norm(lam, c, k):
    a, b = lam ** k, k * c * lam ** (k - 1)
    return (b + math.sqrt(b * b + 4 * a * a)) / 2
""", call="jordan_gradient_norm", message=r"sign of the off-diagonal")

wrong_answer("check_jordan_gradient_norm", "method", "computes W^k and its norm with torch.linalg", """
from torch.linalg import matrix_power as mp, matrix_norm as mn
def jordan_gradient_norm(lam, c, k):
    W = torch.tensor([[lam, c], [0.0, lam]], dtype=torch.float64)
    return float(mn(mp(W, k), ord=2))
""", call="jordan_gradient_norm", message=r"matrix_power|matrix_norm")

wrong_answer("check_jordan_gradient_norm", "method", "W^k by repeated squaring in plain Python, then sigma_max "
             "of the 2x2 result by hand: a measurement of W^k, not a derivation", """
def jordan_gradient_norm(lam, c, k):
    def mul(A, B):
        return [[A[0][0] * B[0][0] + A[0][1] * B[1][0], A[0][0] * B[0][1] + A[0][1] * B[1][1]],
                [A[1][0] * B[0][0] + A[1][1] * B[1][0], A[1][0] * B[0][1] + A[1][1] * B[1][1]]]
    M, P = [[1.0, 0.0], [0.0, 1.0]], [[lam, c], [0.0, lam]]
    while k:
        if k & 1:
            M = mul(M, P)
        P, k = mul(P, P), k >> 1
    (p, q), (r, s) = M
    t, d = p * p + q * q + r * r + s * s, (p * s - q * r) ** 2
    return math.sqrt((t + math.sqrt(max(t * t - 4 * d, 0.0))) / 2)
""", call="jordan_gradient_norm", message=r"repeated squaring")

wrong_answer("check_jordan_gradient_norm", "method", "multiplies W into a 2x2 matrix k times, step by step", """
def jordan_gradient_norm(lam, c, k):
    a, b = 1.0, 0.0  # W^k = [[a, b], [0, a]]
    for _ in range(k):
        a, b = a * lam, a * c + b * lam
    return (abs(b) + math.sqrt(b * b + 4 * a * a)) / 2
""", call="jordan_gradient_norm", message=r"20,000 lines")

wrong_answer("check_jordan_gradient_norm", "method", "sympy finds W^n in closed form: computer algebra, not a "
             "derivation", """
import sympy as sp
def jordan_gradient_norm(lam, c, k):
    L, C = sp.symbols("L C")
    n = sp.symbols("n", integer=True, positive=True)
    Wn = (sp.Matrix([[L, C], [0, L]]) ** n).subs({L: lam, C: c, n: k})
    a, b = float(Wn[0, 0]), float(abs(Wn[0, 1]))
    return (b + (b * b + 4 * a * a) ** 0.5) / 2
""", call="jordan_gradient_norm", message=r"sympy")

wrong_answer("check_jordan_gradient_norm", "method", "numpy's matrix_power and 2-norm", """
import numpy
def jordan_gradient_norm(lam, c, k):
    W = numpy.array([[lam, c], [0.0, lam]])
    return float(numpy.linalg.norm(numpy.linalg.matrix_power(W, k), 2))
""", call="jordan_gradient_norm", message=r"numpy\.linalg")

wrong_answer("check_jordan_gradient_norm", "method", "squares W^k by hand, then the eigenvalues of M^T M with eigvals", """
def jordan_gradient_norm(lam, c, k):
    W = torch.tensor([[lam, c], [0.0, lam]], dtype=torch.float64)
    M, P = torch.eye(2, dtype=torch.float64), W
    while k:
        if k & 1:
            M = M @ P
        P, k = P @ P, k >> 1
    return math.sqrt(float(torch.linalg.eigvals(M.T @ M).real.max()))
""", call="jordan_gradient_norm", message=r"eigvals")

wrong_answer("check_jordan_gradient_norm", "method", "numpy's singular values (svd) of W^k", """
import numpy as xp
def jordan_gradient_norm(lam, c, k):
    a, b = lam ** k, k * c * lam ** (k - 1) if k else 0.0
    return float(xp.linalg.svd(xp.array([[a, b], [0.0, a]]), compute_uv=False)[0])
""", call="jordan_gradient_norm", message=r"numpy\.linalg")

wrong_answer("check_leaky_bptt_jacobian", "method", "rebuilds the recurrence from the states, then torch.autograd.backward", """
def leaky_bptt_jacobian(hs, W_h, alpha):
    d = W_h.shape[0]
    u = (hs[1:] - (1 - alpha) * hs[:-1]) / alpha
    c = torch.atanh(u) - hs[:-1] @ W_h.T  # W_x x_k + b, recovered
    rows = []
    for i in range(d):
        h0 = hs[0].clone().requires_grad_(True)
        h = h0
        for c_k in c:
            h = (1 - alpha) * h + alpha * torch.tanh(W_h @ h + c_k)
        torch.autograd.backward(h[i])
        rows.append(h0.grad)
    return torch.stack(rows) if rows else torch.eye(d, dtype=hs.dtype)
""", call="leaky_bptt_jacobian", message=r"backward")

wrong_answer("check_leaky_bptt_jacobian", "mistake", "the plain tanh RNN's Jacobian: forgets the leak path (1 - alpha) I", """
def leaky_bptt_jacobian(hs, W_h, alpha):
    J = torch.eye(W_h.shape[0], dtype=W_h.dtype)
    for h_prev, h in zip(hs[:-1], hs[1:]):
        u = (h - (1 - alpha) * h_prev) / alpha
        J = alpha * torch.diag(1 - u ** 2) @ W_h @ J
    return J
""", call="leaky_bptt_jacobian", message=r"which paths")

wrong_answer("check_leaky_bptt_jacobian", "mistake", "takes tanh's slope at the state h_k, not at tanh's output", """
def leaky_bptt_jacobian(hs, W_h, alpha):
    I = torch.eye(W_h.shape[0], dtype=W_h.dtype)
    J = I
    for h in hs[1:]:
        J = ((1 - alpha) * I + alpha * torch.diag(1 - h ** 2) @ W_h) @ J
    return J
""", call="leaky_bptt_jacobian", message=r"tanh's slope")

wrong_answer("check_leaky_bptt_jacobian", "mistake", "multiplies the factors in the wrong order (J_1 ... J_T)", """
def leaky_bptt_jacobian(hs, W_h, alpha):
    I = torch.eye(W_h.shape[0], dtype=W_h.dtype)
    J = I
    for h_prev, h in zip(hs[:-1], hs[1:]):
        u = (h - (1 - alpha) * h_prev) / alpha
        J = J @ ((1 - alpha) * I + alpha * torch.diag(1 - u ** 2) @ W_h)
    return J
""", call="leaky_bptt_jacobian", message=r"vs autograd")

wrong_answer("check_leaky_bptt_jacobian", "edge", "T = 0: returns a zero matrix when no step was taken", """
def leaky_bptt_jacobian(hs, W_h, alpha):
    I = torch.eye(W_h.shape[0], dtype=W_h.dtype)
    J = I if len(hs) > 1 else torch.zeros_like(I)
    for h_prev, h in zip(hs[:-1], hs[1:]):
        u = (h - (1 - alpha) * h_prev) / alpha
        J = ((1 - alpha) * I + alpha * torch.diag(1 - u ** 2) @ W_h) @ J
    return J
""", call="leaky_bptt_jacobian", message=r"T = 0")

wrong_answer("check_leaky_bptt_jacobian", "method", "rebuilds a differentiable function and asks autograd", """
from torch.autograd.functional import jacobian as jac
def leaky_bptt_jacobian(hs, W_h, alpha):
    # the states as a function of h_0 cannot be rebuilt without the inputs; autograd on the
    # linearised steps is still autograd
    I = torch.eye(W_h.shape[0], dtype=W_h.dtype)
    def steps(h0):
        h = h0
        for h_prev, h_k in zip(hs[:-1], hs[1:]):
            u = (h_k - (1 - alpha) * h_prev) / alpha
            h = ((1 - alpha) * I + alpha * torch.diag(1 - u ** 2) @ W_h) @ h
        return h
    return jac(steps, hs[0])
""", call="leaky_bptt_jacobian", message=r"jacobian")

wrong_answer("check_bound_slack", "mistake", "treats the saturated unit's slope as exactly 0: 2^k / sqrt(2)", """
def bound_slack(a, k, s):
    return 2 ** k / math.sqrt(2)
""", call="bound_slack", message=r"slope")

wrong_answer("check_bound_slack", "mistake", "uses the spectral radius (0) in the bound", """
def bound_slack(a, k, s):
    return 0.0
""", call="bound_slack", message=r"rho")

wrong_answer("check_bound_slack", "edge", "off by one step: (1 - eps)^k in place of (1 - eps)^(k-1)", """
def bound_slack(a, k, s):
    eps = 1 - math.tanh(s) ** 2
    return 2 ** k / ((1 - eps) ** k * math.sqrt(2) * math.sqrt(1 + eps ** 2))
""", call="bound_slack", message=r"rank-one")

wrong_answer("check_bound_slack", "method", "simulates the k steps with 2x2 products in plain Python and "
             "takes sigma_max by hand: a measurement, not the derived ratio", """
def bound_slack(a, k, s):
    eps = 1 - math.tanh(s) ** 2
    def smax(M):
        (p, q), (r, t) = M
        T, D = p * p + q * q + r * r + t * t, (p * t - q * r) ** 2
        return math.sqrt((T + math.sqrt(max(T * T - 4 * D, 0.0))) / 2)
    J = [[a, a], [-eps * a, -eps * a]]  # diag(1, eps) W at the fixed point
    P = [[1.0, 0.0], [0.0, 1.0]]
    for _ in range(k):
        P = [[J[0][0] * P[0][0] + J[0][1] * P[1][0], J[0][0] * P[0][1] + J[0][1] * P[1][1]],
             [J[1][0] * P[0][0] + J[1][1] * P[1][0], J[1][0] * P[0][1] + J[1][1] * P[1][1]]]
    return smax([[a, a], [-a, -a]]) ** k / smax(P)
""", call="bound_slack", message=r"200 lines")

wrong_answer("check_bound_slack", "method", "simulates the Jacobians in numpy and measures them with np.linalg.norm", """
import numpy as np
def bound_slack(a, k, s):
    W = a * np.array([[1.0, 1.0], [-1.0, -1.0]])
    h = np.array([0.0, math.tanh(s)])
    x = np.array([-a * h[1], s + a * h[1]])
    J, bound = np.eye(2), 1.0
    for _ in range(k):
        slope = 1 - np.tanh(W @ h + x) ** 2
        J = np.diag(slope) @ W @ J
        bound *= slope.max() * np.linalg.norm(W, 2)
    return bound / np.linalg.norm(J, 2)
""", call="bound_slack", message=r"numpy\.linalg")

wrong_answer("check_bound_slack", "method", "measures both norms with autograd and torch.linalg", """
from torch.autograd.functional import jacobian
def bound_slack(a, k, s):
    W = a * torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    c = math.tanh(s)
    x = torch.tensor([-a * c, s + a * c], dtype=torch.float64)
    def run(h):
        for _ in range(k):
            h = torch.tanh(W @ h + x)
        return h
    J = jacobian(run, torch.tensor([0.0, c], dtype=torch.float64))
    return float(torch.linalg.matrix_norm(W, ord=2)) ** k / float(torch.linalg.matrix_norm(J, ord=2))
""", call="bound_slack", message=r"jacobian|matrix_norm")

wrong_answer("check_leaky_bptt_jacobian", "method", "central finite differences on the recurrence rebuilt "
             "from the states (step 1e-6)", """
def leaky_bptt_jacobian(hs, W_h, alpha):
    d = W_h.shape[0]
    c = torch.atanh((hs[1:] - (1 - alpha) * hs[:-1]) / alpha) - hs[:-1] @ W_h.T  # W_x x_k + b
    def run(h):
        for c_k in c:
            h = (1 - alpha) * h + alpha * torch.tanh(W_h @ h + c_k)
        return h
    eps = 1e-6
    cols = [(run(hs[0] + eps * e) - run(hs[0] - eps * e)) / (2 * eps) for e in torch.eye(d, dtype=hs.dtype)]
    return torch.stack(cols, 1)
""", call="leaky_bptt_jacobian", message=r"difference quotient")

wrong_answer("check_leaky_bptt_jacobian", "method", "a five-point finite-difference stencil (step 1e-2) on "
             "the rebuilt recurrence", """
def leaky_bptt_jacobian(hs, W_h, alpha):
    d = W_h.shape[0]
    c = torch.atanh((hs[1:] - (1 - alpha) * hs[:-1]) / alpha) - hs[:-1] @ W_h.T
    def run(h):
        for c_k in c:
            h = (1 - alpha) * h + alpha * torch.tanh(W_h @ h + c_k)
        return h
    s = 1e-2
    cols = [(-run(hs[0] + 2 * s * e) + 8 * run(hs[0] + s * e) - 8 * run(hs[0] - s * e) + run(hs[0] - 2 * s * e))
            / (12 * s) for e in torch.eye(d, dtype=hs.dtype)]
    return torch.stack(cols, 1)
""", call="leaky_bptt_jacobian", message=r"difference quotient")

wrong_answer("check_leaky_bptt_jacobian", "method", "each step's Jacobian by torch.func.jacrev of the rebuilt step", """
def leaky_bptt_jacobian(hs, W_h, alpha):
    J = torch.eye(W_h.shape[0], dtype=W_h.dtype)
    for h_prev, h in zip(hs[:-1], hs[1:]):
        pre = torch.atanh((h - (1 - alpha) * h_prev) / alpha) - W_h @ h_prev  # W_x x_k + b
        step = lambda z, pre=pre: (1 - alpha) * z + alpha * torch.tanh(W_h @ z + pre)
        J = torch.func.jacrev(step)(h_prev) @ J
    return J
""", call="leaky_bptt_jacobian", message=r"torch\.func\.jacrev")
