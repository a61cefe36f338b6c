"""The optimizer a :class:`~fundamentallm.training.Trainer` builds from its ``TrainConfig``:
AdamW (Loshchilov & Hutter 2019) with weight decay on matrices only, or Muon on the hidden
matrices and AdamW on the rest (:mod:`fundamentallm.muon`)."""

from __future__ import annotations

import torch
from torch import nn

from .train_config import TrainConfig


def muon_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The hidden matrices Muon trains: the weights of the ``nn.Linear`` layers, except the output
    layer (a module named ``lm_head`` or ``head``) and any weight shared with an embedding."""
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    out = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] not in ("lm_head", "head") \
                and id(module.weight) not in embedded and module.weight.requires_grad:
            out.append(module.weight)
    return out


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with two groups: weight decay on every parameter with >= 2 dimensions (the linear
    maps and, as in nanoGPT, the embeddings), none on biases and norm gains, whose decay toward
    zero would only fight their role. A tied matrix appears once.

    With ``config.optimizer == "muon"``: one :class:`~fundamentallm.muon.Muon` whose first group
    holds the hidden matrices (:func:`muon_parameters`) and whose other two groups are the AdamW
    groups above without them. Each group keeps its peak rate in ``"peak_lr"``."""
    params = [p for p in model.parameters() if p.requires_grad]

    def adamw_groups(params: list, **extra) -> list[dict]:
        return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay,
                 "peak_lr": config.lr, **extra},
                {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0, "peak_lr": config.lr, **extra}]

    if config.optimizer == "muon":
        from .muon import Muon

        hidden = {id(p) for p in muon_parameters(model)}
        groups = [{"params": [p for p in params if id(p) in hidden], "use_muon": True,
                   "lr": config.muon_lr, "peak_lr": config.muon_lr, "momentum": config.muon_momentum,
                   "weight_decay": config.muon_weight_decay, "ns_steps": config.muon_ns_steps},
                  *adamw_groups([p for p in params if id(p) not in hidden], use_muon=False)]
        return Muon([g for g in groups if g["params"]], lr=config.lr, betas=config.betas, eps=config.eps)
    groups = adamw_groups(params)
    kwargs = dict(lr=config.lr, betas=config.betas, eps=config.eps)
    try:  # the fused kernel (one pass over all parameters) is several times faster, CPU included
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError):  # older torch or a device without a fused kernel
        return torch.optim.AdamW(groups, **kwargs)
