"""Checkpoints that are safe to load and resume exactly.

A checkpoint is a directory:

* ``model.safetensors`` -- the weights (safetensors holds only tensors, so loading cannot run
  code; a tied matrix is stored once, under its first name);
* ``checkpoint.json`` -- format version, model class and config, step, extra metadata;
* ``tokenizer.json`` -- the tokenizer, if one was given;
* ``trainer.pt`` -- optimizer moments, RNG states and the history of a :class:`Trainer`
  (or a bare optimizer), read back with ``torch.load(weights_only=True)``, which refuses to
  unpickle anything but tensors and plain containers; it is read (and verified) only when
  training state is asked for, so generating from a checkpoint never touches it;
* ``manifest.json`` -- the step and each file's size and SHA-256, written last.

Saving never damages the previous checkpoint: the files are written into a hidden sibling
directory and renamed into place (:mod:`fundamentallm.atomic`), so a kill or a full disk at any
moment leaves the old or the new checkpoint complete. Loading verifies every file against the
manifest and names the one that does not match (a flipped bit, a truncated file, a file from
another save).

Resuming from it reproduces uninterrupted training bit for bit on the CPU (tested in a new
process), because every source of randomness and every optimizer statistic is restored.
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from .atomic import (
    MANIFEST,
    CheckpointError,
    check_output_dir,
    locate,
    verify_file,
    verify_manifest,
    write_directory,
)
from .config import TransformerConfig
from .model import TransformerClassifier
from .registry import ModelRegistry
from .tokenizers import Tokenizer
from .utils import rng_state, set_rng_state

FORMAT_VERSION = 2
FILES = ("model.safetensors", "checkpoint.json", "tokenizer.json", "trainer.pt")
READABLE_VERSIONS = (1, 2)  # version 1: the same files, without a manifest
PathLike = Union[str, os.PathLike]


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns. ``trainer_state`` (the saved Trainer's state, or
    None) reads ``trainer.pt`` the first time it is asked for, not before."""

    model: nn.Module
    config: TransformerConfig
    tokenizer: Optional[Tokenizer] = None
    step: Optional[int] = None
    extra: dict[str, Any] = field(default_factory=dict)
    path: Optional[Path] = field(default=None, repr=False)
    verify: bool = field(default=True, repr=False)
    _training: Optional[dict[str, Any]] = field(default=None, repr=False)

    @property
    def trainer_state(self) -> Optional[dict[str, Any]]:
        if self._training is None:
            self._training = _read_training(self.path, self.step, self.verify) if self.path else {}
        return self._training.get("trainer")


