"""Chapter 14's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch14`
must reject, run live by ``python -m fundamentallm.course catches --chapter 14`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_repeat_kv", "method", "torch's repeat_interleave, which the statement rules out", """
def repeat_kv(x, groups):
    return x.repeat_interleave(groups, dim=1)
""", call="repeat_kv", message=r"asks you not to use .*repeat_interleave")

wrong_answer("check_repeat_kv", "method", "NumPy's repeat: repeat_interleave under another name", """
import numpy


def repeat_kv(x, groups):
    return torch.from_numpy(numpy.repeat(x.numpy(), groups, axis=1))
""", call="repeat_kv", message=r"asks you not to use numpy\.repeat")

wrong_answer("check_repeat_kv", "method", "the ndarray's repeat method", """
def repeat_kv(x, groups):
    return torch.from_numpy(x.numpy().repeat(groups, axis=1))
""", call="repeat_kv", message=r"asks you not to use numpy\.(ndarray\.)?repeat")

wrong_answer("check_repeat_kv", "mistake", "tiles the heads (0, 1, 0, 1) instead of repeating each (0, 0, 1, 1)", """
def repeat_kv(x, groups):
    return x.repeat(1, groups, 1, 1)
""", call="repeat_kv", message=r"query head h must get key/value head h // groups")

wrong_answer("check_repeat_kv", "mistake", "the new axis before the heads, then reshape: tiles as well", """
def repeat_kv(x, groups):
    B, G, T, D = x.shape
    return x[:, None].expand(B, groups, G, T, D).reshape(B, G * groups, T, D)
""", call="repeat_kv", message=r"h // groups")

wrong_answer("check_repeat_kv", "value", "returns x unchanged", """
def repeat_kv(x, groups):
    return x
""", call="repeat_kv", message=r"expected shape")

_ROLLING = """
import math


def step(q, k, v, cache_k, cache_v, pos, *, slot_of=None, write_first=True, filled_only=True, scale=True):
    W = cache_k.shape[2]
    cache_k, cache_v = cache_k.clone(), cache_v.clone()
    slot = pos % W if slot_of is None else slot_of(pos, W)

    def attend():
        s = q @ cache_k.transpose(-2, -1)
        if scale:
            s = s / math.sqrt(q.shape[-1])
        if filled_only:
            s = s.masked_fill(~(torch.arange(W) <= pos), float("-inf"))
        return s.softmax(-1) @ cache_v

    if not write_first:
        out = attend()
    cache_k[:, :, slot], cache_v[:, :, slot] = k[:, :, 0], v[:, :, 0]
    if write_first:
        out = attend()
    return out, cache_k, cache_v
"""

wrong_answer("check_rolling_window_step", "mistake", "attends before writing the new key: misses itself, reads the evicted one",
             _ROLLING, call="lambda *a: step(*a, write_first=False)", message=r"its own included")

wrong_answer("check_rolling_window_step", "edge", "attends to all W slots from the first step: reads unwritten slots",
             _ROLLING, call="lambda *a: step(*a, filled_only=False)", message=r"before the buffer has been filled")

wrong_answer("check_rolling_window_step", "mistake", "writes the new key one slot too far, over a key still in the window",
             _ROLLING, call="lambda *a: step(*a, slot_of=lambda p, W: (p + 1) % W)", message=r"which slot")

wrong_answer("check_rolling_window_step", "mistake", "forgets the 1/sqrt(D) scaling of the scores",
             _ROLLING, call="lambda *a: step(*a, scale=False)", message=r"differs from sliding-window attention")

_BALANCE = """
def loss_of(logits, idx, E):
    p = logits.softmax(-1)
    f = torch.zeros_like(p).scatter(1, idx, 1.0).mean(0)
    return E * (f * p.mean(0)).sum(), f, p
"""

wrong_answer("check_balancing_grad", "method", "lets autograd compute the gradient", _BALANCE + """
def balancing_grad(logits, idx, E):
    z = logits.clone().requires_grad_(True)
    loss = loss_of(z, idx, E)[0]
    (grad,) = torch.autograd.grad(loss, z)
    return loss.detach(), grad
