"""The model's doors: every check of a public call, once, at its start (issue 15; issue 39).

Clear errors instead of torch's, or of a silently wrong loss. :func:`check_call` runs at the start
of each public entry of a model (``forward``, ``hidden_states``, ``attention_maps``): types and
shapes for free, values with one host read (:func:`check_values`). A caller that has checked its
data already (the Trainer when it receives it, ``generate`` for the prompt) runs the model inside
:func:`fundamentallm.utils.inputs_checked`, which skips the value read. Past the door nothing is
checked again: the layers a model builds (its position modules and its attention layers) are
built with ``check_inputs=False``, so neither the padding mask nor the cache's room
(:meth:`~fundamentallm.cache.KVCache.check_room`) is checked per layer, and the model's ``_run``
raises nothing. A layer used on its own (``MultiHeadAttention``, ``RotaryEmbedding``, a norm)
checks its own inputs.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from .attention import padding_mask
from .cache import KVCache
from .config import TransformerConfig
from .positions import check_token_positions
from .recipes import POOLINGS
from .utils import values_checked

_POSITION_TABLE_LIMIT = 8 * 2**30  # bytes; Llama 3's 128k context x 4096 in fp32 is 2 GiB


def _host_memory() -> int:
    """Bytes of physical memory of this machine (a generous 2**40 when the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 2**40


def _check_table_sizes(config: TransformerConfig) -> None:
    """Refuse a config whose weights would not fit in this machine's memory, naming the fields
    that make it large, before anything is allocated (``vocab_size=10**11`` or ``max_seq_len=10**9``
    would otherwise start an allocation of terabytes and end in torch's out-of-memory error)."""
    c = config
    table = c.max_seq_len * c.d_model * 4  # bytes of one fp32 (max_seq_len, d_model) table
    if table > _POSITION_TABLE_LIMIT:
        raise ValueError(f"max_seq_len={c.max_seq_len} with d_model={c.d_model} needs "
                         f"{table / 2**30:.0f} GiB for one position table (at most "
                         f"{_POSITION_TABLE_LIMIT // 2**30} GiB allowed); choose a smaller max_seq_len")
    kv_dim = c.kv_heads * c.head_dim
    ff = (3 if c.activation == "swiglu" else 2) * c.d_model * c.ff_dim * max(c.moe_experts or 1, 1)
    per_layer = c.d_model * (2 * c.d_model + 2 * kv_dim) + ff
    per_token = c.d_model * (1 if c.tie_weights else 2) + (c.num_layers * kv_dim if c.value_embeddings else 0)
    parts = [(("vocab_size", "d_model"), c.vocab_size * per_token * 4),  # the embedding tables
             (("num_layers", "d_model", "ff_dim"), c.num_layers * per_layer * 4)]  # the blocks
    total, memory = sum(size for _, size in parts), _host_memory()
    if total > memory:
        fields = max(parts, key=lambda part: part[1])[0]  # the larger part names the fields
        raise ValueError(f"{', '.join(f'{f}={getattr(c, f)}' for f in fields)} need about "
                         f"{total / 2**30:,.0f} GiB of float32 weights, more than this machine's "
                         f"{memory / 2**30:,.0f} GiB of memory; choose smaller values of {', '.join(fields)}")


def _is_integer_tensor(t: torch.Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def check_config(config) -> TransformerConfig:
    """The backbone's configuration, refused before anything is allocated if it is not a
    :class:`TransformerConfig` or would not fit in this machine's memory."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    _check_table_sizes(config)
    return config


def check_classifier(config, num_classes, pooling) -> None:
    """The encoder classifier's own arguments."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    if config.causal:
        raise ValueError("TransformerClassifier is a bidirectional encoder: build it with causal=False")
    if pooling not in POOLINGS:
        raise ValueError(f"pooling={pooling!r} is not supported; allowed values: {', '.join(map(repr, POOLINGS))}")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes={num_classes!r} must be an integer >= 2")


def check_decoder_args(input_ids, targets, logits_to_keep) -> None:
    """The decoder's ``forward`` arguments beyond the door's: ``logits_to_keep`` and the targets' shape."""
    if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or logits_to_keep < 0:
        raise ValueError(f"logits_to_keep={logits_to_keep!r} must be an integer >= 0 (0 keeps every position)")
    if targets is not None and logits_to_keep:
        raise ValueError(f"logits_to_keep={logits_to_keep} cannot be combined with targets: the loss "
                         f"needs every position's logits")
    if targets is not None and isinstance(targets, torch.Tensor) and isinstance(input_ids, torch.Tensor) \
            and targets.shape != input_ids.shape:
        raise ValueError(f"targets must be a tensor with the shape of input_ids {tuple(input_ids.shape)}, "
                         f"got {tuple(targets.shape)}")


def check_class_targets(targets: torch.Tensor, batch_size: int) -> None:
    """The classifier's targets: one class per sequence."""
    if tuple(targets.shape) != (batch_size,):
        raise ValueError(f"targets must have shape (B,) = ({batch_size},) (one class per "
                         f"sequence), got {tuple(targets.shape)}")


def check_call(model, input_ids, attention_mask, kv_cache, token_positions,
               targets=None) -> Optional[torch.Tensor]:
    """Every check of a public call of ``model`` (a backbone: ``config``, ``blocks``), at its
    start: types and shapes, the cache's room (the one overflow check of a forward), then --
    unless the caller checked its data already (:func:`fundamentallm.utils.inputs_checked`) --
    the values, with one host read. Returns the ``(B, 1, 1, T_k)`` key-padding mask, or None."""
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor of token ids, got {type(input_ids).__name__}")
    if input_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"input_ids must be an integer tensor, got dtype {input_ids.dtype}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (B, T), got {tuple(input_ids.shape)}")
    if input_ids.shape[0] == 0:
        raise ValueError(f"input_ids holds a batch of 0 sequences (shape {tuple(input_ids.shape)}); "
                         f"pass at least one")
    if targets is not None:
        if not isinstance(targets, torch.Tensor):
            raise TypeError(f"targets must be a torch.Tensor of integer ids (-100 = ignore), got "
                            f"{type(targets).__name__}")
        if not _is_integer_tensor(targets):
            raise TypeError(f"targets must be an integer tensor of ids (-100 = ignore), got dtype "
                            f"{targets.dtype}; a float tensor would be truncated to other ids")
    if kv_cache is not None and not isinstance(kv_cache, KVCache):
        raise TypeError(f"kv_cache must be a KVCache (see make_kv_cache), got {type(kv_cache).__name__}")
    start = kv_cache.length if kv_cache is not None else 0
    T = input_ids.shape[1]
    if T == 0:
        raise ValueError("input_ids is empty (T=0)")
    if start + T > model.config.max_seq_len:
        raise ValueError(f"sequence length {start + T} exceeds max_seq_len={model.config.max_seq_len}")
    if kv_cache is not None:
        if kv_cache.num_layers != len(model.blocks):
            raise ValueError(f"kv_cache has {kv_cache.num_layers} layers, the model has {len(model.blocks)}")
        # the cache's room, once for every layer (the layers then write without checking)
        kv_cache.check_room(0, (input_ids.shape[0], model.config.kv_heads, T, model.config.head_dim))
    if token_positions is not None:
        check_token_positions(token_positions, tuple(input_ids.shape), model.config.max_seq_len, values=False)
    mask = None
    if attention_mask is not None:
        if not isinstance(attention_mask, torch.Tensor):
            raise TypeError(f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__}")
        expected = (input_ids.shape[0], start + T)
        if tuple(attention_mask.shape) != expected:
            raise ValueError(f"attention_mask must have shape (B, T) = {expected} (1 = token, 0 = padding), "
                             f"got {tuple(attention_mask.shape)}")
        mask = padding_mask(attention_mask)
    if not values_checked(model):
        model.check_values(input_ids, targets, attention_mask, token_positions)
    return mask


def check_values(model, input_ids: Optional[torch.Tensor] = None, targets: Optional[torch.Tensor] = None,
                 attention_mask: Optional[torch.Tensor] = None,
                 token_positions: Optional[torch.Tensor] = None, all_ignored_ok: bool = False) -> None:
    """Raise a clear error if a value is out of place: a token id outside the vocabulary,
    targets that are not class ids in ``[0, num_classes)`` or -100 (or all -100: a 0/0
    loss), a mask that is not 0/1, a position outside ``[0, max_seq_len)``. One host read
    covers them all; the details are computed only on failure. Forward runs it at its door;
    the Trainer runs it once on the data it receives, with ``all_ignored_ok=True`` (a split or
    a micro-batch may hold no real target; its step or evaluation reports that)."""
    V, L = model.config.vocab_size, model.config.max_seq_len
    num_classes = getattr(model, "num_classes", V)  # a classifier's targets are classes
    checks = []
    if input_ids is not None:
        checks.append(((input_ids >= 0) & (input_ids < V)).all())
    if targets is not None:
        real = targets != -100
        checks += [real.any() | all_ignored_ok, ~(real & ((targets < 0) | (targets >= num_classes))).any()]
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        checks.append(((attention_mask == 0) | (attention_mask == 1)).all())  # False for NaN too
    if token_positions is not None:
        checks.append(((token_positions >= 0) & (token_positions < L)).all())
    if not checks or bool(torch.stack([c.to(checks[0].device) for c in checks]).all()):
        return
    if input_ids is not None and not bool(checks[0]):
        lo, hi = int(input_ids.min()), int(input_ids.max())
        raise ValueError(f"token id {lo if lo < 0 else hi} is outside the vocabulary [0, {V})")
    if targets is not None:
        if not all_ignored_ok and not bool((targets != -100).any()):
            raise ValueError("targets are all -100 (ignored): the mean loss would be 0/0 = NaN; "
                             "pass at least one real target")
        bad = targets[(targets != -100) & ((targets < 0) | (targets >= num_classes))]
        if bad.numel():
            raise ValueError(f"targets contain {bad[0].item()}, outside [0, {num_classes}) (-100 marks an "
                             f"ignored position)")
    if attention_mask is not None and attention_mask.dtype != torch.bool \
            and not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 1 (token) and 0 (padding); it contains other "
                         "values (or NaN/inf)")
    if token_positions is not None:
        check_token_positions(token_positions, (1, *token_positions.shape) if token_positions.dim() == 1
                              else tuple(token_positions.shape), L)
