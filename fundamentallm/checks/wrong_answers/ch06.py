"""Chapter 6's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch06`
must reject, run live by ``python -m fundamentallm.course catches --chapter 06`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_pre_ln_block", "mistake", "both sublayers read x (parallel block, not sequential)", """
def pre_ln_block(x, config, weights):
    attn, ff, norm1, norm2 = fundamentallm.block_sublayers(config, weights).values()
    return x + attn(norm1(x)) + ff(norm2(x))
""", call="pre_ln_block", message=r"which input does each norm read")

wrong_answer("check_pre_ln_block", "mistake", "norm1 and norm2 swapped", """
def pre_ln_block(x, config, weights):
    attn, ff, norm1, norm2 = fundamentallm.block_sublayers(config, weights).values()
    h = x + attn(norm2(x))
    return h + ff(norm1(h))
""", call="pre_ln_block", message=r"which input does each norm read")

wrong_answer("check_pre_ln_block", "edge", "post-LN wiring (norm after the sum)", """
def pre_ln_block(x, config, weights):
    attn, ff, norm1, norm2 = fundamentallm.block_sublayers(config, weights).values()
    h = norm1(x + attn(x))
    return norm2(h + ff(h))
""", call="pre_ln_block", message=r"elements differ")

wrong_answer("check_pre_ln_block", "method", "the package's TransformerBlock", """
def pre_ln_block(x, config, weights):
    block = fundamentallm.TransformerBlock(fundamentallm.TransformerConfig(**config)).eval()
    block.load_state_dict({f"{m}.{k}": v for m, sd in weights.items() for k, v in sd.items()})
    return block(x)
""", call="pre_ln_block", message=r"asks you not to use fundamentallm.model.TransformerBlock.forward")

_RMS_RIGHT = """
def _rms_jacobian(z, weight, eps):
    C = z.shape[-1]
    r = torch.sqrt(z.pow(2).mean() + eps)
    return torch.diag(weight) @ (torch.eye(C, dtype=z.dtype) - torch.outer(z, z) / (C * r ** 2)) / r
"""

wrong_answer("check_rms_norm_jacobian", "mistake", "LayerNorm's Jacobian (a mean term RMSNorm does not have)", """
def rms_norm_jacobian(z, weight, eps=1e-5):
    C = z.shape[-1]
    r = torch.sqrt(z.var(unbiased=False) + eps)
    zh = (z - z.mean()) / r
    return torch.diag(weight) @ (torch.eye(C, dtype=z.dtype) - 1 / C - torch.outer(zh, zh) / C) / r
""", call="rms_norm_jacobian", message=r"subtract the mean")

wrong_answer("check_rms_norm_jacobian", "mistake", "the rms treated as a constant: diag(weight) / rms", """
def rms_norm_jacobian(z, weight, eps=1e-5):
    return torch.diag(weight) / torch.sqrt(z.pow(2).mean() + eps)
""", call="rms_norm_jacobian", message=r"elements differ")

wrong_answer("check_rms_norm_jacobian", "edge", "drops eps in the projection term (shows with a large eps)", """
def rms_norm_jacobian(z, weight, eps=1e-5):
    C = z.shape[-1]
    r = torch.sqrt(z.pow(2).mean() + eps)
    return torch.diag(weight) @ (torch.eye(C, dtype=z.dtype) - torch.outer(z, z) / (z.pow(2).sum())) / r
""", call="rms_norm_jacobian", message=r"not exact")

wrong_answer("check_rms_norm_jacobian", "mistake", "the transpose (gain on the inputs' side)", _RMS_RIGHT + """
def rms_norm_jacobian(z, weight, eps=1e-5):
    return _rms_jacobian(z, weight, eps).T
""", call="rms_norm_jacobian", message=r"transpose")

wrong_answer("check_rms_norm_jacobian", "method", "autograd's jacobian of a written-out RMSNorm", """
def rms_norm_jacobian(z, weight, eps=1e-5):
    from torch.autograd.functional import jacobian as jac
    return jac(lambda v: v / torch.sqrt(v.pow(2).mean() + eps) * weight, z)
""", call="rms_norm_jacobian", message=r"asks you not to use torch.autograd")

wrong_answer("check_rms_norm_jacobian", "method", "central finite differences, h = 1e-6", """
def rms_norm_jacobian(z, weight, eps=1e-5):
    f = lambda v: v / torch.sqrt(v.pow(2).mean() + eps) * weight
    h, C = 1e-6, z.shape[-1]
    cols = [(f(z + h * e) - f(z - h * e)) / (2 * h) for e in torch.eye(C, dtype=z.dtype)]
    return torch.stack(cols, dim=1)
