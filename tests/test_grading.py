"""Attacks on the grader, each a student folder in one class graded once (one fresh process per
student): every attack from issue 12 must cost only the attacker, and only what it broke. Plus an
honest correct and an honest wrong answer for every exercise of the book."""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

import nbformat
import pytest

from fundamentallm.course import (
    book_chapters,
    csv_safe,
    grade,
    main,
    submitted_code,
    to_student_notebook,
)
from fundamentallm.course.book import CHECK_TAG, SOLUTION_TAG, exercise_label

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = book_chapters(ROOT)
CH02 = next(c for c in CHAPTERS if c.name.startswith("02_"))
LABELS = [ex.label for c in CHAPTERS for ex in c.exercises]
TIMEOUT_S = 15.0  # per exercise; the infinite loop costs this once


def _book(chapter):
    return nbformat.read(chapter.path, as_version=4)


def _cell_after_label(nb, label: str, tag: str):
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and exercise_label(c.source) == label)
    return next(c for c in nb.cells[start + 1:] if c.cell_type == "code" and tag in c.metadata.get("tags", []))


def _with_code(nb, label: str, code: str):
    nb = nbformat.from_dict(nb)
    _cell_after_label(nb, label, SOLUTION_TAG).source = code
    return nb


def _solution(label: str) -> str:
    return next(ex.code for c in CHAPTERS for ex in c.exercises if ex.label == label)


# An honest wrong answer for any exercise: the book's solution, each result slightly off (a
# tensor + 1, an int + 1, a flipped boolean, an extra list element, ...).
PERTURB = '''

def _off(value):
    import numpy as np
    import torch
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "_"
    if isinstance(value, torch.Tensor):
        return ~value if value.dtype == torch.bool else value + 1
    if isinstance(value, np.ndarray):
        return ~value if value.dtype == bool else value + 1
    if isinstance(value, tuple):
        return tuple(_off(v) for v in value)
    if isinstance(value, list):
        return [_off(v) for v in value] if value else [0]
    if isinstance(value, dict):
        return {**{k: _off(v) for k, v in value.items()}, "extra": 1}
    return "not None" if value is None else value
'''


def _honest_wrong(code: str) -> str:
    names = re.findall(r"^def (\w+)\(", code, flags=re.M)
    wrap = "".join(f"\n{n} = (lambda f: lambda *a, **k: _off(f(*a, **k)))({n})" for n in names if not n.startswith("_"))
    return code + PERTURB + wrap + "\n"


MONKEYPATCH = '''
import fundamentallm.checks as checks_package
import fundamentallm.checks.core as core
import fundamentallm.checks.ch02 as ch02
for module in (checks_package, core, ch02):
    module.assert_same = lambda *a, **k: None
    module.check_shape = lambda *a, **k: None
core.CheckFailed.__init__ = lambda self, *a: None


def scaled_scores(q, k):
    return q
'''

FRAME_WALK = '''
import gc
import sys

frame = sys._getframe()
while frame is not None:  # look for the grader's rows and rewrite them
    for name, value in list(frame.f_locals.items()):
        if isinstance(value, dict):
            value.update({"passed": True, "total": 999})
        elif isinstance(value, list):
            value.append({"student": "alice", "total": 999})
    frame = frame.f_back
for obj in gc.get_objects():
    if isinstance(obj, dict) and "alice" in obj:
        obj["alice"] = 999


def scaled_scores(q, k):
    return q
'''

