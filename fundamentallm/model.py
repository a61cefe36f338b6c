"""The transformer: a block, a decoder-only language model (GPT-2 style, Radford et al. 2019),
and an encoder classifier (BERT style, Devlin et al. 2019).

Read bottom-up: ``TransformerBlock`` (attention + feed-forward, each with a residual connection
and a norm), then ``Transformer`` (embeddings -> blocks -> norm -> tied output projection).
"""

from __future__ import annotations

import math
import os
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import hooks as _hooks
from .attention import MultiHeadAttention, padding_mask
from .cache import KVCache
from .canon import CanonLayer
from .config import TransformerConfig
from .feedforward import FeedForward
from .moe import MoEFeedForward
from .norms import make_norm
from .positions import RotaryEmbedding, check_token_positions, create_positional_encoding
from .recipes import POOLINGS
from .registry import ModelRegistry


def _canon(canon: Optional[CanonLayer], h: torch.Tensor, kv_cache: Optional[KVCache]) -> torch.Tensor:
    """``h`` through a canon layer when the config asks for one at this place, else unchanged."""
    return h if canon is None else canon(h, kv_cache)


class TransformerBlock(nn.Module):
    """One layer. Input/output ``(B, T, d_model)``.

    pre-LN  (GPT-2 and later): ``x = x + attn(norm1(x))``; ``x = x + ff(norm2(x))``
    post-LN (Vaswani et al.):  ``x = norm1(x + attn(x))``; ``x = norm2(x + ff(x))``
    With canon layers (``config.canon``) the input of ``attn`` and/or ``ff`` passes through one first.
    ``layer_idx`` is the block's place in the model: its attention's slot in a KV cache.
    """

    def __init__(self, config: TransformerConfig, layer_idx: int = 0,
                 rope: Optional[RotaryEmbedding] = None) -> None:
        super().__init__()
        c = config
        self.norm_position = c.norm_position
        self.norm1 = make_norm(c.norm, c.d_model, eps=c.norm_eps, bias=c.bias)
        self.attn = MultiHeadAttention(c.d_model, c.num_heads, dropout=c.dropout, bias=c.bias,
                                       causal=c.causal, rope=rope, use_sdpa=c.attn_impl == "sdpa",
                                       num_kv_heads=c.kv_heads, qkv_bias=c.attn_qkv_bias,
                                       sliding_window=c.sliding_window, qk_norm=c.qk_norm,
                                       norm_eps=c.norm_eps, layer_idx=layer_idx)
        self.norm2 = make_norm(c.norm, c.d_model, eps=c.norm_eps, bias=c.bias)
        if c.moe_experts:
            self.ff = MoEFeedForward(c.d_model, c.ff_dim, c.moe_experts, top_k=c.moe_top_k,
                                     activation=c.activation, dropout=c.dropout, bias=c.bias)
        else:
            self.ff = FeedForward(c.d_model, c.ff_dim, activation=c.activation, dropout=c.dropout, bias=c.bias)
        self.resid_dropout = nn.Dropout(c.dropout)
        # Canon layers (optional): a short causal convolution on each sublayer's input.
        self.canon_attn = CanonLayer(c.d_model, c.canon_kernel, key=(layer_idx, "attn")) \
            if "attn" in c.canon_places else None
        self.canon_ffn = CanonLayer(c.d_model, c.canon_kernel, key=(layer_idx, "ffn")) \
            if "ffn" in c.canon_places else None

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None,
                kv_cache: Optional[KVCache] = None, token_positions: Optional[torch.Tensor] = None,
                return_weights: bool = False, value_embeds: Optional[torch.Tensor] = None):
        pre = self.norm_position == "pre"
        h = _canon(self.canon_attn, self.norm1(x) if pre else x, kv_cache)
        out = self.attn(h, mask=mask, kv_cache=kv_cache, token_positions=token_positions,
                        return_weights=return_weights, value_embeds=value_embeds)
        a, w = out if return_weights else (out, None)
        if pre:
            x = x + self.resid_dropout(a)
            x = x + self.ff(_canon(self.canon_ffn, self.norm2(x), kv_cache))
        else:
            x = self.norm1(x + self.resid_dropout(a))
            x = self.norm2(x + self.ff(_canon(self.canon_ffn, x, kv_cache)))
        return (x, w) if return_weights else x