""", call="balancing_grad", message=r"asks you not to use .*autograd")

wrong_answer("check_balancing_grad", "method", "the package's load_balancing_loss and backward", """
from fundamentallm.moe import load_balancing_loss as lb


def balancing_grad(logits, idx, E):
    z = logits.clone().requires_grad_(True)
    loss = lb(z.softmax(-1), idx, E)
    loss.backward()
    return loss.detach(), z.grad
""", call="balancing_grad", message=r"asks you not to use")

wrong_answer("check_balancing_grad", "method", "forward-mode autograd, one tangent per logit", _BALANCE + """
import torch.autograd.forward_ad as fwAD


def balancing_grad(logits, idx, E):
    grad = torch.zeros_like(logits)
    for n in range(logits.shape[0]):
        for j in range(logits.shape[1]):
            tangent = torch.zeros_like(logits)
            tangent[n, j] = 1.0
            with fwAD.dual_level():
                dual = fwAD.make_dual(logits, tangent)
                grad[n, j] = fwAD.unpack_dual(loss_of(dual, idx, E)[0]).tangent
    return loss_of(logits, idx, E)[0], grad
""", call="balancing_grad", message=r"asks you not to use torch\.autograd\.forward_ad")

wrong_answer("check_balancing_grad", "method", "torch.func.grad under another name", _BALANCE + """
from torch.func import grad as derivative


def balancing_grad(logits, idx, E):
    return loss_of(logits, idx, E)[0], derivative(lambda z: loss_of(z, idx, E)[0])(logits)
""", call="balancing_grad", message=r"asks you not to use torch\.(func|_functorch)")

wrong_answer("check_balancing_grad", "method", "torch.autograd.functional.jacobian", _BALANCE + """
from torch.autograd.functional import jacobian


def balancing_grad(logits, idx, E):
    return loss_of(logits, idx, E)[0], jacobian(lambda z: loss_of(z, idx, E)[0], logits)
""", call="balancing_grad", message=r"asks you not to use torch\.autograd\.functional")

wrong_answer("check_balancing_grad", "method", "a custom torch.autograd.Function around the softmax, then backward", _BALANCE + """
class Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        p = z.softmax(-1)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        return p * (g - (g * p).sum(-1, keepdim=True))


def balancing_grad(logits, idx, E):
    N = logits.shape[0]
    p = Softmax.apply(logits)
    f = torch.zeros_like(p).scatter(1, idx, 1.0).mean(0)
    return E * (f * p.mean(0)).sum(), E / N * p * (f - (p * f).sum(-1, keepdim=True))
""", call="balancing_grad", message=r"asks you not to use torch\.autograd\.(Function|function)")

wrong_answer("check_balancing_grad", "method", "central finite differences in float64 (h = 1e-5): a measurement, not a derivation", _BALANCE + """
def balancing_grad(logits, idx, E):
    h, grad = 1e-5, torch.zeros_like(logits)
    for n in range(logits.shape[0]):
        for j in range(logits.shape[1]):
            up, down = logits.clone(), logits.clone()
            up[n, j] += h
            down[n, j] -= h
            grad[n, j] = (loss_of(up, idx, E)[0] - loss_of(down, idx, E)[0]) / (2 * h)
    return loss_of(logits, idx, E)[0], grad
""", call="balancing_grad", message=r"gradient with respect to the logits is not right")

wrong_answer("check_balancing_grad", "method", "a 6th-order central stencil in float64 (h = 1e-2): about 5e-14 from the "
             "true gradient, a measurement, not a derivation", _BALANCE + """
