"""Every list of allowed values and every named recipe of the package, in one place (no torch).

The config (``TransformerConfig``, ``TrainConfig``), the layers, the command line, the
benchmarks and the book read their choices from here, so that a new activation or optimizer is
added once. Importing this module is instant (it imports nothing heavy): the command line's
``--help`` lists the choices without loading PyTorch.

The recipes are the CPU training budget's (``benchmarks/train_budget.py``, the book's records
page): ``baseline`` is nanoGPT's CPU recipe, ``ours`` what the course teaches at the same size
and budget, ``record`` ours plus the speedruns' ingredients. ``python -m fundamentallm train
--recipe NAME`` trains one on the budget's terms (``BUDGET``).
"""

from __future__ import annotations

from typing import Any

# --- the model (TransformerConfig) ---------------------------------------------------------------
NORMS = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
POS_ENCODINGS = ("learned", "sinusoidal", "rope", "none")
ACTIVATIONS = ("gelu", "relu", "swiglu", "relu2")
ATTN_IMPLS = ("explicit", "sdpa")
ROPE_SCALINGS = ("linear", "llama3")
ROPE_STYLES = ("half", "interleaved")  # which channels RoPE pairs (positions.RotaryEmbedding)
CANON_PLACES = ("embed", "attn", "ffn")  # where canon layers go (fundamentallm/canon.py)
POOLINGS = ("first", "mean")  # TransformerClassifier
# The keys each RoPE scaling rule takes (besides "rope_type"), as in Hugging Face's configs.
ROPE_SCALING_KEYS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}

# Named sizes for teaching and benchmarks. Sizes only: architecture choices (norm, positions,
# activation, ...) are passed as overrides, e.g. preset("nano", pos_encoding="rope").
PRESETS: dict[str, dict[str, Any]] = {
    # ~0.1M parameters with a 65-character vocabulary: trains in seconds on a laptop CPU.
    "nano": dict(d_model=64, num_heads=4, num_layers=2, max_seq_len=64),
    # ~0.8M parameters: the size of the well-known minimal-GPT CPU recipe.
    "micro": dict(d_model=128, num_heads=4, num_layers=4, max_seq_len=128),
    # ~3-5M parameters: minutes on a CPU, seconds on a GPU.
    "tiny": dict(d_model=256, num_heads=8, num_layers=6, max_seq_len=256),
    # GPT-2 small (124M with the GPT-2 vocabulary): for speed benchmarks and weight import.
    "gpt2": dict(vocab_size=50257, d_model=768, num_heads=12, num_layers=12, max_seq_len=1024),
}

# The architecture the course ends with (the CLI's `train` without --recipe): RoPE, RMSNorm,
# SwiGLU, no biases, the fused attention.
MODERN = dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False, attn_impl="sdpa")

# --- training (TrainConfig) ----------------------------------------------------------------------
SCHEDULES = ("cosine", "inverse_sqrt", "constant", "wsd")
OPTIMIZERS = ("adamw", "muon")
SAMPLINGS = ("random", "epoch")  # how training windows are drawn (data.DataSource)
# "bf16-native": bf16 where the device multiplies it natively (utils.native_bf16), float32 elsewhere
PRECISIONS = ("auto", "bf16", "bf16-native", "fp16", "off")
DEVICES = ("auto", "cpu", "cuda", "mps", "meta")

# --- the CPU training budget and its recipes -----------------------------------------------------
# The well-known minimal GPT's CPU recipe: 2000 steps x batch 12 x 64 tokens = 1,536,000
# training tokens, at most 0.81M parameters, one character per token, the last 10% of the text
# for validation (its whole loss: every non-overlapping 64-token window), seed 1337.
BUDGET = dict(steps=2000, batch_size=12, block_size=64, max_params=810_000, val_fraction=0.1, seed=1337,
              tokenizer="char")

RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    # nanoGPT's CPU recipe (config/train_shakespeare_char.py with the README's CPU overrides).
    "baseline": dict(
        model=dict(d_model=128, num_heads=4, num_layers=4, norm="layernorm", pos_encoding="learned",
                   activation="gelu", bias=False, tie_weights=True, attn_impl="sdpa"),
        train=dict(lr=1e-3, min_lr=1e-4, warmup_steps=100, betas=(0.9, 0.99), weight_decay=0.1,
                   grad_clip=1.0),
    ),
    # The course's choices at the same size and budget, with AdamW; matrix products in bf16
    # (autocast; the weights, the optimizer and the attention stay float32) on a CPU with bf16
    # instructions, in float32 on one without ("bf16-native": converted in software, bf16 products
    # are slower than float32's there).
    "ours": dict(
        model=dict(d_model=144, num_heads=8, num_layers=3, norm="rmsnorm", pos_encoding="rope",
                   activation="swiglu", bias=False, tie_weights=True, attn_impl="sdpa"),
        train=dict(lr=2.5e-3, min_lr=2.5e-5, warmup_steps=100, betas=(0.9, 0.99), weight_decay=0.1,
                   grad_clip=1.0, mixed_precision="bf16-native"),
    ),
    # The record: ours plus what the 2024-2026 speedruns learned -- Muon for the hidden
    # matrices, QK-norm, value embeddings and an untied output layer (d_ff 368 instead of 384
    # keeps python-docs' 105-character vocabulary within the parameter limit) -- and canon
    # layers (Allen-Zhu 2025) on the token embeddings and before every attention and
    # feed-forward network. torch.compile (its kernels fuse the many small operations a step of
    # this size is made of; benchmarks/README.md, "Made faster") pays for 6 heads, canon layers
    # before attention too, and a higher Muon rate; 4 Newton-Schulz iterations instead of 5.
    # Weight decay on the Muon matrices (0.15) and a higher AdamW rate: python-docs, 3.7 passes
    # over its training text in this budget, overfits without the decay. Windows drawn without
    # replacement (sampling="epoch"): nanoGPT's random windows leave about e^-1.5 = 22% of Tiny
    # Shakespeare's training text unseen after its 1.5 passes; here every token (but the text's ends)
    # is seen once a pass.
    "record": dict(
        model=dict(d_model=144, num_heads=6, num_layers=3, d_ff=368, norm="rmsnorm", pos_encoding="rope",
                   activation="swiglu", bias=False, tie_weights=False, qk_norm=True, value_embeddings=True,
                   canon="embed+attn+ffn", attn_impl="sdpa"),
        train=dict(lr=3.5e-3, min_lr=2.5e-5, warmup_steps=100, betas=(0.9, 0.99), weight_decay=0.1,
                   grad_clip=1.0, mixed_precision="bf16-native", optimizer="muon", muon_lr=0.03, muon_weight_decay=0.15,
                   muon_ns_steps=4, compile=True, sampling="epoch"),
    ),
}


def configs(name: str, vocab_size: int, model: dict | None = None,
            train: dict | None = None) -> tuple[dict, dict]:
    """Recipe ``name`` on the CPU budget's terms, plus overrides -> (``TransformerConfig``
    keyword arguments, ``TrainConfig`` keyword arguments). The one assembler: ``train --recipe``
    and ``benchmarks/train_budget.py`` both build their runs with it.

    Later wins: the budget's terms, then the recipe, then ``model``/``train`` (an override always
    wins, even one equal to the recipe's value). Unless ``train`` sets ``warmup_steps``, a run
    shorter than the recipe's warmup warms up throughout (``min(warmup_steps, max_steps)``).
    Example: ``configs("record", 105, train={"seed": 0})[1]["seed"] == 0``.
    """
    check_choice("recipe", name, RECIPES)
    recipe, model, train = RECIPES[name], model or {}, train or {}
    model_kwargs = {"vocab_size": vocab_size, "max_seq_len": BUDGET["block_size"], "dropout": 0.0,
                    **recipe["model"], **model}
    train_kwargs = {"max_steps": BUDGET["steps"], "batch_size": BUDGET["batch_size"], "seed": BUDGET["seed"],
                    "eval_interval": 0, **recipe["train"], **train}
    if "warmup_steps" not in train:
        train_kwargs["warmup_steps"] = min(recipe["train"].get("warmup_steps", 0), train_kwargs["max_steps"])
    return model_kwargs, train_kwargs


def check_choice(name: str, value: Any, allowed) -> None:
    """Raise ``ValueError`` naming ``name``, ``value`` and the allowed values unless ``value`` is one."""
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; allowed values: {', '.join(map(repr, allowed))}")
