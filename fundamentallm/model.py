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

from . import doors
from . import hooks as _hooks
from .attention import MultiHeadAttention
from .cache import KVCache
from .canon import CanonLayer
from .config import TransformerConfig
from .feedforward import FeedForward
from .moe import MoEFeedForward
from .norms import make_norm
from .positions import RotaryEmbedding, create_positional_encoding
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
    ``check_inputs=False`` (a model's blocks): its attention leaves the input and mask unchecked.
    """

    def __init__(self, config: TransformerConfig, layer_idx: int = 0,
                 rope: Optional[RotaryEmbedding] = None, check_inputs: bool = True) -> None:
        super().__init__()
        c = config
        self.norm_position = c.norm_position
        self.norm1 = make_norm(c.norm, c.d_model, eps=c.norm_eps, bias=c.bias)
        self.attn = MultiHeadAttention(c.d_model, c.num_heads, dropout=c.dropout, bias=c.bias,
                                       causal=c.causal, rope=rope, use_sdpa=c.attn_impl == "sdpa",
                                       num_kv_heads=c.kv_heads, qkv_bias=c.attn_qkv_bias,
                                       sliding_window=c.sliding_window, qk_norm=c.qk_norm,
                                       norm_eps=c.norm_eps, layer_idx=layer_idx, check_inputs=check_inputs)
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


class _Backbone(nn.Module):
    """Embeddings, positions and blocks shared by the decoder and the encoder."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        c = self.config = doors.check_config(config)
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_encoding = None
        self.rope = None
        if c.pos_encoding == "rope":
            # the model checks positions once, at its door: its position modules check nothing
            self.rope = RotaryEmbedding(c.head_dim, c.max_seq_len, base=c.rope_base, scaling=c.rope_scaling,
                                        style=c.rope_style, check_inputs=False)
        else:
            self.pos_encoding = create_positional_encoding(c.pos_encoding, c.d_model, c.max_seq_len,
                                                           check_inputs=False)
        self.dropout = nn.Dropout(c.dropout)
        self.canon_embed = CanonLayer(c.d_model, c.canon_kernel, key="embed") if "embed" in c.canon_places else None
        # the door checked the input and the mask once, for every layer: the blocks check neither
        self.blocks = nn.ModuleList(TransformerBlock(c, i, rope=self.rope, check_inputs=False)
                                    for i in range(c.num_layers))
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

    def check_values(self, input_ids: Optional[torch.Tensor] = None, targets: Optional[torch.Tensor] = None,
                     attention_mask: Optional[torch.Tensor] = None,
                     token_positions: Optional[torch.Tensor] = None, all_ignored_ok: bool = False) -> None:
        """Raise a clear error if a value is out of place (a token id outside the vocabulary,
        targets that are not class ids or -100, a mask that is not 0/1, a position outside
        ``[0, max_seq_len)``), with one host read: :func:`fundamentallm.doors.check_values`."""
        doors.check_values(self, input_ids, targets, attention_mask, token_positions, all_ignored_ok)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                      kv_cache: Optional[KVCache] = None,
                      token_positions: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(B, T) ids -> (B, T, d_model) final hidden states.

        With a ``kv_cache`` the ids continue the cached sequence: every layer reads its position
        from the cache, and the cache is advanced by T once every layer has written its keys and
        values. ``token_positions`` ``(T,)`` or ``(B, T)`` gives the tokens other positions than
        ``length..length+T-1`` (packed documents restarting at 0, left padding).
        """
        mask = doors.check_call(self, input_ids, attention_mask, kv_cache, token_positions)
        return self._run(input_ids, mask, kv_cache, token_positions, attentions=None)

    def attention_maps(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                       token_positions: Optional[torch.Tensor] = None) -> list[torch.Tensor]:
        """Per-layer attention weights ``(B, H, T, T)`` of a full (uncached) pass, for looking at."""
        mask = doors.check_call(self, input_ids, attention_mask, None, token_positions)
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
        doors.check_decoder_args(input_ids, targets, logits_to_keep)
        mask = doors.check_call(self, input_ids, attention_mask, kv_cache, token_positions, targets)
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
        doors.check_classifier(config, num_classes, pooling)
        super().__init__(config)
        self.pooling, self.num_classes = pooling, num_classes
        self.head = nn.Linear(config.d_model, num_classes)
        self._init_weights()

    def forward(self, input_ids: torch.Tensor, targets: Optional[torch.Tensor] = None,
                attention_mask: Optional[torch.Tensor] = None):
        mask = doors.check_call(self, input_ids, attention_mask, None, None, targets)
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
            doors.check_class_targets(targets, logits.shape[0])
            loss = F.cross_entropy(logits, targets.long())
        return logits, loss
