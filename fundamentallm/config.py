"""Model configuration: one validated dataclass that every model in the package takes.

A bad value fails here, at construction, with a message that names the field, the value and
what is allowed -- not three calls later with a shape error from inside torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Optional

from .recipes import (  # noqa: F401  (re-exported: the lists of allowed values live in recipes.py)
    ACTIVATIONS,
    ATTN_IMPLS,
    CANON_PLACES,
    NORM_POSITIONS,
    NORMS,
    POS_ENCODINGS,
    PRESETS,
    ROPE_SCALING_KEYS,
    ROPE_SCALINGS,
    ROPE_STYLES,
)
from .recipes import check_choice as _check_choice


def _check_int(name: str, value: Any, minimum: int = 1) -> None:
    # subtle: bool is a subclass of int, and True would silently mean 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")
    if value < minimum:
        raise ValueError(f"{name}={value!r} must be an integer >= {minimum}")


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name}={value!r} must be True or False")


@dataclass
class TransformerConfig:
    """Hyperparameters of a decoder-only transformer (or, with ``causal=False``, an encoder).

    Defaults are small enough to train on a laptop CPU; ``TransformerConfig.preset`` gives named
    sizes. ``d_ff=None`` means 4·d_model, or 8/3·d_model rounded up to a multiple of 8 for SwiGLU
    (which has three matrices instead of two; Shazeer 2020 keeps the parameter count equal).

    Modern-decoder options: ``num_kv_heads`` (grouped-query attention, Ainslie et al. 2023; 1 is
    multi-query attention, Shazeer 2019), ``sliding_window`` (Mistral's local attention),
    ``rope_scaling`` (linear, or Llama 3's frequency-dependent rule), ``qkv_bias`` (Qwen2), a
    mixture-of-experts feed-forward (``moe_experts``, ``moe_top_k``), ``qk_norm`` (an RMSNorm
    on each head's queries and keys before RoPE, as in Qwen3 and OLMo 2) and
    ``value_embeddings`` (each layer adds its own learned embedding of the input token to the
    attention values, from the modded-nanogpt speedrun) and ``canon`` (canon layers, Allen-Zhu
    2025: a causal convolution over the last ``canon_kernel`` tokens, one filter per channel,
    added to the token embeddings (``"embed"``) and/or to the input of every attention
    (``"attn"``) or feed-forward (``"ffn"``) sublayer; e.g. ``canon="embed+ffn"``). ``activation="relu2"`` is ReLU squared
    (So et al. 2021). With experts, the router's
    load-balancing loss reaches training through ``Transformer.forward``: in training mode and with
    targets, the returned loss is the cross-entropy plus ``moe_aux_loss_coef`` times the mean of
    the layers' balancing losses; in eval mode it is the cross-entropy alone (so perplexity stays
    a perplexity).
    """

    vocab_size: int = 256
    d_model: int = 128
    num_heads: int = 4
    num_layers: int = 4
    d_ff: Optional[int] = None
    max_seq_len: int = 256
    dropout: float = 0.0
    norm: str = "layernorm"
    norm_position: str = "pre"  # pre-LN (GPT-2 and later) trains stably without warmup tricks
    pos_encoding: str = "learned"
    activation: str = "gelu"  # "gelu" is GPT-2's tanh approximation
    bias: bool = True
    tie_weights: bool = True  # share the token embedding with the output projection (Press & Wolf 2017)
    causal: bool = True
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    # RoPE's channel pairing: "half" (i, i + D/2; GPT-NeoX, Hugging Face) or "interleaved"
    # (2i, 2i+1; the RoPE paper, Meta's LLaMA). Checkpoints without the field load as "half".
    rope_style: str = "half"
    attn_impl: str = "explicit"  # "sdpa" opts into torch's fused kernel, tested equal
    # The modern decoder (chapter 14). Defaults give the GPT-2-era model above.
    num_kv_heads: Optional[int] = None  # key/value heads: None = num_heads (MHA), 1 = MQA, between = GQA
    sliding_window: Optional[int] = None  # each query sees at most this many keys (itself included)
    rope_scaling: Optional[dict] = None  # {"rope_type": "linear" | "llama3", "factor": ..., ...}
    qkv_bias: Optional[bool] = None  # biases on Q/K/V only (Qwen2); None = follow `bias`
    moe_experts: int = 0  # 0 = a dense feed-forward; >= 2 = a mixture of this many experts
    moe_top_k: int = 2  # experts per token
    moe_aux_loss_coef: float = 0.01  # weight of the load-balancing loss added to the training loss
    qk_norm: bool = False  # RMSNorm (with a gain) on each head's queries and keys
    value_embeddings: bool = False  # per layer, v += an embedding of the token (vocab_size x kv dim)
    canon: Optional[str] = None  # short causal convolutions: "embed", "attn", "ffn" joined by "+"
    canon_kernel: int = 4  # their width in tokens (the token itself and canon_kernel - 1 before it)

    def __post_init__(self) -> None:
        _check_int("vocab_size", self.vocab_size)
        _check_int("d_model", self.d_model)
        _check_int("num_heads", self.num_heads)
        _check_int("num_layers", self.num_layers)
        _check_int("max_seq_len", self.max_seq_len)
        if self.d_ff is not None:
            _check_int("d_ff", self.d_ff)
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"num_heads={self.num_heads} must divide d_model={self.d_model} "
                f"(each head gets d_model / num_heads channels)"
            )
        if not isinstance(self.dropout, (int, float)) or isinstance(self.dropout, bool) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout={self.dropout!r} must be a float in [0, 1)")
        if not _is_real(self.norm_eps) or not 0 < self.norm_eps < math.inf:
            raise ValueError(f"norm_eps={self.norm_eps!r} must be a positive float")
        if not _is_real(self.rope_base) or not 1 < self.rope_base < math.inf:
            raise ValueError(f"rope_base={self.rope_base!r} must be a float > 1")
        _check_choice("norm", self.norm, NORMS)
        _check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        _check_choice("pos_encoding", self.pos_encoding, POS_ENCODINGS)
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("attn_impl", self.attn_impl, ATTN_IMPLS)
        _check_choice("rope_style", self.rope_style, ROPE_STYLES)
        for name in ("bias", "tie_weights", "causal", "qk_norm", "value_embeddings"):
            _check_bool(name, getattr(self, name))
        if self.pos_encoding == "rope" and self.head_dim % 2 != 0:
            raise ValueError(f"pos_encoding='rope' needs an even head_dim, got d_model/num_heads={self.head_dim}")
        if self.pos_encoding == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(f"pos_encoding='sinusoidal' needs an even d_model, got d_model={self.d_model}")
        self._check_modern()

    def _check_modern(self) -> None:
        """Grouped-query attention, sliding window, RoPE scaling, Q/K/V bias, mixture of experts."""
        if self.num_kv_heads is not None:
            _check_int("num_kv_heads", self.num_kv_heads)
            if self.num_heads % self.num_kv_heads != 0:
                raise ValueError(f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads} "
                                 f"(each key/value head serves num_heads / num_kv_heads query heads)")
        if self.canon is not None:
            places = self.canon_places if isinstance(self.canon, str) else None
            if not places or any(p not in CANON_PLACES for p in places) or len(set(places)) != len(places):
                raise ValueError(f"canon={self.canon!r} must be None or places joined by '+', each at most "
                                 f"once, from {', '.join(map(repr, CANON_PLACES))} (e.g. 'embed+ffn')")
            if not self.causal:
                raise ValueError(f"canon={self.canon!r} needs causal=True (the convolutions look back "
                                 f"only, as a decoder does)")
        _check_int("canon_kernel", self.canon_kernel)
        if self.value_embeddings and not self.causal:
            raise ValueError("value_embeddings=True needs causal=True (a decoder: the embeddings are "
                             "of the tokens whose values the queries read)")
        if self.sliding_window is not None:
            _check_int("sliding_window", self.sliding_window)
            if not self.causal:
                raise ValueError(f"sliding_window={self.sliding_window} needs causal=True "
                                 f"(the window looks back from each query)")
        if self.rope_scaling is not None:
            r = self.rope_scaling
            if self.pos_encoding != "rope":
                raise ValueError(f"rope_scaling={r!r} needs pos_encoding='rope', got {self.pos_encoding!r}")
            if not isinstance(r, dict):
                raise ValueError(f"rope_scaling={r!r} must be None or a dict with a 'rope_type' key")
            _check_choice("rope_scaling['rope_type']", r.get("rope_type"), ROPE_SCALINGS)
            needed = ROPE_SCALING_KEYS[r["rope_type"]]
            extra = sorted(set(r) - set(needed) - {"rope_type"})
            missing = [k for k in needed if k not in r]
            if extra or missing:
                raise ValueError(f"rope_scaling={r!r}: rope_type={r['rope_type']!r} takes exactly the keys "
                                 f"{list(needed)}; missing {missing}, unknown {extra}")
            for key in needed:
                if not _is_real(r[key]) or not 0 < r[key] < math.inf:
                    raise ValueError(f"rope_scaling[{key!r}]={r[key]!r} must be a positive number")
            if r["rope_type"] == "llama3" and not r["low_freq_factor"] < r["high_freq_factor"]:
                raise ValueError(f"rope_scaling: low_freq_factor={r['low_freq_factor']} must be < "
                                 f"high_freq_factor={r['high_freq_factor']}")
        if self.qkv_bias is not None:
            _check_bool("qkv_bias", self.qkv_bias)
        _check_int("moe_experts", self.moe_experts, minimum=0)
        if self.moe_experts == 1:
            raise ValueError("moe_experts=1 is a dense feed-forward with a useless router; "
                             "use 0 (dense) or >= 2 experts")
        _check_int("moe_top_k", self.moe_top_k)
        if self.moe_experts and self.moe_top_k > self.moe_experts:
            raise ValueError(f"moe_top_k={self.moe_top_k} must be <= moe_experts={self.moe_experts}")
        if not _is_real(self.moe_aux_loss_coef) or not 0 <= self.moe_aux_loss_coef < math.inf:
            raise ValueError(f"moe_aux_loss_coef={self.moe_aux_loss_coef!r} must be a number >= 0")

    @property
    def kv_heads(self) -> int:
        """The number of key/value heads actually used (resolves ``num_kv_heads=None``)."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def attn_qkv_bias(self) -> bool:
        """Whether the Q/K/V projections have biases (resolves ``qkv_bias=None`` to ``bias``)."""
        return self.bias if self.qkv_bias is None else self.qkv_bias

    @property
    def canon_places(self) -> tuple[str, ...]:
        """The places of the canon layers, e.g. ``("embed", "ffn")`` (resolves ``canon=None`` to ``()``)."""
        return tuple(self.canon.split("+")) if self.canon else ()

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def ff_dim(self) -> int:
        """The feed-forward hidden size actually used (resolves ``d_ff=None``)."""
        if self.d_ff is not None:
            return self.d_ff
        if self.activation == "swiglu":
            return 8 * ((int(8 * self.d_model / 3) + 7) // 8)
        return 4 * self.d_model

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> TransformerConfig:
        """A named size (``nano``, ``micro``, ``tiny``, ``gpt2``) with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"preset={name!r} is unknown; available presets: {', '.join(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Build from a dict; unknown keys raise instead of being silently ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TransformerConfig field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**values)
