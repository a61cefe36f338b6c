"""Load Hugging Face GPT-2 and LLaMA weights into :class:`~fundamentallm.model.Transformer`.

The point is a proof, not a convenience: if our ``Transformer`` with GPT-2's (or LLaMA's) weights
gives the same logits as the Hugging Face model, every component -- norms, attention, positions,
feed-forward, tying -- matches the published architecture. ``transformers`` is optional: these
functions accept a model object *or* a plain ``state_dict`` and never download anything.

Weight layouts (``C = d_model``):

* GPT-2 uses ``Conv1D`` layers that store weights as ``(in, out)``; ``nn.Linear`` stores
  ``(out, in)``, so every matrix is transposed. ``c_attn`` is Q, K and V fused, like our ``qkv``.
* LLaMA keeps ``q_proj``, ``k_proj``, ``v_proj`` separate; stacking them row-wise gives exactly
  our fused ``qkv`` weight ``(3C, C)`` (a fused matmul is three matmuls side by side).
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


def from_hf_llama(model_or_state_dict: Any, config: Any = None, num_heads: Optional[int] = None,
                  rms_norm_eps: float = 1e-6, rope_theta: float = 10000.0,
                  tie_word_embeddings: Optional[bool] = None) -> Transformer:
    """A :class:`Transformer` equal to a Hugging Face ``LlamaForCausalLM``.

    ``model_or_state_dict``: the HF model, or its ``state_dict`` together with either its
    ``config`` (a ``LlamaConfig``) or ``num_heads`` (plus ``rms_norm_eps``, ``rope_theta`` if not
    the defaults). Returns the model in eval mode: pre-LN RMSNorm, RoPE, SwiGLU, no biases, untied
    embeddings unless the checkpoint ties them. Grouped-query attention and RoPE scaling are
    rejected with a clear error (our attention has one K/V head per query head, unscaled RoPE).
    """
    sd, hf = _split_model(model_or_state_dict)
    hf = hf if config is None else config
    sd = _strip_prefix(sd, "model.")
    if hf is not None:
        _reject(getattr(hf, "model_type", "llama") != "llama", f"model_type={hf.model_type!r}, expected 'llama'")
        kv = getattr(hf, "num_key_value_heads", None) or hf.num_attention_heads
        _reject(kv != hf.num_attention_heads, f"num_key_value_heads={kv} != num_attention_heads="
                f"{hf.num_attention_heads} (grouped-query attention)")
        head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        _reject(head_dim * hf.num_attention_heads != hf.hidden_size,
                f"head_dim={head_dim} * num_attention_heads={hf.num_attention_heads} != hidden_size={hf.hidden_size}")
        _reject(getattr(hf, "hidden_act", "silu") != "silu", f"hidden_act={hf.hidden_act!r}; supported: 'silu'")
        attn_bias, mlp_bias = getattr(hf, "attention_bias", False), getattr(hf, "mlp_bias", False)
        _reject(attn_bias or mlp_bias, f"attention_bias={attn_bias}, mlp_bias={mlp_bias}; supported: no biases")
        _reject(getattr(hf, "pretraining_tp", 1) != 1, f"pretraining_tp={hf.pretraining_tp}")
        rope = getattr(hf, "rope_parameters", None)  # transformers >= 5
        if rope is not None:
            rope_type = rope.get("rope_type", rope.get("type", "default"))
            _reject(rope_type != "default", f"rope_type={rope_type!r} (RoPE scaling); supported: 'default'")
            rope_theta = rope["rope_theta"]
        else:  # transformers 4.x
            _reject(getattr(hf, "rope_scaling", None) is not None, f"rope_scaling={hf.rope_scaling!r}")
            rope_theta = getattr(hf, "rope_theta", rope_theta)
        if num_heads is not None and num_heads != hf.num_attention_heads:
            raise ValueError(f"num_heads={num_heads} disagrees with the config's "
                             f"num_attention_heads={hf.num_attention_heads}")
        num_heads, rms_norm_eps = hf.num_attention_heads, hf.rms_norm_eps
        max_seq_len = hf.max_position_embeddings
        if tie_word_embeddings is None:
            tie_word_embeddings = bool(getattr(hf, "tie_word_embeddings", False))
    else:
        max_seq_len = None
    if num_heads is None:
        raise ValueError("num_heads (or config=LlamaConfig) is required when loading from a state dict")
    if max_seq_len is None:
        max_seq_len = 2048  # RoPE has no table in the weights; any length works
    for key in sd:
        _reject(key.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias", "o_proj.bias")), f"bias {key!r}")
    emb = _take(sd, "embed_tokens.weight")
    vocab_size, d_model = emb.shape
    num_layers = _num_layers(sd, "layers.")
    k0 = _take(sd, "layers.0.self_attn.k_proj.weight")
    _reject(k0.shape[0] != d_model, f"k_proj maps to {k0.shape[0]} channels, not d_model={d_model} "
            "(grouped-query attention)")
    d_ff = _take(sd, "layers.0.mlp.gate_proj.weight").shape[0]
    lm_head = sd.get("lm_head.weight")
    if tie_word_embeddings is None:
        tie_word_embeddings = lm_head is None or torch.equal(lm_head, emb)
    if not tie_word_embeddings and lm_head is None:
        raise ValueError("lm_head.weight is missing but tie_word_embeddings=False")
    cfg = TransformerConfig(
        vocab_size=vocab_size, d_model=d_model, num_heads=num_heads, num_layers=num_layers, d_ff=d_ff,
        max_seq_len=max_seq_len, dropout=0.0, norm="rmsnorm", norm_position="pre", pos_encoding="rope",
        activation="swiglu", bias=False, tie_weights=bool(tie_word_embeddings), causal=True,
        norm_eps=float(rms_norm_eps), rope_base=float(rope_theta),
    )
    w = {"token_embedding.weight": emb, "norm_f.weight": _take(sd, "norm.weight"),
         "lm_head.weight": emb if tie_word_embeddings else lm_head.detach()}
    for i in range(num_layers):
        h, b = f"layers.{i}.", f"blocks.{i}."
        w[b + "norm1.weight"] = _take(sd, h + "input_layernorm.weight")
        w[b + "norm2.weight"] = _take(sd, h + "post_attention_layernorm.weight")
        # Stacking Q, K, V row-wise is exactly the fused projection: (3C, C).
        w[b + "attn.qkv.weight"] = torch.cat([_take(sd, h + f"self_attn.{p}_proj.weight") for p in "qkv"], 0)
        w[b + "attn.out_proj.weight"] = _take(sd, h + "self_attn.o_proj.weight")
        w[b + "ff.gate.weight"] = _take(sd, h + "mlp.gate_proj.weight")
        w[b + "ff.up.weight"] = _take(sd, h + "mlp.up_proj.weight")
        w[b + "ff.down.weight"] = _take(sd, h + "mlp.down_proj.weight")
    return _load(Transformer(cfg), w)
