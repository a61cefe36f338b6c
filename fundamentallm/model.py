"""The transformer: a block, a decoder-only language model (GPT-2 style, Radford et al. 2019),
and an encoder classifier (BERT style, Devlin et al. 2019).

Read bottom-up: ``TransformerBlock`` (attention + feed-forward, each with a residual connection
and a norm), then ``Transformer`` (embeddings -> blocks -> norm -> tied output projection).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVCache, MultiHeadAttention, padding_mask
from .canon import CanonLayer
from .config import TransformerConfig
from .feedforward import FeedForward
from .generation import generate
from .moe import MoEFeedForward
from .norms import make_norm
from .positions import RotaryEmbedding, create_positional_encoding
from .registry import ModelRegistry

POOLINGS = ("first", "mean")


def _canon(canon: Optional[CanonLayer], h: torch.Tensor, kv_cache: Optional[KVCache], key,
           start: int) -> torch.Tensor:
    """``h`` through a canon layer when the config asks for one at this place (its recent inputs
    kept in the cache's ``conv`` under ``key`` while decoding), else ``h`` unchanged."""
    if canon is None:
        return h
    return canon(h, state=kv_cache.conv if kv_cache is not None else None, key=key, start=start)


class TransformerBlock(nn.Module):
    """One layer. Input/output ``(B, T, d_model)``.

    pre-LN  (GPT-2 and later): ``x = x + attn(norm1(x))``; ``x = x + ff(norm2(x))``
    post-LN (Vaswani et al.):  ``x = norm1(x + attn(x))``; ``x = norm2(x + ff(x))``
    With canon layers (``config.canon``) the input of ``attn`` and/or ``ff`` passes through one first.
    """

    def __init__(self, config: TransformerConfig, rope: Optional[RotaryEmbedding] = None) -> None:
        super().__init__()
        c = config
        self.norm_position = c.norm_position
        self.norm1 = make_norm(c.norm, c.d_model, eps=c.norm_eps, bias=c.bias)
        self.attn = MultiHeadAttention(c.d_model, c.num_heads, dropout=c.dropout, bias=c.bias,
                                       causal=c.causal, rope=rope, use_sdpa=c.attn_impl == "sdpa",
                                       num_kv_heads=c.kv_heads, qkv_bias=c.attn_qkv_bias,
                                       sliding_window=c.sliding_window, qk_norm=c.qk_norm,
                                       norm_eps=c.norm_eps)
        self.norm2 = make_norm(c.norm, c.d_model, eps=c.norm_eps, bias=c.bias)
        if c.moe_experts:
            self.ff = MoEFeedForward(c.d_model, c.ff_dim, c.moe_experts, top_k=c.moe_top_k,
                                     activation=c.activation, dropout=c.dropout, bias=c.bias)
        else:
            self.ff = FeedForward(c.d_model, c.ff_dim, activation=c.activation, dropout=c.dropout, bias=c.bias)
        self.resid_dropout = nn.Dropout(c.dropout)
        # Canon layers (optional): a short causal convolution on each sublayer's input.
        self.canon_attn = CanonLayer(c.d_model, c.canon_kernel) if "attn" in c.canon_places else None
        self.canon_ffn = CanonLayer(c.d_model, c.canon_kernel) if "ffn" in c.canon_places else None

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None,
                kv_cache: Optional[KVCache] = None, start_pos: int = 0, layer: int = 0,
                return_weights: bool = False, value_embeds: Optional[torch.Tensor] = None):
        pre = self.norm_position == "pre"
        h = _canon(self.canon_attn, self.norm1(x) if pre else x, kv_cache, (layer, "attn"), start_pos)
        out = self.attn(h, mask=mask, kv_cache=kv_cache, start_pos=start_pos, layer=layer,
                        return_weights=return_weights, value_embeds=value_embeds)
        a, w = out if return_weights else (out, None)
        if pre:
            x = x + self.resid_dropout(a)
            x = x + self.ff(_canon(self.canon_ffn, self.norm2(x), kv_cache, (layer, "ffn"), start_pos))
        else:
            x = self.norm1(x + self.resid_dropout(a))
            x = self.norm2(x + self.ff(_canon(self.canon_ffn, x, kv_cache, (layer, "ffn"), start_pos)))
        return (x, w) if return_weights else x


