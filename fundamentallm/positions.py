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

from .recipes import POS_ENCODINGS, ROPE_STYLES  # ROPE_STYLES: which channels RoPE pairs


def _check_positions(T: int, start_pos: int, max_seq_len: int, name: str) -> None:
    if start_pos < 0:
        raise ValueError(f"start_pos={start_pos} must be >= 0")
    if start_pos + T > max_seq_len:
        raise ValueError(
            f"{name}: positions up to {start_pos + T - 1} requested but max_seq_len={max_seq_len} "
            f"(sequence length {T}, start_pos {start_pos}); use a shorter input or a larger max_seq_len"
        )


def check_token_positions(token_positions, shape: tuple, max_seq_len: int, values: bool = True) -> None:
    """Refuse ``token_positions`` that are not an integer tensor ``(T,)`` or ``(B, T)`` matching
    the input's ``shape = (B, T)``, or (``values=True``, one host sync) that hold a position
    outside ``[0, max_seq_len)``."""
    if not isinstance(token_positions, torch.Tensor) or token_positions.is_floating_point() \
            or token_positions.is_complex() or token_positions.dtype == torch.bool:
        got = token_positions.dtype if isinstance(token_positions, torch.Tensor) else type(token_positions).__name__
        raise TypeError(f"token_positions must be an integer torch.Tensor of positions, got {got}")
    B, T = shape
    if tuple(token_positions.shape) not in ((T,), (B, T)):
        raise ValueError(f"token_positions must have shape (T,) = ({T},) or (B, T) = ({B}, {T}), got "
                         f"{tuple(token_positions.shape)}")
    if values and T and bool(((token_positions < 0) | (token_positions >= max_seq_len)).any()):
        bad = token_positions[(token_positions < 0) | (token_positions >= max_seq_len)][0].item()
        raise ValueError(f"token_positions holds {bad}, outside [0, max_seq_len={max_seq_len})")


def _table_rows(table: torch.Tensor, T: int, start_pos: int, token_positions) -> torch.Tensor:
    """Rows ``start_pos..start_pos+T-1`` of ``table`` (``(T, C)``), or its rows at
    ``token_positions`` (``(T, C)`` or ``(B, T, C)``)."""
    if token_positions is None:
        return table[start_pos:start_pos + T]
    return table[token_positions]


