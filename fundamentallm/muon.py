"""Muon (Jordan et al. 2024): momentum whose update matrix is orthogonalised by Newton-Schulz.

For a weight matrix, AdamW scales each entry of the update on its own. Muon treats the update as a
matrix: it takes the momentum ``M`` of the gradients and replaces it by the nearest matrix with
all singular values equal to one, ``U Vᵀ`` where ``M = U S Vᵀ``. Every direction the gradient
points in then moves the weights by the same amount, so the rare directions (small singular
values) are not drowned by the dominant ones. An SVD per step would be slow; five iterations of
an odd matrix polynomial ``X <- aX + b(XXᵀ)X + c(XXᵀ)²X`` push every singular value of a
normalised ``X`` towards one using only matrix products (Newton-Schulz; the coefficients are
Keller Jordan's, tuned so that small singular values grow fast, which leaves them roughly in
[0.7, 1.2] rather than exactly 1 -- good enough for training).

Muon is for the hidden matrices only; embeddings, the output layer and the 1-D gains and biases
train with AdamW (groups with ``use_muon=False`` here, as in Jordan's ``MuonWithAuxAdam``).

References: K. Jordan et al., "Muon: An optimizer for hidden layers in neural networks" (2024),
https://kellerjordan.github.io/posts/muon/ ; the update rule and the learning-rate adjustment
``sqrt(max(1, rows / cols))`` are those of ``torch.optim.Muon``, which
``tests/test_muon.py`` checks this implementation against.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable

import torch
from torch.optim.adam import adam

from .utils import native_bf16

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_DTYPES = (torch.bfloat16, torch.float32, torch.float64)


def newton_schulz(G: torch.Tensor, steps: int = 5, coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
                  eps: float = 1e-7, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Approximately orthogonalise ``G`` ``(..., m, n)``: ``U S' Vᵀ`` with ``S'`` near the
    identity, where ``G = U S Vᵀ``. A stack of matrices is processed in one batched product.

    ``G`` is first divided by its Frobenius norm, which bounds every singular value by 1 (the
    polynomial only converges there). A tall matrix is transposed so that ``X Xᵀ`` is the small
    Gram matrix. Computed in ``dtype`` (bf16 by default, as in ``torch.optim.Muon``: the
    iteration tolerates the rounding, and bf16 products are several times faster where the
    hardware has bf16 instructions; ``Muon`` passes float32 where it has not)."""
    if G.dim() < 2:
        raise ValueError(f"newton_schulz needs a matrix (or a stack of them), got shape {tuple(G.shape)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an integer >= 1")
    a, b, c = coefficients
    X = G.to(dtype)
    tall = G.shape[-2] > G.shape[-1]
    if tall:
        X = X.mT
    X = X / X.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    batch = X.shape[:-2]
    X = X.reshape(-1, *X.shape[-2:])  # (N, m, n): one batched product per iteration
    for _ in range(steps):
        A = X @ X.mT  # (N, m, m), m the smaller side
        B = torch.baddbmm(A, A, A, beta=b, alpha=c)  # b·A + c·A²
        X = torch.baddbmm(X, B, X, beta=a)  # a·X + B·X
    X = X.reshape(*batch, *X.shape[-2:])
    return X.mT if tall else X


def muon_lr_scale(shape: torch.Size) -> float:
    """``sqrt(max(1, rows / cols))``: an orthogonalised tall matrix has smaller entries, so its
    step is scaled up to keep the update's size per entry comparable across shapes."""
    return math.sqrt(max(1.0, shape[0] / shape[1]))


