"""The KV cache: the keys and values of every attention layer, and the decoding position.

It serves attention (each layer writes its keys/values), the canon layers (``conv`` state) and
the model (which advances it once per forward pass); generation creates one per decode.
"""

from __future__ import annotations

from typing import Optional

import torch


class KVCache:
    """The keys and values of every attention layer of a model, pre-allocated, for generation.

    During decoding each new token's keys and values are appended, so a step costs O(T) instead
    of recomputing all T keys and values. ``k`` and ``v`` are ``(num_layers, B, H_kv, max_seq_len,
    D)``: with grouped-query attention only the ``H_kv`` key/value heads are stored. The first
    ``length`` positions are filled in every layer.

    The cache owns the decoding position: ``length`` is where the next tokens go. In one forward
    pass each layer reads it and :meth:`write`s its new keys/values there (a layer knows its
    index from construction); whoever runs the pass calls :meth:`advance` once at the end (the
    model does; a lone attention layer's caller does). Nobody passes the position back in.
    ``conv`` holds, for models with canon layers, the last few inputs of each of those
    convolutions (:class:`~fundamentallm.canon.CanonLayer` keeps it up to date).
    """

    def __init__(self, batch_size: int, num_kv_heads: int, head_dim: int, max_seq_len: int,
                 num_layers: int = 1, device: Optional[torch.device] = None,
                 dtype: torch.dtype = torch.float32) -> None:
        for name, value in (("batch_size", batch_size), ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                            ("max_seq_len", max_seq_len), ("num_layers", num_layers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        shape = (num_layers, batch_size, num_kv_heads, max_seq_len, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.num_layers, self.max_seq_len = num_layers, max_seq_len
        self.length = 0
        self.conv: dict = {}  # canon layers' recent inputs, by place (read only when length > 0)

    def check_room(self, layer: int, shape: tuple) -> None:
        """Refuse layer ``layer``'s keys of ``shape`` ``(B, H_kv, T, D)`` if they do not fit: another
        batch size, head count or head width, a layer the cache lacks, or too many positions."""
        B, H, T, D = shape
        held = (self.k.shape[1], self.k.shape[2], self.k.shape[4])
        if (B, H, D) != held:
            raise ValueError(f"KV cache holds (B, H_kv, D) = {held}, got keys of shape {tuple(shape)}")
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer={layer} is outside the cache's {self.num_layers} layers")
        if self.length + T > self.max_seq_len:
            raise ValueError(f"KV cache overflow: {self.length} cached + {T} new positions > "
                             f"max_seq_len={self.max_seq_len}")

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor,
              checked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Store layer ``layer``'s ``(B, H_kv, T, D)`` keys/values at positions ``length..length+T-1``;
        return that layer's keys/values for positions ``0..length+T-1``: ``(B, H_kv, length + T, D)``.
        ``checked=True``: the caller ran :meth:`check_room` once for every layer (a model's door)."""
        start, T = self.length, k.shape[2]
        if not checked:
            self.check_room(layer, tuple(k.shape))
        self.k[layer, :, :, start:start + T] = k
        self.v[layer, :, :, start:start + T] = v
        return self.k[layer, :, :, :start + T], self.v[layer, :, :, :start + T]

    def advance(self, num_tokens: int) -> None:
        """Mark ``num_tokens`` more positions as filled (after every layer has written them)."""
        if self.length + num_tokens > self.max_seq_len:
            raise ValueError(f"KV cache overflow: {self.length} cached + {num_tokens} new positions > "
                             f"max_seq_len={self.max_seq_len}")
        self.length += num_tokens

    def bytes_per_token(self) -> int:
        """Memory one position costs: 2 (K and V) · layers · B · H_kv · D · bytes per element."""
        L, B, H, _, D = self.k.shape
        return 2 * L * B * H * D * self.k.element_size()

    def reset(self) -> None:
        self.length = 0
