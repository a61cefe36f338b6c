"""The student edition is safe to publish: its toc keeps every chapter (edited as YAML data), its
buttons do not open the book's repository, it builds with warnings as errors, and no solution text
survives anywhere in the built book. What a student opens (its Jupyter edition in colab/, what the
Colab button opens) shows no MyST markup, and no command writes over a notebook a student edited."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from fundamentallm.course import (
    exercise_parts,
    find_exercises,
    main,
    student_config,
    student_edition,
    student_toc,
    toc_files,
)
from fundamentallm.course.colab import MYST_LEFTOVERS, _colab_button, edited

ROOT = Path(__file__).resolve().parents[1]
BOOK_CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
BOOK_URL = BOOK_CONFIG["repository"]["url"]


def test_toc_is_edited_as_data():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    student, removed = student_toc(toc)
    assert removed == ["book/instructors"]
    files = [f for f in toc_files(ROOT) if "instructors" not in f]
    text = yaml.safe_dump(student, sort_keys=False)
    assert re.findall(r"(?:file|root): (\S+)", text) == files  # nothing else lost (chapters 11-13)
    for part in student["parts"]:
        assert part.get("chapters"), part


def test_config_without_repository_has_no_buttons():
    config = student_config(BOOK_CONFIG)
    assert "launch_buttons" not in config and "repository" not in config
    assert not any(config["html"][k] for k in ("use_repository_button", "use_issues_button", "use_edit_page_button"))
    assert config["title"].endswith("(student edition)")


def test_config_with_repository_points_there():
    url = "https://github.com/a-university/llm-course-student"
    config = student_config(BOOK_CONFIG, repository=url)
    assert config["repository"]["url"] == url
    # Colab opens the edition's colab/ (rendered); Binder would open the MyST sources raw
    assert config["launch_buttons"] == {k: v for k, v in BOOK_CONFIG["launch_buttons"].items() if k != "binderhub_url"}
    assert config["launch_buttons"]["colab_url"] and "fundamentallm.course.book_build" in str(config["sphinx"])
    with pytest.raises(ValueError, match="repository"):
        student_config(BOOK_CONFIG, repository="not a url")


def _solution_lines() -> dict[str, list[str]]:
    """For each exercise, the lines of its solution block (code and the idea's markdown) that its
    answer cell does not hold and that appear nowhere else in the book's source (the chapter may
    legitimately show the same line)."""
    elsewhere, solutions = [], {}
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        parts = exercise_parts(nb)
        hidden = {i for part in parts for i in part["solution"]}
        for part in parts:
            answer = find_exercises(nbformat.from_dict({**nb, "cells": nb.cells[part["statement"]:part["check"] + 1]}))[0].answer
            elsewhere.append(answer)  # signatures and docstrings are public
            lines = [ln.strip() for i in part["solution"] for ln in nb.cells[i].source.splitlines()
                     if "{solution-" not in nb.cells[i].source]
            solutions[f"{path.stem}:{part['label']}"] = [ln for ln in lines if len(ln) >= 16 and ln not in answer]
        elsewhere += [c.source for i, c in enumerate(nb.cells) if i not in hidden]
    for md in (ROOT / "book").glob("*.md"):
        elsewhere.append(md.read_text())
    other = "\n".join(elsewhere)
    return {k: [ln for ln in v if ln not in other] for k, v in solutions.items()}


def _texts(folder: Path):
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix in {".html", ".ipynb", ".md", ".txt", ".js", ".yml", ".json", ".py"}:
            text = path.read_text(encoding="utf-8", errors="replace")
            if path.suffix == ".html":
                text = html.unescape(re.sub(r"<[^>]+>", "", text))
            yield path, text


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The student edition, built once with Jupyter Book (warnings as errors, notebooks not
    executed: its exercises are stubs, and executing is tested elsewhere)."""
    exe = shutil.which("jupyter-book") or str(Path(sys.executable).parent / "jupyter-book")
    if not Path(exe).exists():
        pytest.skip("jupyter-book is not installed (pip install -r requirements.txt)")
    out = tmp_path_factory.mktemp("student") / "edition"
    student_edition(out, ROOT, execute=False)
    result = subprocess.run([exe, "build", str(out), "--all", "-W", "-n", "--keep-going"],
                            capture_output=True, text=True, timeout=900)
    return out, result


def test_student_edition_builds_with_every_chapter(built):
    out, result = built
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    html_dir = out / "_build" / "html"
    for name in toc_files(out):
        assert (html_dir / f"{name}.html").exists(), name
    assert any("11_backprop_by_hand" in n for n in toc_files(out))
    assert not (html_dir / "book" / "instructors.html").exists()


