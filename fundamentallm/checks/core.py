"""The core of the exercise checks: each ``check_*`` runs a student's function on known inputs, compares it with
an independent reference, and says exactly what is wrong (which output, the first mismatching
element, expected vs got). A check prints one line when it passes -- giving feedback is its job --
and raises :class:`CheckFailed` (an ``AssertionError``) when it does not.

Every check is registered in :data:`CHECKS`; the tests run each one against the book's reference
solution (must pass) and against an unimplemented stub (must fail with a helpful message).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import numpy as np
import torch

CHECKS: dict[str, Callable[..., bool]] = {}


class CheckFailed(AssertionError):
    """Raised by a ``check_*`` function when the student's answer is wrong."""


def exercise_check(fn: Callable[..., Optional[str]]) -> Callable[..., bool]:
    """Turn ``fn`` (which raises :class:`CheckFailed` or returns an optional detail string) into
    a student-facing check: stubs and crashes become clear messages; success prints one line."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> bool:
        try:
            detail = fn(*args, **kwargs)
        except NotImplementedError:
            raise CheckFailed(f"{fn.__name__}: your function raises NotImplementedError -- "
                              f"replace the stub with your implementation first") from None
        except CheckFailed as e:
            raise CheckFailed(f"{fn.__name__} failed: {e}") from None
        except Exception as e:  # the student's code crashed: say where, keep the traceback chained
            raise CheckFailed(f"{fn.__name__}: your code raised {type(e).__name__}: {e}") from e
        print(f"✓ {fn.__name__} passed" + (f": {detail}" if detail else ""))
        return True

    CHECKS[fn.__name__] = wrapper
    return wrapper


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
        raise CheckFailed(
            f"{what}: {int(bad.sum())} of {a.numel()} elements differ; first mismatch at index "
            f"{idx}: expected {e[idx].item():.6g}, got {a[idx].item():.6g} "
            f"(max abs difference {diff.max().item():.3g})"
        ) from None


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