def _unique_state(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The state dict with each shared tensor once, plus ``{alias: kept_name}`` for the rest."""
    state, aliases, seen = {}, {}, {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in seen:
            aliases[name] = seen[key]
        else:
            seen[key] = name
            state[name] = tensor.detach().contiguous().cpu()
    return state, aliases


def save_checkpoint(path: PathLike, model: nn.Module, config: Optional[TransformerConfig] = None,
                    tokenizer: Optional[Tokenizer] = None, trainer=None,
                    optimizer: Optional[torch.optim.Optimizer] = None, step: Optional[int] = None,
                    extra: Optional[dict[str, Any]] = None) -> Path:
    """Write ``model`` (and optionally its tokenizer, a :class:`~fundamentallm.training.Trainer`'s
    full state or a bare optimizer, a step and JSON-serialisable ``extra``) to directory ``path``,
    atomically (see the module docstring). ``config`` defaults to ``model.config``. Returns the
    directory. An existing checkpoint at ``path`` is replaced; any other non-empty directory or a
    file there raises ``ValueError``."""
    config = config if config is not None else getattr(model, "config", None)
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig (or model.config one), got {type(config).__name__}")
    if trainer is not None and optimizer is not None:
        raise ValueError("pass either trainer (which owns its optimizer) or optimizer, not both")
    if tokenizer is not None:
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"tokenizer must be a fundamentallm Tokenizer, got {type(tokenizer).__name__}")
        if tokenizer.vocab_size > config.vocab_size:
            raise ValueError(f"tokenizer.vocab_size={tokenizer.vocab_size} exceeds the model's "
                             f"vocab_size={config.vocab_size}; its ids would not fit the embedding")
    if trainer is not None and step is None:
        step = trainer.step
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ValueError(f"step={step!r} must be None or an integer >= 0")
    kwargs = {}
    if isinstance(model, TransformerClassifier):
        kwargs = {"num_classes": model.num_classes, "pooling": model.pooling}
    meta = {"format_version": FORMAT_VERSION, "model_class": type(model).__name__,
            "model_kwargs": kwargs, "config": config.to_dict(), "step": step, "extra": extra or {}}
    try:
        text = json.dumps(meta, indent=2, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TypeError(f"extra must be JSON-serialisable (finite numbers, str, lists, dicts): {err}") from err
    path = check_output_dir(path)

    def fill(stage: Path) -> None:
        state, _ = _unique_state(model)
        save_file(state, str(stage / "model.safetensors"), metadata={"format": "fundamentallm"})
        (stage / "checkpoint.json").write_text(text, encoding="utf-8")
        if tokenizer is not None:
            tokenizer.save(stage / "tokenizer.json")
        # The global RNG states, captured once (utils.rng_state): in the trainer's state when
        # there is one, else here.
        blob: dict[str, Any] = {"trainer": trainer.state_dict()} if trainer is not None else {"rng": rng_state()}
        if optimizer is not None:
            blob["optimizer"] = optimizer.state_dict()
        torch.save(blob, stage / "trainer.pt")

    write_directory(path, fill, step, FILES, FORMAT_VERSION)
    return path


def _load_weights(path: Path, model: nn.Module) -> None:
    try:
        loaded = load_file(str(path / "model.safetensors"))
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path}: model.safetensors is corrupt or unreadable ({err})") from err
    expected, aliases = _unique_state(model)
    missing = sorted(set(expected) - set(loaded))
    unexpected = sorted(set(loaded) - set(expected))
    wrong = [f"{k}: checkpoint {tuple(loaded[k].shape)} vs model {tuple(v.shape)}"
             for k, v in expected.items() if k in loaded and loaded[k].shape != v.shape]
    if missing or unexpected or wrong:
        raise CheckpointError(f"checkpoint {path} does not match the model: missing {missing[:5]}, "
                              f"unexpected {unexpected[:5]}, shape mismatches {wrong[:5]}")
    for name, tensor in loaded.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"checkpoint {path}: model.safetensors holds non-finite values "
                                  f"(NaN or inf) in {name!r}; it cannot be used")
    for alias, name in aliases.items():
        loaded[alias] = loaded[name]
    model.load_state_dict(loaded)


def read_meta(path: PathLike) -> dict[str, Any]:
    """The metadata of the checkpoint in ``path`` (its ``checkpoint.json``: format version, model
    class and arguments, config, step, ``extra``), checked, without reading any other file."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    return _read_meta(locate(Path(path)))[0]


def _read_meta(path: Path) -> tuple[dict[str, Any], TransformerConfig]:
    try:
        meta = json.loads((path / "checkpoint.json").read_text(encoding="utf-8"))
        version, config_values = meta["format_version"], meta["config"]
        meta["model_class"], meta["model_kwargs"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint {path}: checkpoint.json is corrupt ({err!r})") from err
    if version not in READABLE_VERSIONS:
        raise CheckpointError(f"checkpoint {path} has format_version={version!r}; this version reads "
                              f"{', '.join(map(str, READABLE_VERSIONS))}")
    if not isinstance(config_values, dict):
        raise CheckpointError(f"checkpoint {path}: checkpoint.json's config is not an object")
    # subtle: a missing field would silently take today's default (e.g. rope_base), giving a model
    # that loads but computes different logits; every field the checkpoint's era knew must be there.
    missing = sorted(set(_ORIGINAL_FIELDS) - set(config_values))
    if missing:
        raise CheckpointError(f"checkpoint {path}: checkpoint.json's config lacks field(s) {missing}; "
                              f"refusing to fill them with defaults")
    try:
        config = TransformerConfig.from_dict(config_values)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path}: checkpoint.json holds an invalid config ({err})") from err
    return meta, config


# The TransformerConfig fields of format version 1; fields added later have defaults that
# reproduce the older behaviour, so only these must be present.
_ORIGINAL_FIELDS = ("vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_seq_len", "dropout",
                    "norm", "norm_position", "pos_encoding", "activation", "bias", "tie_weights",
                    "causal", "norm_eps", "rope_base", "attn_impl")


def load_checkpoint(path: PathLike, model: Optional[nn.Module] = None, trainer=None,
                    optimizer: Optional[torch.optim.Optimizer] = None,
                    map_location: Optional[Union[str, torch.device]] = None,
                    restore_rng: bool = False, verify: bool = True) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Without ``model`` a new one is built (on the CPU) from the saved class and config; with one,
    its config must equal the saved one and the weights are copied in place. ``map_location``
    moves the model afterwards. ``trainer`` (or ``optimizer``) gets its saved state back -- for a trainer
    that includes the batch generator and RNG states, so ``trainer.fit()`` continues exactly.
    ``restore_rng=True`` also restores the global RNG states saved at the time of saving.

    Every file it reads is first checked against ``manifest.json`` (size and SHA-256); a
    mismatch raises :class:`CheckpointError` (a ``ValueError``) naming the file. ``verify=False``
    skips that check, e.g. for a checkpoint written before manifests existed. ``trainer.pt`` is
    read only for ``trainer``, ``optimizer``, ``restore_rng`` or the returned checkpoint's
    ``trainer_state``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    for name, value in (("restore_rng", restore_rng), ("verify", verify)):
        if not isinstance(value, bool):
            raise TypeError(f"{name}={value!r} must be True or False")
    path = locate(Path(path))
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint directory (needs checkpoint.json and "
                                f"model.safetensors)")
    manifest_step = None
    if verify:
        if not (path / MANIFEST).is_file():
            raise CheckpointError(f"checkpoint {path} has no {MANIFEST}, so its files cannot be "
                                  f"verified (an older format, or copied by hand); pass verify=False "
                                  f"to load it anyway")
        manifest_step = verify_manifest(path, FILES, deferred=("trainer.pt",))
    meta, config = _read_meta(path)
    if verify and meta.get("step") != manifest_step:
        raise CheckpointError(f"checkpoint {path}: checkpoint.json is from step {meta.get('step')} but "
                              f"{MANIFEST} from step {manifest_step}")
    cls_name = meta["model_class"]
    if model is None:
        model_cls = ModelRegistry.builtin_class(cls_name)
        if model_cls is None:
            raise ValueError(f"checkpoint {path} holds a {cls_name}; pass model= to load it "
                             f"(built-in classes: {', '.join(ModelRegistry.builtin_classes())})")
        model = model_cls(config, **meta["model_kwargs"])
    else:
        own = getattr(model, "config", None)
        if isinstance(own, TransformerConfig) and own != config:
            diff = {k: (v, own.to_dict()[k]) for k, v in config.to_dict().items() if own.to_dict()[k] != v}
            raise ValueError(f"checkpoint {path} was saved with a different config; "
                             f"(checkpoint, model) values: {diff}")
    _load_weights(path, model)  # copies into the model's parameters, on their current device
    if map_location is not None:
        model.to(map_location)
    tokenizer = None
    if (path / "tokenizer.json").exists():
        tokenizer = Tokenizer.load(path / "tokenizer.json")
        if tokenizer.vocab_size > config.vocab_size:
            raise CheckpointError(f"checkpoint {path}: tokenizer.json has vocab_size={tokenizer.vocab_size} "
                                  f"but the model only {config.vocab_size}")
    ckpt = Checkpoint(model, config, tokenizer, meta.get("step"), meta.get("extra", {}), path, verify)
    if trainer is None and optimizer is None and not restore_rng:
        return ckpt
    if not (path / "trainer.pt").exists():
        raise ValueError(f"checkpoint {path} has no trainer.pt to restore training state from")
    blob = ckpt._training = _read_training(path, ckpt.step, verify)
    trainer_state = blob.get("trainer")
    if trainer is not None:
        if trainer_state is None:
            raise ValueError(f"checkpoint {path} holds no trainer state (saved without trainer=)")
        trainer.load_state_dict(trainer_state)
    if optimizer is not None:
        state = blob.get("optimizer") or (trainer_state or {}).get("optimizer")
        if state is None:
            raise ValueError(f"checkpoint {path} holds no optimizer state")
        optimizer.load_state_dict(state)
    if restore_rng:
        set_rng_state(blob["rng"] if "rng" in blob else trainer_state["rng"])
    return ckpt


def _read_training(path: Path, step: Optional[int], verify: bool) -> dict[str, Any]:
    """``trainer.pt``'s contents (``{}`` when the checkpoint has none), checked against the
    manifest and against ``checkpoint.json``'s step."""
    if not (path / "trainer.pt").exists():
        return {}
    if verify:
        verify_file(path, "trainer.pt")
    try:
        blob = torch.load(path / "trainer.pt", map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, OSError) as err:
        raise CheckpointError(f"checkpoint {path}: trainer.pt is corrupt or holds more than tensors "
                              f"and plain containers ({err})") from err
    trainer_state = blob.get("trainer") if isinstance(blob, dict) else None
    if not isinstance(blob, dict) or not ("rng" in blob or "rng" in (trainer_state or {})):
        raise CheckpointError(f"checkpoint {path}: trainer.pt does not hold a training state")
    if trainer_state is not None and trainer_state.get("step") != step:
        raise CheckpointError(f"checkpoint {path}: trainer.pt is from step {trainer_state.get('step')} "
                              f"but checkpoint.json from step {step}")
    return blob
