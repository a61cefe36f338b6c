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
        "tags": ["answer"], "exercise": {"difficulty": 2, "minutes": 15, "rubric": "full marks: says why"}})
    check = nbformat.v4.new_code_cell("checks.check_softmax_rows(x)\nchecks.check_softmax_rows(x)",
                                      metadata={"tags": ["check"]})
    nb.cells = [nbformat.v4.new_markdown_cell(":::{exercise} Count it\n:label: ch99-ex1\n:class: accounting\n\nText.\n:::"),
                answer, check,
                nbformat.v4.new_markdown_cell(":::{exercise} No metadata yet\n:label: ch99-ex2\n\nText.\n:::")]
    return nb


def test_kind_difficulty_and_minutes_come_from_the_notebook():
    first, second = exercise_infos(_notebook(), "99_x")
    assert (first.label, first.title, first.kind, first.difficulty, first.minutes) == (
        "ch99-ex1", "Count it", "accounting", 2, 15)
    assert (first.rubric, first.checks) == ("full marks: says why", ("check_softmax_rows",))
    assert (second.kind, second.difficulty, second.minutes, second.rubric, second.checks) == (
        None, None, None, None, ())


def test_the_table_counts_every_chapter_of_the_toc_and_lists_the_rubrics():
    from fundamentallm.course.book import book_exercise_infos, toc_files

    table = exercise_table(ROOT)
    chapters = [Path(n).name for n in toc_files(ROOT) if Path(n).name[:2].isdigit()]
    infos = book_exercise_infos(ROOT)
    assert f"{len(infos)} exercises in {len(chapters)} chapters" in table
    for chapter in chapters:
        assert f"| {{doc}}`{chapter}` | {sum(i.chapter == chapter for i in infos)} |" in table
    for info in infos:
        if info.rubric:
            assert f"{{ref}}`{info.label}` ({info.title}): {info.rubric}" in table


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
