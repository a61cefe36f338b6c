"""Small shared helpers: seeding and device selection."""

from __future__ import annotations

import random
from typing import Optional, Union

import numpy as np
import torch

DEVICES = ("auto", "cpu", "cuda", "mps")


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and PyTorch (all devices) so that the same seed gives the same numbers.

    It does not touch ``PYTHONHASHSEED``: that only affects processes started afterwards, and an
    out-of-range value would break them (e.g. every later Jupyter kernel)."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed={seed!r} must be an integer")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def get_device(device: Optional[Union[str, torch.device]] = "auto") -> torch.device:
    """``"auto"`` picks CUDA, then Apple's MPS, then the CPU; an explicit name must be available."""
    if isinstance(device, torch.device):
        return device
    if device is None or device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    kind = str(device).split(":")[0]
    if kind not in DEVICES:
        raise ValueError(f"device={device!r} is not supported; allowed values: {', '.join(DEVICES)} (e.g. 'cuda:1')")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} was requested but CUDA is not available; use 'cpu' or 'auto'")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"device={device!r} was requested but MPS is not available; use 'cpu' or 'auto'")
    return torch.device(device)
