"""Decoding: extend prompts token by token with the KV cache, one decoder for every option.

A decoder LM gives, at each step, logits over the vocabulary for the next token; a sampler
(:mod:`fundamentallm.sampling`: greedy, temperature, top-k, top-p, re-exported here) turns them
into a token, which is appended. With ``use_cache=True`` the prompt is run once (the *prefill*)
and each later step feeds only the newest token, reusing the keys and values cached by every
layer: a step costs O(T) attention instead of a full O(T²) forward over the whole sequence, and
gives the same logits (up to float rounding) and the same greedy tokens -- the tests check both.

Two options of :func:`generate` make decoding cheaper without changing what it computes
(chapter 17): ``cache=`` a paged cache (:mod:`fundamentallm.paged`: a
:class:`~fundamentallm.paged.BlockPool` or a :class:`~fundamentallm.paged.PagedKVCache`) instead
of the contiguous one, and ``draft=`` a small model with ``lookahead=k`` for speculative decoding
(:mod:`fundamentallm.speculative`): greedy output identical to the target's, sampled output
distributed as the target's.

What this module needs from a model (it does not import ``model.py``): ``model(ids)`` returning
logits ``(B, T, V)`` (or a tuple starting with them) -- that is enough -- or, for the fast path,
a :class:`DecodingModel` (``Transformer`` is one): ``next_token_logits(ids, kv_cache=None)`` ->
``(B, V)``, ``make_kv_cache(B)`` (a cache that the model advances itself), ``config.max_seq_len``
/ ``vocab_size``, and ``check_values(ids)`` (the model's own input check, run once on the
prompt). Padded prompts (``attention_mask``) also need the model to take ``attention_mask`` and
``token_positions`` (Hugging Face's ``position_ids``) in those calls.

Prompts of different lengths decode in one batch when left-padded, with an ``attention_mask``
(1 = token, 0 = padding): the padding is masked and each row's positions count from its first
real token (torchtune's ``get_position_ids_from_padding_mask``), so a row decodes as it would
alone -- the tests check tokens and logits against each prompt decoded by itself.

Checks run once per call, before the first token; a decoding step reads nothing back on the
host except, with ``stop``, whether every row has finished (``benchmarks/host_syncs.py``
counts them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Optional, Protocol, Union, runtime_checkable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .norms import LayerNorm, RMSNorm
from .sampling import (  # noqa: F401  (re-exported: fundamentallm.generation is where they were)
    SamplingConfig,
    _check_finite_logits,
    _check_generator,
    _check_logits,
    _check_temperature,
    _check_top_k,
    _check_top_p,
    _sample,
    _sampling,
    apply_temperature,
    sample_next,
    top_k_filter,
    top_p_filter,
)
from .utils import inputs_checked

StopTokens = Optional[Union[int, Iterable[int]]]


@runtime_checkable
class DecodingModel(Protocol):
    """A model that decodes with a KV cache: what generation uses of it beyond ``model(ids)``.
    Any other module returning logits ``(B, T, V)`` decodes too, recomputing every step."""

    config: Any  # max_seq_len, vocab_size (and canon: padded prompts are refused with canon layers)

    def next_token_logits(self, input_ids: torch.Tensor, kv_cache: Any = None, attention_mask: Any = None,
                          token_positions: Any = None) -> torch.Tensor:
        """``(B, T)`` ids (continuing ``kv_cache``) -> the next token's logits ``(B, V)``."""

    def make_kv_cache(self, batch_size: int) -> Any:
        """An empty cache for ``batch_size`` rows; the model advances it in every call."""

    def check_values(self, input_ids: torch.Tensor) -> None:
        """Raise a clear error for ids outside the vocabulary (run once, on the prompt)."""


