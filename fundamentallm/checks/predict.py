"""Predictions committed in an answer cell: a value the student writes down before the experiment
that reveals it. ``None`` (the stub) is "not attempted yet", never a pass."""

from __future__ import annotations

from typing import Any

from .core import CheckFailed


def require_prediction(value: Any, name: str, what: str) -> None:
    """Raise :class:`CheckFailed` when the prediction ``name`` is still the stub's ``None``."""
    if value is None:
        raise CheckFailed(f"{name} is None: not attempted yet -- write your prediction ({what}) in "
                          f"the answer cell, then run the check")


def int_list(value: Any, name: str) -> list[int]:
    """A prediction that must be a list (or tuple) of ints, as a list."""
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    raise CheckFailed(f"{name} must be a list of ints, got {type(value).__name__} {str(value)[:60]}")


def number(value: Any, name: str) -> float:
    """A prediction that must be a real number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckFailed(f"{name} must be a number, got {type(value).__name__} {str(value)[:60]}")
    return float(value)