DAEMON = '''
import pathlib
import subprocess
import sys

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
pathlib.Path(MARKER).write_text(str(child.pid))


def scaled_scores(q, k):
    return q
'''


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        state = next(line for line in status.read_text().splitlines() if line.startswith("State:"))
    except (FileNotFoundError, StopIteration, ProcessLookupError):
        return False
    return " Z " not in state + " " and "zombie" not in state


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Build the class, grade it once, return (rows by student, details, csv rows, tmp)."""
    tmp = tmp_path_factory.mktemp("class")
    subs = tmp / "submissions"
    marker = tmp / "daemon_marker.txt"
    ch02 = _book(CH02)
    name02 = CH02.path.name

    def put(student: str, nb, name: str = name02) -> None:
        (subs / student).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, subs / student / name)

    # honest: every chapter correct / every chapter slightly wrong / untouched stubs
    for chapter in CHAPTERS:
        nb = _book(chapter)
        put("alice_correct", nb, chapter.path.name)
        wrong = nb
        for ex in chapter.exercises:
            wrong = _with_code(wrong, ex.label, _honest_wrong(ex.code))
        put("carol_wrong", wrong, chapter.path.name)
    put("bob_stubs", to_student_notebook(ch02))
    # the check cells say `pass` / print a tick: the book's checks run instead
    cheat = to_student_notebook(ch02)
    for i, cell in enumerate(c for c in cheat.cells if CHECK_TAG in c.metadata.get("tags", [])):
        cell.source = "pass" if i % 2 else 'print("✓ passed")'
    put("dave_edited_checks", cheat)
    # ch02-ex4 deleted (statement and cells): the denominator does not change
    deleted = nbformat.from_dict(ch02)
    start = next(i for i, c in enumerate(deleted.cells) if exercise_label(c.source) == "ch02-ex4")
    end = next(i for i, c in enumerate(deleted.cells) if i > start and CHECK_TAG in c.metadata.get("tags", []))
    del deleted.cells[start:end + 1]
    put("erin_deleted_exercise", deleted)
    put("fred_frame_walk", _with_code(ch02, "ch02-ex1", FRAME_WALK))
    put("gina_monkeypatch", _with_code(ch02, "ch02-ex1", MONKEYPATCH))
    put("hugo_infinite_loop", _with_code(ch02, "ch02-ex1", "while True:\n    pass\n"))
    exits = _with_code(ch02, "ch02-ex1", "raise SystemExit(0)\n")
    exits = _with_code(exits, "ch02-ex2", "raise KeyboardInterrupt\n")
    put("ivan_system_exit", exits)
    put("jane_os_exit", _with_code(ch02, "ch02-ex2", "import os\nos._exit(0)\n"))
    (subs / "kim_bad_json").mkdir()
    (subs / "kim_bad_json" / name02).write_text("{ this is not a notebook", encoding="utf-8")
    forbidden = _with_code(ch02, "ch02-ex2", "import torch\n\n\ndef softmax_rows(x):\n    return x.softmax(-1)\n")
    forbidden = _with_code(forbidden, "ch02-ex3", "from fundamentallm.attention import causal_mask\n\n\n"
                                                  "def make_causal_mask(T):\n    return causal_mask(T)\n")
    put("lena_forbidden_calls", forbidden)
    put("mia_daemon", _with_code(ch02, "ch02-ex1", DAEMON.replace("MARKER", repr(str(marker)))))
    formula = '=HYPERLINK("https:evil.example","click")'
    put(formula, _with_code(ch02, "ch02-ex1", f"raise ValueError({formula!r})\n"))
    # overwrites a later student's notebook with the book's solutions before that student is run
    target = subs / "zed_wrong_after_attacks" / name02
    put("nina_edits_a_later_submission", _with_code(
        ch02, "ch02-ex1", f"import shutil\nshutil.copy({str(CH02.path)!r}, {str(target)!r})\n"))
    # graded after the attackers: wrong on ch02-ex1, must stay wrong
    put("zed_wrong_after_attacks", _with_code(ch02, "ch02-ex1", "def scaled_scores(q, k):\n    return q @ k.transpose(-2, -1)\n"))

    start_time = time.monotonic()
    rows, details = grade(subs, tmp / "scores.csv", tmp / "details.csv", root=ROOT, timeout=TIMEOUT_S, jobs=2)
    elapsed = time.monotonic() - start_time
    with open(tmp / "scores.csv", newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    with open(tmp / "details.csv", newline="", encoding="utf-8") as f:
        detail_table = list(csv.reader(f))
    print(f"graded {len(rows)} students in {elapsed:.1f} s")
    return {r["student"]: r for r in rows}, details, table, detail_table, marker, formula


def _ch02(row) -> list[int]:
    """Marks of chapter 2's first four exercises, the ones the attack table above targets
    (exercises added to the chapter later are graded too, and counted in ``out_of``)."""
    return [row[f"ch02-ex{i}"] for i in range(1, 5)]


def _message(details, student, label) -> str:
    return next(r.message for r in details if r.student == student and r.label == label)


def test_one_row_per_student_with_the_books_denominator(graded):
    rows, details, table, _, _, _ = graded
    assert table[0] == ["student", *LABELS, "total", "out_of"]
    assert len(table) == 1 + len(rows) == 1 + 16
    assert all(r["out_of"] == len(LABELS) for r in rows.values())
    assert len(details) == len(rows) * len(LABELS)


def test_honest_correct_answers_pass_every_exercise(graded):
    rows, details, *_ = graded
    failed = [(r.label, r.message) for r in details if r.student == "alice_correct" and not r.passed]
    assert not failed
    assert rows["alice_correct"]["total"] == len(LABELS)


def test_honest_wrong_answers_fail_every_exercise(graded):
    rows, details, *_ = graded
    passed = [r.label for r in details if r.student == "carol_wrong" and r.passed]
    assert not passed, f"a slightly wrong answer passes: {passed}"
    assert all(r.message.startswith("CheckFailed") for r in details if r.student == "carol_wrong")


def test_stubs_and_edited_check_cells_score_zero(graded):
    rows, details, *_ = graded
    assert _ch02(rows["bob_stubs"]) == [0, 0, 0, 0]
    assert _ch02(rows["dave_edited_checks"]) == [0, 0, 0, 0]
    assert "NotImplementedError" in _message(details, "dave_edited_checks", "ch02-ex1")


def test_deleted_exercise_counts_as_missing(graded):
    rows, details, *_ = graded
    assert _ch02(rows["erin_deleted_exercise"]) == [1, 1, 1, 0]
    assert rows["erin_deleted_exercise"]["out_of"] == len(LABELS)
    assert "missing" in _message(details, "erin_deleted_exercise", "ch02-ex4")


def test_attacks_do_not_reach_other_students(graded):
    rows, *_ = graded
    assert _ch02(rows["zed_wrong_after_attacks"]) == [0, 1, 1, 1]
    assert rows["alice_correct"]["total"] == len(LABELS)
    assert _ch02(rows["fred_frame_walk"]) == [0, 1, 1, 1]
    assert _ch02(rows["nina_edits_a_later_submission"]) == [0, 1, 1, 1]
    assert all(isinstance(r["total"], int) and r["total"] <= len(LABELS) for r in rows.values())


def test_hang_exit_and_crash_cost_one_exercise(graded):
    rows, details, *_ = graded
    assert _ch02(rows["hugo_infinite_loop"]) == [0, 1, 1, 1]
    assert "timed out" in _message(details, "hugo_infinite_loop", "ch02-ex1")
    assert _ch02(rows["ivan_system_exit"]) == [0, 0, 1, 1]
    assert "SystemExit" in _message(details, "ivan_system_exit", "ch02-ex1")
    assert "KeyboardInterrupt" in _message(details, "ivan_system_exit", "ch02-ex2")
    assert _ch02(rows["jane_os_exit"]) == [1, 0, 1, 1]
    assert "process ended" in _message(details, "jane_os_exit", "ch02-ex2")
    assert _ch02(rows["kim_bad_json"]) == [0, 0, 0, 0]
    assert "could not be read" in _message(details, "kim_bad_json", "ch02-ex1")


def test_forbidden_calls_fail(graded):
    rows, details, *_ = graded
    assert _ch02(rows["lena_forbidden_calls"]) == [1, 0, 0, 1]
    assert "not to use torch.softmax" in _message(details, "lena_forbidden_calls", "ch02-ex2")
    assert "not to use fundamentallm.attention.causal_mask" in _message(details, "lena_forbidden_calls", "ch02-ex3")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_left_over_processes_are_killed(graded):
    rows, _, _, _, marker, _ = graded
    pid = int(marker.read_text())  # the student's background process
    assert not _alive(pid)
    assert _ch02(rows["mia_daemon"]) == [0, 1, 1, 1]


def test_csv_cells_are_not_formulas(graded):
    rows, _, table, detail_table, _, formula = graded
    assert formula in rows
    for line in table + detail_table:
        for cell in line:
            assert not cell.startswith(("=", "+", "-", "@")), cell
    assert any(line[0] == "'" + formula for line in table)
    assert csv_safe("=1+1") == "'=1+1" and csv_safe("-2") == "'-2" and csv_safe(3) == 3


def test_missing_submissions_folder_is_an_error(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "nope"), "--root", str(ROOT)]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["grade", str(tmp_path / "empty"), "--root", str(ROOT)]) == 2
    assert "no student folder" in capsys.readouterr().err
    (tmp_path / "empty" / "x").mkdir()
    with pytest.raises(ValueError, match="timeout"):
        grade(tmp_path / "empty", root=ROOT, timeout=0)


def test_submitted_code_is_matched_by_label():
    nb = to_student_notebook(_book(CH02))
    code = submitted_code(nb, "ch02-ex2")
    assert "def softmax_rows" in code and "NotImplementedError" in code
    assert submitted_code(nb, "ch99-ex1") is None
    assert json.dumps(code)  # plain text
