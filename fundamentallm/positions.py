"""Positional information: sinusoidal (Vaswani et al. 2017), learned (GPT-2), and rotary
(RoPE, Su et al. 2021) encodings.

Attention is permutation-equivariant: without positions, "dog bites man" and "man bites dog"
give the same set of vectors. Sinusoidal and learned encodings *add* a position vector to each
token embedding; RoPE instead *rotates* queries and keys so that the q·k score depends only on
the offset between positions.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import nn

from .config import ROPE_STYLES  # ("half", "interleaved"): which channels RoPE pairs

POS_ENCODINGS = ("learned", "sinusoidal", "rope", "none")


def _check_positions(T: int, start_pos: int, max_seq_len: int, name: str) -> None:
    if start_pos < 0:
        raise ValueError(f"start_pos={start_pos} must be >= 0")
    if start_pos + T > max_seq_len:
        raise ValueError(
            f"{name}: positions up to {start_pos + T - 1} requested but max_seq_len={max_seq_len} "
            f"(sequence length {T}, start_pos {start_pos}); use a shorter input or a larger max_seq_len"
        )


def sinusoidal_table(max_seq_len: int, d_model: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)). (T, d)"""
    pos = torch.arange(max_seq_len, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to ``x``. Input/output ``(B, T, d_model)``. Not trainable."""

    def __init__(self, d_model: int, max_seq_len: int) -> None:
        super().__init__()
        if d_model % 2:
            raise ValueError(f"d_model={d_model} must be even for sinusoidal encodings")
        self.d_model, self.max_seq_len = d_model, max_seq_len
        # A buffer, not a parameter: it moves with .to(device) but gets no gradient. Not saved in
        # the state dict, since it is recomputed exactly from the formula.
        self.register_buffer("pe", sinusoidal_table(max_seq_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        T = x.shape[1]
        _check_positions(T, start_pos, self.max_seq_len, "SinusoidalPositionalEncoding")
        return x + self.pe[start_pos:start_pos + T].to(x.dtype)  # (B, T, C) + (T, C)


class LearnedPositionalEncoding(nn.Module):
    """Adds a trainable vector per position (GPT-2's ``wpe``). Input/output ``(B, T, d_model)``."""

    def __init__(self, d_model: int, max_seq_len: int) -> None:
        super().__init__()
        self.d_model, self.max_seq_len = d_model, max_seq_len
        self.weight = nn.Parameter(torch.randn(max_seq_len, d_model) * 0.02)

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        T = x.shape[1]
        # A learned table has no row for unseen positions: it cannot extrapolate at all.
        _check_positions(T, start_pos, self.max_seq_len, "LearnedPositionalEncoding")
        return x + self.weight[start_pos:start_pos + T]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension (the "half" convention:
    channel i is paired with channel i + D/2, as in GPT-NeoX and Hugging Face)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_interleaved(x: torch.Tensor) -> torch.Tensor:
    """(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...) on the last dimension (the "interleaved"
    convention: channel 2i is paired with channel 2i+1, as in the RoPE paper and Meta's LLaMA)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]  # (..., D/2) each
    return torch.stack((-x1, x0), dim=-1).flatten(-2)


def check_rope_style(style: str, name: str = "style") -> str:
    """``style`` itself if it is one of :data:`ROPE_STYLES`, else a ``ValueError`` naming the
    parameter ``name``."""
    if not isinstance(style, str) or style not in ROPE_STYLES:
        raise ValueError(f"{name}={style!r} is not a RoPE convention; allowed values: "
                         f"{', '.join(map(repr, ROPE_STYLES))}")
    return style


def rope_frequencies(head_dim: int, base: float = 10000.0, scaling: Optional[dict] = None) -> torch.Tensor:
    """The rotation speeds ``θ_i = base^(-2i/head_dim)`` of the ``head_dim/2`` channel pairs,
    float64 ``(head_dim/2,)``, optionally rescaled for a longer context:

    - ``{"rope_type": "linear", "factor": s}``: every ``θ_i / s`` (position interpolation,
      Chen et al. 2023): position ``s·p`` then turns by the angle position ``p`` had.
    - ``{"rope_type": "llama3", "factor": s, "low_freq_factor": l, "high_freq_factor": h,
      "original_max_position_embeddings": L}`` (Llama 3, Grattafiori et al. 2024): pairs whose
      wavelength ``2π/θ_i`` is shorter than ``L/h`` (fast, local) are kept; longer than ``L/l``
      (slow, long-range) are divided by ``s``; in between, interpolated smoothly.
    """
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))  # (D/2,)
    if scaling is None:
        return inv_freq
    kind, factor = scaling.get("rope_type"), float(scaling["factor"])
    if kind == "linear":
        return inv_freq / factor
    if kind != "llama3":
        raise ValueError(f"rope_scaling rope_type={kind!r} is not supported; allowed values: 'linear', 'llama3'")
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old_len = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_len / wavelen - low) / (high - low)  # 0 at wavelength L/l, 1 at L/h
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, blended)
    return torch.where(wavelen < old_len / high, inv_freq, scaled)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (Su et al. 2021) in either convention of pairing channels.

    The k-th pair of channels is rotated by the angle ``pos · base^(-2k/head_dim)``.
    ``style="half"`` (default; GPT-NeoX, Hugging Face's LLaMA): pair ``k`` is channels
    ``(k, k + head_dim/2)``. ``style="interleaved"`` (the RoPE paper, Meta's original LLaMA,
    many course references): pair ``k`` is channels ``(2k, 2k+1)``. The two are the same
    rotation with the channels permuted, so a model trained in one convention runs in the other
    once its query/key projection rows are permuted (:func:`fundamentallm.interop.permute_rope_weights`);
    without that, it loads without error and computes wrong scores.
    Input/output ``(B, H, T, head_dim)``; applied to queries and keys only, inside attention.
    ``scaling`` rescales the speeds (see :func:`rope_frequencies`).
    """

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0,
                 scaling: Optional[dict] = None, style: str = "half") -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"head_dim={head_dim} must be even for rotary embeddings")
        self.style = check_rope_style(style)
        self.head_dim, self.max_seq_len, self.base, self.scaling = head_dim, max_seq_len, base, scaling
        inv_freq = rope_frequencies(head_dim, base, scaling)  # (D/2,)
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)  # (T, D/2)
        if style == "half":
            angles = torch.cat((angles, angles), dim=-1)  # (T, D): [θ0..θ_{D/2-1}, θ0..θ_{D/2-1}]
        else:
            angles = angles.repeat_interleave(2, dim=-1)  # (T, D): [θ0, θ0, θ1, θ1, ...]
        self._rotate = rotate_half if style == "half" else rotate_interleaved
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        T = x.shape[-2]
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"RotaryEmbedding(head_dim={self.head_dim}) got last dimension {x.shape[-1]}")
        _check_positions(T, start_pos, self.max_seq_len, "RotaryEmbedding")
        cos = self.cos[start_pos:start_pos + T].to(x.dtype)  # (T, D)
        sin = self.sin[start_pos:start_pos + T].to(x.dtype)
        return x * cos + self._rotate(x) * sin


def create_positional_encoding(kind: str, d_model: int, max_seq_len: int,
                               head_dim: Optional[int] = None, base: float = 10000.0,
                               rope_style: str = "half") -> Union[nn.Module, None]:
    """``"learned"`` / ``"sinusoidal"``: a module adding positions to embeddings;
    ``"rope"``: a :class:`RotaryEmbedding` over ``head_dim`` (default ``d_model``) in
    ``rope_style``, applied in attention; ``"none"``: ``None``."""
    if kind == "learned":
        return LearnedPositionalEncoding(d_model, max_seq_len)
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model, max_seq_len)
    if kind == "rope":
        return RotaryEmbedding(head_dim or d_model, max_seq_len, base=base, style=rope_style)
    if kind == "none":
        return None
    raise ValueError(f"pos_encoding={kind!r} is not supported; allowed values: "
                     f"{', '.join(map(repr, POS_ENCODINGS))}")
