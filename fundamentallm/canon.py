"""Canon layers (Allen-Zhu 2025): a short causal convolution that mixes each token with the few
before it, added to the residual path.

Attention can move information between any two positions, but it needs a whole layer (and a
head learning a "previous token" pattern) to do what the simplest language models do for free:
look at the last few tokens. A canon layer gives every channel that local view directly::

    y_t = x_t + sum_{j=0}^{K-1} w[:, j] * x_{t-K+1+j}        (x_s = 0 for s < 0)

(column ``j`` weighs the token ``K - 1 - j`` places back; the book writes the same sum by offset,
with its ``w_j`` the column ``K - 1 - j``)

a depthwise (one filter per channel), causal convolution of width ``K`` (4 by default) with a
residual connection. Its weights start at zero, so a new layer is the identity and training
decides how much local mixing helps. It costs ``K·d_model`` parameters per place.

Allen-Zhu puts them before attention (his "Canon-A") and before the feed-forward network
("Canon-C"), among other places; ``TransformerConfig(canon=...)`` offers those two and the
token embeddings (``"embed"``, once, before the first layer; modded-nanogpt's "smear gate" mixes
the previous token's embedding in at that place).

Reference: Z. Allen-Zhu, "Physics of Language Models: Part 4.1, Architecture Design and the
Magic of Canon Layers" (2025), SSRN 5240330, arXiv:2512.17351.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _ShiftedSum(torch.autograd.Function):
    """``out = p[:, K-1:] + sum_j w[:, j] * p[:, j:j+T]`` for ``p`` the input with ``K - 1``
    positions before it, and its gradient written out: one fused multiply-add per offset each
    way. Autograd's version records twice the operations, and at the course's sizes a training
    step spends more time launching small operations than computing them."""

    @staticmethod
    def forward(ctx, padded: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        K = w.shape[1]
        T = padded.shape[1] - (K - 1)
        ctx.save_for_backward(padded, w)
        x = padded[:, K - 1:]
        out = torch.addcmul(x, x, w[:, K - 1])  # x + w_self * x, then the K - 1 tokens before
        for j in range(K - 1):
            out.addcmul_(padded[:, j:j + T], w[:, j])
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        padded, w = ctx.saved_tensors
        K, T = w.shape[1], grad.shape[1]
        d_padded = torch.zeros_like(padded)
        d_padded[:, K - 1:] = grad  # the residual
        for j in range(K):  # p[:, j + t] was multiplied by w[:, j] into out[:, t]
            d_padded[:, j:j + T].addcmul_(grad, w[:, j])
        d_w = torch.stack([(grad * padded[:, j:j + T]).sum((0, 1)) for j in range(K)], dim=1)
        return d_padded, d_w


class CanonLayer(nn.Module):
    """``x + causal_depthwise_conv(x)``: input and output ``(B, T, d_model)``.

    ``weight`` is ``(d_model, kernel_size)``; ``weight[:, -1]`` multiplies the token itself and
    ``weight[:, -1 - j]`` the token ``j`` places back. Equal to ``F.conv1d`` with
    ``groups=d_model`` on the left-padded sequence, gradients included (``tests/test_canon.py``
    checks both; the backward pass is written out, see ``_ShiftedSum``).

    For decoding, ``forward(x, kv_cache)`` continues the cache's sequence: the layer keeps the
    last ``kernel_size - 1`` inputs it saw in the cache's ``conv`` dict under its ``key`` (its
    place in the model, given at construction, like an attention layer's index) and reads the
    position from the cache: at ``kv_cache.length == 0`` the sequence begins and the stored
    inputs are ignored.
    """

    def __init__(self, d_model: int, kernel_size: int = 4, key: object = None) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("kernel_size", kernel_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        self.kernel_size, self.key = kernel_size, key
        self.weight = nn.Parameter(torch.zeros(d_model, kernel_size))  # zero: starts as the identity

    def forward(self, x: torch.Tensor, kv_cache=None) -> torch.Tensor:
        K = self.kernel_size
        state = kv_cache.conv if kv_cache is not None else None
        if state is not None and kv_cache.length > 0 and self.key in state:
            padded = torch.cat([state[self.key], x], dim=1)  # the K - 1 inputs before this chunk, then x
        else:
            padded = F.pad(x, (0, 0, K - 1, 0))  # (B, K - 1 + T, C): zeros before the first token
        if state is not None:
            state[self.key] = padded[:, padded.shape[1] - (K - 1):].detach()
        return _ShiftedSum.apply(padded, self.weight.to(x.dtype))

    def extra_repr(self) -> str:
        return f"d_model={self.weight.shape[0]}, kernel_size={self.kernel_size}"


def reference_canon(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The same layer written with ``F.conv1d`` (for tests and the book)."""
    K = weight.shape[1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), weight[:, None, :], groups=x.shape[2])
    return x + y.transpose(1, 2)