def block_sublayers(config, weights: dict) -> dict[str, nn.Module]:
    """The sublayers of a :class:`TransformerBlock`, built from data, in eval mode.

    ``config`` is a :class:`TransformerConfig` or a dict of its fields; ``weights`` maps a name to
    that sublayer's state dict: ``"attn"`` a ``MultiHeadAttention`` and ``"ff"`` a ``FeedForward``
    as the block of ``config`` builds them, any other name (``"norm1"``, ``"norm"``, ...) a norm of
    ``config.norm``. Returns ``{name: module}`` in the order of ``weights``. The block-wiring
    exercises of chapters 6 and 7 receive their sublayers this way: as tensors, which a grader can
    send to another process, where a module cannot go."""
    if not isinstance(weights, dict):
        raise TypeError(f"weights must be a dict {{name: state dict}}, got {type(weights).__name__}")
    c = config if isinstance(config, TransformerConfig) else TransformerConfig(**config)
    block = TransformerBlock(c)
    out: dict[str, nn.Module] = {}
    for name, state in weights.items():
        if name == "attn":
            module = block.attn
        elif name == "ff":
            module = block.ff
        else:
            module = make_norm(c.norm, c.d_model, eps=c.norm_eps, bias=c.bias)
        module.load_state_dict(state)
        out[name] = module.eval()
    return out


# --- input validation (issue 15): clear errors instead of torch's, or of a silently wrong loss ---
# Checked once, at the door (the public forward, hidden_states and attention_maps): types and
# shapes for free, values with one host read (see _Backbone.check_values). A caller that has
# checked its data already (the Trainer when it receives it, generate for the prompt) runs the
# model inside utils.inputs_checked(model), which skips the value read; the layers check nothing.

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


