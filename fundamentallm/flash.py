"""FlashAttention's idea: attention computed one block of keys at a time, never holding the
``T × T`` score matrix (Dao et al. 2022), thanks to the *online softmax* (Milakov & Gimelshein
2018).

``softmax(s) · V`` needs every score of a row before the first weight is known: the maximum (for
stability) and the sum (for normalisation) are over the whole row. The online softmax keeps, per
query row, a running maximum ``m``, a running sum ``l = Σ exp(s_j - m)`` and a running output
``o = Σ exp(s_j - m) v_j``; a new block of scores ``s_B`` with maximum ``m' = max(m, max s_B)``
updates them as

    l ← l · exp(m - m') + Σ_B exp(s_j - m'),   o ← o · exp(m - m') + Σ_B exp(s_j - m') v_j

(rescaling what was summed under the old maximum), and ``o / l`` at the end is exactly
``softmax(s) · V``. Memory is ``O(T · block)`` for the scores instead of ``O(T²)``. The real
kernel also tiles the queries and keeps the tiles in on-chip memory; here the loop is over key
blocks, in PyTorch, to show the arithmetic, not to be fast.

The backward pass (:func:`tiled_attention_backward`) does not store the attention weights either:
it keeps only each query's log-sum-exp ``L = m + log l`` from the forward and recomputes every
block of weights ``P = exp(S - L)`` from ``q`` and ``k`` when it needs them (Dao et al. 2022, Alg. 4),
with ``dS = P ∘ (dP - rowsum(dO ∘ O))``; the tests check the gradients against autograd.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from typing import Callable, Optional

import torch


def _scores(q: torch.Tensor, k: torch.Tensor, start: int, end: int, scale: float, causal: bool,
            mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Scores of every query with keys ``start .. end-1``, masked: ``(..., Tq, end - start)``."""
    s = q @ k[..., start:end, :].transpose(-2, -1) * scale
    if causal:
        rows = torch.arange(q.shape[-2], device=q.device)[:, None]
        s = s.masked_fill(torch.arange(start, end, device=q.device)[None, :] > rows, float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask[..., start:end], float("-inf"))
    return s


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 32,
                    causal: bool = False, mask: Optional[torch.Tensor] = None,
                    return_lse: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q kᵀ / √D) v`` over key blocks of ``block_size``: ``q`` ``(..., Tq, D)``, ``k``
    ``(..., Tk, D)``, ``v`` ``(..., Tk, Dv)`` -> ``(..., Tq, Dv)``. ``causal`` lets query ``i`` see keys
    ``0..i`` (as ``F.scaled_dot_product_attention(is_causal=True)``); ``mask`` (bool, broadcastable
    to ``(..., Tq, Tk)``, True = attend) as that function's boolean ``attn_mask``. A query that
    may attend to no key gets NaN (0 / 0). ``return_lse=True`` also returns each query's
    log-sum-exp of scores ``(..., Tq, 1)``, what the backward pass keeps."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be an integer >= 1")
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = attend), got {mask.dtype}")
    Tk, D = k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(D)
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)  # (..., Tq, 1)
    total = torch.zeros_like(m)  # l in the docstring
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)  # (..., Tq, Dv)
    for start in range(0, Tk, block_size):
        end = min(start + block_size, Tk)
        s = _scores(q, k, start, end, scale, causal, mask)  # (..., Tq, b): one block of scores
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # rows with no key yet
        p = torch.exp(s - safe)  # (..., Tq, b)
        correction = torch.exp(m - safe)  # rescales what was summed under the old maximum
        total = total * correction + p.sum(-1, keepdim=True)
        o = o * correction + p @ v[..., start:end, :]
        m = m_new
    out = o / total
    return (out, m + torch.log(total)) if return_lse else out


def tiled_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, d_out: torch.Tensor,
                             block_size: int = 32, causal: bool = False,
                             mask: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients ``(dq, dk, dv)`` of ``(tiled_attention(q, k, v) * d_out).sum()``, block by block,
    recomputing each block of attention weights from the forward's log-sum-exp instead of storing
    the ``T × T`` matrix. Every query must see at least one key."""
    out, lse = tiled_attention(q, k, v, block_size, causal, mask, return_lse=True)
    scale = 1.0 / math.sqrt(q.shape[-1])
    delta = (d_out * out).sum(-1, keepdim=True)  # (..., Tq, 1): rowsum(dO ∘ O)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for start in range(0, k.shape[-2], block_size):
        end = min(start + block_size, k.shape[-2])
        p = torch.exp(_scores(q, k, start, end, scale, causal, mask) - lse)  # (..., Tq, b): recomputed
        dv[..., start:end, :] = p.transpose(-2, -1) @ d_out
        ds = p * (d_out @ v[..., start:end, :].transpose(-2, -1) - delta)  # softmax's backward
        dq += ds @ k[..., start:end, :] * scale
        dk[..., start:end, :] = ds.transpose(-2, -1) @ q * scale
    return dq, dk, dv


@contextlib.contextmanager
def _quiet_native_stderr():
    """Silence what native code writes to file descriptor 2 (some PyTorch builds print a line at
    every profiler start and stop); Python's own errors still propagate as exceptions."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def largest_allocation(fn: Callable[[], object]) -> int:
    """The largest block of memory (bytes) that one operation of ``fn()`` allocates on the CPU,
    measured by ``torch.profiler`` (``profile_memory=True``): for attention written as
    ``softmax(q kᵀ) v``, the ``T × T`` score matrix; for :func:`tiled_attention`, one block of scores
    or the output."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max((int(e.self_cpu_memory_usage) for e in prof.events()), default=0)
