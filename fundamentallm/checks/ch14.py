"""Checks for the exercises of chapter 14: a modern decoder."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check


def _ch14_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1400 + seed)


@contextlib.contextmanager
def _ch14_forbid(obj: Any, name: str, label: str) -> Iterator[None]:
    """Make ``obj.name`` raise while the student's code runs: the exercise asks to build it."""
    original = getattr(obj, name)

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise CheckFailed(f"{label} is the shortcut this exercise asks you to build yourself; "
                          f"use indexing, expand or reshape instead")

    setattr(obj, name, forbidden)
    try:
        yield
    finally:
        setattr(obj, name, original)


@exercise_check
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
        with _ch14_forbid(torch, "repeat_interleave", "torch.repeat_interleave"), \
                _ch14_forbid(torch.Tensor, "repeat_interleave", "Tensor.repeat_interleave"):
            got = repeat_kv(x, groups)
        if not torch.equal(x, before):
            raise CheckFailed(f"{what}: repeat_kv changed its input x; return a new tensor")
        B, G, T, D = x.shape
        check_shape(got, (B, G * groups, T, D), what=f"repeat_kv for {what}")
        expected = torch.stack([x[:, h // groups] for h in range(G * groups)], dim=1)
        assert_same(got, expected, what=f"repeat_kv for {what} (query head h must get key/value "
                                         f"head h // groups)")
    return f"{len(cases)} shapes, multi-query and plain multi-head included"


@exercise_check
def check_sliding_window_mask(sliding_window_mask: Callable) -> str:
    """``sliding_window_mask(T, W)``: boolean ``(T, T)``, True where ``0 <= i - j < W``;
    compared with a double loop."""
    cases = [(6, 3), (5, 1), (4, 4), (3, 10), (1, 2), (9, 5)]
    for T, W in cases:
        got = sliding_window_mask(T, W)
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"T={T}, W={W}: expected a torch.Tensor, got {type(got).__name__}")
        if got.dtype != torch.bool:
            raise CheckFailed(f"T={T}, W={W}: expected a boolean mask (True = may attend), got {got.dtype}")
        check_shape(got, (T, T), what=f"mask for T={T}, W={W}")
        expected = torch.tensor([[0 <= i - j < W for j in range(T)] for i in range(T)])
        if not torch.equal(got, expected):
            i, j = (int(v) for v in (got != expected).nonzero()[0])
            raise CheckFailed(f"T={T}, W={W}: query {i} and key {j} should be "
                              f"{'allowed' if bool(expected[i, j]) else 'masked'} (i - j = {i - j}); "
                              f"a query sees itself and the W - 1 tokens before it")
    return f"{len(cases)} (T, W) pairs, W = 1 and W >= T included"


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
