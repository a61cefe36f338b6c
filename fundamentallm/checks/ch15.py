"""Checks for the exercises of chapter 15: from language model to assistant."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check


def _ch15_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1500 + seed)


def _ch15_chat_rows(gen: torch.Generator, A: int, E: int, U: int) -> list[list[int]]:
    """Random chat sequences (ids 20..29 are text): one to three turns, some right-padded with 0."""
    rows = []
    for _ in range(5):
        row = []
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            q = torch.randint(20, 30, (int(torch.randint(1, 4, (1,), generator=gen)),), generator=gen).tolist()
            a = torch.randint(20, 30, (int(torch.randint(0, 3, (1,), generator=gen)),), generator=gen).tolist()
            row += [U, *q, A, *a, E]
        rows.append(row)
    return rows


def _ch15_reference_mask(ids: torch.Tensor, A: int, E: int) -> torch.Tensor:
    mask = torch.zeros(ids.shape[0], ids.shape[1] - 1)
    for b in range(ids.shape[0]):
        inside = False
        for t in range(ids.shape[1] - 1):
            tok = int(ids[b, t + 1])
            if int(ids[b, t]) == A:
                inside = True
            mask[b, t] = float(inside)
            if tok == E:
                inside = False
    return mask


@exercise_check
def check_assistant_mask(assistant_mask: Callable) -> str:
    """``assistant_mask(ids, assistant_id, end_id)``: ``(B, T)`` ids -> ``(B, T-1)`` float mask,
    1 where the target ``ids[:, t+1]`` is an assistant token (after an assistant marker, up to and
    including the end token), in every turn; padding and user turns 0."""
    gen = _ch15_rng(0)
    cases = []
    for A, E, U in ((1, 2, 0), (7, 9, 8)):  # the markers need not be small ids
        rows = _ch15_chat_rows(gen, A, E, U)
        T = max(len(r) for r in rows) + 2
        pad = 0 if U != 0 else 15
        ids = torch.tensor([r + [pad] * (T - len(r)) for r in rows])
        cases.append((f"{len(rows)} chats with assistant_id={A}, end_id={E}", ids, A, E))
    ids = torch.tensor([[8, 3, 7, 4, 5, 9, 8, 6, 7, 9]])
    cases.append(("one chat whose second answer is empty (only the end token)", ids, 7, 9))
    for what, ids, A, E in cases:
        before = ids.clone()
        got = assistant_mask(ids, A, E)
        if not torch.equal(ids, before):
            raise CheckFailed(f"{what}: assistant_mask changed ids; return a new tensor")
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what}: expected a tensor, got {type(got).__name__}")
        check_shape(got, (ids.shape[0], ids.shape[1] - 1), what=f"mask for {what}")
        expected = _ch15_reference_mask(ids, A, E)
        if not torch.equal(got.float(), expected):
            b, t = (int(v) for v in (got.float() != expected).nonzero()[0])
            raise CheckFailed(f"{what}: row {b}, position {t} (target token {int(ids[b, t + 1])}, after "
                              f"{int(ids[b, t])}) should be {int(expected[b, t])}; the mask marks the "
                              f"targets from the token after each assistant marker through its end token")
    return f"{len(cases)} batches, multi-turn chats and padding included"


@exercise_check
def check_lora_trainable(lora_trainable: Callable) -> str:
    """``lora_trainable(shapes, rank)``: the trainable numbers of rank-``rank`` adapters on linear
    layers of weight shapes ``(out_features, in_features)``."""
    gen = _ch15_rng(1)
    cases = [([(384, 128), (128, 128)], 4), ([(64, 32)], 1), ([(3072, 768)] * 12, 8)]
    cases.append(([tuple(torch.randint(1, 500, (2,), generator=gen).tolist()) for _ in range(5)], 3))
    for shapes, rank in cases:
        got = lora_trainable(shapes, rank)
        expected = sum(rank * (o + i) for o, i in shapes)
        if not isinstance(got, (int, float)) or isinstance(got, bool) or got != expected:
            raise CheckFailed(f"shapes={shapes[:3]}{'...' if len(shapes) > 3 else ''}, rank={rank}: expected "
                              f"{expected}, got {got!r}; A is (rank, in_features) and B (out_features, rank)")
    return f"{len(cases)} sets of layers"


@exercise_check
def check_dpo_initial_loss(predicted_initial_loss: Any) -> str:
    """The DPO loss at the first step (policy = reference), for any beta: ``log 2``."""
    if predicted_initial_loss is None:
        raise CheckFailed("not attempted yet: assign your prediction (a number) to predicted_initial_loss")
    if isinstance(predicted_initial_loss, bool) or not isinstance(predicted_initial_loss, (int, float)):
        raise CheckFailed(f"predicted_initial_loss must be a number, got {type(predicted_initial_loss).__name__}")
    if not abs(predicted_initial_loss - math.log(2)) < 1e-3:
        raise CheckFailed(f"{predicted_initial_loss!r} is not it: at the first step the policy is the "
                          f"reference, so what is each implicit reward beta * (log pi - log pi_ref)?")
    return "log 2: both implicit rewards are 0, whatever beta and the answers"


@exercise_check
def check_group_advantages(group_advantages: Callable) -> str:
    """``group_advantages(rewards)``: ``(N, G)`` -> ``(r - mean) / (std + 1e-4)`` per row, std
    with Bessel's correction."""
    gen = _ch15_rng(3)
    cases = [("binary rewards (N=6, G=8)", torch.randint(0, 2, (6, 8), generator=gen).float()),
             ("real-valued rewards (N=3, G=5)", torch.randn(3, 5, generator=gen)),
             ("a group where every answer is right and one where none is", torch.tensor([[1.0] * 4, [0.0] * 4])),
             ("G=2", torch.tensor([[0.0, 1.0], [2.0, -1.0]]))]
    for what, rewards in cases:
        got = group_advantages(rewards.clone())
        expected = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what}: expected a tensor, got {type(got).__name__}")
        check_shape(got, tuple(rewards.shape), what=f"advantages for {what}")
        population = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, unbiased=False, keepdim=True) + 1e-4)
        if rewards.shape[1] > 1 and torch.allclose(got.float(), population, atol=1e-5) and not torch.allclose(
                population, expected, atol=1e-5):
            raise CheckFailed(f"{what}: you divided by the population std; use Bessel's correction "
                              f"(torch.std's default, as trl does)")
        assert_same(got.float(), expected, what=f"advantages for {what}", atol=1e-5, rtol=1e-5)
    return f"{len(cases)} reward tables, groups that all agree included (their advantages are 0)"


