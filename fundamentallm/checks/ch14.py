"""Checks for the exercises of chapter 14: a modern decoder."""

from __future__ import annotations

from typing import Callable

import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check


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


class _Residual(torch.nn.Module):
    """``x + attention(x)``: one attention sublayer with its residual connection."""

    def __init__(self, attention: torch.nn.Module) -> None:
        super().__init__()
        self.attention = attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attention(x)


@exercise_check
def check_influence(influence: Callable) -> str:
    """``influence(model, x, t)`` -> boolean ``(T,)``, True for the input positions j whose value
    changes the output at position t, on stacks of sliding-window attention layers with
    residual connections; compared with the span the windows allow: ``t - Σ(W_l - 1) .. t``."""
    from ..attention import MultiHeadAttention

    g = _ch14_rng(3)
    cases = [("3 layers of window 4, t = 15", [4, 4, 4], 16, 15),
             ("2 layers of windows 2 and 5, t = 10", [2, 5], 12, 10),
             ("4 layers of window 2, t = 8 (not the last position)", [2, 2, 2, 2], 14, 8),
             ("1 layer of window 3, t = 0 (the first token)", [3], 6, 0),
             ("window 3, then a full causal layer, t = 7", [3, None], 12, 7)]
    for what, windows, T, t in cases:
        with torch.random.fork_rng():
            torch.manual_seed(1403)
            model = torch.nn.Sequential(*[
                _Residual(MultiHeadAttention(16, 4, causal=True, num_kv_heads=2, sliding_window=w))
                for w in windows]).double().eval()
        x = torch.randn(2, T, 16, generator=g, dtype=torch.float64)
        before = x.clone()
        got = influence(model, x, t)
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(got).__name__}")
        if got.dtype != torch.bool:
            raise CheckFailed(f"{what}: expected a boolean tensor (True = can change the output), got {got.dtype}")
        check_shape(got, (T,), what=f"influence for {what}")
        if not torch.equal(x.detach(), before):
            raise CheckFailed(f"{what}: influence changed its input x; differentiate a copy")
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
