"""Normalization layers written out: LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019).

Both normalise each token's feature vector independently of the batch and of the other tokens,
which is why transformers use them rather than BatchNorm.
"""

from __future__ import annotations

import torch
from torch import nn


def _check_last_dim(x: torch.Tensor, dim: int, layer: str) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"{layer} expects a floating-point tensor, got {type(x).__name__}"
                        + (f" of dtype {x.dtype}" if isinstance(x, torch.Tensor) else ""))
    if x.shape[-1] != dim:
        raise ValueError(f"{layer}(dim={dim}) got an input whose last dimension is {x.shape[-1]} (shape {tuple(x.shape)})")


class LayerNorm(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias, over the last dimension.

    Input ``(..., dim)``, output the same shape. The variance is the biased one (divide by
    ``dim``), as in ``torch.nn.LayerNorm``.
    """

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True) -> None:
        super().__init__()
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim={dim!r} must be a positive integer")
        if not eps > 0:
            raise ValueError(f"eps={eps!r} must be positive")
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_last_dim(x, self.dim, "LayerNorm")
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # (..., 1), biased
        y = (x - mean) * torch.rsqrt(var + self.eps) * self.weight
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, bias={self.bias is not None}"


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) * weight: LayerNorm without re-centring and without bias.

    Input ``(..., dim)``, output the same shape. Cheaper than LayerNorm and used by LLaMA.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim={dim!r} must be a positive integer")
        if not eps > 0:
            raise ValueError(f"eps={eps!r} must be positive")
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_last_dim(x, self.dim, "RMSNorm")
        ms = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1) mean square
        return x * torch.rsqrt(ms + self.eps) * self.weight

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


def make_norm(kind: str, dim: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """``"layernorm"`` or ``"rmsnorm"``; anything else raises ``ValueError``."""
    if kind == "layernorm":
        return LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    raise ValueError(f"norm={kind!r} is not supported; allowed values: 'layernorm', 'rmsnorm'")
