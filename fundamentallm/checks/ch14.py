"""Checks for the exercises of chapter 14: a modern decoder."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check
from .predict import int_list, number, require_prediction


def _ch14_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1400 + seed)


@exercise_check(forbidden=("torch.repeat_interleave",))
def check_repeat_kv(repeat_kv: Callable) -> str:
    """``repeat_kv(x, groups)``: ``(B, G, T, D)`` -> ``(B, G·groups, T, D)`` with key/value head g
    copied to query heads ``g·groups .. g·groups + groups - 1``, without ``repeat_interleave``."""
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


@exercise_check
def check_window_mask_at(window_mask_at: Callable) -> str:
    """``window_mask_at(num_queries, num_keys, start, W)``: boolean ``(num_queries, num_keys)``,
    True where query i (at absolute position ``start + i``) may read cached key j, i.e.
    ``0 <= start + i - j < W``; compared with a double loop."""
    cases = [(6, 6, 0, 3, "a whole sequence (start 0)"), (1, 9, 8, 3, "one decoding step at position 8"),
             (3, 10, 7, 4, "a 3-token chunk after 7 cached tokens"), (1, 5, 4, 1, "window 1"),
             (2, 6, 4, 10, "W larger than the cache (plain causal)"), (4, 4, 0, 4, "W = T"),
             (2, 8, 3, 3, "a preallocated cache: keys after the queries")]
    for nq, nk, start, W, what in cases:
        label = f"num_queries={nq}, num_keys={nk}, start={start}, W={W} ({what})"
        got = window_mask_at(nq, nk, start, W)
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{label}: expected a torch.Tensor, got {type(got).__name__}")
        if got.dtype != torch.bool:
            raise CheckFailed(f"{label}: expected a boolean mask (True = may attend), got {got.dtype}")
        check_shape(got, (nq, nk), what=f"mask for {label}")
        expected = torch.tensor([[0 <= start + i - j < W for j in range(nk)] for i in range(nq)])
        if not torch.equal(got, expected):
            i, j = (int(v) for v in (got != expected).nonzero()[0])
            raise CheckFailed(f"{label}: query {i} (position {start + i}) and key {j} should be "
                              f"{'allowed' if bool(expected[i, j]) else 'masked'}; a query at "
                              f"position p sees keys p - W + 1 .. p")
    return f"{len(cases)} cases: whole sequences, single decoding steps, chunks after a cache, a preallocated cache"


@exercise_check
def check_load_balancing_loss(load_balancing_loss: Callable) -> str:
    """``load_balancing_loss(router_probs (N, E), top_idx (N, k), num_experts)`` -> scalar
    ``E · Σ_e f_e P_e``, with a gradient to ``router_probs`` through ``P_e`` only."""
    g = _ch14_rng(2)
    cases = []
    for N, E, k in ((16, 4, 2), (10, 8, 1), (7, 3, 3)):
        probs = torch.softmax(torch.randn(N, E, generator=g) * 2, dim=-1)
        cases.append((f"N={N}, E={E}, top-{k} of random routing", probs, probs.topk(k, -1).indices, E))
    uniform = torch.full((8, 4), 0.25)
    cases.append(("perfectly balanced top-2 of 4 (the minimum, = k = 2)", uniform,
                  torch.stack([torch.arange(8) % 4, (torch.arange(8) + 1) % 4], 1), 4))
    collapsed = torch.tensor([[0.97, 0.01, 0.01, 0.01]] * 6)
    cases.append(("every token on expert 0", collapsed, torch.zeros(6, 1, dtype=torch.long), 4))
    for what, probs, idx, E in cases:
        p = probs.clone().requires_grad_(True)
        got = load_balancing_loss(p, idx.clone(), E)
        if not isinstance(got, torch.Tensor) or got.dim() != 0:
            raise CheckFailed(f"{what}: expected a scalar tensor, got {got!r:.60}")
        f = torch.zeros(probs.shape).scatter_(1, idx, 1.0).mean(0)
        expected = E * (f * probs.mean(0)).sum()
        assert_same(got.detach(), expected, what=f"loss for {what}")
        if not got.requires_grad:
            raise CheckFailed(f"{what}: the loss has no gradient to router_probs; P_e (the mean "
                              f"probability) must stay differentiable")
        (grad,) = torch.autograd.grad(got, p)
        assert_same(grad, (E * f / probs.shape[0]).expand_as(probs),
                    what=f"d loss / d router_probs for {what} (f_e is a count: no gradient through it)")
    return f"{len(cases)} routings, balanced and collapsed included, gradients too"


@exercise_check
def check_influence(influence: Callable, predicted_windowed: Any, predicted_mixed: Any) -> str:
    """``predicted_windowed`` / ``predicted_mixed``: the input positions (sorted lists) that can
    change output 15 of a stack of three residual window-4 layers reading 16 tokens, and of the
    same stack with a full causal second layer. ``influence(windows, T, t)`` -> boolean ``(T,)``,
    measured on a stack of residual sliding-window attention layers the function builds itself
    (``None`` = full causal); compared with the span the windows allow, ``t - sum(W_l - 1) .. t``."""
    require_prediction(predicted_windowed, "predicted_windowed", "a sorted list of positions")
    require_prediction(predicted_mixed, "predicted_mixed", "a sorted list of positions")
    for name, value, expected in (("predicted_windowed", predicted_windowed, list(range(6, 16))),
                                  ("predicted_mixed", predicted_mixed, list(range(16)))):
        got = sorted(set(int_list(value, name)))
        if got != expected:
            raise CheckFailed(f"{name}: {got[:3]}...{got[-3:]} ({len(got)} positions) is not right; "
                              f"each layer lets a position read W - 1 positions further back, and a "
                              f"layer without a window reads everything before it")
    cases = [("3 layers of window 4, t = 15", [4, 4, 4], 16, 15),
             ("2 layers of windows 2 and 5, t = 10", [2, 5], 12, 10),
             ("4 layers of window 2, t = 8 (not the last position)", [2, 2, 2, 2], 14, 8),
             ("1 layer of window 3, t = 0 (the first token)", [3], 6, 0),
             ("window 3, then a full causal layer, t = 7", [3, None], 12, 7)]
    for what, windows, T, t in cases:
        got = influence(list(windows), T, t)
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
        if got.dtype != torch.bool:
            raise CheckFailed(f"{what}: expected a boolean tensor (True = can change the output), got {got.dtype}")
        check_shape(got, (T,), what=f"influence for {what}")
        first = 0 if None in windows else max(0, t - sum(w - 1 for w in windows))
        positions = torch.arange(T)
        expected = (positions >= first) & (positions <= t)
        if not torch.equal(got, expected):
            j = int((got != expected).nonzero()[0])
            raise CheckFailed(f"{what}: input position {j} "
                              f"{'can' if bool(expected[j]) else 'cannot'} change the output at "
                              f"position {t}, but you returned {bool(got[j])}; measure it: the "
                              f"gradient of the output at t with respect to each input position")
    return (f"{len(cases)} stacks; e.g. 3 layers of window 4 let position 15 read positions "
            f"{15 - 3 * 3}..15, 3·(4 - 1) = 9 tokens back")


def _ch14_kv_reference(num_layers, num_kv_heads, head_dim, seq_len, bytes_per_number, window):
    cached = seq_len if window is None else min(seq_len, window)
    return 2 * num_layers * num_kv_heads * head_dim * bytes_per_number * cached


@exercise_check
def check_kv_cache_bytes(kv_cache_bytes: Callable, predicted_gib: Any) -> str:
    """``predicted_gib``: the KV cache, in GiB, of one 32,768-token sequence of a Mistral-7B-shaped
    model (32 layers, 8 key/value heads of 128, bfloat16, a 4096-token sliding window).
    ``kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, bytes_per_number, window)`` ->
    the bytes of keys and values one sequence keeps (``window=None``: every position)."""
    require_prediction(predicted_gib, "predicted_gib", "a number of GiB")
    truth = _ch14_kv_reference(32, 8, 128, 32768, 2, 4096) / 2 ** 30
    guess = number(predicted_gib, "predicted_gib")
    if abs(guess - truth) > 0.02 * truth:
        full = _ch14_kv_reference(32, 8, 128, 32768, 2, None) / 2 ** 30
        hint = (" -- that is the cache without the window: a sliding window keeps only the last W "
                "positions" if abs(guess - full) < 0.02 * full else
                "; count keys and values, layers, heads, the head width, bytes per number, and how "
                "many positions a window of 4096 keeps")
        raise CheckFailed(f"predicted_gib: {guess:g} GiB is not right{hint}")
    g = _ch14_rng(7)
    cases = [(32, 8, 128, 32768, 2, 4096), (32, 8, 128, 8192, 2, None), (12, 12, 64, 1024, 4, None),
             (4, 1, 16, 10, 2, 64), (2, 2, 8, 100, 1, 100)]
    cases += [(int(torch.randint(1, 40, (1,), generator=g)), int(torch.randint(1, 9, (1,), generator=g)),
               64, int(torch.randint(1, 5000, (1,), generator=g)), 2,
               int(torch.randint(1, 5000, (1,), generator=g))) for _ in range(5)]
    for args in cases:
        expected = _ch14_kv_reference(*args)
        got = kv_cache_bytes(*args)
        if isinstance(got, torch.Tensor):
            got = got.item()
        if not isinstance(got, (int, float)) or got != expected:
            names = "num_layers, num_kv_heads, head_dim, seq_len, bytes_per_number, window"
            raise CheckFailed(f"kv_cache_bytes({', '.join(map(str, args))}) ({names}): expected "
                              f"{expected:,} bytes, got {got}")
    return f"{truth:.2f} GiB with the window (4 GiB without); {len(cases)} shapes match"