""", call="rms_norm_jacobian", message=r"finite difference")

wrong_answer("check_rms_norm_jacobian", "method", "forward-mode autograd (one JVP per column)", """
import torch.autograd.forward_ad as fwAD
def rms_norm_jacobian(z, weight, eps=1e-5):
    f = lambda v: v / torch.sqrt(v.pow(2).mean() + eps) * weight
    cols = []
    with fwAD.dual_level():
        for e in torch.eye(z.shape[-1], dtype=z.dtype):
            cols.append(fwAD.unpack_dual(f(fwAD.make_dual(z, e))).tangent)
    return torch.stack(cols, dim=1)
""", call="rms_norm_jacobian", message=r"asks you not to use torch.autograd")

wrong_answer("check_rms_norm_jacobian", "method", "torch.func.jacfwd of a written-out RMSNorm", """
from torch.func import jacfwd as jf
def rms_norm_jacobian(z, weight, eps=1e-5):
    return jf(lambda v: v / torch.sqrt(v.pow(2).mean() + eps) * weight)(z)
""", call="rms_norm_jacobian", message=r"asks you not to use torch\.func\.jacfwd")

wrong_answer("check_sandwich_block", "mistake", "the pre-LN block (no output norms)", """
def sandwich_block(x, config, weights):
    attn, ff, n1, n2, n3, n4 = fundamentallm.block_sublayers(config, weights).values()
    h = x + attn(n1(x))
    return h + ff(n2(h))
""", call="sandwich_block", message=r"that is the pre-LN block")

wrong_answer("check_sandwich_block", "mistake", "norm4 around the sum (normalizes the stream)", """
def sandwich_block(x, config, weights):
    attn, ff, n1, n2, n3, n4 = fundamentallm.block_sublayers(config, weights).values()
    h = x + n3(attn(n1(x)))
    return n4(h + ff(n2(h)))
""", call="sandwich_block", message=r"the stream itself is never normalized")

wrong_answer("check_sandwich_block", "edge", "norm3 and norm4 swapped", """
def sandwich_block(x, config, weights):
    attn, ff, n1, n2, n3, n4 = fundamentallm.block_sublayers(config, weights).values()
    h = x + n4(attn(n1(x)))
    return h + n3(ff(n2(h)))
""", call="sandwich_block", message=r"elements differ")

wrong_answer("check_deepnorm_block", "mistake", "alpha on the sublayer's output, not the residual", """
def deepnorm_block(x, config, weights, alpha):
    attn, ff, n1, n2 = fundamentallm.block_sublayers(config, weights).values()
    h = n1(x + alpha * attn(x))
    return n2(h + alpha * ff(h))
""", call="deepnorm_block", message=r"alpha multiplies the residual")

wrong_answer("check_deepnorm_block", "edge", "alpha ignored (plain post-LN)", """
def deepnorm_block(x, config, weights, alpha):
    attn, ff, n1, n2 = fundamentallm.block_sublayers(config, weights).values()
    h = n1(x + attn(x))
    return n2(h + ff(h))
""", call="deepnorm_block", message=r"elements differ")

wrong_answer("check_deepnorm_block", "mistake", "pre-LN wiring with an up-weighted residual", """
def deepnorm_block(x, config, weights, alpha):
    attn, ff, n1, n2 = fundamentallm.block_sublayers(config, weights).values()
    h = alpha * x + attn(n1(x))
    return alpha * h + ff(n2(h))
""", call="deepnorm_block", message=r"elements differ")

wrong_answer("check_ln_jacobian_prediction", "mistake", "J 1 in the same direction", """
ln_jacobian_prediction = {"J_ones": "same direction", "J_zhat": "zero", "J_norm": 0.4364}
""", call="ln_jacobian_prediction", message=r"J_ones: rethink")

wrong_answer("check_ln_jacobian_prediction", "mistake", "J z_hat in another direction", """
ln_jacobian_prediction = {"J_ones": "zero", "J_zhat": "other", "J_norm": 0.4364}
""", call="ln_jacobian_prediction", message=r"J_zhat: rethink")

wrong_answer("check_ln_jacobian_prediction", "mistake", "the Frobenius norm sqrt(C - 2)/sigma, not the spectral norm", """
ln_jacobian_prediction = {"J_ones": "zero", "J_zhat": "zero", "J_norm": 6 ** 0.5 / 5.25 ** 0.5}
""", call="ln_jacobian_prediction", message=r"Frobenius")

wrong_answer("check_ln_jacobian_prediction", "mistake", "the unbiased variance (over C - 1) in sigma", """
ln_jacobian_prediction = {"J_ones": "zero", "J_zhat": "zero", "J_norm": 1 / 6 ** 0.5}
""", call="ln_jacobian_prediction", message=r"which variance")

wrong_answer("check_ln_jacobian_prediction", "mistake", "the bracket alone: norm 1, the division by sigma forgotten", """
ln_jacobian_prediction = {"J_ones": "zero", "J_zhat": "zero", "J_norm": 1.0}
""", call="ln_jacobian_prediction", message=r"scales every output")

wrong_answer("check_ln_jacobian_prediction", "value", "NaN for the norm", """
ln_jacobian_prediction = {"J_ones": "zero", "J_zhat": "zero", "J_norm": float("nan")}
""", call="ln_jacobian_prediction", message=r"J_norm (= nan|is nan)")

wrong_answer("check_post_ln_lr_prediction", "mistake", "it still plateaus", """
post_ln_at_lower_lr = "plateau"
""", call="post_ln_at_lower_lr", message=r"size of the first updates")

wrong_answer("check_post_ln_lr_prediction", "mistake", "it beats pre-LN", """
post_ln_at_lower_lr = "better"
""", call="post_ln_at_lower_lr", message=r"costs progress")

wrong_answer("check_post_ln_lr_prediction", "value", "an answer outside the three", """
post_ln_at_lower_lr = "close"
""", call="post_ln_at_lower_lr", message=r"choose one of")

wrong_answer("check_rms_norm_jacobian", "method", "complex-step differentiation: RMSNorm evaluated at "
             "z + i h e_j, column j read off the imaginary part (exact to rounding, not a derivation)", """
