"""Hooks: read or replace a model's activations by name, for interpretability (chapter 16).

The names are TransformerLens's (Nanda & Bloom 2022), so that a reader can move between the two::

    hook_embed                       (B, T, C)     token embeddings (positions not yet added)
    blocks.{i}.hook_resid_pre        (B, T, C)     the residual stream entering block i
    blocks.{i}.attn.hook_pattern     (B, H, T, T_k) attention weights, after the softmax
    blocks.{i}.attn.hook_z           (B, T, H, D)  each head's weighted values (before out_proj)
    blocks.{i}.hook_attn_out         (B, T, C)     the attention's output, added to the stream
    blocks.{i}.hook_mlp_out          (B, T, C)     the feed-forward's output, added to the stream
    blocks.{i}.hook_resid_post       (B, T, C)     the residual stream leaving block i
    ln_final.hook_normalized         (B, T, C)     the final norm's output (the unembedding's input)

``with model.hooks({name: fn}): ...`` runs ``fn(activation, name)`` at that point of every
forward inside the block; ``fn`` returns ``None`` to leave the activation alone or a tensor of
the same shape to replace it (ablation, patching). ``model.run_with_cache(ids, names=None)``
returns ``(logits, cache)`` with the named activations (detached) of one forward.

Cost when no hook is set: nothing is added to the forward. The points at module boundaries are
PyTorch forward hooks (every module call checks for those anyway), registered on entering the
``with`` block and removed on leaving it; the attention pattern, which lives inside the
attention, is reached through ``MultiHeadAttention.attend``, overridden on the hooked layers
only while a pattern hook is set. Hooks compose with a KV cache: in a cached step the pattern
is ``(B, H, T_new, T_k)``, the rows of the new queries. A pattern hook makes that layer use the
explicit attention (the fused SDPA kernel never forms the pattern).
"""

from __future__ import annotations

import difflib
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Union

import torch

from .attention import scaled_dot_product_attention

HookFn = Callable[[torch.Tensor, str], Optional[torch.Tensor]]

_BLOCK_POINTS = ("hook_resid_pre", "attn.hook_pattern", "attn.hook_z", "hook_attn_out", "hook_mlp_out",
                 "hook_resid_post")


def hook_names(model) -> list[str]:
    """Every hook name of ``model``, in the order a forward pass reaches them."""
    names = ["hook_embed"]
    for i in range(len(model.blocks)):
        names += [f"blocks.{i}.{point}" for point in _BLOCK_POINTS]
    return names + ["ln_final.hook_normalized"]


def _unknown(model, name) -> ValueError:
    valid = hook_names(model)
    close = difflib.get_close_matches(str(name), valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ValueError(f"unknown hook name {name!r}{hint}; the valid names of this {len(model.blocks)}-layer "
                      f"model are: {', '.join(valid)}")


def _apply(fn: HookFn, activation: torch.Tensor, name: str) -> torch.Tensor:
    """``fn(activation, name)``: None keeps the activation, a tensor of its shape replaces it."""
    out = fn(activation, name)
    if out is None:
        return activation
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"the hook on {name!r} returned {type(out).__name__}; it must return None "
                        f"(keep the activation) or a torch.Tensor (replace it)")
    if out.shape != activation.shape:
        raise ValueError(f"the hook on {name!r} returned shape {tuple(out.shape)}; a replacement must "
                         f"have the activation's shape {tuple(activation.shape)}")
    return out


def _on_output(name: str, fn: HookFn):
    """A torch forward hook applying ``fn`` to a module's output (the first item of a tuple)."""
    def hook(_module, _args, output):
        if isinstance(output, tuple):  # attention / block with return_weights: (y, weights)
            return (_apply(fn, output[0], name), *output[1:])
        return _apply(fn, output, name)
    return hook


