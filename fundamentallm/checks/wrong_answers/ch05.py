"""Chapter 5's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch05`
must reject, run live by ``python -m fundamentallm.course catches --chapter 05`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_layer_norm", "method", "the aten operator torch.ops.aten.native_layer_norm", """
def layer_norm(x, weight, bias, eps=1e-5):
    return torch.ops.aten.native_layer_norm(x, [x.shape[-1]], weight, bias, eps)[0]
""", call="layer_norm", message=r"native_layer_norm")

wrong_answer("check_group_norm", "method", "the aten operator torch.ops.aten.native_group_norm", """
def group_norm(x, num_groups, weight, bias, eps=1e-5):
    N, C = x.shape
    if C % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide C={C}")
    return torch.ops.aten.native_group_norm(x, weight, bias, N, C, 1, num_groups, eps)[0]
""", call="group_norm", message=r"native_group_norm")

wrong_answer("check_layer_norm", "method", "F.group_norm with one group: LayerNorm under another name", """
def layer_norm(x, weight, bias, eps=1e-5):
    C = x.shape[-1]
    return F.group_norm(x.reshape(-1, C), 1, weight, bias, eps).reshape(x.shape)
""", call="layer_norm", message=r"group_norm")

wrong_answer("check_layer_norm", "method", "F.batch_norm of the transpose: each token's channels become a batch", """
def layer_norm(x, weight, bias, eps=1e-5):
    C = x.shape[-1]
    y = F.batch_norm(x.reshape(-1, C).T, None, None, training=True, eps=eps).T
    return y.reshape(x.shape) * weight + bias