def rms_norm_jacobian(z, weight, eps=1e-5):
    f = lambda v: v / torch.sqrt((v * v).mean() + eps) * weight
    zc, h = z.to(torch.complex128), 1e-30
    return torch.stack([f(zc + 1j * h * e).imag / h for e in torch.eye(len(z), dtype=torch.float64)], 1)
""", call="rms_norm_jacobian", message=r"complex-step differentiation")

wrong_answer("check_rms_norm_jacobian", "method", "complex-step differentiation inline on Python floats, "
             "the complex temporaries reset before returning", """
def rms_norm_jacobian(z, weight, eps=1e-5):
    zs, ws, C, h = z.tolist(), weight.tolist(), len(z), 1e-30
    J = [[0.0] * C for _ in range(C)]
    for j in range(C):
        ms = 0.0
        for k in range(C):
            ms = ms + (zs[k] + (h * 1j if k == j else 0)) ** 2
        r = (ms / C + eps) ** 0.5
        for i in range(C):
            J[i][j] = ((zs[i] + (h * 1j if i == j else 0)) / r * ws[i]).imag / h
        ms = r = 0.0
    return torch.tensor(J, dtype=torch.float64)
""", call="rms_norm_jacobian", message=r"complex")

wrong_answer("check_rms_norm_jacobian", "method", "dual numbers: a hand-written (value, derivative) class, "
             "one forward pass per column (forward-mode autodiff)", """
class Dual:
    def __init__(self, a, b=0.0):
        self.a, self.b = a, b
    def __add__(self, o):
        o = o if isinstance(o, Dual) else Dual(o)
        return Dual(self.a + o.a, self.b + o.b)
    def __mul__(self, o):
        o = o if isinstance(o, Dual) else Dual(o)
        return Dual(self.a * o.a, self.a * o.b + self.b * o.a)
def rms_norm_jacobian(z, weight, eps=1e-5):
    zs, ws, C = z.tolist(), weight.tolist(), len(z)
    J = [[0.0] * C for _ in range(C)]
    for j in range(C):
        v = [Dual(zs[k], float(k == j)) for k in range(C)]
        ms = Dual(eps)
        for k in range(C):
            ms = ms + v[k] * v[k] * Dual(1 / C)
        r = Dual(ms.a ** -0.5, -0.5 * ms.a ** -1.5 * ms.b)  # 1 / sqrt
        for i in range(C):
            J[i][j] = (v[i] * r * Dual(ws[i])).b
    return torch.tensor(J, dtype=torch.float64)
""", call="rms_norm_jacobian", message=r"overloads arithmetic")

# torch's other names for a forbidden function (core._aliases), each refused under its own name
wrong_answer("check_rms_norm_jacobian", "method", "torch.func.jacrev of a written-out RMSNorm", """
def rms_norm_jacobian(z, weight, eps=1e-5):
    return torch.func.jacrev(lambda v: v / torch.sqrt(v.pow(2).mean() + eps) * weight)(z)
""", call="rms_norm_jacobian", message=r"not to use torch\.func\.jacrev")

wrong_answer("check_rms_norm_jacobian", "method", "autograd's engine called directly (what torch.autograd.grad runs)", """
def rms_norm_jacobian(z, weight, eps=1e-5):
    from torch.autograd.variable import Variable
    v = z.clone().requires_grad_(True)
    y = v / torch.sqrt(v.pow(2).mean() + eps) * weight
    rows = [Variable._execution_engine.run_backward((y[i],), (torch.ones(()),), True, False, (v,), False)[0]
            for i in range(z.shape[-1])]
    return torch.stack(rows)
""", call="rms_norm_jacobian", message=r"not to use \S*run_backward")
