"""FundamentaLLM: the reference components of an executable course on transformer language models.

Each module holds one idea; the book builds each piece from scratch and proves it equal to these.

The names below are imported on first use (PEP 562), so ``import fundamentallm`` -- and with it
``python -m fundamentallm --help`` -- does not pay for importing PyTorch until a name needs it.
``from fundamentallm import Transformer`` works exactly as an eager import would.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "KVCache": "cache", "MultiHeadAttention": "attention", "causal_mask": "attention",
    "padding_mask": "attention", "scaled_dot_product_attention": "attention",
    "sliding_window_mask": "attention",
    "CanonLayer": "canon",
    "load_checkpoint": "checkpoint", "save_checkpoint": "checkpoint",
    "TransformerConfig": "config",
    "TextDataset": "data", "digit_operations": "tasks", "load_corpus": "data", "train_val_split": "data",
    "FeedForward": "feedforward",
    "Transformer": "model", "TransformerBlock": "model", "TransformerClassifier": "model",
    "block_sublayers": "model",
    "MoEFeedForward": "moe", "load_balancing_loss": "moe",
    "Muon": "muon",
    "LayerNorm": "norms", "RMSNorm": "norms",
    "LearnedPositionalEncoding": "positions", "RotaryEmbedding": "positions",
    "SinusoidalPositionalEncoding": "positions", "create_positional_encoding": "positions",
    "ModelRegistry": "registry",
    "ByteBPETokenizer": "tokenizers", "CharacterTokenizer": "tokenizers",
    "TrainConfig": "training", "Trainer": "training",
    "get_device": "utils", "set_seed": "utils",
}

__all__ = sorted(_EXPORTS)


def _submodules() -> set[str]:
    """Every module and subpackage of the package (read from the folder, so none is missed)."""
    return {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        if name in _submodules():  # ``fundamentallm.viz`` without an explicit import, as before
            return importlib.import_module(f".{name}", __name__)
        raise AttributeError(f"module 'fundamentallm' has no attribute {name!r}")
    module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
    if name == "ModelRegistry":
        importlib.import_module(".model", __name__)  # registers the built-in models
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if "IPython" in sys.modules:  # in a notebook kernel: each plot's PNG carries a text description
    from .a11y import install_figure_alt  # (the book's alt text; see fundamentallm/a11y.py)

    install_figure_alt()
    del install_figure_alt