def _validate_inputs(model: nn.Module, input_ids, max_new_tokens, temperature, top_k, top_p, stop):
    """Checks of :func:`generate`/:func:`stream` beyond ``_prepare``'s: NumPy/torch scalars are
    accepted as the Python numbers they stand for, a stop id must be in the vocabulary (else it
    could never fire), and the output must fit in memory. Returns the normalised arguments."""
    def scalar(value, kind):
        if isinstance(value, (np.generic, torch.Tensor)) and getattr(value, "ndim", 1) == 0:
            return kind(value.item())
        return value

    max_new_tokens, top_k = scalar(max_new_tokens, int), scalar(top_k, int)
    temperature, top_p = scalar(temperature, float), scalar(top_p, float)
    vocab = model.config.vocab_size if isinstance(model, DecodingModel) else None
    if stop is not None and vocab is not None:
        items = [stop] if isinstance(stop, int) else stop
        try:
            outside = [t for t in items if isinstance(t, int) and not isinstance(t, bool) and t >= vocab]
        except TypeError:
            outside = []  # _stop_set reports a non-iterable
        if outside:
            raise ValueError(f"stop={stop!r} holds token id {outside[0]}, outside the vocabulary "
                             f"[0, {vocab}); it could never be generated")
    if (isinstance(input_ids, torch.Tensor) and isinstance(max_new_tokens, int)
            and not isinstance(max_new_tokens, bool) and input_ids.dim() in (1, 2)):
        B = input_ids.shape[0] if input_ids.dim() == 2 else 1
        total = B * (input_ids.shape[-1] + max(max_new_tokens, 0))
        if total > 2**31:
            raise ValueError(f"max_new_tokens={max_new_tokens} would make an output of {total:,} token "
                             f"ids ({total * 8 / 2**30:.0f} GiB); generate at most a few million tokens at a time")
    return max_new_tokens, temperature, top_k, top_p


# ----------------------------------------------------------------------------- decoding

def _stop_set(stop: StopTokens) -> list[int]:
    if stop is None:
        return []
    items = [stop] if isinstance(stop, int) else stop
    try:
        ids = list(items)
    except TypeError:
        raise ValueError(f"stop={stop!r} must be None, a token id or an iterable of token ids") from None
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise ValueError(f"stop={stop!r} must contain non-negative integer token ids, got {t!r}")
    return ids


def _max_seq_len(model: nn.Module) -> int | None:
    return model.config.max_seq_len if isinstance(model, DecodingModel) else None


def _last_logits(model: nn.Module, ids: torch.Tensor, kv_cache=None, attention_mask=None,
                 token_positions=None) -> torch.Tensor:
    """Next-token logits ``(B, V)`` for the last position of ``ids (B, T)`` (with a padding
    ``attention_mask`` covering the cached positions and ``ids``, and ``token_positions (B, T)``)."""
    padded = {} if attention_mask is None else {"attention_mask": attention_mask, "token_positions": token_positions}
    if isinstance(model, DecodingModel):
        return model.next_token_logits(ids, kv_cache=kv_cache, **padded)  # (B, V)
    if kv_cache is not None:
        padded["kv_cache"] = kv_cache
    out = model(ids, **padded)
    logits = out[0] if isinstance(out, (tuple, list)) else out
    return logits[:, -1]