def balancing_grad(logits, idx, E):
    h, grad = 1e-2, torch.zeros_like(logits)
    stencil = [(-3, -1 / 60), (-2, 3 / 20), (-1, -3 / 4), (1, 3 / 4), (2, -3 / 20), (3, 1 / 60)]
    for n in range(logits.shape[0]):
        for j in range(logits.shape[1]):
            total = 0.0
            for k, w in stencil:
                z = logits.clone()
                z[n, j] += k * h
                total += w * loss_of(z, idx, E)[0].item()
            grad[n, j] = total / h
    return loss_of(logits, idx, E)[0], grad
""", call="balancing_grad", message=r"gradient with respect to the logits is not right")

wrong_answer("check_balancing_grad", "mistake", "the gradient to the probabilities, E f_e / N, not through the softmax", _BALANCE + """
def balancing_grad(logits, idx, E):
    loss, f, p = loss_of(logits, idx, E)
    return loss, (E * f / logits.shape[0]).expand_as(logits)
""", call="balancing_grad", message=r"chain rule through\s+the softmax")

wrong_answer("check_balancing_grad", "mistake", "the softmax Jacobian right, but no 1/N for the mean over tokens", _BALANCE + """
def balancing_grad(logits, idx, E):
    loss, f, p = loss_of(logits, idx, E)
    return loss, E * p * (f - (p * f).sum(-1, keepdim=True))
""", call="balancing_grad", message=r"mean over the N tokens")

wrong_answer("check_balancing_grad", "edge", "f from each token's first choice only: right for top-1, wrong for top-k", """
def balancing_grad(logits, idx, E):
    p = logits.softmax(-1)
    f = torch.zeros_like(p).scatter(1, idx[:, :1], 1.0).mean(0)
    N = logits.shape[0]
    return E * (f * p.mean(0)).sum(), E / N * p * (f - (p * f).sum(-1, keepdim=True))
""", call="balancing_grad", message=r"f_e counts the tokens")

_INFLUENCE = """
from fundamentallm import MultiHeadAttention


def build(layers, d_model):
    built = []
    for spec in layers:
        layer = MultiHeadAttention(d_model, spec["num_heads"], causal=True, sliding_window=spec["window"])
        layer.double().load_state_dict(spec["weights"])
        built.append(layer.eval())
    return built


def measured(layers, T, t, d_model):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, T, d_model, generator=g, dtype=torch.float64, requires_grad=True)
    h = x
    for layer in build(layers, d_model):
        h = h + layer(h)
    (grad,) = torch.autograd.grad(h[:, t].sum(), x)
    return grad.abs().sum(dim=(0, 2)) != 0


WINDOWED, MIXED = list(range(6, 16)), list(range(16))
"""

wrong_answer("check_influence", "method", "a formula in the layers' windows instead of a measurement", _INFLUENCE + """
def formula(layers, T, t, d_model):
    windows = [layer["window"] for layer in layers]
    j = torch.arange(T)
    first = 0 if None in windows else max(0, t - sum(w - 1 for w in windows))
    return (j >= first) & (j <= t)
""", call="formula, WINDOWED, MIXED", message=r"stack F.*input position \d+ cannot change the output")

wrong_answer("check_influence", "method", "a formula in the windows that skips the layers whose output projection is zero", _INFLUENCE + """
def formula(layers, T, t, d_model):
    reach = 0
    for layer in layers:
        if layer["weights"]["out_proj.weight"].abs().sum() == 0:
            continue
        if layer["window"] is None:
            reach = T
            break
        reach += layer["window"] - 1
    j = torch.arange(T)
    return (j >= max(0, t - reach)) & (j <= t)
""", call="formula, WINDOWED, MIXED", message=r"stack F.*input position \d+ cannot change the output")

wrong_answer("check_influence", "mistake", "measures the last layer alone: misses the layers below", _INFLUENCE + """
def last_only(layers, T, t, d_model):
    return measured(layers[-1:], T, t, d_model)
