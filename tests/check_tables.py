"""The three table-driven tests of a chapter's checks, written once: every correct answer passes,
a stub fails with a NotImplementedError message, every wrong answer fails naming its check.

A test module defines ``CORRECT`` and ``WRONG`` (check name -> list of answers) and binds::

    test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \\
        table_tests(CORRECT, WRONG)
"""

from __future__ import annotations

import pytest

from fundamentallm import checks
from fundamentallm.checks import CheckFailed


def stub(*args, **kwargs):
    raise NotImplementedError


def table_tests(correct: dict, wrong: dict):
    @pytest.mark.parametrize("name,i", [(n, i) for n in sorted(correct) for i in range(len(correct[n]))])
    def test_check_passes_on_correct_answer(name, i, capsys):
        assert checks.CHECKS[name](correct[name][i]) is True
        assert "passed" in capsys.readouterr().out

    @pytest.mark.parametrize("name", sorted(correct))
    def test_check_fails_on_stub(name):
        with pytest.raises(CheckFailed, match="NotImplementedError"):
            checks.CHECKS[name](stub)

    @pytest.mark.parametrize("name,i", [(n, i) for n in sorted(wrong) for i in range(len(wrong[n]))])
    def test_check_fails_on_wrong_answer(name, i):
        with pytest.raises(CheckFailed, match=name):
            checks.CHECKS[name](wrong[name][i])

    return test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer


def wrong_answer_tests(rows):
    """One test per row ``(check name, wrong answer, regex)``: the check fails the answer with a
    message that names the check and matches ``regex`` (what the student is told is wrong).
    Correct answers and stubs need no table: tests/test_course.py runs every solution and every
    answer stub of the book against its check."""
    import re

    @pytest.mark.parametrize("name,answer,message", rows, ids=[f"{r[0][6:]}-{i}" for i, r in enumerate(rows)])
    def test_wrong_answer_gets_its_message(name, answer, message):
        with pytest.raises(CheckFailed, match=name) as info:
            checks.CHECKS[name](answer)
        assert re.search(message, str(info.value)), f"{name}: the message was: {info.value}"

    return test_wrong_answer_gets_its_message


def wrong_call_tests(rows):
    """Like :func:`wrong_answer_tests` for checks of several answers (a prediction and a function):
    one test per row ``(check name, tuple of answers, regex)``, the check called with
    ``*answers``."""
    import re

    @pytest.mark.parametrize("name,answers,message", rows, ids=[f"{r[0][6:]}-{i}" for i, r in enumerate(rows)])
    def test_wrong_answers_get_their_message(name, answers, message):
        with pytest.raises(CheckFailed, match=name) as info:
            checks.CHECKS[name](*answers)
        assert re.search(message, str(info.value)), f"{name}: the message was: {info.value}"

    return test_wrong_answers_get_their_message


def wired(f):
    """A block answer ``f(x, attn, ff, norm1, ..., *rest)`` written on modules, as the block
    exercises of chapters 6 and 7 take it, ``(x, config, weights, *rest)``: the modules built from
    the data by ``fundamentallm.block_sublayers``, as the answer stubs do."""
    from fundamentallm import block_sublayers

    return lambda x, config, weights, *rest: f(x, *block_sublayers(config, weights).values(), *rest)
