"""Small shared helpers: seeding, device selection, and the door checks' switch.

One switch picks the device for the whole course: the environment variable
``FUNDAMENTALLM_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ``mps``, or ``meta`` for shapes only).
``get_device()`` / ``get_device("auto")`` return it when it is set, and otherwise pick CUDA, then
Apple's MPS, then the CPU. Chapters and ``TrainConfig(device="auto")`` go through here, so e.g.
``FUNDAMENTALLM_DEVICE=cpu jupyter lab`` keeps a GPU machine's chapters on the CPU.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import random
from collections.abc import Iterator
from typing import Optional, Union

import numpy as np
import torch

from .recipes import DEVICES

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


def rng_state() -> dict:
    """Every global random state (torch's, CUDA's, Python's, NumPy's) as tensors and plain
    containers, so that ``torch.load(weights_only=True)`` reads it back. The one place that
    captures them: checkpoints and the Trainer's state both use it."""
    _, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1]),
             "numpy": [torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` captured."""
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))
    keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether the CPU multiplies bf16 matrices natively (AVX512-BF16 or AMX). Without these
    instructions a bf16 product is converted in software: measured on a 2-core AMD EPYC with AVX2
    only (2026-12-07), Muon's bf16 Newton-Schulz took 774 ms a step of the record against 88 ms for
    the baseline's whole step (``benchmarks/train_budget.py --profile``). Linux only (it reads
    ``/proc/cpuinfo``); False where unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def native_bf16(device: Union[str, torch.device]) -> bool:
    """Whether ``device`` multiplies bf16 matrices natively: a CUDA GPU that supports bf16, or a
    CPU with bf16 instructions (``cpu_has_bf16``). What ``mixed_precision="bf16-native"`` and
    Muon's Newton-Schulz iteration (``muon.Muon``) go by: bf16 where it is fast, float32 elsewhere."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return kind == "cpu" and cpu_has_bf16()


# the models whose inputs' values the caller has checked, in this context (see inputs_checked)
_VALUES_CHECKED: contextvars.ContextVar[frozenset] = contextvars.ContextVar("fundamentallm_values_checked",
                                                                              default=frozenset())


@contextlib.contextmanager
def inputs_checked(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, ``model`` (and every model inside it, such as the one a wrapper holds)
    skips the checks that read its inputs' values on the host: for a caller that checked its
    data once already, as the Trainer does when it receives data and ``generate`` does with the
    prompt. Type and shape checks stay. Nothing is changed on the model: the block marks it in
    this context only (a ``contextvars`` variable, so another thread is not affected)."""
    ids = {id(m) for m in model.modules() if hasattr(m, "check_values")} | {id(model)}
    token = _VALUES_CHECKED.set(_VALUES_CHECKED.get() | ids)
    try:
        yield
    finally:
        _VALUES_CHECKED.reset(token)


def values_checked(model: torch.nn.Module) -> bool:
    """Whether this context runs ``model`` inside :func:`inputs_checked` (its door then skips
    the value read)."""
    return id(model) in _VALUES_CHECKED.get()


@contextlib.contextmanager
def count_host_syncs() -> Iterator[dict]:
    """Count the reads of a tensor's value on the host inside the block: each
    ``aten._local_scalar_dense`` (``.item()``, ``int(t)``, ``bool(t)``, ``float(t)``, seen by a
    ``TorchDispatchMode``) and each ``Tensor.tolist()``. On a GPU each is a host-device
    synchronisation that stalls the queue; on a CPU they are cheap but counted the same way, so a
    test can bound them anywhere. Yields a dict whose ``"syncs"`` grows as they happen.

    subtle: dispatch modes are not called under ``torch.inference_mode`` (generation runs in it),
    so there the Python-level reads (``item``, ``bool``, ``int``, ``float``) are counted instead."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = {"syncs": 0}
    T = torch.Tensor
    python_reads = {T.item, T.__bool__, T.__int__, T.__float__, T.__index__}

    class _Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                counts["syncs"] += 1
            return func(*args, **(kwargs or {}))

    class _Function(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is T.tolist or (func in python_reads and torch.is_inference_mode_enabled()):
                counts["syncs"] += 1
            return func(*args, **(kwargs or {}))

    with _Function(), _Dispatch():
        yield counts
