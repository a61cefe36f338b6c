"""The comparisons a check makes, each failing with a :class:`~.core.CheckFailed` that says what
differs (which output, the first mismatching element, expected vs got)."""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np
import torch

from .core import CheckFailed


def _as_tensor(x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return torch.as_tensor(x)


def assert_same(actual: Any, expected: Any, what: str = "output", rtol: Optional[float] = None,
                atol: Optional[float] = None) -> None:
    """Like ``torch.testing.assert_close`` (dtype-aware default tolerances; NumPy arrays and
    numbers accepted), but the message names ``what``, the shapes, and the first mismatch."""
    if actual is None:
        raise CheckFailed(f"{what}: got None -- did you forget to return a value?")
    a, e = _as_tensor(actual), _as_tensor(expected)
    if a.shape != e.shape:
        raise CheckFailed(f"{what}: expected shape {tuple(e.shape)}, got {tuple(a.shape)}")
    if a.dtype != e.dtype:
        if not (a.is_floating_point() or a.is_complex()) and e.is_floating_point():
            a = a.to(e.dtype)
        else:
            common = torch.promote_types(a.dtype, e.dtype)
            a, e = a.to(common), e.to(common)
    try:
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=False)
    except AssertionError:
        if a.is_floating_point():
            tol_a = atol if atol is not None else (1e-7 if a.dtype == torch.float64 else 1e-5)
            tol_r = rtol if rtol is not None else (1e-7 if a.dtype == torch.float64 else 1.3e-6)
            bad = ~torch.isclose(a, e, rtol=tol_r, atol=tol_a)
        else:
            bad = a != e
        idx = tuple(int(i) for i in bad.nonzero()[0]) if bad.any() else ()
        diff = (a.double() - e.double()).abs()
        ev, av = e[idx].item(), a[idx].item()
        digits = next((d for d in (6, 9, 12, 17) if f"{ev:.{d}g}" != f"{av:.{d}g}"), 17)
        raise CheckFailed(
            f"{what}: {int(bad.sum())} of {a.numel()} elements differ; first mismatch at index "
            f"{idx}: expected {ev:.{digits}g}, got {av:.{digits}g} "
            f"(max abs difference {diff.max().item():.3g})"
        ) from None


def finite_number(value: Any, what: str) -> float:
    """``value`` as a float: a real number (a Python number or a one-element tensor/array), and
    finite -- NaN and infinity raise :class:`CheckFailed`, so no later comparison can be fooled by
    them (``abs(nan - x) > tol`` is False). Use it for every number an answer gives."""
    if isinstance(value, (bool, str, bytes)) or value is None:
        raise CheckFailed(f"{what} should be a number, got {value!r}"[:200])
    try:
        number = float(value.item() if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1
                       else value)
    except (TypeError, ValueError, RuntimeError, AttributeError):
        raise CheckFailed(f"{what} should be a number, got {type(value).__name__} {str(value)[:60]}") from None
    if not math.isfinite(number):
        raise CheckFailed(f"{what} is {number}: the answer is a finite number")
    return number


def is_close_number(got: float, expected: float, rtol: float = 0.0, atol: float = 0.0) -> bool:
    """Whether ``|got - expected| <= atol + rtol * |expected|``: False for NaN or infinity (the
    one comparison of numbers the checks share)."""
    try:
        got, expected = float(got), float(expected)
    except (TypeError, ValueError):
        return False
    return math.isfinite(got) and abs(got - expected) <= atol + rtol * abs(expected)


def assert_close_number(got: Any, expected: float, what: str, rtol: float = 0.0, atol: float = 0.0,
                        hint: Optional[str] = None) -> float:
    """Raise :class:`CheckFailed` unless ``got`` is a finite number within ``atol + rtol *
    |expected|`` of ``expected``; the message is ``hint`` when given (a graded check names the
    mechanism to rethink, never the answer), else it states both numbers. Returns ``got`` as a
    float."""
    number = finite_number(got, what)
    if not is_close_number(number, expected, rtol, atol):
        raise CheckFailed(hint if hint is not None else f"{what}: expected {expected:.6g}, got {number:.6g}")
    return number


def check_shape(x: Any, expected: tuple, what: str = "output") -> None:
    """Raise :class:`CheckFailed` unless ``x`` has shape ``expected``."""
    shape = tuple(getattr(x, "shape", ()))
    if shape != tuple(expected):
        raise CheckFailed(f"{what}: expected shape {tuple(expected)}, got {shape}")


def _expect_value_error(call: Callable[[], Any], what: str, must_name: str) -> None:
    """Raise CheckFailed unless ``call()`` raises a ValueError whose message names ``must_name``."""
    try:
        call()
    except ValueError as e:
        if must_name not in str(e):
            raise CheckFailed(f"{what}: the ValueError should name {must_name!r}; got: {e}") from None
    except NotImplementedError:
        raise
    except Exception as e:
        raise CheckFailed(f"{what} should raise ValueError, got {type(e).__name__}: {e}") from None
    else:
        raise CheckFailed(f"{what} should raise ValueError instead of returning")
