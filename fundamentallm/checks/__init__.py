"""Exercise checks: each ``check_*`` runs a student's function on known inputs, compares it with
an independent reference, and says exactly what is wrong (which output, the first mismatching
element, expected vs got). A check prints one line when it passes -- giving feedback is its job --
and raises :class:`CheckFailed` (an ``AssertionError``) when it does not.

One module per chapter (``ch02.py`` ...; its wrong-answer table in ``wrong_answers/ch02.py``), all re-exported here, so ``from fundamentallm import
checks; checks.check_softmax_rows(fn)`` works for every chapter. Every check is registered in
:data:`CHECKS`. Gradient checking is a tool, not a check: it lives in :mod:`fundamentallm.gradcheck`.
"""

from . import (
    ch01,
    ch02,
    ch03,
    ch04,
    ch05,
    ch06,
    ch07,
    ch08,
    ch09,
    ch10,
    ch11,
    ch12,
    ch13,
    ch14,
    ch15,
    ch16,
    ch17,
    wrong_answers,  # noqa: F401  (registers every chapter's wrong-answer table)
)
from .core import (
    BY_HAND,
    CHECKS,
    FORBIDDEN,
    SELF_CHECK,
    CheckFailed,
    NotAttempted,
    assert_same,
    check_shape,
    exercise_check,
    rng,
    strict,
)
from .wrong import WRONG_ANSWERS, catches

_CHAPTERS = (ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11, ch12, ch13, ch14, ch15, ch16, ch17)
# Re-export every public check (and the constants the book quotes) at package level.
for _module in _CHAPTERS:
    for _name in dir(_module):
        if _name.startswith("check_") or (_name.isupper() and not _name.startswith("__")):
            globals()[_name] = getattr(_module, _name)
del _module, _name

__all__ = ["BY_HAND", "CHECKS", "FORBIDDEN", "SELF_CHECK", "WRONG_ANSWERS", "catches", "CheckFailed", "NotAttempted", "assert_same", "check_shape",
           "exercise_check", "rng", "strict"] + sorted(
    name for name in CHECKS
)
