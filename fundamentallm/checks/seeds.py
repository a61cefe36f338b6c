"""Fresh inputs: every random input of a check comes from :func:`rng`, seeded in a notebook (the
book's inputs) and mixed with the grader's secret seed when grading (:func:`grading_seed`)."""

from __future__ import annotations

import contextlib
from typing import Optional

import numpy as np
import torch

_SEED_OFFSET: Optional[int] = None  # set by the grader; None in a notebook (the book's inputs)


def rng(seed: int) -> torch.Generator:
    """A ``torch.Generator`` for a check's inputs: seeded with ``seed`` in a notebook (the same
    inputs every run), and with ``seed`` mixed with the grader's secret seed when grading (inputs
    nobody could see in advance). Use it for every random input of a check."""
    return torch.Generator().manual_seed(_mixed_seed(seed))


def _mixed_seed(seed: int) -> int:
    if _SEED_OFFSET is None:
        return int(seed)
    return (int(seed) * 1_000_003 + _SEED_OFFSET) % (2 ** 63 - 1)


@contextlib.contextmanager
def grading_seed(seed: int):
    """Within the block, :func:`rng` draws from its seed mixed with ``seed`` (the grader's fresh
    inputs), and the global torch and NumPy generators restart from ``seed`` (restored after).
    Every random input of a check comes from :func:`rng`; nothing else is replaced (a
    ``torch.Generator`` seeded by hand, in a check's reference or in the library, draws as it
    would anywhere). The grader alone uses it."""
    global _SEED_OFFSET
    previous_offset = _SEED_OFFSET
    _SEED_OFFSET = int(seed) % (2 ** 62)
    state = torch.random.get_rng_state()
    np_state = np.random.get_state()
    torch.manual_seed(_SEED_OFFSET)
    np.random.seed(_SEED_OFFSET % (2 ** 32))
    try:
        yield
    finally:
        _SEED_OFFSET = previous_offset
        torch.random.set_rng_state(state)
        np.random.set_state(np_state)


def generator_as_told(seed: int) -> torch.Generator:
    """A ``torch.Generator`` seeded with exactly ``seed``: for a check whose reference repeats what
    the student's function is told to do with a seed the check handed it (``seed`` itself drawn
    from :func:`rng`, so the grader's seed reaches it). Not for a check's own inputs: those come
    from :func:`rng`."""
    return torch.Generator().manual_seed(int(seed))
