"""Every check's table of wrong answers (fundamentallm/checks/wrong.py), run live: each row is
rejected with its message; every check has at least three rows; every check whose exercise forbids
calls has a row that breaks the method; the CLI prints the table."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fundamentallm import checks
from fundamentallm.checks.core import CHECKS, FORBIDDEN
from fundamentallm.checks.wrong import WRONG_ANSWERS, run, wrong_answer

# Checks that are part of the core's own tests, not of an exercise.
_EXERCISE_CHECKS = sorted(name for name in CHECKS if not name.startswith("check_core_demo"))


@pytest.mark.parametrize("index", range(len(WRONG_ANSWERS)),
                         ids=[f"ch{w.chapter}-{w.check[6:]}-{w.kind}-{i}" for i, w in enumerate(WRONG_ANSWERS)])
def test_wrong_answer_is_rejected_with_its_message(index):
    result = run(WRONG_ANSWERS[index], index)
    assert result.rejected, f"{WRONG_ANSWERS[index].what}: {result.message}"
    assert result.message_ok, (f"{WRONG_ANSWERS[index].what}: the message does not match "
                               f"{WRONG_ANSWERS[index].message!r}: {result.message}")


@pytest.mark.parametrize("name", _EXERCISE_CHECKS)
def test_every_check_has_three_wrong_answers(name):
    rows = [w for w in WRONG_ANSWERS if w.check == name]
    assert len(rows) >= 3, f"{name} declares {len(rows)} wrong answers (checks/wrong.py asks for 3 or more)"


@pytest.mark.parametrize("name", sorted(n for n in _EXERCISE_CHECKS if FORBIDDEN.get(n)))
def test_a_check_that_forbids_calls_has_a_method_row(name):
    assert any(w.check == name and w.kind == "method" for w in WRONG_ANSWERS), \
        f"{name} forbids {FORBIDDEN[name]} but no wrong answer of kind 'method' tries a way around it"


def test_a_right_answer_in_the_table_is_reported_as_passed():
    from fundamentallm.checks.wrong import WrongAnswer

    right = WrongAnswer("check_softmax_rows", "mistake", "actually right", """
def f(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).nan_to_num(0.0)
""", "f", "x")
    result = run(right)
    assert not result.rejected and result.message.startswith("PASSED"), result.message


def test_bad_rows_are_clear_errors():
    with pytest.raises(ValueError, match="kind='typo' must be one of"):
        wrong_answer("check_softmax_rows", "typo", "x", "f = 1", call="f", message="x")
    with pytest.raises(ValueError, match="must be a check's name"):
        wrong_answer("softmax_rows", "mistake", "x", "f = 1", call="f", message="x")


def test_catches_cli_prints_json_for_one_chapter():
    proc = subprocess.run([sys.executable, "-m", "fundamentallm.course", "catches", "--chapter", "02", "--json"],
                          capture_output=True, text=True, timeout=600)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert rows and all(r["chapter"] == "02" for r in rows)
    assert {"check", "kind", "what", "rejected", "student_reads"} <= set(rows[0])
    assert proc.returncode == (0 if all(r["rejected"] and r["message_ok"] for r in rows) else 1)


def test_catches_cli_rejects_a_bad_chapter():
    proc = subprocess.run([sys.executable, "-m", "fundamentallm.course", "catches", "--chapter", "x"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "--chapter='x' must be a chapter number" in proc.stderr


def test_package_exports_the_table():
    assert checks.WRONG_ANSWERS is WRONG_ANSWERS