def test_student_edition_has_no_solution_text_and_no_book_buttons(built):
    out, _ = built
    lines = _solution_lines()
    assert sum(map(len, lines.values())) > 100  # the search is not vacuous
    book_text = "\n".join(c.source for p in (ROOT / "book").glob("*.ipynb")
                          for c in nbformat.read(p, as_version=4).cells)
    assert all(ln in book_text for v in lines.values() for ln in v)
    found = []
    for path, text in _texts(out):
        found += [(path.name, key, ln) for key, v in lines.items() for ln in v if ln in text]
        if path.suffix == ".html":
            for needle in ("colab.research.google.com", "mybinder.org", BOOK_URL):
                assert needle not in text, f"{path}: {needle}"
    assert not found, found[:5]


STUDENT_URL = "https://github.com/a-university/llm-course-student"


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student-jupyter") / "edition"
    student_edition(out, ROOT, repository=STUDENT_URL, execute=False)
    return out


def test_the_jupyter_edition_has_every_chapter_no_myst_and_no_solution(edition):
    chapters = [Path(f).name for f in toc_files(ROOT) if re.fullmatch(r"\d\d_\w+", Path(f).name)]
    assert sorted(p.stem for p in (edition / "colab").glob("*.ipynb")) == sorted(chapters)
    lines = _solution_lines()
    for path in sorted((edition / "colab").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        assert not [ln for v in lines.values() for ln in v if ln in text], path.name
        assert "Solution to Exercise" not in text and not [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
        for i, cell in enumerate(nb.cells):
            for pattern in MYST_LEFTOVERS if cell.cell_type == "markdown" else []:
                m = re.search(pattern, cell.source, flags=re.M)
                assert not m, f"{path.name} cell {i}: MyST markup {m.group(0)!r}"
        checks = [i for i, c in enumerate(nb.cells) if "check" in c.metadata.get("tags", [])]
        assert checks and all("answer" in nb.cells[i - 1].metadata.get("tags", []) for i in checks), path.name
        assert nb.cells[0].source.startswith(f"# {int(path.name[:2])}. ") and "student edition" in nb.cells[1].source
    from fundamentallm.course import book_chapters
    from fundamentallm.course.grading import submitted_code

    for chapter in book_chapters(ROOT):  # the grader finds every answer cell by its label
        nb = nbformat.read(edition / "colab" / chapter.path.name, as_version=4)
        assert all((submitted_code(nb, ex.label) or "").strip() == ex.answer.strip() for ex in chapter.exercises)


def test_the_colab_button_opens_a_file_the_edition_holds(edition):
    """The pages' Colab button, as sphinx-book-theme builds it from the edition's _config.yml and the
    Colab extension rewrites it, opens colab/NN_name.ipynb of the student repository: a file the
    edition contains (the Jupyter edition, not the MyST source)."""
    config = yaml.safe_load((edition / "_config.yml").read_text())
    assert "fundamentallm.course.book_build" in config["sphinx"]["config"]["extensions"]
    repo, branch = config["repository"]["url"].removeprefix("https://github.com/"), config["repository"].get("branch", "main")
    for name in toc_files(edition):
        if not re.fullmatch(r"\d\d_\w+", Path(name).name):
            continue
        url = f"{config['launch_buttons']['colab_url']}/github/{repo}/blob/{branch}/{name}.ipynb"
        context = {"header_buttons": [{"buttons": [{"text": "Colab", "url": url}]}]}
        _colab_button(None, name, "page.html", context, None)
        target = context["header_buttons"][0]["buttons"][0]["url"].split(f"/blob/{branch}/", 1)[1]
        assert target.startswith("colab/") and (edition / target).is_file(), target


def test_a_students_edited_notebook_in_the_edition_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "edition"
    assert main(["student-edition", str(out), "--no-execute", "--root", str(ROOT)]) == 0
    path = out / "colab" / "02_attention_by_hand.ipynb"
    nb = json.loads(path.read_text())
    next(c for c in nb["cells"] if "answer" in c["metadata"].get("tags", []))["source"] = "mine = 1\n"
    path.write_text(json.dumps(nb))
    mine = path.read_text()
    capsys.readouterr()
    assert main(["student-edition", str(out), "--no-execute", "--root", str(ROOT)]) == 2 and path.read_text() == mine
    assert "--force" in capsys.readouterr().err
    assert not edited(out / "book" / "02_attention_by_hand.ipynb")  # the book's notebooks are stamped too
    assert main(["student-edition", str(out), "--no-execute", "--root", str(ROOT), "--force"]) == 0 and path.read_text() != mine
