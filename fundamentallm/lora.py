"""Low-rank adaptation (LoRA; Hu et al. 2021): fine-tune a frozen model through small adapters.

A frozen linear layer ``y = x W^T + b`` gets a trainable low-rank update::

    y = x W^T + b + (alpha / r) * x A^T B^T      A: (r, in_features), B: (out_features, r)

``B`` starts at zero, so the adapted model starts exactly equal to the frozen one; ``A`` starts
with PyTorch's default (Kaiming-uniform) initialisation, as in Hugging Face ``peft``. Only
``r * (in + out)`` numbers per layer are trained. For inference the update is **merged** into
``W`` (``W + (alpha / r) B A``), so the adapted model costs nothing extra at run time.

* :class:`LoRALinear` wraps one ``nn.Linear``; ``merge()`` / ``unmerge()``;
* :func:`apply_lora` replaces the linear layers named by ``targets`` (suffix match, like
  ``peft``'s ``target_modules``) and freezes every other parameter;
* :func:`merge_lora` merges every adapter in place; :func:`lora_state_dict`, :func:`save_lora`
  and :func:`load_lora` handle the adapters only (kilobytes, not the model).
"""

from __future__ import annotations

import math
import os
from typing import Sequence, Union

import torch
from torch import nn


class LoRALinear(nn.Module):
    """``base(x) + (alpha / rank) * x A^T B^T``; ``base`` is frozen. (..., in) -> (..., out)."""

    def __init__(self, base: nn.Linear, rank: int = 4, alpha: float = 8.0, dropout: float = 0.0) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"base must be an nn.Linear, got {type(base).__name__}")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise ValueError(f"rank={rank!r} must be an integer >= 1")
        if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha={alpha!r} must be a finite number > 0")
        if not 0 <= dropout < 1:
            raise ValueError(f"dropout={dropout!r} must be in [0, 1)")
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.rank, self.alpha, self.scaling = rank, alpha, alpha / rank
        w = base.weight
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, device=w.device, dtype=w.dtype))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, device=w.device, dtype=w.dtype))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's default, as peft does
        self.dropout = nn.Dropout(dropout)
        self.merged = False

    def delta_weight(self) -> torch.Tensor:
        """The update ``(alpha / r) B A``: (out, in)."""
        return self.scaling * (self.lora_B @ self.lora_A)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        if self.merged:
            return y
        return y + self.scaling * (self.dropout(x) @ self.lora_A.T @ self.lora_B.T)

    @torch.no_grad()
    def merge(self) -> None:
        """Add the update into the frozen weight (forward then costs one matmul)."""
        if not self.merged:
            self.base.weight += self.delta_weight()
            self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Subtract it again (exact up to rounding), e.g. to keep training the adapter."""
        if self.merged:
            self.base.weight -= self.delta_weight()
            self.merged = False

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha}, merged={self.merged}"


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def apply_lora(model: nn.Module, targets: Sequence[str], rank: int = 4, alpha: float = 8.0,
               dropout: float = 0.0) -> list[str]:
    """Wrap every ``nn.Linear`` whose name equals or ends with ``.target`` for a target in
    ``targets`` (e.g. ``("attn.qkv", "attn.out_proj")``), freeze all other parameters, and return
    the wrapped names. A target that names no linear layer raises ``ValueError``."""
    if isinstance(targets, str) or not targets:
        raise ValueError(f"targets={targets!r} must be a non-empty list of module names, e.g. ['attn.qkv']")
    linears = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    chosen = {t: [n for n in linears if n == t or n.endswith("." + t)] for t in targets}
    missing = [t for t, names in chosen.items() if not names]
    if missing:
        raise ValueError(f"targets={missing} name no nn.Linear of the model; its linear layers are "
                         f"{linears[:12]}{' ...' if len(linears) > 12 else ''}")
    for p in model.parameters():
        p.requires_grad_(False)
    wrapped = sorted({n for names in chosen.values() for n in names})
    for name in wrapped:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoRALinear(getattr(parent, child), rank, alpha, dropout))
    return wrapped


def merge_lora(model: nn.Module) -> nn.Module:
    """Merge every adapter into its frozen weight, in place; returns ``model``."""
    for layer in lora_layers(model).values():
        layer.merge()
    return model


def lora_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the adapters' tensors, by their names in the model (``...qkv.lora_A``)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()
            if k.endswith(".lora_A") or k.endswith(".lora_B")}


def save_lora(path: Union[str, os.PathLike], model: nn.Module) -> None:
    """Write the adapters only, as one safetensors file (atomically: write, then rename)."""
    from safetensors.torch import save_file

    state = lora_state_dict(model)
    if not state:
        raise ValueError("the model has no LoRA adapters (see apply_lora)")
    tmp = f"{os.fspath(path)}.tmp"
    save_file({k: v.contiguous() for k, v in state.items()}, tmp)
    os.replace(tmp, path)


def load_lora(path: Union[str, os.PathLike], model: nn.Module) -> None:
    """Load adapters written by :func:`save_lora` into a model with the same adapters applied."""
    from safetensors.torch import load_file

    state = load_file(os.fspath(path))
    expected = set(lora_state_dict(model))
    if set(state) != expected:
        raise ValueError(f"{os.fspath(path)} holds adapters {sorted(set(state) ^ expected)[:4]} that the "
                         f"model does not (apply_lora with the same targets first)")
    model.load_state_dict(state, strict=False)


def merged_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every adapter merged and its :class:`LoRALinear` replaced by the
    plain ``nn.Linear``: the original architecture, loadable without this module."""
    import copy

    out = copy.deepcopy(model)
    for name, layer in lora_layers(out).items():
        layer.merge()
        layer.base.weight.requires_grad_(True)
        parent_name, _, child = name.rpartition(".")
        setattr(out.get_submodule(parent_name) if parent_name else out, child, layer.base)
    for p in out.parameters():
        p.requires_grad_(True)
    return out
