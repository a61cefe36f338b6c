"""Predictions committed in an answer cell: a value the student writes down before the experiment
that reveals it. ``None`` (the stub) is "not attempted yet", never a pass (the check wrapper of
``core`` already reports a ``None`` argument so; these helpers also guard the values inside one).
The prediction checks of every chapter use these helpers."""

from __future__ import annotations

from typing import Any

from .core import CheckFailed, finite_number


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
    return finite_number(value, name)


def answer_given(value, name: str, expected: str):
    """Raise NotImplementedError (the check reports "not attempted yet") while ``value`` is still
    the stub's ``None``; else return it. ``expected`` says what kind of answer is wanted."""
    if value is None:
        raise NotImplementedError(f"{name} is still None: replace it with {expected}")
    return value


def choice_answers(answer, name: str, allowed: dict[str, tuple]) -> dict:
    """Validate a dict of predictions ``{key: one of allowed[key]}``; clear messages for a missing
    key, an extra key or a value outside the allowed ones."""
    answer = answer_given(answer, name, f"a dict with the keys {sorted(allowed)}")
    if not isinstance(answer, dict):
        raise CheckFailed(f"{name} should be a dict with the keys {sorted(allowed)}, got {type(answer).__name__}")
    missing, extra = sorted(set(allowed) - set(answer)), sorted(set(answer) - set(allowed))
    if missing or extra:
        raise CheckFailed(f"{name} needs exactly the keys {sorted(allowed)}"
                          + (f"; missing {missing}" if missing else "") + (f"; unknown {extra}" if extra else ""))
    for key, options in allowed.items():
        if answer[key] not in options or isinstance(answer[key], bool) != isinstance(options[0], bool):
            raise CheckFailed(f"{name}[{key!r}] = {answer[key]!r}; choose one of {list(options)}")
    return answer
