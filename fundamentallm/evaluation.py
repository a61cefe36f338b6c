"""Evaluation: the mean token loss and perplexity of a model over a whole split, and the checks
a split's values pass once, when a trainer or ``evaluate`` receives it (the model's own door
check, ``model.check_values``)."""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Optional

import torch
from torch import nn

from .data import DataSource
from .utils import inputs_checked


def mask_kwargs(batch: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """The forward's keyword arguments for a batch ``(x, y[, attention_mask])``."""
    return {"attention_mask": batch[2]} if len(batch) > 2 else {}


def check_batch(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> None:
    """Check a batch ``(x, y[, attention_mask])`` with the model's own door check
    (``model.check_values``: ids in the vocabulary, targets valid, a 0/1 mask), if it has one."""
    check = getattr(model, "check_values", None)
    if callable(check):
        check(batch[0], batch[1], batch[2] if len(batch) > 2 else None, all_ignored_ok=True)


def check_data(model: nn.Module, source: DataSource) -> bool:
    """Check a whole split once, when the Trainer receives it: a token stream by its smallest
    and largest id, a ``TensorDataset`` (or tuple of tensors) tensor by tensor. Returns False for
    a lazily built ``Dataset``, whose items are then checked batch by batch as they are drawn."""
    if not callable(getattr(model, "check_values", None)):
        return True
    if source.stream is not None:
        stream = source.stream
        lo, hi = stream.min(), stream.max()  # a tensor, or a NumPy array (memory map)
        ends = torch.tensor([[int(lo), int(hi)]])
        check_batch(model, (ends, ends))
        return True
    if isinstance(source.dataset, torch.utils.data.TensorDataset):
        check_batch(model, source.dataset.tensors)
        return True
    return False


@torch.no_grad()
def evaluate(model: nn.Module, data, batch_size: int = 64, max_batches: Optional[int] = None,
             block_size: Optional[int] = None, autocast: Optional[Callable] = None, rank: int = 0,
             world_size: int = 1, check_batches: bool = False) -> dict[str, float]:
    """Mean loss per target token (targets of -100 excluded) and perplexity ``exp(loss)`` of
    ``model`` over the whole of ``data`` (any format the Trainer takes, or a ``DataSource``; a
    token stream is cut into every non-overlapping ``block_size`` window, by default the model's
    ``max_seq_len``), ``batch_size`` windows per forward pass, on the model's device. A plain
    function: no optimizer, no trainer. ``max_batches`` caps the work; ``autocast`` is a
    context-manager factory (mixed precision); ``rank``/``world_size`` split the batches across
    processes (the sums are all-reduced). The data is checked once first (``check_batches``:
    each batch as it is drawn instead, for a lazily built ``Dataset``)."""
    if isinstance(data, DataSource):
        source = data
    else:
        source = DataSource(data, block_size or getattr(getattr(model, "config", None), "max_seq_len", None))
        check_batches = not check_data(model, source)
    device = next(iter(model.parameters())).device
    was_training = model.training
    model.eval()
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # (loss · count, count)
    try:
        for i, batch in enumerate(source.batches(batch_size)):
            if max_batches is not None and i >= max_batches:
                break
            if i % world_size != rank:
                continue
            if check_batches:
                check_batch(model, batch)
            batch = tuple(t.to(device) for t in batch)
            count = (batch[1] != -100).sum()
            with (autocast() if autocast is not None else contextlib.nullcontext()), inputs_checked(model):
                loss = model(batch[0], batch[1], **mask_kwargs(batch))[1]
            # a batch with no real target has a 0/0 mean: it adds nothing (chosen on the device)
            sums += torch.stack([torch.where(count > 0, loss.double() * count, 0.0),
                                 count.double()])
    finally:
        model.train(was_training)
    if world_size > 1:
        torch.distributed.all_reduce(sums)
    total, count = sums.tolist()
    if count == 0:
        raise ValueError("the validation data has no target other than -100: nothing to evaluate")
    val_loss = total / count
    return {"val_loss": val_loss, "val_perplexity": math.exp(min(val_loss, 700.0))}
