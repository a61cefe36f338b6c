"""Checkpoints that are safe to load and resume exactly.

A checkpoint is a directory:

* ``model.safetensors`` -- the weights (safetensors holds only tensors, so loading cannot run
  code; a tied matrix is stored once, under its first name);
* ``checkpoint.json`` -- format version, model class and config, step, extra metadata;
* ``tokenizer.json`` -- the tokenizer, if one was given;
* ``trainer.pt`` -- optimizer moments, RNG states and the history of a :class:`Trainer`
  (or a bare optimizer), read back with ``torch.load(weights_only=True)``, which refuses to
  unpickle anything but tensors and plain containers.

Resuming from it reproduces uninterrupted training bit for bit on the CPU (tested in a new
process), because every source of randomness and every optimizer statistic is restored.
"""

from __future__ import annotations

import json
import os
import pickle
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from .config import TransformerConfig
from .model import Transformer, TransformerClassifier
from .tokenizers import Tokenizer

FORMAT_VERSION = 1
MODEL_CLASSES = {"Transformer": Transformer, "TransformerClassifier": TransformerClassifier}
PathLike = Union[str, os.PathLike]


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns."""

    model: nn.Module
    config: TransformerConfig
    tokenizer: Optional[Tokenizer] = None
    step: Optional[int] = None
    extra: dict[str, Any] = field(default_factory=dict)
    trainer_state: Optional[dict[str, Any]] = None


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


def _rng_state() -> dict[str, Any]:
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1]),
             "numpy": [torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))
    keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: PathLike, model: nn.Module, config: Optional[TransformerConfig] = None,
                    tokenizer: Optional[Tokenizer] = None, trainer=None,
                    optimizer: Optional[torch.optim.Optimizer] = None, step: Optional[int] = None,
                    extra: Optional[dict[str, Any]] = None) -> Path:
    """Write ``model`` (and optionally its tokenizer, a :class:`~fundamentallm.training.Trainer`'s
    full state or a bare optimizer, a step and JSON-serialisable ``extra``) to directory ``path``.
    ``config`` defaults to ``model.config``. Returns the directory."""
    config = config if config is not None else getattr(model, "config", None)
    if not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig (or model.config one), got {type(config).__name__}")
    if trainer is not None and optimizer is not None:
        raise ValueError("pass either trainer (which owns its optimizer) or optimizer, not both")
    kwargs = {}
    if isinstance(model, TransformerClassifier):
        kwargs = {"num_classes": model.num_classes, "pooling": model.pooling}
    if trainer is not None and step is None:
        step = trainer.step
    meta = {"format_version": FORMAT_VERSION, "model_class": type(model).__name__,
            "model_kwargs": kwargs, "config": config.to_dict(), "step": step, "extra": extra or {}}
    try:
        text = json.dumps(meta, indent=2)
    except TypeError as err:
        raise TypeError(f"extra must be JSON-serialisable: {err}") from err
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state, _ = _unique_state(model)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "fundamentallm"})
    (path / "checkpoint.json").write_text(text, encoding="utf-8")
    if tokenizer is not None:
        tokenizer.save(path / "tokenizer.json")
    elif (path / "tokenizer.json").exists():
        (path / "tokenizer.json").unlink()  # do not leave a stale tokenizer from an older save
    blob: dict[str, Any] = {"rng": _rng_state()}
    if trainer is not None:
        blob["trainer"] = trainer.state_dict()
    if optimizer is not None:
        blob["optimizer"] = optimizer.state_dict()
    torch.save(blob, path / "trainer.pt")
    return path


def _load_weights(path: Path, model: nn.Module) -> None:
    try:
        loaded = load_file(str(path / "model.safetensors"))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"checkpoint {path}: model.safetensors is corrupt or unreadable ({err})") from err
    expected, aliases = _unique_state(model)
    missing = sorted(set(expected) - set(loaded))
    unexpected = sorted(set(loaded) - set(expected))
    wrong = [f"{k}: checkpoint {tuple(loaded[k].shape)} vs model {tuple(v.shape)}"
             for k, v in expected.items() if k in loaded and loaded[k].shape != v.shape]
    if missing or unexpected or wrong:
        raise ValueError(f"checkpoint {path} does not match the model: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}, shape mismatches {wrong[:5]}")
    for alias, name in aliases.items():
        loaded[alias] = loaded[name]
    model.load_state_dict(loaded)


def load_checkpoint(path: PathLike, model: Optional[nn.Module] = None, trainer=None,
                    optimizer: Optional[torch.optim.Optimizer] = None,
                    map_location: Optional[Union[str, torch.device]] = None,
                    restore_rng: bool = False) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Without ``model`` a new one is built (on the CPU) from the saved class and config; with one,
    its config must equal the saved one and the weights are copied in place. ``map_location``
    moves the model afterwards. ``trainer`` (or ``optimizer``) gets its saved state back -- for a trainer
    that includes the batch generator and RNG states, so ``trainer.fit()`` continues exactly.
    ``restore_rng=True`` also restores the global RNG states saved at the time of saving.
    """
    path = Path(path)
    if not (path / "checkpoint.json").is_file() or not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint directory (needs checkpoint.json and "
                                f"model.safetensors)")
    try:
        meta = json.loads((path / "checkpoint.json").read_text(encoding="utf-8"))
        version, cls_name = meta["format_version"], meta["model_class"]
        config = TransformerConfig.from_dict(meta["config"])
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"checkpoint {path}: checkpoint.json is corrupt ({err!r})") from err
    if version != FORMAT_VERSION:
        raise ValueError(f"checkpoint {path} has format_version={version}; this version reads {FORMAT_VERSION}")
    if model is None:
        if cls_name not in MODEL_CLASSES:
            raise ValueError(f"checkpoint {path} holds a {cls_name}; pass model= to load it "
                             f"(built-in classes: {', '.join(MODEL_CLASSES)})")
        model = MODEL_CLASSES[cls_name](config, **meta["model_kwargs"])
    else:
        own = getattr(model, "config", None)
        if isinstance(own, TransformerConfig) and own != config:
            diff = {k: (v, own.to_dict()[k]) for k, v in config.to_dict().items() if own.to_dict()[k] != v}
            raise ValueError(f"checkpoint {path} was saved with a different config; "
                             f"(checkpoint, model) values: {diff}")
    _load_weights(path, model)  # copies into the model's parameters, on their current device
    if map_location is not None:
        model.to(map_location)
    tokenizer = Tokenizer.load(path / "tokenizer.json") if (path / "tokenizer.json").exists() else None
    trainer_state = None
    if (path / "trainer.pt").exists():
        try:
            blob = torch.load(path / "trainer.pt", map_location="cpu", weights_only=True)
        except (RuntimeError, pickle.UnpicklingError, EOFError) as err:
            raise ValueError(f"checkpoint {path}: trainer.pt is corrupt or holds more than tensors "
                             f"and plain containers ({err})") from err
        trainer_state = blob.get("trainer")
        if restore_rng:
            _set_rng_state(blob["rng"])
        if trainer is not None:
            if trainer_state is None:
                raise ValueError(f"checkpoint {path} holds no trainer state (saved without trainer=)")
            trainer.load_state_dict(trainer_state)
        if optimizer is not None:
            state = blob.get("optimizer") or (trainer_state or {}).get("optimizer")
            if state is None:
                raise ValueError(f"checkpoint {path} holds no optimizer state")
            optimizer.load_state_dict(state)
    elif trainer is not None or optimizer is not None or restore_rng:
        raise ValueError(f"checkpoint {path} has no trainer.pt to restore training state from")
    return Checkpoint(model, config, tokenizer, meta.get("step"), meta.get("extra", {}), trainer_state)