def _on_input(name: str, fn: HookFn, num_heads: Optional[int] = None):
    """A torch forward pre-hook applying ``fn`` to a module's first argument; with ``num_heads``
    the (B, T, H·D) argument is shown as (B, T, H, D) (``hook_z``, the input of ``out_proj``)."""
    def hook(_module, args):
        x = args[0]
        if num_heads is None:
            return (_apply(fn, x, name), *args[1:])
        z = x.view(*x.shape[:-1], num_heads, x.shape[-1] // num_heads)  # (B, T, H, D)
        return (_apply(fn, z, name).reshape(x.shape), *args[1:])
    return hook


class _PatternHandle:
    """Removes one pattern hook; the attention goes back to its own ``attend`` and SDPA setting
    when its last pattern hook is removed."""

    def __init__(self, attn, entry) -> None:
        self.attn, self.entry = attn, entry

    def remove(self) -> None:
        fns = self.attn._pattern_fns
        fns.remove(self.entry)
        if not fns:
            self.attn.use_sdpa = self.attn._sdpa_before_hooks
            for attr in ("attend", "_pattern_fns", "_sdpa_before_hooks"):
                delattr(self.attn, attr)


def _add_pattern_hook(attn, name: str, fn: HookFn) -> _PatternHandle:
    if "_pattern_fns" not in attn.__dict__:
        attn._pattern_fns = []
        attn._sdpa_before_hooks, attn.use_sdpa = attn.use_sdpa, False  # the pattern must exist

        def attend(q, k, v, mask=None, dropout_p=0.0, return_weights=True):
            _, weights = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=dropout_p,
                                                      return_weights=True)
            # (B, H_kv, groups·T, T_k) with grouped-query attention: a view as (B, H, T, T_k)
            pattern = weights.view(q.shape[0], attn.num_heads, -1, k.shape[-2])
            for hook_name, hook_fn in list(attn._pattern_fns):
                pattern = _apply(hook_fn, pattern, hook_name)
            weights = pattern.reshape(weights.shape)
            # subtle: recomputed after the hooks, so a replaced (or edited) pattern is the one used;
            # with identity hooks this is the same product of the same tensors, bit for bit.
            out = weights @ v
            return (out, weights) if return_weights else out

        attn.attend = attend  # an instance attribute: shadows MultiHeadAttention.attend
    entry = (name, fn)
    attn._pattern_fns.append(entry)
    return _PatternHandle(attn, entry)


def _attach(model, name: str, fn: HookFn):
    """Register ``fn`` at ``name``; returns a handle with ``remove()``."""
    if name == "hook_embed":
        return model.token_embedding.register_forward_hook(_on_output(name, fn))
    if name == "ln_final.hook_normalized":
        return model.norm_f.register_forward_hook(_on_output(name, fn))
    _, index, point = name.split(".", 2)
    block = model.blocks[int(index)]
    if point == "hook_resid_pre":
        return block.register_forward_pre_hook(_on_input(name, fn))
    if point == "attn.hook_pattern":
        return _add_pattern_hook(block.attn, name, fn)
    if point == "attn.hook_z":
        return block.attn.out_proj.register_forward_pre_hook(_on_input(name, fn, block.attn.num_heads))
    if point == "hook_attn_out":
        return block.attn.register_forward_hook(_on_output(name, fn))
    if point == "hook_mlp_out":
        return block.ff.register_forward_hook(_on_output(name, fn))
    return block.register_forward_hook(_on_output(name, fn))  # hook_resid_post


def _check_fns(model, fns) -> list[tuple[str, HookFn]]:
    if not isinstance(fns, dict):
        raise TypeError(f"fns must be a dict {{hook name: fn(activation, name)}}, got {type(fns).__name__}")
    valid = set(hook_names(model))
    pairs = []
    for name, value in fns.items():
        if name not in valid:
            raise _unknown(model, name)
        for fn in (value if isinstance(value, (list, tuple)) else [value]):
            if not callable(fn):
                raise TypeError(f"fns[{name!r}] must be a callable fn(activation, name) (or a list of them), "
                                f"got {type(fn).__name__}")
            pairs.append((name, fn))
    return pairs


@contextmanager
def hooks(model, fns: dict[str, Union[HookFn, list[HookFn]]]) -> Iterator:
    """``with hooks(model, {name: fn}):`` run ``fn(activation, name)`` at ``name`` in every forward
    inside the block (a list of functions runs in order; nested blocks compose). Everything is
    removed on leaving the block, also after an exception."""
    pairs = _check_fns(model, fns)
    handles = []
    try:
        for name, fn in pairs:
            handles.append(_attach(model, name, fn))
        yield model
    finally:
        for handle in reversed(handles):
            handle.remove()


def _select(model, names) -> list[str]:
    valid = hook_names(model)
    if names is None:
        return valid
    if callable(names):
        return [n for n in valid if names(n)]
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, (list, tuple, set, frozenset)):
        raise TypeError(f"names must be None (every hook), a hook name, a list of names or a filter "
                        f"fn(name) -> bool, got {type(names).__name__}")
    for name in names:
        if name not in valid:
            raise _unknown(model, name)
    return [n for n in valid if n in set(names)]


def run_with_cache(model, input_ids: torch.Tensor, names=None, **forward_kwargs):
    """One forward of ``model(input_ids, **forward_kwargs)``; returns ``(logits, cache)`` where
    ``cache`` maps each hook name in ``names`` (None: all of :func:`hook_names`; a name, a list,
    or a filter ``fn(name) -> bool``) to its activation, detached, in the order computed."""
    cache: dict[str, torch.Tensor] = {}

    def save(activation, name):
        cache[name] = activation.detach()

    with hooks(model, {name: save for name in _select(model, names)}):
        out = model(input_ids, **forward_kwargs)
    return (out[0] if isinstance(out, tuple) else out), cache