""", call="last_only, WINDOWED, MIXED", message=r"input position \d+ can change the output")

wrong_answer("check_influence", "mistake", "predicts the reach of one window for the stack of three", _INFLUENCE,
             call="measured, list(range(12, 16)), MIXED", message=r"predicted_windowed: .* not right")

wrong_answer("check_influence", "mistake", "predicts that the full layer's reach adds to the windows", _INFLUENCE,
             call="measured, WINDOWED, list(range(3, 16))", message=r"predicted_mixed: .* not right")

wrong_answer("check_influence", "value", "a float tensor of gradient sizes, not a boolean", _INFLUENCE,
             call="lambda *a: measured(*a).double(), WINDOWED, MIXED", message=r"expected a boolean tensor")

_KV = """
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, bytes_per_number=2, window=None, chunk=1,
                   *, extra=-1, edges=True):
    if window is None:
        held = seq_len
    elif edges:
        held = max(min(s + min(chunk, seq_len - s), window + extra + min(chunk, seq_len - s))
                   for s in range(0, seq_len, chunk))
    else:
        held = min(seq_len, window + extra + chunk)
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_number * held


GIB = 8191 * 2 * 32 * 8 * 128 * 2 / 2 ** 30
"""

wrong_answer("check_kv_cache_bytes", "mistake", "predicts the cache without the window", _KV,
             call="kv_cache_bytes, 4.0", message=r"without the window")

wrong_answer("check_kv_cache_bytes", "mistake", "predicts the one-token decoding buffer (W positions), not a chunk's", _KV,
             call="kv_cache_bytes, 0.5", message=r"buffer of one-token decoding")

wrong_answer("check_kv_cache_bytes", "mistake", "keys only in the function (no factor 2)", _KV + """
def keys_only(*args):
    return kv_cache_bytes(*args) // 2
""", call="keys_only, GIB", message=r"count keys and values")

wrong_answer("check_kv_cache_bytes", "value", "a NaN prediction", _KV,
             call="kv_cache_bytes, float('nan')", message=r"is nan: the answer is a finite number")

wrong_answer("check_kv_cache_bytes", "mistake", "W + chunk positions: one too many (the W - 1 keys before the chunk suffice)", _KV,
             call="lambda *a: kv_cache_bytes(*a, extra=0), GIB", message=r"from the first key the\s+chunk's first query")

wrong_answer("check_kv_cache_bytes", "edge", "min(seq_len, W - 1 + chunk): ignores that a short sequence or last chunk holds less", _KV,
             call="lambda *a: kv_cache_bytes(*a, edges=False), GIB", message=r"does not have yet")

wrong_answer("check_kv_cache_bytes", "edge", "ignores the window in the function", _KV + """
def no_window(L, G, D, n, b=2, w=None, c=1):
    return kv_cache_bytes(L, G, D, n, b, None, c)
""", call="no_window, GIB", message=r"as if there were no window")

wrong_answer("check_kv_cache_bytes", "mistake", "ignores the chunk: the decoding buffer of W positions", _KV + """
def decoding(L, G, D, n, b=2, w=None, c=1):
    return kv_cache_bytes(L, G, D, n, b, w, 1)
""", call="decoding, GIB", message=r"while one chunk is processed")

wrong_answer("check_balancing_grad", "method", "complex-step differentiation: the loss evaluated at "
             "z + i h e_nj, the gradient read off the imaginary part (exact to rounding, not a derivation)", """
def balancing_grad(router_logits, top_idx, num_experts):
    N, E = router_logits.shape
    f = torch.zeros(N, E, dtype=torch.float64).scatter(1, top_idx, 1.0).mean(0)
    def loss(z):
        p = torch.exp(z - z.real.max(-1, keepdim=True).values)
        p = p / p.sum(-1, keepdim=True)
        return num_experts * (f * p.mean(0)).sum()
    z, h = router_logits.to(torch.complex128), 1e-30
    grad = torch.zeros(N, E, dtype=torch.float64)
    for n in range(N):
        for j in range(E):
            step = torch.zeros(N, E, dtype=torch.complex128)
            step[n, j] = 1j * h
            grad[n, j] = loss(z + step).imag / h
    return loss(z).real.item(), grad
""", call="balancing_grad", message=r"complex-step differentiation")
