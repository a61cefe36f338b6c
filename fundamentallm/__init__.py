"""FundamentaLLM: the reference components of an executable course on transformer language models.

Each module holds one idea; the book builds each piece from scratch and proves it equal to these.
"""

from .attention import (
    KVCache,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    sliding_window_mask,
)
from .checkpoint import load_checkpoint, save_checkpoint
from .config import TransformerConfig
from .data import TextDataset, digit_operations, load_corpus, train_val_split
from .feedforward import FeedForward
from .model import Transformer, TransformerBlock, TransformerClassifier
from .moe import MoEFeedForward, load_balancing_loss
from .norms import LayerNorm, RMSNorm
from .positions import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    create_positional_encoding,
)
from .registry import ModelRegistry
from .tokenizers import ByteBPETokenizer, CharacterTokenizer
from .training import TrainConfig, Trainer
from .utils import get_device, set_seed

__version__ = "0.1.0"

__all__ = [
    "ByteBPETokenizer", "CharacterTokenizer", "TextDataset", "TrainConfig", "Trainer",
    "digit_operations", "load_checkpoint", "load_corpus", "save_checkpoint", "train_val_split",
    "FeedForward", "KVCache", "LayerNorm", "LearnedPositionalEncoding", "ModelRegistry",
    "MoEFeedForward", "MultiHeadAttention", "RMSNorm", "RotaryEmbedding", "SinusoidalPositionalEncoding",
    "Transformer", "TransformerBlock", "TransformerClassifier", "TransformerConfig",
    "causal_mask", "create_positional_encoding", "get_device", "padding_mask",
    "load_balancing_loss", "scaled_dot_product_attention", "set_seed", "sliding_window_mask",
]