def _attention_mask(attention_mask: Optional[torch.Tensor], input_ids: torch.Tensor,
                    num_keys: int) -> Optional[torch.Tensor]:
    """Validate a ``(B, num_keys)`` 1/0 attention mask and turn it into a ``(B, 1, 1, num_keys)``
    boolean key-padding mask (``num_keys`` counts cached positions too)."""
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be a torch.Tensor, got {type(attention_mask).__name__}")
    expected = (input_ids.shape[0], num_keys)
    if tuple(attention_mask.shape) != expected:
        raise ValueError(f"attention_mask must have shape (B, T) = {expected} (1 = token, 0 = padding), "
                         f"got {tuple(attention_mask.shape)}")
    return padding_mask(attention_mask)


# --- input validation (issue 15): clear errors instead of torch's, or of a silently wrong loss ---

_POSITION_TABLE_LIMIT = 8 * 2**30  # bytes; Llama 3's 128k context x 4096 in fp32 is 2 GiB


def _check_table_sizes(config: TransformerConfig) -> None:
    """Refuse a config whose position tables alone would not fit in memory (``max_seq_len=10**9``
    would otherwise start a 256 GB allocation)."""
    table = config.max_seq_len * config.d_model * 4  # bytes of one fp32 (max_seq_len, d_model) table
    if table > _POSITION_TABLE_LIMIT:
        raise ValueError(f"max_seq_len={config.max_seq_len} with d_model={config.d_model} needs "
                         f"{table / 2**30:.0f} GiB for one position table (at most "
                         f"{_POSITION_TABLE_LIMIT // 2**30} GiB allowed); choose a smaller max_seq_len")


