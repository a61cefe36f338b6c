"""Load Hugging Face GPT-2 and LLaMA weights into :class:`~fundamentallm.model.Transformer`.

The point is a proof, not a convenience: if our ``Transformer`` with GPT-2's (or LLaMA's) weights
gives the same logits as the Hugging Face model, every component -- norms, attention, positions,
feed-forward, tying -- matches the published architecture. ``transformers`` is optional: these
functions accept a model object *or* a plain ``state_dict`` and never download anything.

Weight layouts (``C = d_model``):

* GPT-2 uses ``Conv1D`` layers that store weights as ``(in, out)``; ``nn.Linear`` stores
  ``(out, in)``, so every matrix is transposed. ``c_attn`` is Q, K and V fused, like our ``qkv``.
* LLaMA keeps ``q_proj``, ``k_proj``, ``v_proj`` separate; stacking them row-wise gives exactly
  our fused ``qkv`` weight ``(C + 2·H_kv·D, C)`` (a fused matmul is three matmuls side by side;
  with grouped-query attention K and V have only ``H_kv`` heads). Qwen2, Mistral and Mixtral
  are LLaMA with Q/K/V biases, a sliding window, and a mixture of experts respectively.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch

from .config import TransformerConfig
from .model import Transformer

# HF GPT-2 activation names that are the tanh approximation of GELU (our "gelu").
_GPT2_GELU_TANH = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")


def _split_model(model_or_state_dict: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """-> (state_dict, hf_config or None)."""
    if isinstance(model_or_state_dict, Mapping):
        return dict(model_or_state_dict), None
    if hasattr(model_or_state_dict, "state_dict") and hasattr(model_or_state_dict, "config"):
        return model_or_state_dict.state_dict(), model_or_state_dict.config
    raise TypeError("expected a Hugging Face model (with .state_dict() and .config) or a state dict "
                    f"(a mapping of names to tensors), got {type(model_or_state_dict).__name__}")


def _strip_prefix(sd: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Drop ``prefix`` from keys that carry it (``transformer.`` / ``model.``); keep the others."""
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in sd.items()}


def _take(sd: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in sd:
        raise ValueError(f"state dict has no {key!r}; is this the right architecture? "
                         f"(keys start with {sorted(sd)[:3]} ...)")
    return sd[key].detach()


def _num_layers(sd: dict[str, torch.Tensor], prefix: str) -> int:
    idx = {int(k[len(prefix):].split(".")[0]) for k in sd if k.startswith(prefix)}
    if not idx:
        raise ValueError(f"state dict has no layers named {prefix}<i>.*")
    return max(idx) + 1


def _reject(condition: bool, message: str) -> None:
    if condition:
        raise ValueError(f"unsupported Hugging Face configuration: {message}")


def _load(model: Transformer, weights: dict[str, torch.Tensor]) -> Transformer:
    """Copy ``weights`` (our names) into ``model``; every parameter must be covered."""
    own = model.state_dict()
    missing = sorted(set(own) - set(weights))
    if missing:
        raise ValueError(f"no weights for {missing}")
    for name, value in weights.items():
        if own[name].shape != value.shape:
            raise ValueError(f"{name}: expected shape {tuple(own[name].shape)}, got {tuple(value.shape)}")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in weights.items()}, strict=True)
    return model.eval()


