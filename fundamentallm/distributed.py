"""Data-parallel training across processes with ``torch.distributed`` (Li et al. 2020, PyTorch DDP).

Every process holds a full copy of the model, trains on its own slice of the global batch, and
all-reduces (averages) the gradients before the optimizer step, so all copies stay identical and
the update equals the one a single process would make on the whole batch.

Start it with ``torchrun``, which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``
and ``MASTER_PORT`` for each process::

    torchrun --standalone --nproc_per_node 2 -m fundamentallm train --ddp --steps 200

In your own script call :func:`init_distributed` before building the :class:`Trainer`; the
trainer notices the process group, wraps the model in ``DistributedDataParallel``, and gives
each rank its slice of every batch (``TrainConfig.batch_size`` is the global batch).
"""

from __future__ import annotations

import os
from typing import Optional

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """True inside an initialised process group."""
    return dist.is_available() and dist.is_initialized()


def launched_by_torchrun() -> bool:
    """True when the environment says this process is one of several (``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_distributed(backend: Optional[str] = None) -> tuple[int, int, torch.device]:
    """Join the process group described by the torchrun environment variables.

    ``backend`` defaults to ``"nccl"`` when CUDA is available (one GPU per process, chosen by
    ``LOCAL_RANK``) and ``"gloo"`` on the CPU. Returns ``(rank, world_size, device)``; the
    device is the one to pass as ``TrainConfig(device=str(device))``.
    """
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(f"environment variable(s) {missing} are not set: start the processes "
                           f"with torchrun, e.g. `torchrun --standalone --nproc_per_node 2 ...`")
    use_cuda = torch.cuda.is_available() if backend is None else backend == "nccl"
    backend = backend or ("nccl" if use_cuda else "gloo")
    if backend not in ("nccl", "gloo"):
        raise ValueError(f"backend={backend!r} is not supported; allowed values: 'nccl', 'gloo'")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return dist.get_rank(), dist.get_world_size(), device


def cleanup() -> None:
    """Leave the process group (call at the end of each process)."""
    if is_distributed():
        dist.destroy_process_group()


def is_main_process() -> bool:
    """Rank 0 (or not distributed): the process that logs and writes checkpoints."""
    return not is_distributed() or dist.get_rank() == 0