def _validate_inputs(input_ids, targets, attention_mask, num_classes: int) -> None:
    """Checks ``forward`` runs first: an empty batch, targets that are not integer class ids in
    ``[0, num_classes)`` or -100, targets that are all -100 (a 0/0 loss), a mask that is not 0/1.
    One device sync covers the value checks; the details are computed only on failure."""
    if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and input_ids.shape[0] == 0:
        raise ValueError(f"input_ids holds a batch of 0 sequences (shape {tuple(input_ids.shape)}); "
                         f"pass at least one")
    checks = []
    if targets is not None:
        if not isinstance(targets, torch.Tensor):
            raise TypeError(f"targets must be a torch.Tensor of integer ids (-100 = ignore), got "
                            f"{type(targets).__name__}")
        if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
            raise TypeError(f"targets must be an integer tensor of ids (-100 = ignore), got dtype "
                            f"{targets.dtype}; a float tensor would be truncated to other ids")
        real = targets != -100
        out_of_range = real & ((targets < 0) | (targets >= num_classes))
        checks += [real.any(), ~out_of_range.any()]
    if isinstance(attention_mask, torch.Tensor) and attention_mask.dtype != torch.bool:
        checks.append(((attention_mask == 0) | (attention_mask == 1)).all())  # False for NaN too
    if checks and not bool(torch.stack(checks).all()):
        if targets is not None and not bool(checks[0]):
            raise ValueError("targets are all -100 (ignored): the mean loss would be 0/0 = NaN; "
                             "pass at least one real target")
        if targets is not None and not bool(checks[1]):
            bad = targets[out_of_range][0].item()
            raise ValueError(f"targets contain {bad}, outside [0, {num_classes}) (-100 marks an "
                             f"ignored position)")
        raise ValueError("attention_mask must hold only 1 (token) and 0 (padding); it contains other "
                         "values (or NaN/inf)")


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
        self.dropout = nn.Dropout(c.dropout)
        self.canon_embed = CanonLayer(c.d_model, c.canon_kernel) if "embed" in c.canon_places else None
        self.blocks = nn.ModuleList(TransformerBlock(c, rope=self.rope) for _ in range(c.num_layers))
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

    def _check_ids(self, input_ids: torch.Tensor, start_pos: int) -> None:
        if not isinstance(input_ids, torch.Tensor):
            raise TypeError(f"input_ids must be a torch.Tensor of token ids, got {type(input_ids).__name__}")
        if input_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise TypeError(f"input_ids must be an integer tensor, got dtype {input_ids.dtype}")
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape (B, T), got {tuple(input_ids.shape)}")
        T = input_ids.shape[1]
        if T == 0:
            raise ValueError("input_ids is empty (T=0)")
        if start_pos + T > self.config.max_seq_len:
            raise ValueError(f"sequence length {start_pos + T} exceeds max_seq_len={self.config.max_seq_len}")
        lo, hi = int(input_ids.min()), int(input_ids.max())
        if lo < 0 or hi >= self.config.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.config.vocab_size})")

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                      kv_cache: Optional[KVCache] = None) -> torch.Tensor:
        """(B, T) ids -> (B, T, d_model) final hidden states.

        With a ``kv_cache`` the ids continue the cached sequence: their position offset is the
        cache's ``length``, read once here and passed to every layer; the cache is advanced by T
        once every layer has written its keys and values.
        """
        return self._run(input_ids, attention_mask, kv_cache, attentions=None)

    def attention_maps(self, input_ids: torch.Tensor,
                       attention_mask: Optional[torch.Tensor] = None) -> list[torch.Tensor]:
        """Per-layer attention weights ``(B, H, T, T)`` of a full (uncached) pass, for looking at."""
        attentions: list[torch.Tensor] = []
        self._run(input_ids, attention_mask, None, attentions=attentions)
        return attentions

    def _run(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor],
             kv_cache: Optional[KVCache], attentions: Optional[list]) -> torch.Tensor:
        if kv_cache is not None and not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache must be a KVCache (see make_kv_cache), got {type(kv_cache).__name__}")
        start = kv_cache.length if kv_cache is not None else 0  # the position offset, read once
        self._check_ids(input_ids, start)
        if kv_cache is not None and kv_cache.num_layers != len(self.blocks):
            raise ValueError(f"kv_cache has {kv_cache.num_layers} layers, the model has {len(self.blocks)}")
        T = input_ids.shape[1]
        mask = _attention_mask(attention_mask, input_ids, start + T)
        x = self.token_embedding(input_ids.long())  # (B, T, C)
        if self.pos_encoding is not None:
            x = self.pos_encoding(x, start)
        x = _canon(self.canon_embed, x, kv_cache, "embed", start)
        x = self.dropout(x)
        ids = input_ids.long()
        for i, block in enumerate(self.blocks):
            ve = self.value_embeds[i](ids) if self.value_embeds is not None else None  # (B, T, H_kv·D)
            if attentions is not None:
                x, w = block(x, mask=mask, kv_cache=kv_cache, start_pos=start, layer=i, return_weights=True,
                             value_embeds=ve)
                attentions.append(w)
            else:
                x = block(x, mask=mask, kv_cache=kv_cache, start_pos=start, layer=i, value_embeds=ve)
        if kv_cache is not None:
            kv_cache.advance(T)
        return self.norm_f(x)

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
                kv_cache: Optional[KVCache] = None, attention_mask: Optional[torch.Tensor] = None):
        _validate_inputs(input_ids, targets, attention_mask, self.config.vocab_size)
        h = self.hidden_states(input_ids, attention_mask=attention_mask, kv_cache=kv_cache)  # (B, T, C)
        logits = self.lm_head(h)  # (B, T, V)
        loss = None
        if targets is not None:
            if not isinstance(targets, torch.Tensor) or targets.shape != input_ids.shape:
                raise ValueError(f"targets must be a tensor with the shape of input_ids {tuple(input_ids.shape)}, "
                                 f"got {tuple(getattr(targets, 'shape', ())) or type(targets).__name__}")
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

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, **kwargs) -> torch.Tensor:
        """Autoregressive sampling; see :func:`fundamentallm.generation.generate`."""
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
        _validate_inputs(input_ids, targets, attention_mask, self.num_classes)
        h = self.hidden_states(input_ids, attention_mask=attention_mask)  # (B, T, C)
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