""", call="layer_norm", message=r"batch_norm")

wrong_answer("check_group_norm", "method", "F.layer_norm of each group: GroupNorm from the LayerNorm routine", """
def group_norm(x, num_groups, weight, bias, eps=1e-5):
    N, C = x.shape
    if C % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide C={C}")
    return F.layer_norm(x.reshape(N, num_groups, C // num_groups), (C // num_groups,), eps=eps).reshape(N, C) \
        * weight + bias
""", call="group_norm", message=r"layer_norm")

wrong_answer("check_layer_norm", "mistake", "the unbiased variance (torch's default var)", """
def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(dim=-1, keepdim=True) + eps) * weight + bias
""", call="layer_norm", message=r"biased variance")

wrong_answer("check_layer_norm", "edge", "eps outside the square root (shows with a large eps)", """
def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    std = (x - mean).pow(2).mean(dim=-1, keepdim=True).sqrt()
    return (x - mean) / (std + eps) * weight + bias
""", call="layer_norm", message=r"large eps")

wrong_answer("check_layer_norm", "mistake", "detached inputs: no gradient flows", """
def layer_norm(x, weight, bias, eps=1e-5):
    x, weight, bias = x.detach(), weight.detach(), bias.detach()
    mean = x.mean(dim=-1, keepdim=True)
    var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias
""", call="layer_norm", message=r"not differentiable")

wrong_answer("check_layer_norm", "method", "the package's LayerNorm under another name", """
from fundamentallm.norms import LayerNorm as Norm
def layer_norm(x, weight, bias, eps=1e-5):
    norm = Norm(x.shape[-1], eps=eps).to(x.dtype)
    norm.weight, norm.bias = torch.nn.Parameter(weight), torch.nn.Parameter(bias)
    return norm(x)
""", call="layer_norm", message=r"asks you not to use")

wrong_answer("check_layer_norm", "method", "torch's F.layer_norm", """
def layer_norm(x, weight, bias, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)
""", call="layer_norm", message=r"asks you not to use torch")

wrong_answer("check_layer_norm", "method", "torch.native_layer_norm under another name", """
from torch import native_layer_norm as nln
def layer_norm(x, weight, bias, eps=1e-5):
    return nln(x, x.shape[-1:], weight, bias, eps)[0]
""", call="layer_norm", message=r"asks you not to use torch")

_BN_RIGHT = """
def _bn(x, gamma, dy, eps):
    mean = x.mean(dim=0)
    inv_std = 1 / torch.sqrt(x.var(dim=0, unbiased=False) + eps)
    x_hat = (x - mean) * inv_std
    g = dy * gamma
    dx = inv_std * (g - g.mean(dim=0) - x_hat * (g * x_hat).mean(dim=0))
    return dx, (dy * x_hat).sum(dim=0), dy.sum(dim=0), inv_std
"""

wrong_answer("check_batch_norm_backward", "method", "torch.autograd.backward(y, dy) through F.batch_norm", """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    x = x.clone().requires_grad_()
    g = gamma.clone().requires_grad_()
    b = torch.zeros_like(gamma, requires_grad=True)
    torch.autograd.backward(F.batch_norm(x, None, None, g, b, training=True, eps=eps), dy)
    return x.grad, g.grad, b.grad
""", call="batch_norm_backward", message=r"torch\.autograd\.backward")

wrong_answer("check_batch_norm_backward", "method", "torch's own BatchNorm backward kernel, torch.ops.aten", """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    mean, invstd = x.mean(0), 1 / torch.sqrt(x.var(0, unbiased=False) + eps)
    return torch.ops.aten.native_batch_norm_backward(dy, x, gamma, None, None, mean, invstd, True, eps,
                                                     [True, True, True])
""", call="batch_norm_backward", message=r"batch_norm_backward")

wrong_answer("check_batch_norm_backward", "mistake", "treats the batch mean and variance as constants", _BN_RIGHT + """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    _, dgamma, dbeta, inv_std = _bn(x, gamma, dy, eps)
    return dy * gamma * inv_std, dgamma, dbeta
""", call="batch_norm_backward", message=r"treats the batch mean and variance as constants")

wrong_answer("check_batch_norm_backward", "mistake", "dgamma from the un-normalized x", _BN_RIGHT + """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    dx, _, dbeta, _ = _bn(x, gamma, dy, eps)
    return dx, (dy * x).sum(0), dbeta
""", call="batch_norm_backward", message=r"dgamma")

wrong_answer("check_batch_norm_backward", "mistake", "forgot the final 1/sigma", _BN_RIGHT + """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    dx, dgamma, dbeta, inv_std = _bn(x, gamma, dy, eps)
    return dx / inv_std, dgamma, dbeta
""", call="batch_norm_backward", message=r"dx: .* elements differ")

wrong_answer("check_batch_norm_backward", "value", "returns only (dx, dgamma)", _BN_RIGHT + """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    return _bn(x, gamma, dy, eps)[:2]
""", call="batch_norm_backward", message=r"return the tuple \(dx, dgamma, dbeta\)")

wrong_answer("check_batch_norm_backward", "method", "autograd through F.batch_norm (.backward)", _BN_RIGHT + """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    x = x.clone().requires_grad_(True)
    (F.batch_norm(x, None, None, gamma, None, training=True, eps=eps) * dy).sum().backward()
    return x.grad, *_bn(x.detach(), gamma, dy, eps)[1:3]
""", call="batch_norm_backward", message=r"asks you not to use torch.Tensor.backward")

wrong_answer("check_batch_norm_backward", "method", "torch.func.vjp of a hand-written forward", _BN_RIGHT + """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    fwd = lambda v: (v - v.mean(0)) / torch.sqrt(v.var(0, unbiased=False) + eps) * gamma
    _, vjp = torch.func.vjp(fwd, x)
    return vjp(dy)[0], *_bn(x, gamma, dy, eps)[1:3]
""", call="batch_norm_backward", message=r"asks you not to use torch")

wrong_answer("check_batch_norm_backward", "method", "forward-mode autograd (one JVP per entry)", _BN_RIGHT + """
import torch.autograd.forward_ad as fwAD
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    fwd = lambda v: (v - v.mean(0)) / torch.sqrt(v.var(0, unbiased=False) + eps) * gamma
    dx = torch.zeros_like(x)
    with fwAD.dual_level():
        for idx in range(x.numel()):
            t = torch.zeros_like(x).view(-1)
            t[idx] = 1
            out = fwAD.unpack_dual(fwd(fwAD.make_dual(x, t.view_as(x)))).tangent
            dx.view(-1)[idx] = (out * dy).sum()
    return dx, *_bn(x, gamma, dy, eps)[1:3]
""", call="batch_norm_backward", message=r"asks you not to use torch.autograd")

wrong_answer("check_batch_norm_backward", "method", "central finite differences in float64, h = 1e-5", _BN_RIGHT + """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    f = lambda v: ((v - v.mean(0)) / torch.sqrt(v.var(0, unbiased=False) + eps) * gamma * dy).sum()
    dx, h = torch.zeros_like(x), 1e-5
    for idx in range(x.numel()):
        e = torch.zeros_like(x).view(-1)
        e[idx] = h
        e = e.view_as(x)
        dx.view(-1)[idx] = (f(x + e) - f(x - e)) / (2 * h)
    return dx, *_bn(x, gamma, dy, eps)[1:3]
""", call="batch_norm_backward", message=r"finite difference")

wrong_answer("check_group_norm", "mistake", "LayerNorm over all C channels", """
def group_norm(x, num_groups, weight, bias, eps=1e-5):
    if x.shape[1] % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide C")
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt((x - mean).pow(2).mean(-1, keepdim=True) + eps) * weight + bias
""", call="group_norm", message=r"that is LayerNorm over all C channels")

wrong_answer("check_group_norm", "mistake", "statistics over the batch (BatchNorm)", """
def group_norm(x, num_groups, weight, bias, eps=1e-5):
    if x.shape[1] % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide C")
    return (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + eps) * weight + bias
""", call="group_norm", message=r"normalizes over the batch")

wrong_answer("check_group_norm", "edge", "no ValueError when num_groups does not divide C", """
def group_norm(x, num_groups, weight, bias, eps=1e-5):
    N, C = x.shape
    k = max(C // num_groups, 1)
    g = x[:, : num_groups * k].reshape(N, num_groups, k)
    out = (g - g.mean(-1, keepdim=True)) / torch.sqrt(g.var(-1, unbiased=False, keepdim=True) + eps)
    return out.reshape(N, -1) * weight[: num_groups * k] + bias[: num_groups * k]
""", call="group_norm", message=r"should raise ValueError")

wrong_answer("check_group_norm", "mistake", "groups of strided channels (c, c + G, ...) not consecutive ones", """
def group_norm(x, num_groups, weight, bias, eps=1e-5):
    N, C = x.shape
    if C % num_groups:
        raise ValueError(f"num_groups={num_groups} must divide C")
    g = x.reshape(N, C // num_groups, num_groups)
    out = (g - g.mean(1, keepdim=True)) / torch.sqrt(g.var(1, unbiased=False, keepdim=True) + eps)
    return out.reshape(N, C) * weight + bias
""", call="group_norm", message=r"elements differ")

wrong_answer("check_group_norm", "method", "torch's group_norm under another name", """
from torch.nn.functional import group_norm as gn
def group_norm(x, num_groups, weight, bias, eps=1e-5):
    return gn(x, num_groups, weight, bias, eps)
""", call="group_norm", message=r"asks you not to use")

wrong_answer("check_branch_scale", "mistake", "no scale (s = 1): the stream grows", """
def branch_scale(num_layers):
    return 1.0
""", call="branch_scale", message=r"grows with depth")

wrong_answer("check_branch_scale", "mistake", "s = 1/L: the blocks fade out", """
def branch_scale(num_layers):
    return 1.0 / num_layers
""", call="branch_scale", message=r"fading branch scale|fades with depth")

wrong_answer("check_branch_scale", "mistake", "s = L^-0.4: close, still grows", """
def branch_scale(num_layers):
    return num_layers ** -0.4
""", call="branch_scale", message=r"grows with depth")

wrong_answer("check_branch_scale", "mistake", "s = L^-0.6: close, still fades", """
def branch_scale(num_layers):
    return num_layers ** -0.6
""", call="branch_scale", message=r"fades with depth")

wrong_answer("check_branch_scale", "edge", "s = 0: depth-independent because the blocks are switched off", """
def branch_scale(num_layers):
    return 0.0
""", call="branch_scale", message=r"the blocks add almost nothing")

wrong_answer("check_branch_scale", "value", "NaN", """
def branch_scale(num_layers):
    return float("nan")
""", call="branch_scale", message=r"not a finite number")

wrong_answer("check_dropout_covariance", "mistake", "only the diagonal (outputs treated as independent)", """
def dropout_covariance(W, x, p):
    return torch.diag(torch.diagonal(p / (1 - p) * W @ torch.diag(x ** 2) @ W.T))
""", call="dropout_covariance", message=r"off the diagonal.*which mask entries")

wrong_answer("check_dropout_covariance", "mistake", "the Bernoulli variance p(1-p) without the 1/(1-p)^2 scaling", """
def dropout_covariance(W, x, p):
    return p * (1 - p) * W @ torch.diag(x ** 2) @ W.T
""", call="dropout_covariance", message=r"variances \(diagonal\).*one term")

wrong_answer("check_dropout_covariance", "method", "a Monte-Carlo estimate from sampled masks, not a derivation", """
def dropout_covariance(W, x, p):
    z = (torch.rand(400_000, x.shape[0], generator=torch.Generator().manual_seed(1), dtype=x.dtype) >= p)
    ys = (z * x / (1 - p)) @ W.T
    return torch.cov(ys.T)
""", call="dropout_covariance", message=r"not a derivation")

wrong_answer("check_dropout_covariance", "method", "exact enumeration of all 2^n masks (a computation, no derivation)", """
def dropout_covariance(W, x, p):
    n = x.shape[0]
    z = torch.cartesian_prod(*[torch.tensor([0.0, 1.0], dtype=x.dtype)] * n).reshape(-1, n)
    prob = ((1 - p) ** z.sum(1)) * (p ** (n - z.sum(1)))
    ys = (z * x / (1 - p)) @ W.T
    mean = (prob[:, None] * ys).sum(0)
    return (prob[:, None, None] * (ys - mean)[:, :, None] * (ys - mean)[:, None, :]).sum(0)
""", call="dropout_covariance", message=r"memory|allocate")

wrong_answer("check_dropout_covariance", "edge", "p / (1 - p) computed as 0/0 style NaN at p = 0", """
def dropout_covariance(W, x, p):
    c = p / (1 - p) * W @ torch.diag(x ** 2) @ W.T
    return c if p > 0 else c * float("nan")
""", call="dropout_covariance", message=r"elements differ")

wrong_answer("check_norm_ablation_prediction", "mistake", "with the norm the stream stays constant", """
growth_prediction = {"with_norm": "constant", "without_norm": "exponential"}
""", call="growth_prediction", message=r"sqrt\(L\)")

wrong_answer("check_norm_ablation_prediction", "mistake", "without the norm it grows linearly", """
growth_prediction = {"with_norm": "sqrt", "without_norm": "linear"}
""", call="growth_prediction", message=r"compounds")

wrong_answer("check_norm_ablation_prediction", "value", "a missing key", """
growth_prediction = {"with_norm": "sqrt"}
""", call="growth_prediction", message=r"needs exactly the keys")

wrong_answer("check_batch_norm_backward", "method", "complex-step differentiation: the loss evaluated at "
             "x + i h e_k, dx read off the imaginary part (exact to rounding, not a derivation)", """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    def loss(xc):
        mu = xc.mean(0)
        var = ((xc - mu) ** 2).mean(0)
        return ((xc - mu) / torch.sqrt(var + eps) * gamma * dy).sum()
    h = 1e-30
    dx = torch.zeros_like(x)
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            step = torch.zeros(x.shape, dtype=torch.complex128)
            step[n, c] = 1j * h
            dx[n, c] = loss(x.to(torch.complex128) + step).imag / h
    xhat = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + eps)
    return dx, (dy * xhat).sum(0), dy.sum(0)
""", call="batch_norm_backward", message=r"complex-step differentiation")

wrong_answer("check_batch_norm_backward", "method", "the vector-Jacobian product of F.batch_norm by torch.func.vjp", """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    _, vjp = torch.func.vjp(lambda a, g, b: F.batch_norm(a, None, None, g, b, training=True, eps=eps),
                            x, gamma, torch.zeros_like(gamma))
    return vjp(dy)
""", call="batch_norm_backward", message=r"torch\.func\.vjp")

# torch's other names for a forbidden function (core._aliases), each refused under its own name, and autograd in every form (by_hand)
wrong_answer("check_layer_norm", "method", "the aten operator's overload torch.ops.aten.layer_norm.default", """
def layer_norm(x, weight, bias, eps=1e-5):
    return torch.ops.aten.layer_norm.default(x, [x.shape[-1]], weight, bias, eps)
""", call="layer_norm", message=r"not to use torch\.ops\.aten\.layer_norm\.default \(torch\.\S+ under another name\)")

wrong_answer("check_batch_norm_backward", "method", "torch.func.vjp of a written-out batch norm", """
def batch_norm_backward(x, gamma, dy, eps=1e-5):
    def bn(x, g, b):
        mu = x.mean(0)
        return (x - mu) / torch.sqrt(((x - mu) ** 2).mean(0) + eps) * g + b
    _, pull = torch.func.vjp(bn, x, gamma, torch.zeros_like(gamma))
    return pull(dy)
""", call="batch_norm_backward", message=r"not to use torch\.func\.vjp")
