"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017); the KV cache is in ``cache.py``.

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

from .cache import KVCache  # (also importable from here, where it lived before cache.py)
from .norms import RMSNorm
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
    if mask is not None:
        _check_mask(mask, torch.Size((*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])))
    return _attend(q, k, v, mask, dropout_p, return_weights)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor] = None,
            dropout_p: float = 0.0, return_weights: bool = False):
    """:func:`scaled_dot_product_attention` on arguments already checked: what a
    :class:`MultiHeadAttention` layer runs, once its inputs (or its model's) have been checked."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    if mask is not None:
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


def sliding_window_mask(seq_len: int, window: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """Boolean ``(T, T)``: token t sees tokens ``t - window + 1 .. t`` (itself and ``window - 1``
    before it), the local causal attention of Mistral (Jiang et al. 2023)."""
    return causal_mask(seq_len, device=device).triu(diagonal=-(window - 1))


def allowed_keys(num_queries: int, num_keys: int, start: int, window: Optional[int] = None,
                 device: Optional[torch.device] = None) -> torch.Tensor:
    """Boolean ``(T_q, T_k)``: query i sits at absolute position ``start + i`` and may see key j
    when ``j <= start + i`` (causal) and, with a window, ``start + i - j < window``."""
    allowed = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(diagonal=start)
    if window is not None:
        allowed = allowed.triu(diagonal=start - window + 1)
    return allowed


class MultiHeadAttention(nn.Module):
    """Self-attention with ``num_heads`` heads of ``head_dim = d_model // num_heads`` channels.

    Input ``(B, T, d_model)`` -> output ``(B, T, d_model)``; with ``return_weights=True`` also the
    per-head weights ``(B, H, T, T_k)``. ``fused_qkv`` keeps Q, K, V in one ``qkv`` linear layer
    (GPT-2, ``nn.MultiheadAttention``) instead of ``q_proj``/``k_proj``/``v_proj`` (LLaMA).
    ``use_sdpa=True`` opts into ``F.scaled_dot_product_attention`` (tested equal to the explicit path).

    Modern options: ``num_kv_heads`` < ``num_heads`` is grouped-query attention (Ainslie et al.
    2023; 1 = multi-query, Shazeer 2019): query head h uses key/value head
    ``h // (num_heads // num_kv_heads)``; ``qkv_bias`` (default ``bias``) sets the Q/K/V biases
    alone; ``sliding_window=W`` lets each query see only itself and the ``W - 1`` keys before it;
    ``qk_norm=True`` applies an RMSNorm (one gain per channel, shared by the heads) to every
    head's queries and keys before RoPE, so their dot products cannot grow without bound
    (Dehghani et al. 2023; Qwen3). ``forward(..., value_embeds=E)`` adds ``E`` ``(B, T, H_kv·D)``
    to the values (value embeddings).
    With a :class:`KVCache`, the new tokens sit at the cache's positions ``length..`` and their
    keys and values are written to the cache's layer ``layer_idx`` (given at construction); the
    caller advances the cache. ``token_positions`` (an integer tensor ``(T,)`` or ``(B, T)``)
    gives RoPE other positions than ``length..length+T-1`` (packed sequences, left padding); the
    causal mask still follows the order of the tokens. ``rope`` is a registered submodule, shared
    by every layer of a model (its tables are non-persistent buffers: no state-dict entries).
    ``check_inputs=False`` (what a model passes, having checked its inputs at its door) skips the
    checks of the input's shape, of the mask and of the cache's room on every call.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 causal: bool = False, fused_qkv: bool = True, rope: Optional[RotaryEmbedding] = None,
                 use_sdpa: bool = False, num_kv_heads: Optional[int] = None, qkv_bias: Optional[bool] = None,
                 sliding_window: Optional[int] = None, qk_norm: bool = False, norm_eps: float = 1e-6,
                 layer_idx: int = 0, check_inputs: bool = True) -> None:
        super().__init__()
        # a layer used on its own checks its input and mask; one a model builds does not (the
        # model's door checked them once, for every layer: fundamentallm/doors.py)
        self._checks = bool(check_inputs)
        if isinstance(layer_idx, bool) or not isinstance(layer_idx, int) or layer_idx < 0:
            raise ValueError(f"layer_idx={layer_idx!r} must be an integer >= 0")
        self.layer_idx = layer_idx
        if not isinstance(num_heads, int) or num_heads < 1 or d_model % num_heads != 0:
            raise ValueError(f"num_heads={num_heads} must be a positive integer dividing d_model={d_model}")
        kv = num_heads if num_kv_heads is None else num_kv_heads
        if isinstance(kv, bool) or not isinstance(kv, int) or kv < 1 or num_heads % kv != 0:
            raise ValueError(f"num_kv_heads={num_kv_heads!r} must be a positive integer dividing num_heads={num_heads}")
        if sliding_window is not None and (isinstance(sliding_window, bool) or not isinstance(sliding_window, int)
                                           or sliding_window < 1 or not causal):
            raise ValueError(f"sliding_window={sliding_window!r} must be None or an integer >= 1, "
                             f"with causal=True")
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, d_model // num_heads
        self.num_kv_heads, self.sliding_window = kv, sliding_window
        self.dropout, self.causal, self.use_sdpa = dropout, causal, use_sdpa
        qkv_bias = bias if qkv_bias is None else qkv_bias
        kv_dim = kv * self.head_dim
        if fused_qkv:
            self.qkv = nn.Linear(d_model, d_model + 2 * kv_dim, bias=qkv_bias)
        else:
            self.q_proj = nn.Linear(d_model, d_model, bias=qkv_bias)
            self.k_proj = nn.Linear(d_model, kv_dim, bias=qkv_bias)
            self.v_proj = nn.Linear(d_model, kv_dim, bias=qkv_bias)
        self.fused_qkv = fused_qkv
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, eps=norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, eps=norm_eps) if qk_norm else None
        self.rope = rope  # shared with the other layers of a model

    # The explicit path's attention function. fundamentallm.hooks shadows it on one layer while a
    # pattern hook is set (to read or replace the weights); otherwise nothing is added to the forward.
    attend = staticmethod(_attend)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, H·D) -> (B, H, T, D), for any number of heads H."""
        B, T, C = x.shape
        return x.view(B, T, C // self.head_dim, self.head_dim).transpose(1, 2)

    @staticmethod
    def merge_heads(x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, D) -> (B, T, C)"""
        B, H, T, D = x.shape
        return x.transpose(1, 2).contiguous().view(B, T, H * D)

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, T, C) -> q (B, H, T, D), k and v (B, H_kv, T, D)."""
        if self.fused_qkv:
            kv_dim = self.num_kv_heads * self.head_dim
            q, k, v = self.qkv(x).split([self.d_model, kv_dim, kv_dim], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None,
                kv_cache: Optional[KVCache] = None, token_positions: Optional[torch.Tensor] = None,
                return_weights: bool = False, value_embeds: Optional[torch.Tensor] = None):
        if self._checks and (x.dim() != 3 or x.shape[-1] != self.d_model):
            raise ValueError(f"MultiHeadAttention expects input (B, T, d_model={self.d_model}), got {tuple(x.shape)}")
        B, T, C = x.shape
        start = kv_cache.length if kv_cache is not None else 0  # the cache owns the position
        q, k, v = self.project_qkv(x)  # (B, H, T, D), (B, H_kv, T, D) x 2
        if value_embeds is not None:
            v = v + self.split_heads(value_embeds)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope is not None:
            q, k = self.rope(q, start, token_positions), self.rope(k, start, token_positions)
        if kv_cache is not None:
            k, v = kv_cache.write(self.layer_idx, k, v, checked=not self._checks)  # (B, H_kv, start + T, D)
        T_k = k.shape[2]
        if mask is not None:  # check before combining with the causal mask
            if self._checks:
                _check_mask(mask, torch.Size((B, self.num_heads, T, T_k)))
            if mask.dtype != torch.bool:
                mask = mask.to(q.dtype)
        use_sdpa = self.use_sdpa and not return_weights
        groups = self.num_heads // self.num_kv_heads
        is_causal = False
        if self.causal and T == 1 and (self.sliding_window is None or T_k <= self.sliding_window):
            pass  # one query, at the newest position, every key within reach: nothing to mask
        elif self.causal and use_sdpa and mask is None and start == 0 and self.sliding_window is None \
                and groups == 1:
            is_causal = True  # no cache offset: the fused kernel applies the causal mask itself
        elif self.causal:
            allowed = allowed_keys(T, T_k, start, self.sliding_window, device=x.device)  # (T, T_k)
            if mask is None:
                mask = allowed
            elif mask.dtype == torch.bool:
                mask = mask & allowed
            else:
                mask = mask.masked_fill(~allowed, float("-inf"))
        if groups > 1:
            # Grouped-query attention without copying keys/values: the `groups` query heads that
            # share a key/value head are stacked along the query axis, (B, H, T, D) ->
            # (B, H_kv, groups·T, D), so each cached key is read once per group, not once per head.
            q = q.reshape(B, self.num_kv_heads, groups * T, self.head_dim)
            if mask is not None:
                m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))  # (B|1, H|1, T|1, T_k)
                m = m.expand(m.shape[0], self.num_heads, T, T_k)
                mask = m.reshape(m.shape[0], self.num_kv_heads, groups * T, T_k)
        p = self.dropout if self.training else 0.0
        # Under CPU autocast the fused kernel would get bf16 inputs, even when q/k/v arrive in
        # float32 (after QK-norm or value embeddings); float64 is left alone by autocast, and here.
        cpu_autocast = q.device.type == "cpu" and torch.is_autocast_enabled("cpu") and all(
            t.dtype != torch.float64 for t in (q, k, v))
        if use_sdpa and q.device.type == "cpu" and (cpu_autocast or q.dtype == torch.bfloat16):
            # subtle: torch's fused CPU attention is ~5x slower in bf16 than in float32 at small
            # head sizes (measured fwd+bwd at B=12, H=8, T=64, D=18: 6.5 ms vs 1.2 ms), so under
            # CPU autocast (which would cast its inputs to bf16) the attention runs in float32.
            out_dtype = torch.get_autocast_dtype("cpu") if cpu_autocast else q.dtype
            with torch.autocast("cpu", enabled=False):
                m = mask if mask is None or mask.dtype == torch.bool else mask.float()
                y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=m,
                                                   dropout_p=p, is_causal=is_causal).to(out_dtype)
            weights = None
        elif use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal)
            weights = None
        else:
            y, weights = self.attend(q, k, v, mask=mask, dropout_p=p, return_weights=True)
            weights = weights.view(B, self.num_heads, T, T_k)
        y = y.view(B, self.num_heads, T, self.head_dim)  # undo the stacking (a no-op without groups)
        y = self.out_proj(self.merge_heads(y))  # (B, T, C)
        return (y, weights) if return_weights else y
