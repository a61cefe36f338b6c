"""Course tools for instructors: the student edition and grading with the exercise checks.

Every exercise in a chapter notebook has the same structure (book/CONTRIBUTING.md):

    markdown  :::{exercise} ... :label: chNN-exK
    markdown  ````{solution-start} chNN-exK   (:class: dropdown)
    code      tags ["solution"]   imports + top-level functions only, self-contained
    markdown  ````{solution-end}
    code      tags ["check"]      e.g. checks.check_softmax_rows(softmax_rows)

The student edition drops the solution markers, replaces each solution cell by a stub with the
same signatures and docstrings whose bodies raise ``NotImplementedError`` (tagged
``exercise-stub``), and tags each check cell ``raises-exception`` so the unsolved notebook still
executes end to end. Grading runs each exercise's code cell (solution or the student's filled-in
stub) with its check cell in a fresh namespace and records pass/fail with the check's message.

Usage::

    python -m fundamentallm.course student-edition OUT_DIR [--book-dir book]
    python -m fundamentallm.course grade SUBMISSIONS_DIR [--csv scores.csv]
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import re
import shutil
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import nbformat

SOLUTION_TAG, CHECK_TAG, STUB_TAG = "solution", "check", "exercise-stub"
_LABEL = re.compile(r":label:\s*(\S+)")


@dataclass
class Exercise:
    """One exercise of a notebook: its label, the code cell and the check cell."""

    label: str
    code: str
    check: str


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def find_exercises(nb) -> list[Exercise]:
    """The exercises of a notebook, in order. Raises ``ValueError`` on a malformed structure
    (a solution cell with no check cell after it, or no exercise label before it)."""
    found, label = [], None
    cells = nb.cells
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and "{exercise}" in cell.source:
            m = _LABEL.search(cell.source)
            label = m.group(1) if m else None
        tags = _tags(cell)
        if cell.cell_type == "code" and (SOLUTION_TAG in tags or STUB_TAG in tags):
            check = next((c for c in cells[i + 1:] if c.cell_type == "code" and CHECK_TAG in _tags(c)), None)
            if check is None or label is None:
                raise ValueError(f"exercise code cell {i} has no {'check cell after it' if check is None else 'exercise label before it'}")
            found.append(Exercise(label, cell.source, check.source))
            label = None
    return found


def make_stub(source: str, label: str = "this exercise") -> str:
    """Keep imports and each top-level function's signature and docstring; replace every body by
    ``raise NotImplementedError``. Solution cells hold only imports and definitions."""
    tree = ast.parse(source)
    lines = source.splitlines()
    imports: list[str] = []
    out: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.get_source_segment(source, node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            body = node.body
            has_doc = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str)
            keep_until = body[0].end_lineno if has_doc else body[0].lineno - 1
            header = lines[first - 1:keep_until]
            indent = " " * body[0].col_offset
            out.append("\n".join(header) + f"\n{indent}# Your code here.\n"
                       f"{indent}raise NotImplementedError(\"{label}: implement {node.name}\")")
        else:
            raise ValueError(f"solution cells may hold only imports and function definitions; "
                             f"found a {type(node).__name__} at line {node.lineno}")
    return "\n\n\n".join(["\n".join(imports)] * bool(imports) + out) + "\n"


def to_student_notebook(nb):
    """A copy of ``nb`` with solutions removed and exercises stubbed (see the module docstring)."""
    nb = nbformat.from_dict(nb)  # deep copy
    cells, label = [], None
    for cell in nb.cells:
        if cell.cell_type == "markdown" and ("{solution-start}" in cell.source or "{solution-end}" in cell.source):
            continue
        if cell.cell_type == "markdown" and "{exercise}" in cell.source:
            m = _LABEL.search(cell.source)
            label = m.group(1) if m else None
        tags = _tags(cell)
        if cell.cell_type == "code" and SOLUTION_TAG in tags:
            cell.source = make_stub(cell.source, label or "exercise")
            cell.metadata["tags"] = [t for t in tags if t != SOLUTION_TAG] + [STUB_TAG]
        elif cell.cell_type == "code" and CHECK_TAG in tags and "raises-exception" not in tags:
            cell.metadata["tags"] = tags + ["raises-exception"]
        cells.append(cell)
    nb.cells = cells
    return nb


def _toc_files(root: Path) -> list[str]:
    """Files listed in ``_toc.yml`` (without suffix), in order; parsed without a YAML dependency."""
    return re.findall(r"(?:file|root):\s*(\S+)", (root / "_toc.yml").read_text())


def student_edition(out_dir: Path, root: Path = Path(".")) -> list[Path]:
    """Write the student edition of the book in ``root`` to ``out_dir`` as a buildable book.
    Returns the written notebooks."""
    root, out_dir = Path(root), Path(out_dir)
    if out_dir.resolve() == root.resolve():
        raise ValueError("out_dir must differ from the book's root")
    (out_dir / "book").mkdir(parents=True, exist_ok=True)
    written = []
    toc_lines = []
    for line in (root / "_toc.yml").read_text().splitlines():
        # Instructors' material stays out of the student edition.
        if "instructors" in line:
            continue
        toc_lines.append(line)
    (out_dir / "_toc.yml").write_text("\n".join(toc_lines) + "\n")
    config = (root / "_config.yml").read_text()
    config = re.sub(r"^title:\s*(.*)$", lambda m: f"title: {m.group(1).strip()} (student edition)", config, count=1, flags=re.M)
    (out_dir / "_config.yml").write_text(config)
    for name in _toc_files(out_dir):
        src = next((root / f"{name}{ext}" for ext in (".ipynb", ".md") if (root / f"{name}{ext}").exists()), None)
        if src is None:
            raise FileNotFoundError(f"{name} is listed in _toc.yml but neither {name}.ipynb nor {name}.md exists")
        dst = out_dir / src.relative_to(root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == ".ipynb":
            nbformat.write(to_student_notebook(nbformat.read(src, as_version=4)), dst)
            written.append(dst)
        else:
            shutil.copy(src, dst)
    for extra in ("book/references.bib",):
        if (root / extra).exists():
            shutil.copy(root / extra, out_dir / extra)
    # What the pages need besides the notebooks: the diagrams, the CSS, the book's own MathJax.
    for extra in ("book/images", "_static", "_vendor"):
        if (root / extra).is_dir():
            shutil.copytree(root / extra, out_dir / extra, dirs_exist_ok=True)
    return written


def run_exercise(ex: Exercise) -> tuple[bool, str]:
    """Execute the exercise's code and its check in a fresh namespace: (passed, message).
    Note: this executes the submitted code; grade only submissions you are willing to run."""
    from .. import checks

    namespace = {"checks": checks, "__name__": "__exercise__"}
    buf = io.StringIO()
    try:
        with redirect_stdout(buf):
            exec(compile(ex.code, f"<{ex.label} code>", "exec"), namespace)
            exec(compile(ex.check, f"<{ex.label} check>", "exec"), namespace)
    except Exception as e:  # a wrong answer, a stub, or a crash: all count as not passed
        return False, f"{type(e).__name__}: {e}".splitlines()[0]
    return True, buf.getvalue().strip().splitlines()[-1] if buf.getvalue().strip() else "passed"


def grade(submissions: Path, csv_path: Optional[Path] = None) -> list[dict]:
    """Grade every notebook under ``submissions``: one row per (notebook, exercise)."""
    rows = []
    for path in sorted(Path(submissions).rglob("*.ipynb")):
        for ex in find_exercises(nbformat.read(path, as_version=4)):
            ok, message = run_exercise(ex)
            rows.append({"notebook": str(path.relative_to(submissions)), "exercise": ex.label,
                         "passed": ok, "message": message})
    if csv_path is not None:
        with open(csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["notebook", "exercise", "passed", "message"])
            writer.writeheader()
            writer.writerows(rows)
    return rows


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fundamentallm.course", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("student-edition", help="write the book without solutions")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--root", type=Path, default=Path("."), help="the book's root (holds _toc.yml)")
    g = sub.add_parser("grade", help="run the checks over a folder of submitted notebooks")
    g.add_argument("submissions", type=Path)
    g.add_argument("--csv", type=Path, default=None, help="also write the score table as CSV")
    args = parser.parse_args(argv)
    if args.command == "student-edition":
        written = student_edition(args.out_dir, args.root)
        print(f"wrote {len(written)} student notebooks to {args.out_dir}")
        return 0
    rows = grade(args.submissions, args.csv)
    per_nb: dict[str, list[bool]] = {}
    for r in rows:
        per_nb.setdefault(r["notebook"], []).append(r["passed"])
    print(f"{'notebook':40s} {'passed':>8s} {'score':>6s}")
    for name, results in per_nb.items():
        print(f"{name:40s} {sum(results):4d}/{len(results):<3d} {100 * sum(results) / len(results):5.0f}%")
    for r in rows:
        if not r["passed"]:
            print(f"  {r['notebook']} {r['exercise']}: {r['message']}")
    return 0

