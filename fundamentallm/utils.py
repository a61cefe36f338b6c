"""Small shared helpers: seeding and device selection.

One switch picks the device for the whole course: the environment variable
``FUNDAMENTALLM_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``, or ``meta`` for shapes only).
``get_device()`` / ``get_device("auto")`` return it when it is set, and otherwise pick CUDA, then
Apple's MPS, then the CPU. Chapters and ``TrainConfig(device="auto")`` go through here, so e.g.
``FUNDAMENTALLM_DEVICE=cpu jupyter lab`` keeps a GPU machine's chapters on the CPU.
"""

from __future__ import annotations

import os
import random
from typing import Optional, Union

import numpy as np
import torch

DEVICES = ("auto", "cpu", "cuda", "mps", "meta")
DEVICE_ENV = "FUNDAMENTALLM_DEVICE"


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
    """``"auto"`` is ``$FUNDAMENTALLM_DEVICE`` when set, else CUDA, then Apple's MPS, then the CPU;
    an explicit name (``"cpu"``, ``"cuda:1"``, ``"meta"``, ...) must be available."""
    if isinstance(device, torch.device):
        return device
    source = f"device={device!r}"
    if device is None or device == "auto":
        chosen = os.environ.get(DEVICE_ENV, "").strip()
        if chosen and chosen != "auto":
            device, source = chosen, f"{DEVICE_ENV}={chosen!r}"
        else:
            if torch.cuda.is_available():
                return torch.device("cuda")
            if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
                return torch.device("mps")
            return torch.device("cpu")
    kind = str(device).split(":")[0]
    if kind not in DEVICES:
        raise ValueError(f"{source} is not supported; allowed values: {', '.join(DEVICES)} (e.g. 'cuda:1')")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{source} was requested but CUDA is not available; use 'cpu' or 'auto'")
    if kind == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"{source} was requested but MPS is not available; use 'cpu' or 'auto'")
    try:
        return torch.device(device)
    except RuntimeError as e:  # e.g. "cuda:x"
        raise ValueError(f"{source} is not a valid device name: {e}") from None
