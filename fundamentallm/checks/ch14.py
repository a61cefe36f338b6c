"""Checks for the exercises of chapter 14: a modern decoder."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check, rng
from .predict import int_list, number, require_prediction


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


def _ch14_stack(windows: list, hidden: set, d_model: int, seed: int) -> list:
    """Residual attention layers of ``fundamentallm.MultiHeadAttention`` (4 heads), float64, fresh
    weights, as data: ``{"num_heads", "window", "weights"}``. The layers in ``hidden`` add nothing
    to the stream, though no weight matrix of theirs is zero: their values live in the first two
    heads' channels and their output projection reads only the last two heads' (exact zeros, so a
    measured influence is exactly none)."""
    from ..attention import MultiHeadAttention

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        layers = [MultiHeadAttention(d_model, 4, causal=True, sliding_window=w).double().eval()
                  for w in windows]
    for i in hidden:
        with torch.no_grad():
            half = d_model // 2
            layers[i].qkv.weight[2 * d_model + half:].zero_()  # values: heads 2, 3 carry nothing
            layers[i].qkv.bias[2 * d_model + half:].zero_()
            layers[i].out_proj.weight[:, :half].zero_()  # the output reads heads 2, 3 alone
    return [{"num_heads": 4, "window": w, "weights": {k: v.clone() for k, v in layer.state_dict().items()}}
            for w, layer in zip(windows, layers)]


@exercise_check
def check_influence(influence: Callable, predicted_windowed: Any, predicted_mixed: Any) -> str:
    """``predicted_windowed`` / ``predicted_mixed``: the input positions (sorted lists) that can
    change output 15 of a stack of three residual window-4 layers reading 16 tokens, and of the
    same stack with a full causal second layer. ``influence(layers, T, t, d_model)`` -> boolean
    ``(T,)``, measured on residual attention layers the check builds with fresh weights and hands
    over as data (``{"num_heads", "window", "weights"}``: a ``MultiHeadAttention`` state dict), as
    the grader can send them; in one stack a layer whose output is zero though none of its weight
    matrices is, so that no formula in the windows (or in which weights are zero) gives the answer."""
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
        got = influence(_ch14_stack(windows, dead, d_model, seed + n), T, t, d_model)
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