@exercise_check
def check_clip_stops_gradient(clip_stops_gradient: Callable) -> str:
    """``clip_stops_gradient(ratio, advantage, clip_eps)``: boolean, True where the gradient of
    ``min(ratio A, clip(ratio, 1-eps, 1+eps) A)`` with respect to ``ratio`` is zero; compared with
    autograd."""
    gen = _ch15_rng(4)
    ratio = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5, 0.5, 0.9, 1.0, 1.1, 1.5, 0.5, 1.5])
    adv = torch.tensor([1.0] * 5 + [-1.0] * 5 + [0.0] * 2)
    r2 = torch.rand(4, 6, generator=gen) * 2
    r2 = torch.where(((r2 - 0.9).abs() < 1e-3) | ((r2 - 1.1).abs() < 1e-3), torch.ones_like(r2), r2)
    cases = [("ratios 0.5..1.5 with advantages +1, -1 and 0, eps=0.2", ratio, adv, 0.2),
             ("random ratios and advantages, eps=0.1", r2, torch.randn(4, 6, generator=gen), 0.1)]
    for what, r, a, eps in cases:
        got = clip_stops_gradient(r.clone(), a.clone(), eps)
        x = r.clone().requires_grad_(True)
        torch.min(x * a, x.clamp(1 - eps, 1 + eps) * a).sum().backward()
        expected = x.grad == 0
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool:
            raise CheckFailed(f"{what}: expected a boolean tensor, got "
                              f"{got.dtype if isinstance(got, torch.Tensor) else type(got).__name__}")
        check_shape(got, tuple(r.shape), what=f"mask for {what}")
        if not torch.equal(got, expected):
            i = int((got != expected).flatten().nonzero()[0])
            raise CheckFailed(f"{what}: ratio {float(r.flatten()[i]):.3f}, advantage {float(a.flatten()[i]):+.3f}: "
                              f"the gradient is {'zero' if bool(expected.flatten()[i]) else 'not zero'} there")
    return "positive, negative and zero advantages, inside and outside the clip range"