def sinusoidal_table(max_seq_len: int, d_model: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)). (T, d)"""
    pos = torch.arange(max_seq_len, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to ``x``. Input/output ``(B, T, d_model)``. Not trainable.
    ``check_inputs=False``: see :class:`RotaryEmbedding`."""

    def __init__(self, d_model: int, max_seq_len: int, check_inputs: bool = True) -> None:
        super().__init__()
        if d_model % 2:
            raise ValueError(f"d_model={d_model} must be even for sinusoidal encodings")
        self.d_model, self.max_seq_len, self._checks = d_model, max_seq_len, bool(check_inputs)
        # A buffer, not a parameter: it moves with .to(device) but gets no gradient. Not saved in
        # the state dict, since it is recomputed exactly from the formula.
        self.register_buffer("pe", sinusoidal_table(max_seq_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, start_pos: int = 0,
                token_positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        T = x.shape[1]
        if self._checks:
            _check_positions(T, start_pos, self.max_seq_len, "SinusoidalPositionalEncoding")
            if token_positions is not None:
                check_token_positions(token_positions, x.shape[:2], self.max_seq_len)
        return x + _table_rows(self.pe, T, start_pos, token_positions).to(x.dtype)  # + (T, C) or (B, T, C)


class LearnedPositionalEncoding(nn.Module):
    """Adds a trainable vector per position (GPT-2's ``wpe``). Input/output ``(B, T, d_model)``.
    ``check_inputs=False``: see :class:`RotaryEmbedding`."""

    def __init__(self, d_model: int, max_seq_len: int, check_inputs: bool = True) -> None:
        super().__init__()
        self.d_model, self.max_seq_len, self._checks = d_model, max_seq_len, bool(check_inputs)
        self.weight = nn.Parameter(torch.randn(max_seq_len, d_model) * 0.02)

    def forward(self, x: torch.Tensor, start_pos: int = 0,
                token_positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        T = x.shape[1]
        # A learned table has no row for unseen positions: it cannot extrapolate at all.
        if self._checks:
            _check_positions(T, start_pos, self.max_seq_len, "LearnedPositionalEncoding")
            if token_positions is not None:
                check_token_positions(token_positions, x.shape[:2], self.max_seq_len)
        return x + _table_rows(self.weight, T, start_pos, token_positions)


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

    ``forward(x, start_pos)`` rotates the ``T`` rows of ``x`` as positions ``start_pos..``;
    ``forward(x, token_positions=p)`` as the positions in ``p``, any integer tensor ``(T,)`` or
    ``(B, T)`` (packed sequences restarting at 0, left padding). Out-of-range positions are an
    error; that check reads ``p`` on the host once. A model that checks its positions once, at its
    own door, builds its position modules with ``check_inputs=False``: they then check nothing
    (neither the range of ``start_pos`` nor ``p``), as the door has.
    """

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0,
                 scaling: Optional[dict] = None, style: str = "half", check_inputs: bool = True) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"head_dim={head_dim} must be even for rotary embeddings")
        self.style = check_rope_style(style)
        self.head_dim, self.max_seq_len, self.base, self.scaling = head_dim, max_seq_len, base, scaling
        self._checks = bool(check_inputs)
        inv_freq = rope_frequencies(head_dim, base, scaling)  # (D/2,)
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)  # (T, D/2)
        if style == "half":
            angles = torch.cat((angles, angles), dim=-1)  # (T, D): [θ0..θ_{D/2-1}, θ0..θ_{D/2-1}]
        else:
            angles = angles.repeat_interleave(2, dim=-1)  # (T, D): [θ0, θ0, θ1, θ1, ...]
        self._rotate = rotate_half if style == "half" else rotate_interleaved
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, start_pos: int = 0,
                token_positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        T = x.shape[-2]
        if x.shape[-1] != self.head_dim:
            raise ValueError(f"RotaryEmbedding(head_dim={self.head_dim}) got last dimension {x.shape[-1]}")
        if self._checks:
            _check_positions(T, start_pos, self.max_seq_len, "RotaryEmbedding")
            if token_positions is not None:
                check_token_positions(token_positions, (x.shape[0] if x.dim() > 2 else 1, T), self.max_seq_len)
        cos = _table_rows(self.cos, T, start_pos, token_positions).to(x.dtype)  # (T, D) or (B, T, D)
        sin = _table_rows(self.sin, T, start_pos, token_positions).to(x.dtype)
        if cos.dim() == 3 and x.dim() == 4:  # (B, T, D) -> (B, 1, T, D): the same angles for every head
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return x * cos + self._rotate(x) * sin


def create_positional_encoding(kind: str, d_model: int, max_seq_len: int,
                               head_dim: Optional[int] = None, base: float = 10000.0,
                               rope_style: str = "half", check_inputs: bool = True) -> Union[nn.Module, None]:
    """``"learned"`` / ``"sinusoidal"``: a module adding positions to embeddings;
    ``"rope"``: a :class:`RotaryEmbedding` over ``head_dim`` (default ``d_model``) in
    ``rope_style``, applied in attention; ``"none"``: ``None``. ``check_inputs=False`` for a
    model that checks positions at its own door (see :class:`RotaryEmbedding`)."""
    if kind == "learned":
        return LearnedPositionalEncoding(d_model, max_seq_len, check_inputs=check_inputs)
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model, max_seq_len, check_inputs=check_inputs)
    if kind == "rope":
        return RotaryEmbedding(head_dim or d_model, max_seq_len, base=base, style=rope_style,
                               check_inputs=check_inputs)
    if kind == "none":
        return None
    raise ValueError(f"pos_encoding={kind!r} is not supported; allowed values: "
                     f"{', '.join(map(repr, POS_ENCODINGS))}")
