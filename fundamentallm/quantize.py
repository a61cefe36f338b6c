"""Weight-only quantization: int8 per output channel and int4 in groups, stored packed, dequantized
in the matmul.

A weight matrix ``W`` ``(out, in)`` in float32 costs 4 bytes per entry. Weight-only quantization
stores each entry as a small integer ``q`` and a float *scale* shared by many entries
(and, asymmetric, a *zero point*), and rebuilds ``W ≈ (q - zero) · scale`` when it is used:

- **symmetric** (``zero = 0``): ``scale = max|w| / qmax`` with ``qmax = 2^(bits-1) - 1``, so
  ``q = round(w / scale)`` lies in ``[-qmax, qmax]`` (127 for int8, 7 for int4);
- **asymmetric**: the range ``[min w, max w]`` is mapped onto ``[0, 2^bits - 1]``:
  ``scale = (max - min) / (2^bits - 1)``, ``zero = round(-min / scale)``; it spends no code on
  values the group does not have (a group that is all positive, say).

The entries that share a scale are one output channel (a row of ``W``: ``group_size=None``, the
usual int8 choice, LLM.int8()'s vector-wise quantization, Dettmers et al. 2022) or a group of
``group_size`` consecutive inputs of a row (the usual int4 choice: GPTQ, AWQ and llama.cpp's
``Q4`` formats use groups of 32 to 128). A smaller group follows the weights more closely and costs
one more scale per group. Two int4 values are packed into one byte.

Only the *weights* are quantized: activations stay float (they have outlier channels that a
shared scale handles badly; chapter 17 shows one). Decoding one token at a batch of one streams
every weight from memory once, so fewer bytes per weight is what makes it cheaper where memory
bandwidth is the limit. This module dequantizes with PyTorch operations and then calls
``F.linear``: it saves memory, not time (a fused kernel, as in llama.cpp or torchao, does both).
"""

from __future__ import annotations

from typing import Iterable, Optional

import torch
import torch.nn.functional as F
from torch import nn

BITS = (4, 8)  # what QuantLinear stores (int4 packed two per byte, int8)
CODE_BITS = tuple(range(2, 9))  # what quantize/dequantize compute (any width to 8 bits, one code per int8)


def _check(bits: int, group_size: Optional[int], in_features: int, symmetric: bool, allowed=BITS) -> None:
    if isinstance(bits, bool) or bits not in allowed:
        raise ValueError(f"bits={bits!r} must be one of {allowed}")
    if not isinstance(symmetric, bool):
        raise ValueError(f"symmetric={symmetric!r} must be True or False")
    if group_size is None:
        return
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size={group_size!r} must be None (one scale per output channel) or an "
                         f"integer >= 1")
    if in_features % group_size:
        raise ValueError(f"group_size={group_size} must divide the weight's {in_features} input features")
    if bits == 4 and group_size % 2:
        raise ValueError(f"group_size={group_size} must be even for bits=4 (two values per byte)")


