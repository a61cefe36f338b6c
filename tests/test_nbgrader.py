"""The nbgrader export works with the real nbgrader: generate the student version of two chapters,
autograde a correct submission, an unsolved one and one whose check cells were edited to `pass`."""

from __future__ import annotations

import csv
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from fundamentallm.course import book_chapters, nbgrader_export
from fundamentallm.course.nbgrader import solution_regions

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [c for c in book_chapters(ROOT) if c.name.startswith(("02_", "08_"))]  # two quick ones


def test_solution_regions_keep_signatures_and_docstrings():
    src = 'import math\n\n\ndef area(r):\n    """Disc area."""\n    # pi r squared\n    return math.pi * r * r\n'
    out = solution_regions(src)
    assert out.index("def area(r):") < out.index('"""Disc area."""') < out.index("### BEGIN SOLUTION")
    assert out.index("### BEGIN SOLUTION") < out.index("# pi r squared") < out.index("### END SOLUTION")
    assert "    ### BEGIN SOLUTION\n" in out


def test_export_marks_answer_and_check_cells(tmp_path):
    written = nbgrader_export(tmp_path, ROOT, points=2)
    assert (tmp_path / "nbgrader_config.py").exists()
    assert len(written) == len(book_chapters(ROOT))
    nb = nbformat.read(written[0], as_version=4)
    answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert answers and len(answers) == len(tests)
    assert all(c.metadata.nbgrader["locked"] and c.metadata.nbgrader["points"] == 2 for c in tests)
    assert all("### BEGIN SOLUTION" in c.source for c in answers)
    assert not any("{solution-start}" in c.source for c in nb.cells)
    with pytest.raises(ValueError, match="points"):
        nbgrader_export(tmp_path, ROOT, points=0)


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    result = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"nbgrader {' '.join(args)}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


@pytest.mark.skipif(importlib.util.find_spec("nbgrader") is None,
                    reason="nbgrader is not installed (pip install nbgrader, see requirements.txt)")
def test_real_nbgrader_autogrades_correct_unsolved_and_edited(tmp_path):
    course = tmp_path / "course"
    nbgrader_export(course, ROOT)
    for path in (course / "source").iterdir():  # only the two chapters: the run stays short
        if path.name not in {c.name for c in CHAPTERS}:
            shutil.rmtree(path)
    for chapter in CHAPTERS:  # and only their exercises: autograde executes the whole notebook
        path = course / "source" / chapter.name / chapter.path.name
        nb = nbformat.read(path, as_version=4)
        nb.cells = [nbformat.v4.new_code_cell("from fundamentallm import checks", id="imports")] + \
            [c for c in nb.cells if "nbgrader" in c.metadata]
        nbformat.write(nb, path)
    expected = {}
    for chapter in CHAPTERS:
        _nbgrader(course, "generate_assignment", chapter.name, "--force")
        release = nbformat.read(course / "release" / chapter.name / chapter.path.name, as_version=4)
        assert not any("### BEGIN SOLUTION" in c.source for c in release.cells)
        solutions = {f"{ex.label}-answer": ex.code for ex in chapter.exercises}
        correct, edited = nbformat.from_dict(release), nbformat.from_dict(release)
        for cell in correct.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in solutions:
                cell.source = solutions[grade_id]
        for cell in edited.cells:
            if cell.metadata.get("nbgrader", {}).get("grade"):
                cell.source = "pass"  # nbgrader restores locked test cells from the source
        for student, nb in (("alice", correct), ("bob", release), ("carol", edited)):
            folder = course / "submitted" / student / chapter.name
            folder.mkdir(parents=True)
            nbformat.write(nb, folder / chapter.path.name)
        expected[chapter.name] = {"alice": len(chapter.exercises), "bob": 0, "carol": 0}
        _nbgrader(course, "autograde", chapter.name, "--create", "--force")
    _nbgrader(course, "export", "--to", str(tmp_path / "grades.csv"))
    with open(tmp_path / "grades.csv", newline="") as f:
        grades = list(csv.DictReader(f))
    scores = {(g["assignment"], g["student_id"]): (float(g["score"]), float(g["max_score"])) for g in grades}
    for assignment, by_student in expected.items():
        for student, points in by_student.items():
            assert scores[(assignment, student)] == (points, float(expected[assignment]["alice"])), (assignment, student)
