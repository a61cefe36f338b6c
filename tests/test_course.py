"""The instructor kit: every exercise's check passes on the book's solution and fails helpfully on
the stub; the student edition has no solutions, runs end to end, and grading scores it."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from fundamentallm import checks
from fundamentallm.course import (
    Exercise,
    find_exercises,
    make_stub,
    run_exercise,
    student_edition,
    to_student_notebook,
)

ROOT = Path(__file__).resolve().parents[1]


def _chapters() -> list[Path]:
    """Every notebook of the toc: the chapters and the appendix pages."""
    names = re.findall(r"file:\s*(book/\S+)", (ROOT / "_toc.yml").read_text()) if (ROOT / "_toc.yml").exists() else []
    return [ROOT / f"{n}.ipynb" for n in names if (ROOT / f"{n}.ipynb").exists()]


def _numbered_chapters() -> list[Path]:
    """The chapters (NN_name); an appendix page has no exercises (tests/test_book.py)."""
    return [p for p in _chapters() if re.fullmatch(r"\d\d_\w+", p.stem)]


def _all_exercises() -> list[tuple[str, Exercise]]:
    out = []
    for path in _chapters():
        for ex in find_exercises(nbformat.read(path, as_version=4)):
            out.append((path.stem, ex))
    return out


EXERCISES = _all_exercises()
IDS = [f"{nb}:{ex.label}" for nb, ex in EXERCISES]


@pytest.mark.parametrize(("notebook", "exercise"), EXERCISES, ids=IDS)
def test_check_passes_on_reference_solution(notebook, exercise):
    ok, message = run_exercise(exercise)
    assert ok, f"{notebook} {exercise.label}: the reference solution fails its check: {message}"


@pytest.mark.parametrize(("notebook", "exercise"), EXERCISES, ids=IDS)
def test_check_fails_helpfully_on_stub(notebook, exercise):
    stub = Exercise(exercise.label, make_stub(exercise.code, exercise.label), exercise.check)
    ok, message = run_exercise(stub)
    assert not ok, f"{notebook} {exercise.label}: the check passes on an unimplemented stub"
    # a function stub raises NotImplementedError; a value stub (a prediction left None) is
    # "not attempted yet" (CONTRACT.md): both fail with a message that says so
    assert message.startswith("CheckFailed") and ("NotImplementedError" in message
                                                  or "not attempted yet" in message), message


def test_every_chapter_has_three_checked_exercises():
    chapters = _numbered_chapters()
    assert chapters, "no chapter notebooks found through _toc.yml"
    for path in chapters:
        exercises = find_exercises(nbformat.read(path, as_version=4))
        assert len(exercises) >= 3, f"{path.name} has {len(exercises)} exercises; the standard asks for >= 3"
        labels = [ex.label for ex in exercises]
        assert len(set(labels)) == len(labels), f"{path.name}: duplicate exercise labels {labels}"
        for ex in exercises:
            called = re.findall(r"checks\.(check_\w+)\(", ex.check)
            assert called, f"{path.name} {ex.label}: the check cell calls no checks.check_* function"
            for name in called:
                assert name in checks.CHECKS, f"{path.name} {ex.label}: {name} is not a registered check"


def test_every_registered_check_is_used_by_an_exercise():
    used = {name for _, ex in EXERCISES for name in re.findall(r"checks\.(check_\w+)\(", ex.check)}
    unused = sorted(set(checks.CHECKS) - used)
    assert not unused, f"checks without an exercise in any chapter: {unused}"


def test_make_stub_keeps_signatures_and_docstrings():
    src = 'import math\n\n\ndef area(r,\n         scale=1.0):\n    """Disc area."""\n    return math.pi * r * r * scale\n'
    stub = make_stub(src, "ch00-ex1")
    namespace: dict = {}
    exec(stub, namespace)
    assert namespace["area"].__doc__ == "Disc area."
    with pytest.raises(NotImplementedError, match="ch00-ex1: implement area"):
        namespace["area"](1.0)
    assert make_stub("predicted = 3\n") == "predicted = None  # your answer here\n"  # a value answer
    with pytest.raises(ValueError, match="only imports, function definitions"):
        make_stub("print(1)\n")


def test_malformed_exercise_is_reported():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(":::{exercise} T\n:label: chX-ex1\n\ntext\n:::"),
                nbformat.v4.new_code_cell("def f():\n    return 1\n", metadata={"tags": ["solution"]})]
    with pytest.raises(ValueError, match="no check cell"):
        find_exercises(nb)


def test_student_notebook_has_no_solutions():
    for path in _chapters():
        nb = nbformat.read(path, as_version=4)
        student = to_student_notebook(nb)
        text = "\n".join(c.source for c in student.cells)
        assert "solution-start" not in text and "solution-end" not in text
        assert not [c for c in student.cells if "solution" in c.metadata.get("tags", [])]
        stubs = [c for c in student.cells if "exercise-stub" in c.metadata.get("tags", [])]
        assert len(stubs) == len(find_exercises(nb))
        for cell in stubs:  # a function stub raises; a value stub (a prediction) is None
            assert "NotImplementedError" in cell.source or "= None" in cell.source
        assert len(student.cells) == len(nb.cells) - 2 * len(stubs)


def test_student_edition_executes_end_to_end(tmp_path):
    """Generate the student edition and run every notebook: the stubs' checks fail (tagged
    raises-exception), everything else must run."""
    from nbclient import NotebookClient

    written = student_edition(tmp_path / "student", ROOT)
    assert len(written) == len(_chapters())
    for path in written:
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if o.get("output_type") == "error"]
        stubs_checked = [c for c in nb.cells if "check" in c.metadata.get("tags", [])]
        assert len(errors) == len(stubs_checked), f"{path.name}: unexpected errors {[e['ename'] for e in errors]}"
        assert all(e["ename"] == "CheckFailed" for e in errors), f"{path.name}: {[e['evalue'] for e in errors]}"