def from_hf_gpt2(model_or_state_dict: Any, num_heads: Optional[int] = None,
                 layer_norm_eps: float = 1e-5) -> Transformer:
    """A :class:`Transformer` equal to a Hugging Face ``GPT2LMHeadModel`` (or ``GPT2Model``).

    ``model_or_state_dict``: the HF model (its config gives every size), or its ``state_dict``,
    in which case ``num_heads`` is required (sizes are read from the tensor shapes). Returns the
    model in eval mode: pre-LN LayerNorm, learned positions, tanh-GELU, biases, tied embeddings.
    """
    sd, hf = _split_model(model_or_state_dict)
    sd = _strip_prefix(sd, "transformer.")
    if hf is not None:
        _reject(getattr(hf, "model_type", "gpt2") != "gpt2", f"model_type={hf.model_type!r}, expected 'gpt2'")
        act = getattr(hf, "activation_function", "gelu_new")
        _reject(act not in _GPT2_GELU_TANH, f"activation_function={act!r}; supported: {_GPT2_GELU_TANH}")
        _reject(not getattr(hf, "scale_attn_weights", True), "scale_attn_weights=False")
        _reject(getattr(hf, "scale_attn_by_inverse_layer_idx", False), "scale_attn_by_inverse_layer_idx=True")
        _reject(getattr(hf, "add_cross_attention", False), "add_cross_attention=True")
        _reject(getattr(hf, "tie_word_embeddings", True) is False, "tie_word_embeddings=False")
        if num_heads is not None and num_heads != hf.n_head:
            raise ValueError(f"num_heads={num_heads} disagrees with the model's config n_head={hf.n_head}")
        num_heads, layer_norm_eps = hf.n_head, hf.layer_norm_epsilon
    if num_heads is None:
        raise ValueError("num_heads is required when loading from a state dict (it is not in the weights)")
    wte, wpe = _take(sd, "wte.weight"), _take(sd, "wpe.weight")
    vocab_size, d_model = wte.shape
    num_layers = _num_layers(sd, "h.")
    d_ff = _take(sd, "h.0.mlp.c_fc.weight").shape[1]
    config = TransformerConfig(
        vocab_size=vocab_size, d_model=d_model, num_heads=num_heads, num_layers=num_layers, d_ff=d_ff,
        max_seq_len=wpe.shape[0], dropout=0.0, norm="layernorm", norm_position="pre",
        pos_encoding="learned", activation="gelu", bias=True, tie_weights=True, causal=True,
        norm_eps=float(layer_norm_eps),
    )
    if "lm_head.weight" in sd and not torch.equal(sd["lm_head.weight"], wte):
        raise ValueError("lm_head.weight differs from wte.weight: GPT-2 ties them, this checkpoint does not")
    w = {"token_embedding.weight": wte, "pos_encoding.weight": wpe,
         "norm_f.weight": _take(sd, "ln_f.weight"), "norm_f.bias": _take(sd, "ln_f.bias")}
    for i in range(num_layers):
        h, b = f"h.{i}.", f"blocks.{i}."
        for ours, theirs in (("norm1", "ln_1"), ("norm2", "ln_2")):
            w[b + ours + ".weight"] = _take(sd, h + theirs + ".weight")
            w[b + ours + ".bias"] = _take(sd, h + theirs + ".bias")
        for ours, theirs in (("attn.qkv", "attn.c_attn"), ("attn.out_proj", "attn.c_proj"),
                             ("ff.up", "mlp.c_fc"), ("ff.down", "mlp.c_proj")):
            w[b + ours + ".weight"] = _take(sd, h + theirs + ".weight").t()  # Conv1D (in, out) -> (out, in)
            w[b + ours + ".bias"] = _take(sd, h + theirs + ".bias")
    w["lm_head.weight"] = wte  # tied: the same Parameter as token_embedding.weight
    return _load(Transformer(config), w)


LLAMA_FAMILY = ("llama", "qwen2", "mistral", "mixtral")