class _Backbone(nn.Module):
    """Embeddings, positions and blocks shared by the decoder and the encoder."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        c = self.config = config
        _check_table_sizes(c)
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_encoding = None
        self.rope = None
        if c.pos_encoding == "rope":
            self.rope = RotaryEmbedding(c.head_dim, c.max_seq_len, base=c.rope_base, scaling=c.rope_scaling,
                                        style=c.rope_style)
        else:
            self.pos_encoding = create_positional_encoding(c.pos_encoding, c.d_model, c.max_seq_len)
        for positions in (self.rope, self.pos_encoding):
            if positions is not None:
                positions.check_positions = False  # the model checks token_positions once, at its door
        self.dropout = nn.Dropout(c.dropout)
        self.canon_embed = CanonLayer(c.d_model, c.canon_kernel, key="embed") if "embed" in c.canon_places else None
        self.blocks = nn.ModuleList(TransformerBlock(c, i, rope=self.rope) for i in range(c.num_layers))
        # Value embeddings: one table per layer, added to that layer's attention values.
        self.value_embeds = nn.ModuleList(nn.Embedding(c.vocab_size, c.kv_heads * c.head_dim)
                                          for _ in range(c.num_layers)) if c.value_embeddings else None
        # Post-LN blocks already end with a norm; pre-LN needs one after the last residual add.
        self.norm_f = make_norm(c.norm, c.d_model, eps=c.norm_eps, bias=c.bias) \
            if c.norm_position == "pre" else nn.Identity()

    def _init_weights(self) -> None:
        """GPT-2 initialisation: N(0, 0.02) weights, zero biases, and the projections that write
        into the residual stream scaled by 1/sqrt(2·num_layers) -- each layer adds two such
        terms, so the residual's variance stays O(1) with depth (Radford et al. 2019)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
        resid_std = 0.02 / math.sqrt(2 * self.config.num_layers)
        for block in self.blocks:
            nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=resid_std)
            for ff in getattr(block.ff, "experts", [block.ff]):
                nn.init.normal_(ff.down.weight, mean=0.0, std=resid_std)

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Parameter count; a tied matrix is counted once (``parameters()`` yields it once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    check_inputs = True  # read the inputs' values at the door (utils.inputs_checked turns it off)

    def _door(self, input_ids, attention_mask, kv_cache, token_positions,
              targets=None) -> tuple[int, Optional[torch.Tensor]]:
        """Every check of a public call, at its start: types and shapes, then (unless the caller
        checked its data already) the values, with one host read. Returns the cache's position
        and the ``(B, 1, 1, T_k)`` key-padding mask."""
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
        if start + T > self.config.max_seq_len:
            raise ValueError(f"sequence length {start + T} exceeds max_seq_len={self.config.max_seq_len}")
        if kv_cache is not None and kv_cache.num_layers != len(self.blocks):
            raise ValueError(f"kv_cache has {kv_cache.num_layers} layers, the model has {len(self.blocks)}")
        if token_positions is not None:
            check_token_positions(token_positions, tuple(input_ids.shape), self.config.max_seq_len, values=False)
        mask = None
        if attention_mask is not None:
            if not isinstance(attention_mask, torch.Tensor):
                raise TypeError(f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__}")
            expected = (input_ids.shape[0], start + T)
            if tuple(attention_mask.shape) != expected:
                raise ValueError(f"attention_mask must have shape (B, T) = {expected} (1 = token, 0 = padding), "
                                 f"got {tuple(attention_mask.shape)}")
            mask = padding_mask(attention_mask)
        if self.check_inputs:
            self.check_values(input_ids, targets, attention_mask, token_positions)
        return start, mask

    def check_values(self, input_ids: Optional[torch.Tensor] = None, targets: Optional[torch.Tensor] = None,
                     attention_mask: Optional[torch.Tensor] = None,
                     token_positions: Optional[torch.Tensor] = None, all_ignored_ok: bool = False) -> None:
        """Raise a clear error if a value is out of place: a token id outside the vocabulary,
        targets that are not class ids in ``[0, num_classes)`` or -100 (or all -100: a 0/0
        loss), a mask that is not 0/1, a position outside ``[0, max_seq_len)``. One host read
        covers them all; the details are computed only on failure. Forward runs it at its door;
        the Trainer runs it once on the data it receives, with ``all_ignored_ok=True`` (a split or
        a micro-batch may hold no real target; its step or evaluation reports that)."""
        V, L = self.config.vocab_size, self.config.max_seq_len
        num_classes = getattr(self, "num_classes", V)  # a classifier's targets are classes
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

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                      kv_cache: Optional[KVCache] = None,
                      token_positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(B, T) ids -> (B, T, d_model) final hidden states.

        With a ``kv_cache`` the ids continue the cached sequence: every layer reads its position
        from the cache, and the cache is advanced by T once every layer has written its keys and
        values. ``token_positions`` ``(T,)`` or ``(B, T)`` gives the tokens other positions than
        ``length..length+T-1`` (packed documents restarting at 0, left padding).
        """
        _, mask = self._door(input_ids, attention_mask, kv_cache, token_positions)
        return self._run(input_ids, mask, kv_cache, token_positions, attentions=None)

    def attention_maps(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                       token_positions: Optional[torch.Tensor] = None) -> list[torch.Tensor]:
        """Per-layer attention weights ``(B, H, T, T)`` of a full (uncached) pass, for looking at."""
        _, mask = self._door(input_ids, attention_mask, None, token_positions)
        attentions: list[torch.Tensor] = []
        self._run(input_ids, mask, None, token_positions, attentions=attentions)
        return attentions

    def _run(self, input_ids: torch.Tensor, mask: Optional[torch.Tensor], kv_cache: Optional[KVCache],
             token_positions: Optional[torch.Tensor], attentions: Optional[list]) -> torch.Tensor:
        """The forward pass itself, on inputs the door has checked: it raises nothing."""
        ids = input_ids.long()
        x = self.token_embedding(ids)  # (B, T, C)
        if self.pos_encoding is not None:
            x = self.pos_encoding(x, kv_cache.length if kv_cache is not None else 0, token_positions)
        x = _canon(self.canon_embed, x, kv_cache)
        x = self.dropout(x)
        for i, block in enumerate(self.blocks):
            ve = self.value_embeds[i](ids) if self.value_embeds is not None else None  # (B, T, H_kv·D)
            if attentions is not None:
                x, w = block(x, mask=mask, kv_cache=kv_cache, token_positions=token_positions,
                             return_weights=True, value_embeds=ve)
                attentions.append(w)
            else:
                x = block(x, mask=mask, kv_cache=kv_cache, token_positions=token_positions, value_embeds=ve)
        if kv_cache is not None:
            kv_cache.advance(ids.shape[1])
        return self.norm_f(x)

    def hooks(self, fns: dict):
        """``with model.hooks({name: fn}): ...`` -- run ``fn(activation, name)`` at the named point
        of every forward inside the block; a returned tensor replaces the activation. Names (as
        TransformerLens writes them) and costs: :mod:`fundamentallm.hooks`."""
        return _hooks.hooks(self, fns)

    def run_with_cache(self, input_ids: torch.Tensor, names=None, **forward_kwargs):
        """``(logits, cache)``: one forward, with the activations named in ``names`` (None: all of
        them) in ``cache`` (a dict, detached). ``forward_kwargs`` go to the forward (``kv_cache``,
        ``attention_mask``, ...). See :mod:`fundamentallm.hooks`."""
        return _hooks.run_with_cache(self, input_ids, names, **forward_kwargs)

    def hook_names(self) -> list[str]:
        """Every hook name of this model, in the order a forward pass reaches them."""
        return _hooks.hook_names(self)

    def moe_aux_loss(self) -> torch.Tensor:
        """Mean load-balancing loss of the mixture-of-experts layers in the last forward (0 if none)."""
        losses = [block.ff.aux_loss for block in self.blocks if isinstance(block.ff, MoEFeedForward)]
        return torch.stack(losses).mean() if losses else torch.zeros(())


@ModelRegistry.register("transformer")
class Transformer(_Backbone):
    """Decoder-only language model. ``forward(input_ids (B, T), targets (B, T) or None,
    kv_cache=None, attention_mask=None)`` always returns ``(logits (B, T, vocab_size), loss or
    None)``; attention weights come from the separate :meth:`attention_maps`. Targets equal to
    -100 are ignored in the loss. With mixture-of-experts layers, in training mode, the loss also
    carries ``moe_aux_loss_coef`` times their load-balancing loss (see ``TransformerConfig``).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_weights:
            # The input embedding maps ids to vectors; the output layer scores vectors against
            # every id. Sharing the matrix saves vocab_size·d_model parameters (Press & Wolf 2017).
            self.lm_head.weight = self.token_embedding.weight

    def forward(self, input_ids: torch.Tensor, targets: Optional[torch.Tensor] = None,
                kv_cache: Optional[KVCache] = None, attention_mask: Optional[torch.Tensor] = None,
                token_positions: Optional[torch.Tensor] = None, logits_to_keep: int = 0):
        """``logits_to_keep=k > 0`` projects only the last ``k`` positions to the vocabulary
        (logits ``(B, k, V)``; Hugging Face's argument): decoding needs the last one only, and
        with a large vocabulary the other rows would cost most of the step."""
        if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or logits_to_keep < 0:
            raise ValueError(f"logits_to_keep={logits_to_keep!r} must be an integer >= 0 (0 keeps every position)")
        if targets is not None and logits_to_keep:
            raise ValueError(f"logits_to_keep={logits_to_keep} cannot be combined with targets: the loss "
                             f"needs every position's logits")
        if targets is not None and isinstance(targets, torch.Tensor) and isinstance(input_ids, torch.Tensor) \
                and targets.shape != input_ids.shape:
            raise ValueError(f"targets must be a tensor with the shape of input_ids {tuple(input_ids.shape)}, "
                             f"got {tuple(targets.shape)}")
        _, mask = self._door(input_ids, attention_mask, kv_cache, token_positions, targets)
        h = self._run(input_ids, mask, kv_cache, token_positions, attentions=None)  # (B, T, C)
        logits = self.lm_head(h[:, -logits_to_keep:] if logits_to_keep else h)  # (B, T or k, V)
        loss = None
        if targets is not None:
            # subtle: half-precision logits are upcast for a stable loss; float64 stays float64.
            flat = logits.flatten(0, 1)
            flat = flat.float() if flat.dtype in (torch.float16, torch.bfloat16) else flat
            loss = F.cross_entropy(flat, targets.flatten().long(), ignore_index=-100)
            if self.training and self.config.moe_experts:
                loss = loss + self.config.moe_aux_loss_coef * self.moe_aux_loss()
        return logits, loss

    def make_kv_cache(self, batch_size: int, device: Optional[torch.device] = None,
                      dtype: Optional[torch.dtype] = None) -> KVCache:
        """An empty :class:`KVCache` for every layer, sized for ``max_seq_len`` positions and
        holding only the ``num_kv_heads`` key/value heads."""
        ref = self.lm_head.weight
        c = self.config
        return KVCache(batch_size, c.kv_heads, c.head_dim, c.max_seq_len, num_layers=len(self.blocks),
                       device=device or ref.device, dtype=dtype or ref.dtype)

    def next_token_logits(self, input_ids: torch.Tensor, kv_cache: Optional[KVCache] = None,
                          attention_mask: Optional[torch.Tensor] = None,
                          token_positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The logits ``(B, V)`` of the token after ``input_ids`` ``(B, T)`` (continuing
        ``kv_cache``'s sequence when given; ``attention_mask``/``token_positions`` as in forward,
        for left-padded prompts): the one call a decoding step makes. Generation
        (:mod:`fundamentallm.generation`) and chapter 10 use it."""
        return self(input_ids, kv_cache=kv_cache, attention_mask=attention_mask, token_positions=token_positions,
                    logits_to_keep=1)[0][:, -1]

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
        """Autoregressive sampling; see :func:`fundamentallm.generation.generate`."""
        from .generation import generate  # here, so that the model does not import the sampler
        return generate(self, input_ids, max_new_tokens, **kwargs)


@ModelRegistry.register("classifier")
class TransformerClassifier(_Backbone):
    """Bidirectional encoder + pooling + linear head.

    ``forward(input_ids (B, T), targets (B,) or None, attention_mask (B, T) or None)`` returns
    ``(logits (B, num_classes), loss or None)``; attention weights come from
    :meth:`attention_maps`. ``pooling="first"`` uses the first token's
    vector (BERT's [CLS]); ``"mean"`` averages the non-padding tokens. The config's ``causal``
    must be False: an encoder lets every token see every other.
    """

    def __init__(self, config: TransformerConfig, num_classes: int, pooling: str = "first") -> None:
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
        if config.causal:
            raise ValueError("TransformerClassifier is a bidirectional encoder: build it with causal=False")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r} is not supported; allowed values: 'first', 'mean'")
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes={num_classes!r} must be an integer >= 2")
        super().__init__(config)
        self.pooling, self.num_classes = pooling, num_classes
        self.head = nn.Linear(config.d_model, num_classes)
        self._init_weights()

    def forward(self, input_ids: torch.Tensor, targets: Optional[torch.Tensor] = None,
                attention_mask: Optional[torch.Tensor] = None):
        _, mask = self._door(input_ids, attention_mask, None, None, targets)
        h = self._run(input_ids, mask, None, None, attentions=None)  # (B, T, C)
        if self.pooling == "first":
            pooled = h[:, 0]
        else:
            keep = (attention_mask.to(h.dtype) if attention_mask is not None
                    else torch.ones(h.shape[:2], dtype=h.dtype, device=h.device)).unsqueeze(-1)  # (B, T, 1)
            pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1)
        logits = self.head(pooled)  # (B, num_classes)
        loss = None
        if targets is not None:
            if tuple(targets.shape) != (logits.shape[0],):
                raise ValueError(f"targets must have shape (B,) = ({logits.shape[0]},) (one class per "
                                 f"sequence), got {tuple(targets.shape)}")
            loss = F.cross_entropy(logits, targets.long())
        return logits, loss
