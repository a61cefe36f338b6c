"""The call into the student's function (:func:`exercise_check`). Each ``check_*`` runs a student's function on inputs drawn from a
seeded generator (:func:`rng`), compares it with an independent reference, and says exactly what
is wrong (which output, the first mismatching element, expected vs got).

What a check shows, in a notebook (IPython: Jupyter, Colab, VS Code):

* a pass: one line ``✓ check_x passed: ...``, and the call returns ``None`` (no ``Out: True``);
* a stub (the function raises ``NotImplementedError``, or a value is still ``None``): one line
  ``… check_x: not attempted yet ...``, no exception, so Run All goes on;
* a wrong answer: :class:`CheckFailed` whose traceback is one message with a hint, without the
  package's frames; when the student's own code crashed, its frames (and only those) come first.

Outside IPython (scripts, tests, the grader) a pass returns ``True`` and a stub raises
:class:`NotAttempted` (a :class:`CheckFailed`), so code can tell the three apart.

Every check is registered in :data:`CHECKS` (and its forbidden calls in :data:`FORBIDDEN`); the
tests run each one against the book's reference solution (must pass) and against an unimplemented
stub (must fail with a helpful message). :func:`exercise_check` owns the call into the student's
function: see its docstring and book/CONTRIBUTING.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
import threading
import types
from typing import Any, Callable, Optional

import numpy as np
import torch

from .core import (
    BY_HAND,
    CHECKS,
    FORBIDDEN,
    SELF_CHECK,
    CheckFailed,
    NotAttempted,
    _resolve,
    _unimported_package,
    run_forbidding,
)

# inside strict(), in this context only (a context variable, not a module-level switch: another
# thread, or code outside the block, is not affected)
_STRICT: contextvars.ContextVar[bool] = contextvars.ContextVar("fundamentallm_checks_strict", default=False)


@contextlib.contextmanager
def strict():
    """Within the block, checks behave as outside IPython even in a notebook: a stub raises
    :class:`NotAttempted` and a pass returns ``True`` (nbgrader's check cells use it, since
    nbgrader gives the points of every cell that raises nothing)."""
    token = _STRICT.set(True)
    try:
        yield
    finally:
        _STRICT.reset(token)


def in_ipython() -> bool:
    """Whether the code runs in an IPython shell or kernel (Jupyter, Colab, VS Code), outside
    :func:`strict`."""
    if _STRICT.get():
        return False
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    try:
        return get is not None and get() is not None
    except Exception:  # a broken IPython import: behave as a script
        return False


def _snapshot(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)) and all(isinstance(v, (torch.Tensor, np.ndarray)) for v in value):
        return [_snapshot(v) for v in value]
    if isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value):
        return list(value)
    return None


def _unchanged(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor):
        if not isinstance(after, torch.Tensor) or after.shape != before.shape:
            return False
        return bool(torch.equal(after.detach(), before)) or (
            before.is_floating_point() and bool(torch.equal(after.detach().isnan(), before.isnan()))
            and bool(torch.equal(after.detach().nan_to_num(0.0), before.nan_to_num(0.0))))
    if isinstance(before, np.ndarray):
        return isinstance(after, np.ndarray) and after.shape == before.shape and \
            bool(np.array_equal(after, before, equal_nan=before.dtype.kind in "fc"))
    if isinstance(before, list) and isinstance(after, (list, tuple)) and len(after) == len(before):
        return all(_unchanged(b, a) if isinstance(b, (torch.Tensor, np.ndarray))
                   else (b == a or (b != b and a != a))  # NaN equals NaN here
                   for b, a in zip(before, after))
    return False


def _student_call(fn: Callable, pure: bool, may_return_none: bool) -> Callable:
    """Wrap the student's function: mark exceptions it raises as the student's, report an input
    it modified in place (``pure``) and a missing ``return`` (unless ``may_return_none``)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        snapshots = []
        if pure:
            snapshots = [(f"argument {i + 1}", a, _snapshot(a)) for i, a in enumerate(args)]
            snapshots += [(f"argument {k!r}", a, _snapshot(a)) for k, a in kwargs.items()]
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:
            with contextlib.suppress(Exception):
                e._raised_by_student = True  # type: ignore[attr-defined]
            raise
        if pure:
            for what, value, before in snapshots:
                if before is not None and not _unchanged(before, value):
                    raise CheckFailed(f"{fn.__name__} modified its {what} in place; leave the "
                                      f"inputs unchanged and return a new value")
        if result is None and not may_return_none:
            raise CheckFailed(f"{fn.__name__} returned None -- did you forget to `return` "
                              f"the result?")
        return result

    call._student_function = fn  # type: ignore[attr-defined]
    return call


def is_student_object(value: Any) -> bool:
    """Whether a check argument is the student's callable: a plain function, or a grader proxy
    of one (a class with ``_student_proxy = True``)."""
    return isinstance(value, types.FunctionType) or getattr(type(value), "_student_proxy", False)