def _prepare(model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int, temperature: float,
             top_k: int | None, top_p: float | None, greedy: bool, use_cache: bool,
             truncate: bool, generator, attention_mask=None) -> tuple[torch.Tensor, bool, SamplingConfig]:
    """Validate everything up front (before any token is produced); return the ids as (B, T),
    whether the prompt was 1-D, and the sampling configuration."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor of token ids, got {type(input_ids).__name__}")
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must be an integer tensor, got dtype {input_ids.dtype}")
    squeeze = input_ids.dim() == 1
    ids = input_ids.unsqueeze(0) if squeeze else input_ids
    if ids.dim() != 2 or ids.shape[1] == 0:
        raise ValueError(f"input_ids must have shape (B, T) or (T,) with T >= 1, got {tuple(input_ids.shape)}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 0")
    sampling = SamplingConfig(temperature, top_k, top_p, greedy)
    for name, value in (("use_cache", use_cache), ("truncate", truncate)):
        if not isinstance(value, bool):
            raise ValueError(f"{name}={value!r} must be True or False")
    _check_generator(generator)
    max_len = _max_seq_len(model)
    if max_len is not None and ids.shape[1] > max_len and not truncate:
        raise ValueError(f"the prompt has {ids.shape[1]} tokens but the model's context is "
                         f"max_seq_len={max_len}; shorten it, or pass truncate=True to condition on "
                         f"its last {max_len} tokens")
    if attention_mask is not None:
        _check_attention_mask(model, attention_mask, ids, truncate)
    if isinstance(model, DecodingModel):
        model.check_values(ids)  # the prompt's ids, once; later steps feed sampled ids only
    return ids, squeeze, sampling


def _begin(model: nn.Module, input_ids, max_new_tokens, temperature, top_k, top_p, greedy, use_cache, stop,
           generator, truncate, attention_mask, sampling) -> tuple:
    """The prologue of :func:`generate` and :func:`stream`: every check, once. Returns the prompt
    ``(B, T)`` on the model's device, whether it was 1-D, the :class:`SamplingConfig`, the stop
    ids, the padding mask (or None) and ``max_new_tokens``."""
    temperature, top_k, top_p, greedy = _sampling(sampling, temperature, top_k, top_p, greedy)
    max_new_tokens, temperature, top_k, top_p = _validate_inputs(
        model, input_ids, max_new_tokens, temperature, top_k, top_p, stop)
    ids, squeeze, config = _prepare(model, input_ids, max_new_tokens, temperature, top_k, top_p, greedy,
                                    use_cache, truncate, generator, attention_mask)
    device = next(iter(model.parameters()), ids).device
    mask = None if attention_mask is None else attention_mask.reshape(ids.shape).to(device).long()
    return ids.to(device).long(), squeeze, config, _stop_set(stop), mask, max_new_tokens


def _check_attention_mask(model: nn.Module, attention_mask, ids: torch.Tensor, truncate: bool) -> None:
    """A left-padding mask of ``ids``' shape: 0/1 (or bool), every row ending in real tokens
    (a 1 is never followed by a 0) and holding at least one. One host read."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.is_floating_point() \
            or attention_mask.is_complex():
        raise TypeError(f"attention_mask must be an integer or bool torch.Tensor (1 = token, 0 = padding), got "
                        f"{attention_mask.dtype if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__}")
    if tuple(attention_mask.shape) != tuple(ids.shape):
        raise ValueError(f"attention_mask must have the prompts' shape (B, T) = {tuple(ids.shape)}, got "
                         f"{tuple(attention_mask.shape)}")
    if truncate:
        raise ValueError("truncate=True cannot be combined with attention_mask: a padded row's window "
                         "would cut its tokens and its padding differently; pass prompts that fit max_seq_len")
    m = attention_mask.long()
    binary = ((m == 0) | (m == 1)).all()
    left = (m[:, 1:] >= m[:, :-1]).all() if m.shape[1] > 1 else binary  # 0...0 1...1 in every row
    if not bool(binary & left & (m[:, -1] == 1).all()):
        raise ValueError("attention_mask must hold 0 (padding) then 1 (tokens) in every row, with at least "
                         "one token: generation pads on the left, so that every row's newest token is last")
    canon = getattr(model.config, "canon", None) if isinstance(model, DecodingModel) else None
    if canon and not bool(m.all()):
        raise ValueError(f"the model has canon layers (canon={canon!r}), whose convolution would mix the "
                         f"padding into a row's first tokens; decode prompts of different lengths separately")


