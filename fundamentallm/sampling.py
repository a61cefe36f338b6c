"""Choosing the next token from a model's logits: greedy, temperature, top-k, top-p (nucleus).

At each decoding step a language model gives logits over the vocabulary; this module turns them
into one token per row:

- **greedy**: the argmax, deterministic;
- **temperature** ``τ``: sample from ``softmax(logits / τ)``; ``τ < 1`` sharpens, ``τ > 1`` flattens;
- **top-k** (Fan et al. 2018): sample only among the ``k`` most likely tokens;
- **top-p / nucleus** (Holtzman et al. 2020): sample among the smallest set of most likely tokens
  whose total probability reaches ``p``.

The filters are applied in that order (temperature, top-k, top-p), as in Hugging Face's
``generate``. :class:`SamplingConfig` holds the four knobs, validated once; the decoding loop
(:mod:`fundamentallm.generation`, which re-exports everything here) passes it on unchecked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

# ----------------------------------------------------------------------------- validation

def _check_temperature(temperature: float) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ValueError(f"temperature={temperature!r} must be a positive number")
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r} must be > 0; for deterministic decoding "
                         f"use greedy=True instead of temperature=0")
    if not math.isfinite(temperature):
        raise ValueError(f"temperature={temperature!r} must be finite: an infinite temperature makes "
                         f"every logit 0 (a uniform draw that ignores top_k and top_p)")


def _check_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator={generator!r} must be None or a torch.Generator "
                        f"(e.g. torch.Generator().manual_seed(0))")


def _check_top_k(top_k: int | None) -> None:
    if top_k is None:
        return
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k={top_k!r} must be None or an integer >= 1")


def _check_top_p(top_p: float | None) -> None:
    if top_p is None:
        return
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p={top_p!r} must be None or a number in (0, 1]")


def _check_logits(logits: torch.Tensor) -> None:
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point torch.Tensor, got "
                        f"{type(logits).__name__ if not isinstance(logits, torch.Tensor) else logits.dtype}")
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have shape (..., vocab_size) with vocab_size >= 1, got {tuple(logits.shape)}")


def _check_finite_logits(logits: torch.Tensor) -> None:
    """NaN or +inf logits (a model whose weights diverged) would give an arbitrary argmax or a
    multinomial error; -inf is fine (a masked token) unless a whole row is -inf."""
    bad = torch.isnan(logits) | torch.isposinf(logits)
    if bool(bad.any() | torch.isneginf(logits).all(dim=-1).any()):
        raise ValueError("the model's next-token logits are not finite (NaN, +inf, or -inf for every "
                         "token), so no token can be chosen; were its weights trained with a diverging "
                         "loss? Check the checkpoint with load_checkpoint, or retrain with a smaller lr")



@dataclass(frozen=True)
class SamplingConfig:
    """How each next token is chosen, validated once when it is made (Hugging Face's
    ``GenerationConfig``, nanochat's one sampler's arguments): the decoding loop passes it on
    unchecked. ``greedy=True`` takes the argmax; otherwise temperature, then top-k, then top-p
    (see :func:`sample_next`). ``generate(model, ids, n, sampling=SamplingConfig(top_k=5))``
    equals ``generate(model, ids, n, top_k=5)``."""

    temperature: float = 1.0
    top_k: Optional[int] = None
    top_p: Optional[float] = None
    greedy: bool = False

    def __post_init__(self) -> None:
        _check_temperature(self.temperature)
        _check_top_k(self.top_k)
        _check_top_p(self.top_p)
        if not isinstance(self.greedy, bool):
            raise ValueError(f"greedy={self.greedy!r} must be True or False")


def _sampling(sampling: Optional[SamplingConfig], temperature, top_k, top_p, greedy) -> tuple:
    """The knobs of ``generate``/``stream``: from ``sampling`` when given (then the separate
    arguments must keep their defaults), else as passed."""
    if sampling is None:
        return temperature, top_k, top_p, greedy
    if not isinstance(sampling, SamplingConfig):
        raise TypeError(f"sampling={sampling!r} must be None or a SamplingConfig")
    if (temperature, top_k, top_p, greedy) != (1.0, None, None, False):
        raise ValueError("pass the sampling options either as sampling=SamplingConfig(...) or as "
                         "temperature/top_k/top_p/greedy, not both")
    return sampling.temperature, sampling.top_k, sampling.top_p, sampling.greedy


# ----------------------------------------------------------------------------- the filters

def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature``. Shape ``(..., V)`` -> ``(..., V)``.

    Dividing by ``τ`` before the softmax raises every probability to the power ``1/τ`` (then
    renormalises): ``τ -> 0`` tends to the argmax, ``τ -> ∞`` to the uniform distribution.
    """
    _check_logits(logits)
    _check_temperature(temperature)
    return logits if temperature == 1.0 else logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row, set the others to ``-inf``. ``(..., V)`` -> ``(..., V)``.

    Ties with the k-th largest value are all kept (so a row can keep more than ``k`` tokens when
    logits are exactly equal); ``k >= V`` keeps everything.
    """
    _check_logits(logits)
    _check_top_k(k)
    if k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1), the k-th largest
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering (Holtzman et al. 2020). ``(..., V)`` -> ``(..., V)``.

    Sort tokens by probability, keep the smallest prefix whose total probability is ``>= p``,
    set the rest to ``-inf``. A token is kept exactly when the probability of the tokens ranked
    above it is ``< p``, so the most likely token is always kept. ``p = 1`` keeps everything.
    """
    _check_logits(logits)
    _check_top_p(p)
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (..., V)
    probs = torch.softmax(sorted_logits.float(), dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs  # probability of the tokens ranked above
    remove_sorted = mass_before >= p  # (..., V); position 0 has mass_before 0 < p: always kept
    remove = remove_sorted.scatter(-1, order, remove_sorted)  # back to vocabulary order
    return logits.masked_fill(remove, float("-inf"))


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, greedy: bool = False,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row from next-token logits ``(B, V)`` -> ``(B,)`` int64.

    ``greedy=True`` takes the argmax (temperature, top-k and top-p do not change the argmax, so
    they are ignored). Otherwise temperature, then top-k, then top-p, then one draw from the
    softmax with ``torch.multinomial`` using ``generator`` (or the global RNG): the same seed
    gives the same tokens.
    """
    _check_logits(logits)
    sampling = SamplingConfig(temperature, top_k, top_p, greedy)
    _check_generator(generator)
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (B, vocab_size), got {tuple(logits.shape)}")
    _check_finite_logits(logits)
    return _sample(logits, sampling, generator)


def _sample(logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator | None) -> torch.Tensor:
    """:func:`sample_next` on arguments checked already: a decoding step's sampler."""
    temperature, top_k, top_p = sampling.temperature, sampling.top_k, sampling.top_p
    if sampling.greedy:
        return logits.argmax(dim=-1)
    scaled = logits if temperature == 1.0 else logits / temperature
    if temperature < 1.0:
        # subtle: a tiny temperature overflows logits / τ to inf (inf - inf = NaN in the softmax),
        # or underflows to 0 in float32 (0 / 0). Shifting each row's maximum to 0 and dividing
        # in float64 leaves the distribution unchanged and finite: it tends to the argmax. The
        # rows that need it are picked on the device (a host read here would cost one per token);
        # float64 holds the other rows' float32 values exactly.
        overflow = (torch.isposinf(scaled) | torch.isnan(scaled)).any(dim=-1, keepdim=True)
        safe = (logits - logits.amax(dim=-1, keepdim=True)).double() / temperature
        scaled = torch.where(overflow, safe, scaled.double())
    logits = scaled
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits.float(), dim=-1)  # (B, V)
    if generator is not None and generator.device != probs.device:
        # subtle: a CPU generator (the chapters' seeded torch.Generator()) with a model on a GPU:
        # draw on the generator's device, so the same seed picks the same tokens on every device
        draw = torch.multinomial(probs.to(generator.device), num_samples=1, generator=generator)
        return draw.to(probs.device).squeeze(-1)  # (B,)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)  # (B,)