def _verdict(fn: Callable, forbidden: tuple[str, ...], pure: bool, may_return_none: bool,
             args: tuple, kwargs: dict, by_hand: bool = False) -> Optional[str]:
    """Run the check ``fn`` on the student's objects: the detail string of a pass, or
    :class:`NotAttempted` / :class:`CheckFailed` with one clear message."""
    name = fn.__name__
    if any(a is None for a in (*args, *kwargs.values())):
        raise NotAttempted(f"{name}: not attempted yet -- replace None by your answer, then run "
                           f"this cell again")
    args = tuple(_student_call(a, pure, may_return_none) if is_student_object(a) else a for a in args)
    kwargs = {k: _student_call(v, pure, may_return_none) if is_student_object(v) else v
              for k, v in kwargs.items()}
    try:
        return run_forbidding(forbidden, lambda: fn(*args, **kwargs), by_hand=by_hand)
    except NotImplementedError:
        raise NotAttempted(f"{name}: not attempted yet -- your function still raises "
                           f"NotImplementedError; replace the stub with your implementation") from None
    except NotAttempted:
        raise
    except CheckFailed as e:
        raise CheckFailed(f"{name} failed: {e}") from None
    except Exception as e:
        if getattr(e, "_raised_by_student", False):  # the student's code crashed: say so
            raise CheckFailed(f"{name}: your code raised {type(e).__name__}: {e}") from e
        raise CheckFailed(
            f"{name}: the check could not use your function's result "
            f"({type(e).__name__}: {e}); check the type and shape of what you return "
            f"(if they look right, the check itself may have a bug -- please report it)") from None


_PASSES = threading.local()  # this thread's list of pass messages, inside collect_passes()


@contextlib.contextmanager
def collect_passes():
    """Within the block, every check that passes in this thread appends its message (the line it
    prints) to the list this yields: the grader and :func:`fundamentallm.course.run_exercise` read
    the message here, not from the printed output."""
    previous = getattr(_PASSES, "found", None)
    _PASSES.found = found = []
    try:
        yield found
    finally:
        _PASSES.found = previous


def exercise_check(fn: Optional[Callable[..., Optional[str]]] = None, *, forbidden: tuple[str, ...] = (),
                   pure: bool = True, may_return_none: bool = False, self_check: bool = False,
                   by_hand: bool = False) -> Any:
    """Turn ``fn`` (which raises :class:`CheckFailed` or returns an optional detail string) into
    a student-facing check: stubs and crashes become clear messages; success prints one line.

    Called by a notebook, the check prints one line for a pass or a stub and raises
    :class:`CheckFailed` for a wrong answer (see the module docstring).

    Usable bare (``@exercise_check``) or with options
    (``@exercise_check(forbidden=("torch.softmax",), pure=True)``):

    * ``forbidden``: dotted names the exercise asks the student not to call. ``torch.X`` also
      forbids ``torch.Tensor.X``, ``torch.nn.functional.X``, ``torch.special.X`` ... of the same
      name; a module name (``"torch"``) forbids every function in it; a ``fundamentallm.*``
      function forbids wrapping the package's reference. Calls made through a library count
      (``nn.CrossEntropyLoss`` calls ``F.cross_entropy``); calls the check itself makes do not.
    * ``pure`` (default True): every plain function passed to the check is the student's; an
      input tensor, array or list it modifies in place fails the check. Pass ``pure=False`` for
      an exercise whose function is meant to work in place.
    * ``may_return_none`` (default False): a ``None`` result fails the check ("did you forget to
      return?") unless ``None`` is a valid answer of the exercise.
    * ``self_check`` (default False): the item is a self-check (a prediction with two or three
      choices, guessable by trial and error): its message may state the answer, and it counts no
      marks (:data:`SELF_CHECK`). A graded check's message names what to rethink, never the answer.
    * ``by_hand`` (default False): the statement asks for a derivation by hand (a gradient, a
      Jacobian). Besides the ``forbidden`` calls, the student's code may not compute with complex
      numbers: complex-step differentiation (evaluate f(x + ih), read f'(x) off the imaginary
      part) is exact to rounding, so no tolerance refuses it, and a difference quotient in
      extended precision comes close. Any complex tensor a torch function takes or returns for the
      student's code, any complex or long-double array or number (or ``Decimal``, ``Fraction``)
      among the arguments, locals or return value of the student's functions, ``cmath``,
      ``decimal`` and ``fractions`` fail the check (:data:`BY_HAND`).
    """
    if isinstance(forbidden, str):
        raise TypeError(f"forbidden must be a tuple of dotted names, got the string {forbidden!r}")
    if fn is None:
        return functools.partial(exercise_check, forbidden=tuple(forbidden), pure=pure,
                                 may_return_none=may_return_none, self_check=self_check, by_hand=by_hand)
    forbidden = tuple(forbidden)
    for name in forbidden:
        if not _unimported_package(name):
            _resolve(name)  # fail at import time on a typo

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Optional[bool]:
        try:
            detail = _verdict(fn, forbidden, pure, may_return_none, args, kwargs, by_hand)
        except NotAttempted as e:
            if not in_ipython():
                raise
            print(f"\u2026 {e}")
            return None
        message = f"\u2713 {fn.__name__} passed" + (f": {detail}" if detail else "")
        found = getattr(_PASSES, "found", None)
        if found is not None:
            found.append(message)
        print(message)
        return None if in_ipython() else True

    wrapper.forbidden = forbidden  # type: ignore[attr-defined]
    wrapper.self_check = self_check  # type: ignore[attr-defined]
    wrapper.by_hand = by_hand  # type: ignore[attr-defined]
    CHECKS[fn.__name__] = wrapper
    FORBIDDEN[fn.__name__] = forbidden
    if self_check:
        SELF_CHECK.add(fn.__name__)
    if by_hand:
        BY_HAND.add(fn.__name__)
    else:
        BY_HAND.discard(fn.__name__)
    return wrapper
