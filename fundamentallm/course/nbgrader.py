"""An nbgrader export: ``python -m fundamentallm.course nbgrader OUT [--points 1]``.

Writes an nbgrader course folder: ``OUT/nbgrader_config.py`` and one *source* assignment per
chapter, ``OUT/source/<chapter>/<chapter>.ipynb``, the instructor's notebook in nbgrader's format:

* each exercise's solution cell is an autograded-answer cell (``nbgrader.solution``): imports and
  signatures stay, each function body sits between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
  (``nbgrader generate_assignment`` replaces it by ``raise NotImplementedError()``);
* each check cell is a locked autograder test cell, run under ``checks.strict()`` (a stub raises
  instead of printing "not attempted yet") (``nbgrader.grade``, ``locked``, ``points``):
  ``nbgrader autograde`` restores it from the source before running, so an edited check does not
  count;
* the answer cell (the stub) and the solution block's markers and markdown (the solution's idea)
  are removed; every other cell is kept as is.

Then, in ``OUT``: ``nbgrader generate_assignment <chapter>``, collect submissions into
``submitted/<student>/<chapter>/``, ``nbgrader autograde <chapter> --create``, ``nbgrader export``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional

import nbformat

from .book import CHECK_TAG, SOLUTION_TAG, book_chapters, exercise_parts

CONFIG = '''# nbgrader configuration written by `python -m fundamentallm.course nbgrader`.
c = get_config()  # noqa: F821
c.CourseDirectory.root = "."
c.CourseDirectory.db_url = "sqlite:///gradebook.db"
# A chapter runs in well under a minute; one cell may take up to two.
c.ExecutePreprocessor.timeout = 120
'''


def solution_regions(source: str) -> str:
    """``source`` (imports and function definitions) with every function body wrapped in
    ``### BEGIN SOLUTION`` / ``### END SOLUTION``, after its docstring."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out: list[str] = []
    previous_end = 0
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):  # a value answer: hide it all
            out.extend(lines[previous_end:node.lineno - 1])
            out.append("### BEGIN SOLUTION")
            out.extend(lines[node.lineno - 1:node.end_lineno])
            out.append("### END SOLUTION")
            previous_end = node.end_lineno
            continue
        body = node.body
        has_doc = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str)
        first_code = body[1] if has_doc and len(body) > 1 else body[0]
        if has_doc and len(body) == 1:
            continue  # a docstring-only function has no body to hide
        start = body[0].end_lineno if has_doc else first_code.lineno - 1  # comments stay hidden
        for decorator in getattr(first_code, "decorator_list", []):  # a nested decorated def
            start = min(start, decorator.lineno - 1)
        indent = " " * first_code.col_offset
        out.extend(lines[previous_end:start])
        out.append(f"{indent}### BEGIN SOLUTION")
        out.extend(lines[start:node.end_lineno])
        out.append(f"{indent}### END SOLUTION")
        previous_end = node.end_lineno
    out.extend(lines[previous_end:])
    return "\n".join(out) + "\n"


def nbgrader_notebook(nb, points: float = 1.0):
    """The nbgrader source version of a chapter notebook (see the module docstring)."""
    nb = nbformat.from_dict(nb)
    parts = exercise_parts(nb)
    first_code = {part["solution_code"][0]: part for part in parts}
    by_check = {part["check"]: part for part in parts}
    drop = {i for part in parts for i in part["solution"]} | {part["answer"] for part in parts}
    cells = []
    for i, cell in enumerate(nb.cells):
        if i in first_code:  # the exercise's solution, as one autograded-answer cell
            part = first_code[i]
            code = "\n\n".join(nb.cells[j].source for j in part["solution_code"])
            cell.source = solution_regions(code)
            cell.metadata["tags"] = [t for t in cell.metadata.get("tags", []) if t != SOLUTION_TAG]
            cell.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False, "task": False,
                                         "grade_id": f"{part['label']}-answer", "schema_version": 3}
            cells.append(cell)
        elif i in by_check:
            # strict: an unattempted stub raises (nbgrader gives the points of a cell that does not)
            body = "\n".join("    " + line if line.strip() else line for line in cell.source.splitlines())
            cell.source = f"with checks.strict():\n{body}\n"
            cell.metadata["tags"] = [t for t in cell.metadata.get("tags", []) if t != CHECK_TAG]
            cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "task": False,
                                         "points": points, "grade_id": f"{by_check[i]['label']}-check",
                                         "schema_version": 3}
            cells.append(cell)
        elif i not in drop:
            cells.append(cell)
    nb.cells = cells
    return nb


def nbgrader_export(out_dir: Path, root: Optional[Path] = None, points: float = 1.0) -> list[Path]:
    """Write the nbgrader course folder (see the module docstring). Returns the notebooks."""
    if not points > 0:
        raise ValueError(f"points={points!r} must be > 0")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "nbgrader_config.py").write_text(CONFIG, encoding="utf-8")
    written = []
    for chapter in book_chapters(root):
        dst = out_dir / "source" / chapter.name / chapter.path.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nbgrader_notebook(nbformat.read(chapter.path, as_version=4), points), dst)
        written.append(dst)
    return written