def _check_group(i: int, group: dict) -> None:
    """Raise ``ValueError`` naming the setting and its value, or the shape of a non-matrix in a
    Muon group."""
    def number(name, lo, hi):
        value = group[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value < hi:
            raise ValueError(f"param group {i}: {name}={value!r} must be a number in [{lo}, {hi})")

    number("lr", 0.0, math.inf)
    number("weight_decay", 0.0, math.inf)
    if not group["use_muon"]:
        number("eps", 0.0, math.inf)
        betas = group["betas"]
        if len(betas) != 2 or not all(isinstance(b, (int, float)) and 0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"param group {i}: betas={betas!r} must be two numbers in [0, 1)")
        return
    number("momentum", 0.0, 1.0)
    if not isinstance(group["nesterov"], bool):
        raise ValueError(f"param group {i}: nesterov={group['nesterov']!r} must be True or False")
    ns_steps = group["ns_steps"]
    if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 1:
        raise ValueError(f"param group {i}: ns_steps={ns_steps!r} must be an integer >= 1")
    for p in group["params"]:
        if p.dim() != 2:
            raise ValueError(f"param group {i}: Muon updates matrices only, got a parameter of "
                             f"shape {tuple(p.shape)}; put vectors, embeddings and the output "
                             f"layer in a group with use_muon=False (AdamW)")


class Muon(torch.optim.Optimizer):
    """Muon for the matrices of groups with ``use_muon=True`` (the default); AdamW for the others.

    A Muon group: ``lr`` (default 0.02), ``momentum`` 0.95 with Nesterov, ``weight_decay``
    (decoupled: ``p <- p · (1 - lr · wd)``), ``ns_steps`` 5. Per step, for each matrix ``W`` with
    gradient ``g`` and momentum buffer ``m``::

        m <- momentum · m + (1 - momentum) · g
        u <- newton_schulz((1 - momentum) · g + momentum · m)       # Nesterov look-ahead
        W <- W · (1 - lr · wd) - lr · sqrt(max(1, rows / cols)) · u

    Matrices of the same shape (up to a transpose) are orthogonalised together in one batched
    product: at the course's sizes a step is many small products, and batching them saves most
    of Muon's extra time. The momentum equals ``torch.optim.Muon``'s bit for bit; the weights
    most often too, but the batched bf16 products (``baddbmm``) now and then round differently
    from torch's one-matrix ``addmm`` (about one Newton-Schulz call in 200, by a few bf16 ulps),
    so compare with a tolerance, not ``torch.equal``. ``ns_dtype``: the Newton-Schulz iteration's
    precision; ``None`` (the default) is bf16 where the weights' device multiplies bf16 natively
    (``utils.native_bf16``: a GPU with bf16, a CPU with AVX512-BF16 or AMX) and float32 elsewhere,
    where a bf16 product is converted in software and costs several times a float32 one. An AdamW group (``use_muon=False``) takes
    ``lr``, ``betas``, ``eps`` and ``weight_decay`` and is updated exactly as by
    ``torch.optim.AdamW``.
    """

    def __init__(self, params: Iterable, lr: float = 0.02, momentum: float = 0.95, nesterov: bool = True,
                 weight_decay: float = 0.0, ns_steps: int = 5, betas: tuple[float, float] = (0.9, 0.95),
                 eps: float = 1e-8, ns_dtype: torch.dtype | None = None) -> None:
        if ns_dtype is not None and ns_dtype not in NS_DTYPES:
            raise ValueError(f"ns_dtype={ns_dtype!r} is not supported; allowed values: None (bf16 where native, "
                             f"else float32), {', '.join(map(str, NS_DTYPES))}")
        self.ns_dtype = ns_dtype
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                        ns_steps=ns_steps, betas=tuple(betas), eps=eps, use_muon=True)
        super().__init__(params, defaults)  # checks every group through add_param_group

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (the constructor adds each of its groups here too) after checking its
        settings, its own as well as the defaults it inherits, and that a Muon group holds only
        matrices."""
        super().add_param_group(param_group)
        i, group = len(self.param_groups) - 1, self.param_groups[-1]
        try:
            _check_group(i, group)
        except ValueError:
            self.param_groups.pop()  # leave the optimizer as it was
            raise

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                (self._muon_step if group["use_muon"] else self._adamw_step)(group, params)
        return loss

    def _muon_step(self, group: dict, params: list[torch.Tensor]) -> None:
        mu, lr = group["momentum"], group["lr"]
        bufs = []
        for p in params:
            state = self.state[p]
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = torch.zeros_like(p)
            bufs.append(state["momentum_buffer"])
        # One multi-tensor operation for all matrices instead of one small one per matrix (the
        # same arithmetic, entry by entry): at the course's sizes a step is mostly overhead.
        grads = [p.grad for p in params]
        torch._foreach_lerp_(bufs, grads, 1 - mu)
        updates = torch._foreach_lerp(grads, bufs, mu) if group["nesterov"] else bufs
        by_shape: dict[tuple, list[tuple[torch.Tensor, torch.Tensor]]] = defaultdict(list)
        for p, update in zip(params, updates):
            wide = update if update.shape[0] <= update.shape[1] else update.mT  # NS(Gᵀ) = NS(G)ᵀ
            by_shape[(tuple(wide.shape), update.dtype, update.device)].append((p, wide))
        if group["weight_decay"]:
            torch._foreach_mul_(params, 1 - lr * group["weight_decay"])
        for (_, _, device), items in by_shape.items():
            dtype = self.ns_dtype or (torch.bfloat16 if native_bf16(device) else torch.float32)
            ortho = newton_schulz(torch.stack([w for _, w in items]), steps=group["ns_steps"], dtype=dtype)
            by_target: dict[tuple, tuple[list, list]] = defaultdict(lambda: ([], []))
            for (p, wide), o in zip(items, ortho):
                targets, values = by_target[(tuple(p.shape), p.dtype)]
                targets.append(p)
                values.append((o if wide.shape == p.shape else o.mT).to(p.dtype))
            for (shape, _), (targets, values) in by_target.items():
                torch._foreach_add_(targets, values, alpha=-lr * muon_lr_scale(shape))

    def _adamw_step(self, group: dict, params: list[torch.Tensor]) -> None:
        states = [self.state[p] for p in params]
        for p, state in zip(params, states):
            if "exp_avg" not in state:
                state["step"] = torch.zeros((), dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
        beta1, beta2 = group["betas"]
        adam(params, [p.grad for p in params], [s["exp_avg"] for s in states],
             [s["exp_avg_sq"] for s in states], [], [s["step"] for s in states],
             amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"],
             eps=group["eps"], maximize=False, decoupled_weight_decay=True)
