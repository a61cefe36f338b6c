"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017), with a KV cache.

Mask convention (the same as ``torch.nn.functional.scaled_dot_product_attention``): a boolean
mask is ``True`` where a query MAY attend to a key; a float mask is added to the scores
(``0`` keeps, ``-inf`` removes). Masks broadcast against the scores ``(..., T_q, T_k)``.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .positions import RotaryEmbedding


def causal_mask(seq_len: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """Boolean ``(T, T)``, ``True`` on and below the diagonal: token t sees tokens 0..t."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` of 1/True for real tokens and 0/False for padding -> boolean ``(B, 1, 1, T)``
    that stops every query from attending to padded keys."""
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must have shape (B, T), got {tuple(attention_mask.shape)}")
    return attention_mask.bool()[:, None, None, :]


def _check_mask(mask: torch.Tensor, scores_shape: torch.Size) -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    # subtle: an integer 0/1 mask would otherwise be *added* to the scores like a float mask.
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(f"mask dtype {mask.dtype} is not supported; allowed: torch.bool "
                        f"(True = may attend) or a floating dtype (added to the scores)")
    try:
        ok = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except RuntimeError:
        ok = False
    if not ok:  # a larger mask would silently broadcast the output to a larger shape
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the attention scores "
            f"(..., T_q, T_k) = {tuple(scores_shape)}"
        )


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                                 return_weights: bool = False):
    """softmax(q kᵀ / √d_k + mask) v, written out.

    Shapes: q ``(..., T_q, D)``, k ``(..., T_k, D)``, v ``(..., T_k, D_v)`` -> ``(..., T_q, D_v)``;
    the weights are ``(..., T_q, T_k)``. A query whose keys are all masked gets all-zero weights
    and a zero output (not NaN, which is what a plain softmax over only ``-inf`` gives).
    Dropout is applied to the weights whenever ``dropout_p > 0``, as in PyTorch's function.
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last dimension, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys, got {k.shape[-2]} and {v.shape[-2]}")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p={dropout_p} must be in [0, 1)")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    if mask is not None:
        _check_mask(mask, scores.shape)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(scores.dtype)
    # subtle: a row of only -inf makes softmax return NaN. Give such rows zero weight instead.
    dead = torch.isneginf(scores.amax(dim=-1, keepdim=True))  # (..., T_q, 1)
    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    out = weights @ v  # (..., T_q, D_v)
    return (out, weights) if return_weights else out


class KVCache:
    """Pre-allocated keys and values of one attention layer, for generation.

    During decoding each new token's key and value are appended, so a step costs O(T) instead of
    recomputing all T keys and values. ``k`` and ``v`` are ``(B, H, max_seq_len, D)``; the first
    ``length`` positions are filled.
    """

    def __init__(self, batch_size: int, num_heads: int, head_dim: int, max_seq_len: int,
                 device: Optional[torch.device] = None, dtype: torch.dtype = torch.float32) -> None:
        shape = (batch_size, num_heads, max_seq_len, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.max_seq_len = max_seq_len
        self.length = 0

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``(B, H, T, D)`` keys/values; return all cached ones ``(B, H, length, D)``."""
        B, H, T, D = k.shape
        if (B, H, D) != (self.k.shape[0], self.k.shape[1], self.k.shape[3]):
            raise ValueError(f"KV cache holds (B, H, D) = {(self.k.shape[0], self.k.shape[1], self.k.shape[3])}, "
                             f"got keys of shape {tuple(k.shape)}")
        if self.length + T > self.max_seq_len:
            raise ValueError(f"KV cache overflow: {self.length} cached + {T} new positions > "
                             f"max_seq_len={self.max_seq_len}")
        self.k[:, :, self.length:self.length + T] = k
        self.v[:, :, self.length:self.length + T] = v
        self.length += T
        return self.k[:, :, :self.length], self.v[:, :, :self.length]

    def reset(self) -> None:
        self.length = 0


class MultiHeadAttention(nn.Module):
    """Self-attention with ``num_heads`` heads of ``head_dim = d_model // num_heads`` channels.

    Input ``(B, T, d_model)`` -> output ``(B, T, d_model)``; with ``return_weights=True`` also the
    per-head weights ``(B, H, T, T_k)``. ``fused_qkv`` keeps Q, K, V in one ``qkv`` linear layer
    (GPT-2, ``nn.MultiheadAttention``) instead of ``q_proj``/``k_proj``/``v_proj`` (LLaMA).
    ``use_sdpa=True`` opts into ``F.scaled_dot_product_attention`` (tested equal to the explicit path).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 causal: bool = False, fused_qkv: bool = True, rope: Optional[RotaryEmbedding] = None,
                 use_sdpa: bool = False) -> None:
        super().__init__()
        if not isinstance(num_heads, int) or num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(f"num_heads={num_heads} must be a positive integer dividing d_model={d_model}")
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.dropout, self.causal, self.use_sdpa = dropout, causal, use_sdpa
        if fused_qkv:
            self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        else:
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.k_proj = nn.Linear(d_model, d_model, bias=bias)
            self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.fused_qkv = fused_qkv
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        # Shared with the other layers, so not registered as a submodule here.
        self._rope = [rope] if rope is not None else []

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, C) -> (B, H, T, D)"""
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

    @staticmethod
    def merge_heads(x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, D) -> (B, T, C)"""
        B, H, T, D = x.shape
        return x.transpose(1, 2).contiguous().view(B, T, H * D)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None,
                kv_cache: Optional[KVCache] = None, return_weights: bool = False):
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"MultiHeadAttention expects input (B, T, d_model={self.d_model}), got {tuple(x.shape)}")
        B, T, C = x.shape
        if self.fused_qkv:
            q, k, v = self.qkv(x).split(C, dim=-1)  # 3 x (B, T, C)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # (B, H, T, D)
        start = kv_cache.length if kv_cache is not None else 0
        if self._rope:
            q, k = self._rope[0](q, start), self._rope[0](k, start)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H, start + T, D)
        T_k = k.shape[2]
        if mask is not None:  # check before combining with the causal mask
            _check_mask(mask, torch.Size((B, self.num_heads, T, T_k)))
            if mask.dtype != torch.bool:
                mask = mask.to(q.dtype)
        use_sdpa = self.use_sdpa and not return_weights
        is_causal = False
        if self.causal and T == 1:
            pass  # one query, at the newest position: it may see every key, nothing to mask
        elif self.causal and use_sdpa and mask is None and start == 0:
            is_causal = True  # no cache offset: the fused kernel applies the causal mask itself
        elif self.causal:
            # Query i sits at absolute position start + i and may see keys 0..start + i.
            allowed = torch.ones(T, T_k, dtype=torch.bool, device=x.device).tril(diagonal=start)  # (T, T_k)
            if mask is None:
                mask = allowed
            elif mask.dtype == torch.bool:
                mask = mask & allowed
            else:
                mask = mask.masked_fill(~allowed, float("-inf"))
        p = self.dropout if self.training else 0.0
        if use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal)
            weights = None
        else:
            y, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=p, return_weights=True)
        y = self.out_proj(self.merge_heads(y))  # (B, T, C)
        return (y, weights) if return_weights else y
