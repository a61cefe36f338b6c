"""The instructor kit: every exercise's check passes on the book's solution and fails helpfully on
the stub; the student edition has no solutions, runs what the wheel test runs end to end, and
grading scores it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from fundamentallm import checks
from fundamentallm.course import (
    Exercise,
    exercise_parts,
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
def test_check_says_not_attempted_on_the_answer_stub(notebook, exercise):
    stub = Exercise(exercise.label, exercise.answer, exercise.check)
    ok, message = run_exercise(stub)
    assert not ok, f"{notebook} {exercise.label}: the check passes on the unattempted stub"
    assert message.startswith("NotAttempted") and "not attempted yet" in message, message


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
    package = {name for name, fn in checks.CHECKS.items()  # not the fixture checks other test files register
               if getattr(fn, "__module__", "").startswith("fundamentallm.checks")}
    unused = sorted(package - used)
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
        parts = exercise_parts(nb)
        student = to_student_notebook(nb)
        text = "\n".join(c.source for c in student.cells)
        assert "solution-start" not in text and "solution-end" not in text
        assert not [c for c in student.cells if "solution" in c.metadata.get("tags", [])]
        answers = [c for c in student.cells if "answer" in c.metadata.get("tags", [])]
        assert len(answers) == len(parts)
        generated = sum(part["answer"] is None for part in parts)  # an older chapter's stubs
        assert len(student.cells) == len(nb.cells) - sum(len(p["solution"]) for p in parts) + generated


def _fixture_notebook():
    """One exercise in the contract's format, with a markdown idea inside the solution block."""
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook()
    nb.cells = [md("# 2. Title"), code("import torch\nfrom fundamentallm import checks"),
                md(":::{exercise} Causal mask\n:label: ch02-ex1\n:class: variant\n\nWrite it.\n:::"),
                code("def make_causal_mask(T):\n    raise NotImplementedError  # your code here",
                     metadata={"tags": ["answer"], "exercise": {"difficulty": 1, "minutes": 5}}),
                md("````{solution-start} ch02-ex1\n:class: dropdown\n````"),
                code("import torch\n\n\ndef make_causal_mask(T):\n    return torch.tril(torch.ones(T, T, dtype=torch.bool))",
                     metadata={"tags": ["solution"]}),
                md("SECRET IDEA: key j <= query i."),
                md("````{solution-end}\n````"),
                code("checks.check_make_causal_mask(make_causal_mask)", metadata={"tags": ["check"]}),
                md("After the exercise.")]
    return nb


def test_the_contract_format_in_every_edition(tmp_path):
    from fundamentallm.course.colab import render_notebook
    from fundamentallm.course.nbgrader import nbgrader_notebook

    nb = _fixture_notebook()
    (ex,) = find_exercises(nb)
    assert ex.answer.startswith("def make_causal_mask") and "NotImplementedError" in ex.answer
    assert "SECRET IDEA" in ex.idea and "tril" in ex.code
    assert run_exercise(ex)[0] and not run_exercise(Exercise(ex.label, ex.answer, ex.check))[0]
    student = to_student_notebook(nb)
    assert [c.source.split("\n")[0][:14] for c in student.cells] == [
        "# 2. Title", "import torch", ":::{exercise} ", "def make_causa", "checks.check_m", "After the exer"]
    assert "SECRET" not in json.dumps(student) and "tril" not in json.dumps(student)
    path = tmp_path / "02_fixture.ipynb"
    nbformat.write(nb, path)
    colab = render_notebook(path, {"ch02-ex1": ("exercise", "2.1")}, {})
    kinds = [(c["cell_type"], "".join(c["source"])[:9]) for c in colab["cells"]]
    assert kinds[3:] == [("markdown", "### Exerc"), ("code", "def make_"), ("code", "checks.ch"),
                         ("markdown", "<details>"), ("markdown", "After the")]
    details = "".join(colab["cells"][6]["source"])
    assert "```python\nimport torch\n\n\ndef make_causal_mask" in details and "SECRET IDEA" in details and details.endswith("</details>")
    assert not [c for c in colab["cells"] if "solution" in c.get("metadata", {}).get("tags", [])]
    graded = nbgrader_notebook(nb)
    sources = [c.source for c in graded.cells]
    assert not any("SECRET" in s or "NotImplementedError  # your code here" in s for s in sources)
    assert any("### BEGIN SOLUTION" in s for s in sources)
    assert any(s.startswith("with checks.strict():") for s in sources)


def test_malformed_exercises_are_named():
    nb = _fixture_notebook()
    del nb.cells[8]  # the check cell
    with pytest.raises(ValueError, match="ch02-ex1.*no check cell"):
        find_exercises(nb)
    nb = _fixture_notebook()
    nb.cells[2].source = ":::{exercise} Scores\n\nno label\n:::"
    with pytest.raises(ValueError, match="no :label:"):
        find_exercises(nb)


def test_student_edition_runs_the_code_that_the_wheel_test_executes(tmp_path):
    """The student edition's code cells are the Colab/Jupyter edition's, cell for cell, so
    tests/test_wheel.py, which executes every chapter of the Colab edition end to end and checks
    that each unattempted exercise prints its one line and no `Out: True`, runs the student
    edition too: one run of the chapters instead of two (about 17 minutes of CI on a 2-core
    machine). The other pages the student edition holds have no exercises and are the book's,
    which nbmake runs."""
    from fundamentallm.course.colab import render_edition

    written = student_edition(tmp_path / "student", ROOT, execute=False)
    assert len(written) == len(_chapters())
    rendered = render_edition(ROOT)
    compared = 0
    for path in written:
        student = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        if path.name not in rendered:
            book = nbformat.read(ROOT / "book" / path.name, as_version=4)
            assert student == [c.source for c in book.cells if c.cell_type == "code"], path.name
            assert not find_exercises(book), f"{path.name} has exercises but no Colab edition"
            continue
        colab = [c for c in nbformat.reads(rendered[path.name], as_version=4).cells if c.cell_type == "code"]
        assert student == [c.source for c in colab], path.name
        compared += 1
    assert compared == len(rendered) == len(_numbered_chapters())