def _decode(model: nn.Module, ids: torch.Tensor, max_new_tokens: int, sampling: SamplingConfig,
            use_cache: bool, stop: list[int], generator: torch.Generator | None,
            attention_mask: torch.Tensor | None = None, kv_cache=None) -> Iterator[torch.Tensor]:
    """The decode loop. Runs in inference mode; yields one ``(B,)`` tensor per step. ``kv_cache``:
    an empty cache to fill (a paged one), else the model makes its contiguous one."""
    B, T = ids.shape
    max_len = _max_seq_len(model)
    cache = None
    if use_cache and isinstance(model, DecodingModel) and (max_len is None or min(T, max_len) < max_len):
        cache = kv_cache if kv_cache is not None else model.make_kv_cache(B)
    # Room for the prompt and every new token, so the loop never re-allocates or concatenates.
    seq = torch.empty(B, T + max_new_tokens, dtype=torch.long, device=ids.device)
    seq[:, :T] = ids
    length = T
    stop_ids = torch.tensor(stop, dtype=torch.long, device=ids.device) if stop else None
    finished = torch.zeros(B, dtype=torch.bool, device=ids.device) if stop else None
    pad = torch.zeros(B, dtype=torch.long, device=ids.device) if stop else None
    mask = None
    if attention_mask is not None:  # the prompts' padding, then every new token real
        mask = torch.ones(B, T + max_new_tokens, dtype=torch.long, device=ids.device)
        mask[:, :T] = attention_mask

    def window(start: int, end: int) -> dict:
        """The padding mask of positions start..end-1 (a cache's positions 0..start-1 included) and
        the window's positions, counted from each row's first real token."""
        if mask is None:
            return {}
        return {"attention_mask": mask[:, :end] if cache is not None else mask[:, start:end],
                "token_positions": (mask[:, :end].cumsum(-1)[:, start:] - 1).clamp(min=0) if cache is not None
                else (mask[:, start:end].cumsum(-1) - 1).clamp(min=0)}  # (B, end - start)

    for step in range(max_new_tokens):
        if cache is not None and cache.length == 0:
            # Prefill: the whole prompt (its last max_seq_len tokens) in one forward.
            start = length - min(length, max_len) if max_len is not None else 0
            logits = _last_logits(model, seq[:, start:length], kv_cache=cache, **window(start, length))
        elif cache is not None and (max_len is None or cache.length < max_len):
            # Decode: only the newest token; its keys/values join the cache.
            logits = _last_logits(model, seq[:, length - 1:length], kv_cache=cache, **window(length - 1, length))
        else:
            # No cache, or the window is full: recompute over the last max_seq_len tokens
            # (nanoGPT's sliding window). The cache is dropped for good once it is full.
            cache = None
            start = length - min(length, max_len) if max_len is not None else 0
            logits = _last_logits(model, seq[:, start:length], **window(start, length))
        if step == 0:  # diverged weights show in the first logits already: checked once
            _check_logits(logits)
            _check_finite_logits(logits)
        token = _sample(logits, sampling, generator)  # (B,)
        if finished is not None:
            # Rows that already stopped keep repeating their own stop token.
            token = torch.where(finished, pad, token)
            newly = torch.isin(token, stop_ids) & ~finished
            pad = torch.where(newly, token, pad)
            finished = finished | newly
        seq[:, length] = token
        length += 1
        yield token
        # subtle: this check costs a device sync per step, so it runs only when stop is given.
        if finished is not None and bool(finished.all()):
            return


def stream(model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
           top_k: int | None = None, top_p: float | None = None, greedy: bool = False,
           use_cache: bool = True, stop: StopTokens = None, generator: torch.Generator | None = None,
           truncate: bool = False, attention_mask: torch.Tensor | None = None,
           sampling: SamplingConfig | None = None, cache=None) -> Iterator[torch.Tensor]:
    """Like :func:`generate`, but a generator yielding each new token as soon as it exists:
    a ``(B,)`` int64 tensor per step (``()`` for a 1-D prompt). Every argument is validated
    when ``stream`` is called, before the first token. The model is in eval mode while tokens
    are produced and is put back in its previous mode when the stream ends or is closed.
    ``cache`` as in :func:`generate` (a pool's blocks go back when the stream ends or is closed);
    speculative decoding (``draft=``) is :func:`generate`'s alone.
    """
    ids, squeeze, config, stop_ids, mask, max_new_tokens = _begin(
        model, input_ids, max_new_tokens, temperature, top_k, top_p, greedy, use_cache, stop, generator,
        truncate, attention_mask, sampling)
    kv_cache, owned = _given_cache(model, cache, ids.shape[0], use_cache)
    return _stream(model, ids, squeeze, max_new_tokens, config, use_cache, stop_ids, generator, mask,
                   kv_cache, owned)


def _stream(model, ids, squeeze, max_new_tokens, sampling, use_cache, stop_ids, generator,
            attention_mask, kv_cache=None, owned=False) -> Iterator[torch.Tensor]:
    was_training = model.training
    model.eval()
    try:
        steps = _decode(model, ids, max_new_tokens, sampling, use_cache, stop_ids, generator, attention_mask,
                        kv_cache)
        while True:
            # subtle: inference mode is entered around each step only; holding it across `yield`
            # would leak it into the caller's code while the generator is suspended.
            with torch.inference_mode(), inputs_checked(model):
                token = next(steps, None)
            if token is None:
                return
            token = token.clone()  # a normal tensor, usable later with autograd
            yield token[0] if squeeze else token
    finally:
        model.train(was_training)
        if owned:
            kv_cache.free()


class _FusedLayerNorm(LayerNorm):
    """:class:`~fundamentallm.norms.LayerNorm` computed by ``F.layer_norm`` (the same formula)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (self.dim,), self.weight, self.bias, self.eps)


class _FusedRMSNorm(RMSNorm):
    """:class:`~fundamentallm.norms.RMSNorm` computed by ``F.rms_norm`` (the same formula)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.dim,), self.weight, self.eps)


