"""book/instructors.md's exercise table is generated from the exercises' own metadata
(fundamentallm.course.book.exercise_table), so the stored table must equal the generated one."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from fundamentallm.course.book import (
    TABLE_END,
    TABLE_START,
    exercise_infos,
    exercise_table,
    stored_exercise_table,
    write_exercise_table,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_stored_table_equals_the_generated_one():
    assert stored_exercise_table(ROOT / "book" / "instructors.md") == exercise_table(ROOT), (
        "book/instructors.md's exercise table is out of date: run "
        "`python -m fundamentallm.course exercise-table --write`")


def _notebook():
    nb = nbformat.v4.new_notebook()
    answer = nbformat.v4.new_code_cell("x = None  # your prediction", metadata={
        "tags": ["answer"], "exercise": {"difficulty": 2, "minutes": 15}})
    nb.cells = [nbformat.v4.new_markdown_cell(":::{exercise} Count it\n:label: ch99-ex1\n:class: accounting\n\nText.\n:::"),
                answer,
                nbformat.v4.new_markdown_cell(":::{exercise} No metadata yet\n:label: ch99-ex2\n\nText.\n:::")]
    return nb


def test_kind_difficulty_and_minutes_come_from_the_notebook():
    first, second = exercise_infos(_notebook(), "99_x")
    assert (first.label, first.title, first.kind, first.difficulty, first.minutes) == (
        "ch99-ex1", "Count it", "accounting", 2, 15)
    assert (second.kind, second.difficulty, second.minutes) == (None, None, None)


def test_writing_replaces_only_the_text_between_the_markers(tmp_path):
    page = tmp_path / "instructors.md"
    page.write_text(f"# Guide\n\nbefore\n\n{TABLE_START}\nold table\n{TABLE_END}\n\nafter\n", encoding="utf-8")
    assert write_exercise_table(page, ROOT) is True
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# Guide\n\nbefore\n\n") and text.endswith(f"{TABLE_END}\n\nafter\n")
    assert "old table" not in text and stored_exercise_table(page) == exercise_table(ROOT)
    assert write_exercise_table(page, ROOT) is False  # already up to date


def test_a_page_without_markers_is_refused(tmp_path):
    page = tmp_path / "instructors.md"
    page.write_text("# Guide\n", encoding="utf-8")
    with pytest.raises(ValueError, match="lacks the markers"):
        write_exercise_table(page, ROOT)