def _rope_from_hf(hf: Any, rope_theta: float) -> tuple[float, Optional[dict]]:
    """-> (rope_base, our rope_scaling) from a HF config (``rope_parameters`` in transformers 5,
    ``rope_theta`` + ``rope_scaling`` in 4.x)."""
    rope = getattr(hf, "rope_parameters", None)
    if rope is None:  # transformers 4.x
        rope = dict(getattr(hf, "rope_scaling", None) or {})
        rope.setdefault("rope_theta", getattr(hf, "rope_theta", rope_theta))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    _reject(rope_type not in ("default", "linear", "llama3"),
            f"rope_type={rope_type!r}; supported: 'default', 'linear', 'llama3'")
    scaling = None
    if rope_type != "default":
        keys = ("factor",) if rope_type == "linear" else (
            "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        scaling = {"rope_type": rope_type, **{k: rope[k] for k in keys}}
    return float(rope.get("rope_theta", rope_theta)), scaling


def from_hf_llama(model_or_state_dict: Any, config: Any = None, num_heads: Optional[int] = None,
                  rms_norm_eps: float = 1e-6, rope_theta: float = 10000.0,
                  tie_word_embeddings: Optional[bool] = None) -> Transformer:
    """A :class:`Transformer` equal to a Hugging Face ``LlamaForCausalLM``, ``Qwen2ForCausalLM``,
    ``MistralForCausalLM`` or ``MixtralForCausalLM``.

    ``model_or_state_dict``: the HF model, or its ``state_dict`` together with either its
    ``config`` or ``num_heads`` (plus ``rms_norm_eps``, ``rope_theta`` if not the defaults; the
    number of key/value heads, Q/K/V biases and experts are read off the weights). Returns the
    model in eval mode: pre-LN RMSNorm, RoPE, SwiGLU, untied embeddings unless the checkpoint ties
    them; grouped-query attention (``num_key_value_heads``), RoPE scaling (``rope_type`` "linear"
    or "llama3"), Qwen2's Q/K/V biases, Mistral's sliding window and Mixtral's experts are
    carried over. Anything else (other RoPE types, per-layer window patterns, a ``head_dim`` other
    than ``hidden_size / num_attention_heads``) raises a ``ValueError`` naming the setting.
    """
    sd, hf = _split_model(model_or_state_dict)
    hf = hf if config is None else config
    sd = _strip_prefix(sd, "model.")
    sliding_window, rope_scaling, moe_top_k = None, None, 2
    if hf is not None:
        model_type = getattr(hf, "model_type", "llama")
        _reject(model_type not in LLAMA_FAMILY, f"model_type={model_type!r}, expected one of {LLAMA_FAMILY}")
        head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        _reject(head_dim * hf.num_attention_heads != hf.hidden_size,
                f"head_dim={head_dim} * num_attention_heads={hf.num_attention_heads} != hidden_size={hf.hidden_size}")
        act = getattr(hf, "hidden_act", "silu")
        _reject(act != "silu", f"hidden_act={act!r}; supported: 'silu'")
        attn_bias, mlp_bias = getattr(hf, "attention_bias", False), getattr(hf, "mlp_bias", False)
        _reject(model_type != "qwen2" and (attn_bias or mlp_bias), f"attention_bias={attn_bias}, "
                f"mlp_bias={mlp_bias}; supported: no biases (Q/K/V biases come with model_type='qwen2')")
        tp = getattr(hf, "pretraining_tp", 1)
        _reject(tp != 1, f"pretraining_tp={tp}")
        rope_theta, rope_scaling = _rope_from_hf(hf, rope_theta)
        if model_type == "qwen2":
            layer_types = set(getattr(hf, "layer_types", None) or ["full_attention"])
            use_window = getattr(hf, "use_sliding_window", False)
            _reject(use_window or layer_types != {"full_attention"},
                    f"use_sliding_window={use_window}, layer_types={sorted(layer_types)} "
                    "(Qwen2's per-layer windows); supported: full attention in every layer")
        if model_type in ("mistral", "mixtral"):
            sliding_window = getattr(hf, "sliding_window", None)
        if model_type == "mixtral":
            jitter = getattr(hf, "router_jitter_noise", 0.0)
            _reject(jitter != 0.0, f"router_jitter_noise={jitter}")
            moe_top_k = hf.num_experts_per_tok
        if num_heads is not None and num_heads != hf.num_attention_heads:
            raise ValueError(f"num_heads={num_heads} disagrees with the config's "
                             f"num_attention_heads={hf.num_attention_heads}")
        num_heads, rms_norm_eps = hf.num_attention_heads, hf.rms_norm_eps
        max_seq_len = hf.max_position_embeddings
        if tie_word_embeddings is None:
            tie_word_embeddings = bool(getattr(hf, "tie_word_embeddings", False))
    else:
        max_seq_len = 2048  # RoPE has no table in the weights; any length works
    if num_heads is None:
        raise ValueError("num_heads (or config=the HF config) is required when loading from a state dict")
    for key in sd:
        _reject(key.endswith("o_proj.bias"), f"bias {key!r}")
    emb = _take(sd, "embed_tokens.weight")
    vocab_size, d_model = emb.shape
    num_layers = _num_layers(sd, "layers.")
    head_dim = d_model // num_heads
    k0 = _take(sd, "layers.0.self_attn.k_proj.weight")
    _reject(k0.shape[0] % head_dim != 0 or num_heads % (k0.shape[0] // head_dim) != 0,
            f"k_proj maps to {k0.shape[0]} channels, not a number of heads of {head_dim} dividing num_heads={num_heads}")
    num_kv_heads = k0.shape[0] // head_dim
    qkv_bias = "layers.0.self_attn.q_proj.bias" in sd
    experts = "layers.0.mlp.experts.gate_up_proj" in sd
    moe_experts = _take(sd, "layers.0.mlp.gate.weight").shape[0] if experts else 0
    d_ff = (_take(sd, "layers.0.mlp.experts.down_proj").shape[2] if experts
            else _take(sd, "layers.0.mlp.gate_proj.weight").shape[0])
    lm_head = sd.get("lm_head.weight")
    if tie_word_embeddings is None:
        tie_word_embeddings = lm_head is None or torch.equal(lm_head, emb)
    if not tie_word_embeddings and lm_head is None:
        raise ValueError("lm_head.weight is missing but tie_word_embeddings=False")
    cfg = TransformerConfig(
        vocab_size=vocab_size, d_model=d_model, num_heads=num_heads, num_layers=num_layers, d_ff=d_ff,
        max_seq_len=max_seq_len, dropout=0.0, norm="rmsnorm", norm_position="pre", pos_encoding="rope",
        activation="swiglu", bias=False, tie_weights=bool(tie_word_embeddings), causal=True,
        norm_eps=float(rms_norm_eps), rope_base=float(rope_theta), num_kv_heads=num_kv_heads,
        sliding_window=sliding_window, rope_scaling=rope_scaling, qkv_bias=qkv_bias,
        moe_experts=moe_experts, moe_top_k=moe_top_k,
    )
    w = {"token_embedding.weight": emb, "norm_f.weight": _take(sd, "norm.weight"),
         "lm_head.weight": emb if tie_word_embeddings else lm_head.detach()}
    for i in range(num_layers):
        h, b = f"layers.{i}.", f"blocks.{i}."
        w[b + "norm1.weight"] = _take(sd, h + "input_layernorm.weight")
        w[b + "norm2.weight"] = _take(sd, h + "post_attention_layernorm.weight")
        # Stacking Q, K, V row-wise is exactly the fused projection: (C + 2·H_kv·D, C).
        w[b + "attn.qkv.weight"] = torch.cat([_take(sd, h + f"self_attn.{p}_proj.weight") for p in "qkv"], 0)
        if qkv_bias:
            w[b + "attn.qkv.bias"] = torch.cat([_take(sd, h + f"self_attn.{p}_proj.bias") for p in "qkv"], 0)
        w[b + "attn.out_proj.weight"] = _take(sd, h + "self_attn.o_proj.weight")
        if experts:
            # Mixtral stores the experts fused: gate_up_proj (E, 2·d_ff, C), down_proj (E, C, d_ff).
            w[b + "ff.router.weight"] = _take(sd, h + "mlp.gate.weight")
            gate_up, down = _take(sd, h + "mlp.experts.gate_up_proj"), _take(sd, h + "mlp.experts.down_proj")
            for e in range(moe_experts):
                w[b + f"ff.experts.{e}.gate.weight"] = gate_up[e, :d_ff]
                w[b + f"ff.experts.{e}.up.weight"] = gate_up[e, d_ff:]
                w[b + f"ff.experts.{e}.down.weight"] = down[e]
        else:
            w[b + "ff.gate.weight"] = _take(sd, h + "mlp.gate_proj.weight")
            w[b + "ff.up.weight"] = _take(sd, h + "mlp.up_proj.weight")
            w[b + "ff.down.weight"] = _take(sd, h + "mlp.down_proj.weight")
    return _load(Transformer(cfg), w)


def permute_rope_weights(weight: torch.Tensor, num_heads: int, to: str = "half") -> torch.Tensor:
    """Reorder the rows of a query or key projection between the two RoPE conventions.

    ``weight``: ``(num_heads·D, ...)`` -- a ``q_proj``/``k_proj`` weight ``(out, in)``, its bias
    ``(out,)``, or a per-head norm gain ``(D,)`` with ``num_heads=1``. ``to="half"`` turns Meta's
    interleaved layout (pair ``k`` = channels ``2k, 2k+1`` of each head) into the half layout
    (pair ``k`` = channels ``k, k + D/2``), exactly as Hugging Face's
    ``convert_llama_weights_to_hf.py`` does (its ``permute``); ``to="interleaved"`` undoes it.
    The attention scores are unchanged: q·k is a sum over channels, and both q and k are
    permuted the same way, so only the pairing that RoPE rotates moves.
    """
    from .positions import check_rope_style

    check_rope_style(to, "to")
    if not isinstance(weight, torch.Tensor) or weight.dim() == 0:
        raise TypeError(f"weight must be a tensor with rows num_heads·head_dim, got {type(weight).__name__}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1 \
            or weight.shape[0] % (2 * num_heads):
        raise ValueError(f"num_heads={num_heads!r} must be a positive integer with 2·num_heads dividing "
                         f"the weight's first dimension {weight.shape[0]} (each head has an even head_dim)")
    rest = tuple(weight.shape[1:])
    D = weight.shape[0] // num_heads
    if to == "half":  # row (h, 2k + j) -> row (h, j·D/2 + k)
        return weight.reshape(num_heads, D // 2, 2, *rest).transpose(1, 2).reshape(weight.shape)
    return weight.reshape(num_heads, 2, D // 2, *rest).transpose(1, 2).reshape(weight.shape)


def convert_rope_style(model: Transformer, style: str) -> Transformer:
    """A copy of ``model`` (a RoPE :class:`Transformer`) with ``rope_style=style`` that computes
    the same logits: the query and key rows of every layer's fused ``qkv`` projection (weight and
    bias) and the QK-norm gains are permuted by :func:`permute_rope_weights`. Converting a model
    already in ``style`` returns an equal copy."""
    from .positions import check_rope_style

    check_rope_style(style)
    c = model.config
    if c.pos_encoding != "rope":
        raise ValueError(f"convert_rope_style needs a model with pos_encoding='rope', got {c.pos_encoding!r}")
    new = Transformer(TransformerConfig.from_dict({**c.to_dict(), "rope_style": style}))
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if style != c.rope_style:
        q_rows, k_rows = c.d_model, c.kv_heads * c.head_dim
        for i in range(c.num_layers):
            for name in (f"blocks.{i}.attn.qkv.weight", f"blocks.{i}.attn.qkv.bias"):
                if name in sd:
                    w = sd[name]
                    q, k, v = w.split([q_rows, k_rows, k_rows], dim=0)
                    sd[name] = torch.cat([permute_rope_weights(q, c.num_heads, to=style),
                                          permute_rope_weights(k, c.kv_heads, to=style), v], 0)
            for norm in ("q_norm", "k_norm"):
                name = f"blocks.{i}.attn.{norm}.weight"
                if name in sd:
                    sd[name] = permute_rope_weights(sd[name], 1, to=style)
    new.load_state_dict(sd)
    return new.train(model.training)