_FUSED_NORMS = {LayerNorm: _FusedLayerNorm, RMSNorm: _FusedRMSNorm}


def optimize_for_decoding(model: nn.Module) -> nn.Module:
    """Store every ``nn.Linear`` weight that is wider than it is tall column-major, for fast
    one-token decoding on a CPU. Changes ``model`` in place and returns it.

    With a batch of one, each decoding step multiplies a single vector by every weight matrix,
    so its speed is how fast the matrices stream from memory. ``nn.Linear`` keeps its weight
    ``W`` as an ``(out, in)`` row-major matrix and computes ``x @ W.T``; for a layer whose output is
    wider than its input (GPT-2's fused Q/K/V, the first feed-forward layer, the vocabulary
    projection) the CPU's matrix-vector kernel is markedly faster when ``W.T`` is the contiguous
    one, which is the layout Hugging Face's GPT-2 (``Conv1D``) uses. This function gives those
    weights that layout: each stays a ``(out, in)`` parameter with the same values, only its
    strides change (``W.t().contiguous().t()``). Parameters, weight tying, ``state_dict``,
    checkpoints and training are unaffected; outputs equal the original up to float rounding.

    The package's LayerNorm and RMSNorm compute their formula step by step (a mean, a difference,
    a square, a second mean, ...: about ten small operations per call, each dispatched from
    Python); here each computes the same formula with PyTorch's fused kernel
    (``F.layer_norm``/``F.rms_norm``), which at batch 1 of a small model is a sizeable share of a
    step. ``benchmarks/generation.py`` measures the effect.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    with torch.no_grad():
        for module in model.modules():
            fused = _FUSED_NORMS.get(type(module))
            if fused is not None:
                module.__class__ = fused  # same parameters and state_dict, one kernel per call
            if not isinstance(module, nn.Linear):
                continue
            w = module.weight
            if w.shape[0] > w.shape[1] and not w.t().is_contiguous():
                # A tied weight is one Parameter object: converting it once converts every user.
                w.data = w.data.t().contiguous().t()
    return model


def _given_cache(model: nn.Module, cache, batch_size: int, use_cache: bool) -> tuple:
    """``generate``'s ``cache=``: ``(the cache to fill, whether generate made it and frees it)``.
    A :class:`~fundamentallm.paged.BlockPool` gives a :class:`~fundamentallm.paged.PagedKVCache` of
    ``batch_size`` rows; a ``KVCache`` (paged or not) must be empty and hold ``batch_size`` rows."""
    if cache is None:
        return None, False
    from .cache import KVCache
    from .paged import BlockPool, PagedKVCache
    if not use_cache or not isinstance(model, DecodingModel):
        raise ValueError("cache= needs use_cache=True and a model with a KV cache (a DecodingModel)")
    if isinstance(cache, BlockPool):
        return PagedKVCache(cache, batch_size, model.config.max_seq_len), True
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache={type(cache).__name__} must be a KVCache, a PagedKVCache or a BlockPool")
    rows = cache.batch_size if isinstance(cache, PagedKVCache) else cache.k.shape[1]
    if cache.length != 0 or rows != batch_size:
        raise ValueError(f"cache= must be empty (it holds {cache.length} positions) and hold the batch's "
                         f"{batch_size} rows (it holds {rows})")
    return cache, False


def _speculative(model, draft, lookahead, ids, max_new_tokens, config, stop_ids, generator, mask, truncate):
    """``generate(..., draft=, lookahead=)``: :mod:`fundamentallm.speculative`'s rounds, one prompt."""
    from .speculative import speculative_generate
    if ids.shape[0] != 1 or mask is not None or truncate:
        raise ValueError("speculative decoding (draft=) takes one prompt of shape (T,) or (1, T), without "
                         "attention_mask or truncate")
    if max_new_tokens == 0:
        return ids
    out, _ = speculative_generate(model, draft, ids, max_new_tokens, k=lookahead, temperature=config.temperature,
                                  greedy=config.greedy, generator=generator, top_k=config.top_k,
                                  top_p=config.top_p, stop=stop_ids)
    return out


