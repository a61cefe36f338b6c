"""Compute accounting for training a decoder: parameters counted two ways, and FLOPs per token.

Two conventions for the parameter count N:

* Kaplan et al. 2020 count **non-embedding** parameters: everything but the token (and
  position) embeddings. Their loss-vs-size curves line up across depths only in that count.
* Hoffmann et al. 2022 (Chinchilla) count **all** parameters, embeddings included. For a large
  model the two differ by a few per cent; for a tiny character model the (tied) embedding is a
  large share, and the two counts give different exponents (Pearce and Song 2024).

Training FLOPs are about ``C = 6·N·D`` for ``D`` training tokens: 2 FLOPs per parameter per token
for the forward pass (one multiply, one add) and twice that for the backward pass (the gradient
with respect to the input and with respect to the weight). Two terms that the rule leaves out:

* the **attention** scores and their weighted sum, ``2·T·d`` FLOPs each per token per layer in the
  forward pass for a window of ``T`` tokens (the full ``T×T`` matrix, as Chinchilla's appendix F
  and ``FlopCounterMode`` count it; the causal half is computed and masked). Relative to the
  weights' ``24·d²`` per layer (SwiGLU with ``d_ff = 8/3·d``) this is ``T/(6·d)``: small for wide
  models, but a third of the weights' FLOPs again for ``d = 32`` and ``T = 64``;
* the **output layer** (``d·V`` multiply-adds per token), which a tied embedding shares with the
  token embedding: its weights are not in the non-embedding count, but its FLOPs are real.

Element-wise work (norms, softmax, activations, RoPE) is not counted, as in both papers.
"""

from __future__ import annotations

from .config import TransformerConfig

_EMBEDDING_NAMES = ("token_embedding", "pos_encoding", "lm_head", "value_embeds")


def _config_of(model):
    config = getattr(model, "config", None)
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"model must be a fundamentallm Transformer (with a TransformerConfig), "
                        f"got {type(model).__name__}")
    return config


def parameter_counts(model) -> dict[str, int]:
    """``{"non_embedding": ..., "embedding": ..., "total": ...}`` for a ``Transformer``.

    Non-embedding (Kaplan's N): all parameters but token, position and value embeddings and the
    output layer (tied to the token embedding, so counted once, as an embedding)."""
    _config_of(model)
    seen, emb, non_emb = set(), 0, 0
    for name, p in model.named_parameters():
        if id(p) in seen:  # a tied matrix appears once
            continue
        seen.add(id(p))
        if any(part in name for part in _EMBEDDING_NAMES):
            emb += p.numel()
        else:
            non_emb += p.numel()
    return {"non_embedding": non_emb, "embedding": emb, "total": emb + non_emb}


def training_flops_per_token(config: TransformerConfig, seq_len: int) -> dict[str, float]:
    """Training FLOPs (forward + backward, 3x the forward) per token, by term.

    ``weights``: ``6·N_matmul`` for the blocks' weight matrices (attention projections and
    feed-forward); ``attention``: ``6·2·T·d`` per layer (scores ``QKᵀ`` and their weighted sum of
    ``V``); ``output``: ``6·d·V`` (the output layer). ``total`` is their sum. Only a dense decoder
    without mixture-of-experts is supported."""
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
    if getattr(config, "moe_experts", 0):
        raise ValueError("training_flops_per_token counts dense models only (moe_experts must be 0)")
    d, L, V = config.d_model, config.num_layers, config.vocab_size
    kv = config.kv_heads * config.head_dim
    attn_weights = d * d + 2 * d * kv + d * d  # Wq, Wk, Wv, Wo
    ff = (3 if config.activation == "swiglu" else 2) * d * config.ff_dim
    weights = 6 * L * (attn_weights + ff)
    attention = 6 * L * 2 * seq_len * d
    output = 6 * d * V
    return {"weights": float(weights), "attention": float(attention), "output": float(output),
            "total": float(weights + attention + output)}


def compute_budget(n_params: float, n_tokens: float) -> float:
    """``C = 6·N·D`` (Kaplan et al. 2020, Hoffmann et al. 2022), in FLOPs."""
    for name, value in (("n_params", n_params), ("n_tokens", n_tokens)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    return 6.0 * n_params * n_tokens


def tokens_for_budget(budget: float, n_params: float) -> float:
    """The ``D`` that spends ``budget`` FLOPs on a model of ``n_params`` parameters: ``C/(6N)``."""
    for name, value in (("budget", budget), ("n_params", n_params)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    return budget / (6.0 * n_params)
