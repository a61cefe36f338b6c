"""Reading a submission, as data: a student's folder, its notebooks (without following links,
regular files of at most :data:`MAX_NOTEBOOK_BYTES`), and the code of each exercise (the code
cells between its statement and its check cell, check and solution cells excluded)."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path
from typing import Optional

import nbformat

from ..book import ANSWER_TAG, CHECK_TAG, SOLUTION_TAG, Chapter, exercise_label

MAX_NOTEBOOK_BYTES = 20 * 2 ** 20
MAX_CODE_CHARS = 200_000
MAX_FILES = 2_000  # files looked at in one student's folder


def submitted_code(nb, label: str) -> Optional[str]:
    """The student's code for exercise ``label``: the code cells after the markdown cell that
    declares ``:label: label``, up to the next check cell or exercise statement, without check or
    solution cells. ``None`` when the label is not in the notebook."""
    cells = list(nb.cells)
    start = next((i for i, c in enumerate(cells)
                  if c.get("cell_type") == "markdown" and exercise_label(_source(c)) == label), None)
    if start is None:
        return None
    code = []
    for cell in cells[start + 1:]:
        tags = _cell_tags(cell)
        if cell.get("cell_type") == "markdown" and exercise_label(_source(cell)) is not None:
            break
        if cell.get("cell_type") == "code":
            if CHECK_TAG in tags:
                break
            if SOLUTION_TAG not in tags:
                code.append(_source(cell))
    return "\n\n".join(code)


def _source(cell) -> str:
    source = cell.get("source", "")
    if isinstance(source, list):
        source = "".join(s for s in source if isinstance(s, str))
    return source if isinstance(source, str) else ""


def _cell_tags(cell) -> list:
    metadata = cell.get("metadata")
    tags = metadata.get("tags", []) if isinstance(metadata, dict) else []
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


def read_notebook_file(path: Path):
    """(notebook, None) or (None, why): a regular file, not a symbolic link (never followed), at
    most :data:`MAX_NOTEBOOK_BYTES`, UTF-8 JSON in nbformat 4."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return None, f"the notebook could not be opened ({'a symbolic link, not followed' if e.errno == 40 else e.strerror})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "the notebook is not a regular file"
        if info.st_size > MAX_NOTEBOOK_BYTES:
            return None, f"the notebook is larger than {MAX_NOTEBOOK_BYTES // 2 ** 20} MiB"
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_NOTEBOOK_BYTES:
        return None, f"the notebook is larger than {MAX_NOTEBOOK_BYTES // 2 ** 20} MiB"
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        if not isinstance(nb.get("cells"), list) or not all(isinstance(c, dict) for c in nb.cells):
            raise ValueError("no list of cells")
        return nb, None
    except Exception as e:  # not JSON, not UTF-8, too deep, not a notebook ...
        first = str(e).splitlines()[0][:200] if str(e) else ""
        return None, f"the notebook could not be read ({type(e).__name__}: {first})"


def student_folders(submissions: Path) -> list[Path]:
    """One folder per student (hidden entries ignored; a symbolic link is listed, and graded as
    having no readable notebook). Raises ``FileNotFoundError`` / ``ValueError`` when
    ``submissions`` is missing or holds no student folder."""
    submissions = Path(submissions)
    if not submissions.is_dir():
        raise FileNotFoundError(f"submissions={str(submissions)!r}: no such folder; it must hold one "
                                f"folder per student")
    folders = sorted(p for p in submissions.iterdir() if not p.name.startswith(".")
                     and (p.is_symlink() or p.is_dir()))
    if not folders:
        raise ValueError(f"submissions={str(submissions)!r} holds no student folder; put each "
                         f"student's notebooks in a folder named after the student")
    return folders


def _find_notebooks(folder: Path) -> dict[str, Path]:
    """The first ``*.ipynb`` of each name under ``folder``, without following symbolic links."""
    found: dict[str, Path] = {}
    seen = 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != ".ipynb_checkpoints")
        for name in sorted(filenames):
            seen += 1
            if seen > MAX_FILES:
                return found
            if name.endswith(".ipynb"):
                found.setdefault(name, Path(dirpath) / name)
    return found


def chapter_prelude(chapter: Chapter) -> str:
    """The chapter's own import statements (outside its exercises): the answer cells run after
    them, as in the notebook. Book code, read by the grader."""
    nb = nbformat.read(chapter.path, as_version=4)
    lines: list[str] = []
    for cell in nb.cells:
        tags = _cell_tags(cell)
        if cell.cell_type != "code" or {SOLUTION_TAG, CHECK_TAG, ANSWER_TAG} & set(tags):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                text = ast.get_source_segment(cell.source, node)
                if text and text not in lines:
                    lines.append(text)
    return "\n".join(lines) + "\n"