def quantize(weight: torch.Tensor, bits: int = 8, group_size: Optional[int] = None,
             symmetric: bool = True) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """``(out, in)`` float weight -> ``(q, scale, zero)``.

    ``q`` is int8 ``(out, in)`` (integers in ``[-qmax, qmax]`` symmetric, ``[0, 2^bits - 1]``
    asymmetric); ``scale`` is float32 ``(out, in // group_size)`` (``(out, 1)`` per channel); ``zero``
    is ``None`` (symmetric) or an integer-valued float tensor shaped like ``scale``. ``bits`` from 2 to 8
    (``QuantLinear`` stores 4 and 8); asymmetric codes are uint8 (``[0, 255]`` does not fit int8).
    """
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError("weight must be a 2-D floating-point tensor (out_features, in_features)")
    out, inp = weight.shape
    _check(bits, group_size, inp, symmetric, allowed=CODE_BITS)
    g = inp if group_size is None else group_size
    w = weight.detach().float().reshape(out, inp // g, g)  # (out, groups, g)
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        scale = w.abs().amax(-1, keepdim=True) / qmax  # (out, groups, 1)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero group: any scale
        q = torch.round(w / scale).clamp(-qmax, qmax)
        zero = None
    else:
        qmax = 2 ** bits - 1
        lo = w.amin(-1, keepdim=True).clamp(max=0.0)  # keep 0 exactly representable
        hi = w.amax(-1, keepdim=True).clamp(min=0.0)
        scale = (hi - lo) / qmax
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        zero = torch.round(-lo / scale).clamp(0, qmax)
        q = (torch.round(w / scale) + zero).clamp(0, qmax)
        zero = zero.squeeze(-1)
    return q.reshape(out, inp).to(torch.int8 if symmetric else torch.uint8), scale.squeeze(-1), zero


def dequantize(q: torch.Tensor, scale: torch.Tensor, zero: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``(q - zero) · scale``, each scale repeated over its group: ``(out, in)`` float32."""
    out, inp = q.shape
    groups = scale.shape[1]
    w = q.float().reshape(out, groups, inp // groups)  # (out, groups, g)
    if zero is not None:
        w = w - zero.unsqueeze(-1)
    return (w * scale.unsqueeze(-1)).reshape(out, inp)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Two 4-bit codes per byte: ``(out, in)`` integers in ``[-8, 15]`` read as 4-bit patterns ->
    ``(out, in // 2)`` uint8, element ``2j`` in the low nibble, ``2j + 1`` in the high one."""
    if q.shape[-1] % 2:
        raise ValueError(f"q has {q.shape[-1]} columns; pack_int4 needs an even number")
    u = (q.to(torch.int16) & 0xF).to(torch.uint8)  # two's complement nibble for negative codes
    return u[..., 0::2] | (u[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor, signed: bool) -> torch.Tensor:
    """Inverse of :func:`pack_int4`: ``(out, n)`` uint8 -> ``(out, 2n)`` int8 codes, in
    ``[-8, 7]`` when ``signed`` else ``[0, 15]``."""
    low, high = (packed & 0xF).to(torch.int8), (packed >> 4).to(torch.int8)
    q = torch.stack((low, high), dim=-1).flatten(-2)  # (out, 2n): low, high, low, high, ...
    return torch.where(q > 7, q - 16, q) if signed else q


class QuantLinear(nn.Module):
    """An ``nn.Linear`` whose weight is stored quantized (int8, or int4 packed two per byte) and
    dequantized at every forward. ``QuantLinear.from_linear(linear, bits, group_size, symmetric)``.
    The scales are stored in float16 (as GPTQ and llama.cpp's formats store them: a float32 scale
    per group of 32 int4 codes would add a quarter to their bytes); the zero points in uint8."""

    def __init__(self, in_features: int, out_features: int, bits: int = 8, group_size: Optional[int] = None,
                 symmetric: bool = True, bias: bool = True) -> None:
        super().__init__()
        _check(bits, group_size, in_features, symmetric)
        self.in_features, self.out_features = in_features, out_features
        self.bits, self.group_size, self.symmetric = bits, group_size, symmetric
        groups = 1 if group_size is None else in_features // group_size
        cols = in_features if bits == 8 else in_features // 2
        self.register_buffer("qweight", torch.zeros(out_features, cols, dtype=torch.int8 if bits == 8 else torch.uint8))
        self.register_buffer("scale", torch.ones(out_features, groups, dtype=torch.float16))
        self.register_buffer("zero", None if symmetric else torch.zeros(out_features, groups, dtype=torch.uint8))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, bits: int = 8, group_size: Optional[int] = None,
                    symmetric: bool = True) -> QuantLinear:
        layer = cls(linear.in_features, linear.out_features, bits, group_size, symmetric, linear.bias is not None)
        q, scale, zero = quantize(linear.weight, bits, group_size, symmetric)
        layer.qweight = q if bits == 8 else pack_int4(q)
        layer.scale = scale.to(torch.float16)
        if zero is not None:
            layer.zero = zero.to(torch.uint8)
        if linear.bias is not None:
            layer.bias = nn.Parameter(linear.bias.detach().clone())
        return layer.to(linear.weight.device)

    def dequantized_weight(self) -> torch.Tensor:
        """The float32 ``(out, in)`` weight this layer multiplies by."""
        q = self.qweight if self.bits == 8 else unpack_int4(self.qweight, signed=self.symmetric)
        return dequantize(q, self.scale.float(), None if self.zero is None else self.zero.float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.dequantized_weight().to(x.dtype), self.bias)  # (..., out)

    def weight_bytes(self) -> int:
        """Bytes of the stored weight: the codes, the scales and the zero points (not the bias)."""
        return sum(t.numel() * t.element_size() for t in (self.qweight, self.scale, self.zero) if t is not None)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, "
                f"group_size={self.group_size}, symmetric={self.symmetric}")


def quantize_model(model: nn.Module, bits: int = 8, group_size: Optional[int] = None, symmetric: bool = True,
                   skip: Iterable[str] = ("lm_head",)) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (in place; returns it) by a :class:`QuantLinear`,
    except the modules whose name is in ``skip``. The default skips ``lm_head``: in the course's
    ``Transformer`` it shares its weight with the token embedding (weight tying), which stays float."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    skip = set(skip)
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear) and name not in skip]
    for name, _ in targets:  # check every layer before changing any
        in_features = model.get_submodule(name).in_features
        _check(bits, group_size, in_features, symmetric)
    for name, linear in targets:
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child,
                QuantLinear.from_linear(linear, bits, group_size, symmetric))
    return model


def linear_weight_bytes(model: nn.Module, skip: Iterable[str] = ("lm_head",)) -> int:
    """Bytes of the weights of the linear layers of ``model`` whose name is not in ``skip`` (by default
    those :func:`quantize_model` replaces): float ``nn.Linear`` weights at their dtype's size,
    :class:`QuantLinear` weights as stored (codes, scales, zero points). Biases, embeddings and
    norms are not counted."""
    seen, total, skip = set(), 0, set(skip)
    for name, m in model.named_modules():
        if name in skip:
            continue
        if isinstance(m, QuantLinear):
            total += m.weight_bytes()
        elif isinstance(m, nn.Linear) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            total += m.weight.numel() * m.weight.element_size()
    return total


def model_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer of ``model`` (a shared tensor counted once)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total
