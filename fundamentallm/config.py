"""Model configuration: one validated dataclass that every model in the package takes.

A bad value fails here, at construction, with a message that names the field, the value and
what is allowed -- not three calls later with a shape error from inside torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Optional

NORMS = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
POS_ENCODINGS = ("learned", "sinusoidal", "rope", "none")
ACTIVATIONS = ("gelu", "relu", "swiglu")
ATTN_IMPLS = ("explicit", "sdpa")

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


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; allowed values: {', '.join(map(repr, allowed))}")


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
    attn_impl: str = "explicit"  # "sdpa" opts into torch's fused kernel, tested equal

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
        for name in ("bias", "tie_weights", "causal"):
            _check_bool(name, getattr(self, name))
        if self.pos_encoding == "rope" and self.head_dim % 2 != 0:
            raise ValueError(f"pos_encoding='rope' needs an even head_dim, got d_model/num_heads={self.head_dim}")
        if self.pos_encoding == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(f"pos_encoding='sinusoidal' needs an even d_model, got d_model={self.d_model}")

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
