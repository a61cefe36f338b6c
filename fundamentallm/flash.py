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
"""

from __future__ import annotations

import math
from typing import Optional

import torch


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 32,
                    causal: bool = False, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``softmax(q kᵀ / √D) v`` over key blocks of ``block_size``: ``q`` ``(..., Tq, D)``, ``k``
    ``(..., Tk, D)``, ``v`` ``(..., Tk, Dv)`` -> ``(..., Tq, Dv)``. ``causal`` lets query ``i`` see keys
    ``0..i`` (as ``F.scaled_dot_product_attention(is_causal=True)``); ``mask`` (bool, broadcastable
    to ``(..., Tq, Tk)``, True = attend) as that function's boolean ``attn_mask``. A query that
    may attend to no key gets NaN (0 / 0)."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be an integer >= 1")
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = attend), got {mask.dtype}")
    Tq, Tk, D = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(D)
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype, device=q.device)  # (..., Tq, 1)
    total = torch.zeros_like(m)  # l in the docstring
    o = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)  # (..., Tq, Dv)
    rows = torch.arange(Tq, device=q.device)[:, None]
    for start in range(0, Tk, block_size):
        end = min(start + block_size, Tk)
        s = q @ k[..., start:end, :].transpose(-2, -1) * scale  # (..., Tq, b): one block of scores
        if causal:
            s = s.masked_fill(torch.arange(start, end, device=q.device)[None, :] > rows, float("-inf"))
        if mask is not None:
            s = s.masked_fill(~mask[..., start:end], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # rows with no key yet
        p = torch.exp(s - safe)  # (..., Tq, b)
        correction = torch.exp(m - safe)  # rescales what was summed under the old maximum
        total = total * correction + p.sum(-1, keepdim=True)
        o = o * correction + p @ v[..., start:end, :]
        m = m_new
    return o / total
