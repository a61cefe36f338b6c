"""Position-wise feed-forward network (Vaswani et al. 2017), with the GELU (Hendrycks & Gimpel
2016), ReLU, ReLU² (So et al. 2021, "Primer") and SwiGLU (Shazeer 2020) variants.

The same two-layer MLP is applied to every token independently: attention mixes information
across positions, the feed-forward network transforms it within each position.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .recipes import ACTIVATIONS


class FeedForward(nn.Module):
    """``down(act(up(x)))``, or for SwiGLU ``down(silu(gate(x)) * up(x))``.

    Input ``(B, T, d_model)``, output ``(B, T, d_model)``. ``activation="gelu"`` is GPT-2's tanh
    approximation of GELU. ``d_ff`` is the hidden width (commonly 4·d_model).
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", dropout: float = 0.0,
                 bias: bool = True) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} is not supported; allowed values: "
                             f"{', '.join(map(repr, ACTIVATIONS))}")
        for name, value in (("d_model", d_model), ("d_ff", d_ff)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer")
        self.activation = activation
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.gate = nn.Linear(d_model, d_ff, bias=bias) if activation == "swiglu" else None
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)  # (B, T, d_ff)
        if self.activation == "swiglu":
            h = F.silu(self.gate(x)) * h
        elif self.activation == "gelu":
            h = F.gelu(h, approximate="tanh")
        elif self.activation == "relu2":
            h = F.relu(h).square()
        else:
            h = F.relu(h)
        return self.dropout(self.down(h))  # (B, T, d_model)