def generate(model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, greedy: bool = False,
             use_cache: bool = True, stop: StopTokens = None, generator: torch.Generator | None = None,
             truncate: bool = False, attention_mask: torch.Tensor | None = None,
             sampling: SamplingConfig | None = None, cache=None, draft: nn.Module | None = None,
             lookahead: int = 4) -> torch.Tensor:
    """Extend each prompt by up to ``max_new_tokens`` tokens.

    ``input_ids`` is ``(B, T)`` (a batch of prompts) or ``(T,)``; the result is ``(B, T + n)``
    (or ``(T + n,)``), the prompt followed by the new tokens, with ``n = max_new_tokens`` unless
    ``stop`` ends generation earlier.

    - Prompts of different lengths: left-pad them to ``T`` and pass ``attention_mask`` ``(B, T)``
      (1 = token, 0 = padding; every row ends with its tokens). The padding is masked, each row's
      positions count from its first token, and each row decodes as it would alone (the result
      keeps the padding on the left). Not with ``truncate=True``, nor for models with canon
      layers (their convolution would see the padding).

    - Sampling: ``greedy=True`` takes the argmax; otherwise ``temperature`` (> 0), ``top_k``
      and ``top_p`` shape the distribution (see :func:`sample_next`); or, instead of those four,
      ``sampling=SamplingConfig(...)``. ``generator`` (a
      ``torch.Generator``) makes the draws reproducible; without it the global RNG is used,
      so ``torch.manual_seed`` gives the same samples.
    - ``stop``: a token id or several. A row that samples one is *finished*: the stop token is
      kept and the row's later positions repeat it (padding). Generation ends as soon as every
      row has finished, so ``n`` can be smaller than ``max_new_tokens``.
    - Context: a prompt longer than ``max_seq_len`` raises ``ValueError`` unless
      ``truncate=True``, which conditions on its last ``max_seq_len`` tokens (the returned
      sequence still starts with the full prompt). Once the sequence outgrows ``max_seq_len``
      the model sees only the last ``max_seq_len`` tokens (a sliding window, as in nanoGPT).
    - ``use_cache=True`` prefills a KV cache with the prompt and then feeds one token per step.
      A cache holds ``max_seq_len`` positions and cannot slide (learned positions have no row
      for a shifted window), so when the window is full generation falls back to recomputing
      the last ``max_seq_len`` tokens each step. Either way the cache changes only the speed:
      greedy decoding gives the same tokens with and without it.
    - ``cache``: the cache to fill instead of the model's contiguous one -- a
      :class:`~fundamentallm.paged.BlockPool` (a :class:`~fundamentallm.paged.PagedKVCache` is taken
      from it and its blocks given back at the end) or an empty ``KVCache``/``PagedKVCache`` of
      ``B`` rows (left filled, for the caller). The tokens are those of the contiguous cache.
    - ``draft``: a smaller model with the same vocabulary, for speculative decoding
      (:mod:`fundamentallm.speculative`): it proposes ``lookahead`` tokens per round, the model
      checks them in one forward. Greedy output is the model's greedy output; sampled output is
      distributed as the model's own samples (not the same draws for a seed). One prompt; the
      prompt, ``max_new_tokens`` and ``lookahead`` must fit both models' ``max_seq_len``.

    The model runs in eval mode (no dropout) and in ``torch.inference_mode``; its previous mode
    is restored afterwards.
    """
    ids, squeeze, config, stop_ids, mask, max_new_tokens = _begin(
        model, input_ids, max_new_tokens, temperature, top_k, top_p, greedy, use_cache, stop, generator,
        truncate, attention_mask, sampling)
    if draft is not None:
        if cache is not None or not use_cache:
            raise ValueError("draft= keeps its own caches: pass neither cache= nor use_cache=False with it")
        out = _speculative(model, draft, lookahead, ids, max_new_tokens, config, stop_ids, generator, mask,
                           truncate)
        return out[0] if squeeze else out
    kv_cache, owned = _given_cache(model, cache, ids.shape[0], use_cache)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), inputs_checked(model):
            tokens = list(_decode(model, ids, max_new_tokens, config, use_cache, stop_ids, generator, mask,
                                  kv_cache))
            out = torch.cat([ids] + [t.unsqueeze(1) for t in tokens], dim=1)  # (B, T + n)
    finally:
        model.train(was_training)
        if owned:
            kv_cache.free()
    out = out.clone()  # a normal tensor (not an inference tensor), usable later with autograd
    return out[0] if squeeze else out
