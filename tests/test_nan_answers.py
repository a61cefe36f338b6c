"""NaN and infinity where the answer is finite fail every check (issue 38): for each chapter's
checks, every parameter is given NaN (or infinity) -- as a number, as a function returning one,
and as a dict of them (with the keys the check asks for) or a function returning such a dict --
and no check may pass. The three checks that once let NaN through have their own tests."""

from __future__ import annotations

import importlib
import inspect
import math
import re
from pathlib import Path

import pytest

from fundamentallm.checks import core
from fundamentallm.checks.core import (
    CheckFailed,
    assert_close_number,
    finite_number,
    is_close_number,
    strict,
)

BAD = (float("nan"), float("inf"), -float("inf"))


def _keys(check, arity: int, as_function: bool) -> list:
    """The keys a dict answer must have, read from the check's message for an empty dict."""
    value = (lambda *a, **k: {}) if as_function else {}
    try:
        with strict():
            check(*([value] * arity))
    except Exception as e:  # noqa: BLE001  (the message names the keys)
        found = re.search(r"\[('[^\]]*')\]", str(e))
        if found:
            return re.findall(r"'([^']*)'", found.group(1))
    return []


def _answers(check, arity: int):
    for bad in BAD:
        yield f"{bad}", bad
        yield f"fn -> {bad}", (lambda *a, _b=bad, **k: _b)
        for as_function in (False, True):
            keys = _keys(check, arity, as_function)
            if keys:
                d = dict.fromkeys(keys, bad)
                yield (f"fn -> {{{keys}: {bad}}}", (lambda *a, _d=d, **k: dict(_d))) if as_function \
                    else (f"{{{keys}: {bad}}}", d)


def _passes(check, args) -> bool:
    try:
        with strict():
            return check(*args) is True
    except Exception:  # noqa: BLE001  (CheckFailed, NotAttempted, a TypeError: not a pass)
        return False


@pytest.mark.parametrize("chapter", sorted(p.stem for p in (Path(core.__file__).parent).glob("ch[0-9][0-9].py")))
def test_no_check_passes_nan_or_infinity(chapter):
    module = importlib.import_module(f"fundamentallm.checks.{chapter}")
    names = [n for n, f in vars(module).items() if n.startswith("check_") and n in core.CHECKS
             and getattr(f, "__module__", "") == module.__name__]
    assert names
    passed = []
    for name in names:
        check = core.CHECKS[name]
        arity = len([p for p in inspect.signature(inspect.unwrap(check)).parameters.values()
                     if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
        for what, value in _answers(check, arity):
            if _passes(check, [value] * arity):
                passed.append(f"{name}({what})")
    assert passed == []


def test_the_three_checks_nan_once_passed():
    from fundamentallm.checks import ch05, ch06, ch12

    nan = float("nan")
    for check, answer in ((ch12.check_mlm_shares, lambda *a, **k: {"mask": nan, "random": nan, "unchanged": nan}),
                          (ch05.check_branch_scale, lambda L: nan),
                          (ch06.check_ln_jacobian_prediction, {"J_ones": "zero", "J_zhat": "zero", "J_norm": nan})):
        with strict(), pytest.raises(CheckFailed):
            check(answer)


def test_the_shared_number_comparison():
    assert is_close_number(1.0, 1.0) and is_close_number(1.01, 1.0, rtol=0.02)
    for bad in BAD:
        assert not is_close_number(bad, 1.0, rtol=1.0, atol=1e9)
        with pytest.raises(CheckFailed, match="finite"):
            finite_number(bad, "x")
        with pytest.raises(CheckFailed):
            assert_close_number(bad, 0.0, "x", atol=math.inf)
    with pytest.raises(CheckFailed, match="rethink"):
        assert_close_number(2.0, 1.0, "x", hint="rethink the scale")
    assert assert_close_number(1.0, 1.0, "x") == 1.0
    with pytest.raises(CheckFailed, match="number"):
        finite_number("1", "x")
