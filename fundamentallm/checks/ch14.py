"""Checks for the exercises of chapter 14: a modern decoder."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check, rng
from .predict import int_list, number, require_prediction
from .wrong import wrong_answer


def _ch14_rng(seed: int) -> torch.Generator:
    return rng(1400 + seed)


@exercise_check(forbidden=("torch.repeat_interleave", "numpy.repeat", "numpy.ndarray.repeat"))
def check_repeat_kv(repeat_kv: Callable) -> str:
    """``repeat_kv(x, groups)``: ``(B, G, T, D)`` -> ``(B, G·groups, T, D)`` with key/value head g
    copied to query heads ``g·groups .. g·groups + groups - 1``, without ``repeat_interleave``
    (nor NumPy's ``repeat``, the same function under another name)."""
    g = _ch14_rng(0)
    cases = [("(2, 2, 5, 4), groups=2", torch.randn(2, 2, 5, 4, generator=g), 2),
             ("(1, 1, 3, 8), groups=4 (multi-query)", torch.randn(1, 1, 3, 8, generator=g), 4),
             ("(3, 4, 2, 2), groups=1 (plain multi-head)", torch.randn(3, 4, 2, 2, generator=g), 1),
             ("(1, 3, 4, 2), groups=3", torch.randn(1, 3, 4, 2, generator=g), 3)]
    for what, x, groups in cases:
        before = x.clone()
        got = repeat_kv(x, groups)  # the core makes repeat_interleave raise while it runs
        if not torch.equal(x, before):
            raise CheckFailed(f"{what}: repeat_kv changed its input x; return a new tensor")
        B, G, T, D = x.shape
        check_shape(got, (B, G * groups, T, D), what=f"repeat_kv for {what}")
        expected = torch.stack([x[:, h // groups] for h in range(G * groups)], dim=1)
        assert_same(got, expected, what=f"repeat_kv for {what} (query head h must get key/value "
                                         f"head h // groups)")
    return f"{len(cases)} shapes, multi-query and plain multi-head included"


def _ch14_window_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, W: int) -> torch.Tensor:
    """Windowed causal attention over a whole sequence, (B, H, T, D) each -> (B, H, T, D)."""
    T = q.shape[-2]
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (i - j >= 0) & (i - j < W)
    scores = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    return scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v


@exercise_check(pure=False)
def check_rolling_window_step(rolling_window_step: Callable) -> str:
    """``rolling_window_step(q, k, v, cache_k, cache_v, pos)`` -> ``(out, cache_k, cache_v)``: one
    decoding step of sliding-window attention with a rolling buffer of W slots (the key and value
    of absolute position p live in slot ``p % W``). Run position by position over sequences longer
    than the window, from buffers full of garbage, and compared with windowed causal attention over
    the whole sequence."""
    g = _ch14_rng(1)
    cases = [("B=2, H=3, D=5, W=4, 11 tokens", 2, 3, 5, 4, 11),
             ("B=1, H=2, D=8, W=3, 10 tokens", 1, 2, 8, 3, 10),
             ("W=1 (each token reads only itself), 5 tokens", 1, 2, 4, 1, 5),
             ("W=6 longer than the 4 tokens (plain causal)", 2, 1, 4, 6, 4)]
    for what, B, H, D, W, T in cases:
        q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=torch.float64) for _ in range(3))
        expected = _ch14_window_reference(q, k, v, W)
        # slots never written hold garbage: reading them changes the output
        cache_k = 30 * torch.randn(B, H, W, D, generator=g, dtype=torch.float64)
        cache_v = 30 * torch.randn(B, H, W, D, generator=g, dtype=torch.float64)
        for pos in range(T):
            out = rolling_window_step(q[:, :, pos:pos + 1].clone(), k[:, :, pos:pos + 1].clone(),
                                      v[:, :, pos:pos + 1].clone(), cache_k, cache_v, pos)
            if not isinstance(out, (tuple, list)) or len(out) != 3:
                raise CheckFailed(f"{what}: expected (out, cache_k, cache_v), got {type(out).__name__}")
            got, cache_k, cache_v = (torch.as_tensor(t) for t in out)
            check_shape(got, (B, H, 1, D), what=f"out at position {pos} for {what}")
            check_shape(cache_k, (B, H, W, D), what=f"cache_k after position {pos} for {what}")
            check_shape(cache_v, (B, H, W, D), what=f"cache_v after position {pos} for {what}")
            want = expected[:, :, pos:pos + 1]
            if not torch.isfinite(got).all() or not torch.allclose(got, want, atol=1e-9, rtol=1e-7):
                phase = ("before the buffer has been filled once: which slots hold a key of this "
                         "sequence yet?" if pos < W - 1 else
                         "after the buffer wrapped around: which slot holds the oldest key, and "
                         "which one must the new key replace?")
                raise CheckFailed(f"{what}: at position {pos} the output differs from sliding-window "
                                  f"attention over the whole sequence, {phase} The query must read "
                                  f"exactly the keys of positions {max(0, pos - W + 1)}..{pos}, "
                                  f"its own included")
    return (f"{len(cases)} sequences decoded token by token through a rolling buffer, equal to "
            f"windowed attention over the whole sequence")


_CH14_NO_AUTOGRAD = ("torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward",
                     "torch.autograd.functional", "torch.autograd.forward_ad", "torch.autograd.Function",
                     "torch.autograd.function", "torch.func", "torch._functorch",
                     "fundamentallm.moe.load_balancing_loss",
                     "fundamentallm.moe.MoEFeedForward.forward")


@exercise_check(forbidden=_CH14_NO_AUTOGRAD, by_hand=True)
def check_balancing_grad(balancing_grad: Callable) -> str:
    """``balancing_grad(router_logits (N, E), top_idx (N, k), num_experts)`` -> ``(loss, grad)``:
    the load-balancing loss ``E · Σ_e f_e P_e`` of ``p = softmax(router_logits)`` and its gradient
    with respect to ``router_logits``, derived by hand (no autograd in any form, reverse or forward
    mode; no package function), compared with autograd in float64 to 2e-15 (+ 1e-14 relative):
    an analytic formula lands within 1e-16, while float64 finite differences stop near 1e-14 even
    with 6th- and 8th-order stencils (rounding of the loss, ~4e-16, divided by the step). A
    numerical derivative is not a derivation: the instructor reads the code for the rest."""
    g = _ch14_rng(2)
    cases = []
    for N, E, k in ((16, 4, 2), (10, 8, 1), (9, 5, 3)):
        logits = 2 * torch.randn(N, E, generator=g, dtype=torch.float64)
        cases.append((f"N={N}, E={E}, top-{k} of random routing", logits, logits.topk(k, -1).indices, E))
    logits = torch.randn(6, 3, generator=g, dtype=torch.float64)
    cases.append(("top-3 of 3 experts (every expert chosen by every token)", logits,
                  logits.topk(3, -1).indices, 3))
    logits = torch.tensor([[4.0, 0.0, 0.0, 0.0]] * 5 + [[0.0, 3.0, 0.0, 0.0]], dtype=torch.float64)
    cases.append(("five of six tokens on expert 0 (top-1)", logits, logits.argmax(-1, keepdim=True), 4))
    for what, logits, idx, E in cases:
        out = balancing_grad(logits.clone(), idx.clone(), E)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise CheckFailed(f"{what}: expected a pair (loss, grad), got {type(out).__name__}")
        loss, grad = out
        loss = float(loss.detach() if isinstance(loss, torch.Tensor) else loss)  # a Python float stays float64
        z = logits.clone().requires_grad_(True)
        p = z.softmax(-1)
        f = torch.zeros_like(p).scatter(1, idx, 1.0).mean(0)
        ref = E * (f * p.mean(0)).sum()
        (ref_grad,) = torch.autograd.grad(ref, z)
        if not (abs(loss - ref.item()) <= 1e-9 * max(1.0, abs(ref.item()))):
            raise CheckFailed(f"{what}: the loss is not right; f_e counts the tokens that chose e "
                              f"(each token chooses k experts), P_e averages the probabilities")
        grad = torch.as_tensor(grad).detach()
        check_shape(grad, tuple(logits.shape), what=f"grad for {what}")
        if not torch.isfinite(grad).all() or not torch.allclose(grad.double(), ref_grad, atol=2e-15, rtol=1e-14):
            raise CheckFailed(f"{what}: the gradient with respect to the logits is not right. The "
                              f"loss reaches a logit only through P_e (f_e is a count), and a logit "
                              f"moves every probability of its token: apply the chain rule through "
                              f"the softmax, and remember the mean over the N tokens")
    return f"{len(cases)} routings: the loss and its gradient to the logits, derived by hand"


def _ch14_stack(windows: list, dead: set, d_model: int, seed: int) -> list:
    """Residual attention layers of ``fundamentallm.MultiHeadAttention``, float64, fresh weights;
    the layers in ``dead`` have a zero output projection (they add nothing to the stream)."""
    from ..attention import MultiHeadAttention

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layers = [MultiHeadAttention(d_model, 4, causal=True, sliding_window=w).double().eval()
                  for w in windows]
    for i in dead:
        with torch.no_grad():
            layers[i].out_proj.weight.zero_()
            if layers[i].out_proj.bias is not None:
                layers[i].out_proj.bias.zero_()
    return layers


@exercise_check
def check_influence(influence: Callable, predicted_windowed: Any, predicted_mixed: Any) -> str:
    """``predicted_windowed`` / ``predicted_mixed``: the input positions (sorted lists) that can
    change output 15 of a stack of three residual window-4 layers reading 16 tokens, and of the
    same stack with a full causal second layer. ``influence(layers, T, t, d_model)`` -> boolean
    ``(T,)``, measured on residual attention layers the check builds with fresh weights and hands
    over as bare functions ``x -> layer(x)`` (windows and weights unknown to the function; in one stack a layer whose output is zero, so
    that no formula in the windows gives the answer)."""
    require_prediction(predicted_windowed, "predicted_windowed", "a sorted list of positions")
    require_prediction(predicted_mixed, "predicted_mixed", "a sorted list of positions")
    for name, value, expected in (("predicted_windowed", predicted_windowed, list(range(6, 16))),
                                  ("predicted_mixed", predicted_mixed, list(range(16)))):
        got = sorted(set(int_list(value, name)))
        if got != expected:
            raise CheckFailed(f"{name}: the {len(got)} positions you listed are not right; each layer "
                              f"lets a position read W - 1 positions further back, and a layer "
                              f"without a window reads everything before it")
    seed = int(torch.randint(0, 2 ** 31 - 1, (1,), generator=_ch14_rng(4)))
    cases = [("stack A, t = 15", [4, 4, 4], set(), 16, 15),
             ("stack B, t = 10", [2, 5], set(), 12, 10),
             ("stack C, t = 8 (not the last position)", [2, 2, 2, 2], set(), 14, 8),
             ("stack D, t = 0 (the first token)", [3], set(), 6, 0),
             ("stack E, t = 7", [3, None], set(), 12, 7),
             ("stack F, t = 13", [3, 5, 4], {1}, 14, 13)]
    for n, (what, windows, dead, T, t) in enumerate(cases):
        d_model = 8 * (1 + n % 2)
        layers = _ch14_stack(windows, dead, d_model, seed + n)
        # functions, not modules: the windows and the weights stay hidden, only a measurement answers
        got = influence([_ch14_opaque(layer) for layer in layers], T, t, d_model)
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
        if got.dtype != torch.bool:
            raise CheckFailed(f"{what}: expected a boolean tensor (True = can change the output), got {got.dtype}")
        check_shape(got, (T,), what=f"influence for {what}")
        live = [w for i, w in enumerate(windows) if i not in dead]
        first = 0 if None in live else max(0, t - sum(w - 1 for w in live))
        positions = torch.arange(T)
        expected = (positions >= first) & (positions <= t)
        if not torch.equal(got, expected):
            j = int((got != expected).nonzero()[0])
            raise CheckFailed(f"{what}: input position {j} "
                              f"{'can' if bool(expected[j]) else 'cannot'} change the output at "
                              f"position {t}, but you returned {bool(got[j])}; measure it on the layers "
                              f"you are given (their windows are not the whole story): how does the "
                              f"output at t respond to each input position?")
    return (f"{len(cases)} stacks measured; e.g. 3 layers of window 4 let position 15 read positions "
            f"{15 - 3 * 3}..15, 3·(4 - 1) = 9 tokens back, and a layer that adds nothing extends nothing")


def _ch14_opaque(layer: Callable) -> Callable:
    """``layer`` as a bare function ``x -> layer(x)``: no attribute (window, weights) to read."""
    return lambda x: layer(x)


def _ch14_kv_reference(num_layers, num_kv_heads, head_dim, seq_len, bytes_per_number, window, chunk=1):
    """Bytes the cache holds at its largest: while a chunk of l tokens starting at s is processed,
    its first query may read W - 1 keys before s and the chunk reads its own l keys, so the buffer
    keeps positions max(0, s - W + 1) .. s + l - 1: min(s + l, W - 1 + l) of them."""
    if window is None:
        held = seq_len
    else:
        held = max((min(s + min(chunk, seq_len - s), window - 1 + min(chunk, seq_len - s))
                    for s in range(0, seq_len, chunk)), default=0)
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_number * held


@exercise_check
def check_kv_cache_bytes(kv_cache_bytes: Callable, predicted_gib: Any) -> str:
    """``predicted_gib``: the largest KV cache, in GiB, while a Mistral-7B-shaped model (32 layers, 8
    key/value heads of 128, bfloat16, a 4096-token sliding window) prefills a 32,768-token prompt
    in chunks of 4096. ``kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len,
    bytes_per_number, window, chunk)`` -> the bytes of keys and values the cache must hold at its
    largest when the sequence is fed ``chunk`` tokens at a time (``window=None``: every position)."""
    require_prediction(predicted_gib, "predicted_gib", "a number of GiB")
    truth = _ch14_kv_reference(32, 8, 128, 32768, 2, 4096, 4096) / 2 ** 30
    guess = number(predicted_gib, "predicted_gib")
    if not (abs(guess - truth) <= 0.02 * truth):  # NaN and infinity fail too
        one_token = _ch14_kv_reference(32, 8, 128, 32768, 2, 4096, 1) / 2 ** 30
        full = _ch14_kv_reference(32, 8, 128, 32768, 2, None) / 2 ** 30
        hint = (" -- that is the cache without the window: a sliding window keeps only what some query "
                "of the chunk may still read" if abs(guess - full) < 0.02 * full else
                " -- that is the buffer of one-token decoding: which keys does the chunk's first query "
                "read, and which the chunk's own queries?" if abs(guess - one_token) < 0.02 * one_token else
                "; count keys and values, layers, heads, the head width, bytes per number, and the "
                "positions some query of one chunk may read")
        raise CheckFailed(f"predicted_gib: {guess:g} GiB is not right{hint}")
    g = _ch14_rng(7)
    cases = [(32, 8, 128, 32768, 2, 4096, 4096), (32, 8, 128, 32768, 2, 4096, 1), (32, 8, 128, 8192, 2, None, 512),
             (12, 12, 64, 1024, 4, None, 1), (4, 1, 16, 10, 2, 64, 4), (2, 2, 8, 100, 1, 100, 100),
             (2, 2, 8, 12, 2, 4, 8),  # the last chunk (4 tokens) is short: the first one holds the most
             (3, 1, 4, 7, 2, 3, 20)]  # one chunk longer than the sequence: every position at once
    for _ in range(6):
        cases.append((int(torch.randint(1, 40, (1,), generator=g)), int(torch.randint(1, 9, (1,), generator=g)), 64,
                      int(torch.randint(1, 5000, (1,), generator=g)), 2, int(torch.randint(1, 2000, (1,), generator=g)),
                      int(torch.randint(1, 3000, (1,), generator=g))))
    names = "num_layers, num_kv_heads, head_dim, seq_len, bytes_per_number, window, chunk"
    for args in cases:
        expected = _ch14_kv_reference(*args)
        got = kv_cache_bytes(*args)
        if isinstance(got, torch.Tensor):
            got = got.item()
        call = f"kv_cache_bytes({', '.join(map(str, args))}) ({names})"
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise CheckFailed(f"{call}: expected a number of bytes, got {type(got).__name__}")
        if got != expected:
            why = (" -- as if there were no window: a sliding window keeps only what some query still reads"
                   if args[5] is not None and got == _ch14_kv_reference(*args[:5], None) else
                   ": count keys and values, layers, KV heads, the head width, bytes per number, and the "
                   "positions the cache must hold while one chunk is processed: from the first key the "
                   "chunk's first query may read to the chunk's last token (and a chunk cannot read what "
                   "the sequence does not have yet)")
            raise CheckFailed(f"{call}: {got:,} bytes is not right{why}")
    return (f"{truth:.2f} GiB for chunks of 4096 (0.50 GiB token by token, 4 GiB without a window); "
            f"{len(cases)} shapes match")


# --- What each check catches (python -m fundamentallm.course catches --chapter 14) -------------

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
def measured(layers, T, t, d_model):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, T, d_model, generator=g, dtype=torch.float64, requires_grad=True)
    h = x
    for layer in layers:
        h = h + layer(h)
    (grad,) = torch.autograd.grad(h[:, t].sum(), x)
    return grad.abs().sum(dim=(0, 2)) != 0


WINDOWED, MIXED = list(range(6, 16)), list(range(16))
"""
wrong_answer("check_influence", "method", "a formula in the layers' windows instead of a measurement", _INFLUENCE + """
def formula(layers, T, t, d_model):
    windows = [layer.sliding_window for layer in layers]
    j = torch.arange(T)
    first = 0 if None in windows else t - sum(w - 1 for w in windows)
    return (j >= first) & (j <= t)
""", call="formula, WINDOWED, MIXED", message=r"no attribute 'sliding_window'")
wrong_answer("check_influence", "method", "a formula in the windows that skips the layers whose output projection is zero", _INFLUENCE + """
def formula(layers, T, t, d_model):
    reach = 0
    for layer in layers:
        if layer.out_proj.weight.abs().sum() == 0:
            continue
        if layer.sliding_window is None:
            reach = T
            break
        reach += layer.sliding_window - 1
    j = torch.arange(T)
    return (j >= max(0, t - reach)) & (j <= t)
""", call="formula, WINDOWED, MIXED", message=r"no attribute 'out_proj'")
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
