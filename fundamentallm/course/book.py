"""The book as the instructor's source: its chapters (from ``_toc.yml``, read as YAML), their
exercises, and the student version of a notebook.

Every exercise in a chapter notebook has the same structure (book/CONTRIBUTING.md):

    markdown  :::{exercise} Title  :label: chNN-exK  :class: KIND
    code      tags ["answer"]     the stub the student edits (raises NotImplementedError / = None)
    markdown  ````{solution-start} chNN-exK   (:class: dropdown)
    code      tags ["solution"]   the solution: defines the same names as the stub
    markdown  (optional)          the idea of the solution
    markdown  ````{solution-end}
    code      tags ["check"]      e.g. checks.check_softmax_rows(softmax_rows)

An older chapter without the answer cell still parses: its stub is made from the solution
(:func:`make_stub`). The student version keeps the statement, the answer cell and the check, and
drops the solution block (markers, solution cells and the markdown between them).
"""

from __future__ import annotations

import ast
import io
import re
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import nbformat
import yaml

SOLUTION_TAG, CHECK_TAG, ANSWER_TAG = "solution", "check", "answer"
STUB_TAG = ANSWER_TAG  # the student's cell (older name)
_LABEL = re.compile(r":label:\s*(\S+)")
_SOLUTION_START = re.compile(r"\{solution-start\}\s*(\S+)")


@dataclass
class Exercise:
    """One exercise of a notebook: its label, the solution's code, the check cell's code, the
    stub of the answer cell and the solution's markdown (its idea, if any)."""

    label: str
    code: str
    check: str
    answer: str = ""
    idea: str = ""


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def exercise_label(source: str) -> Optional[str]:
    """The label of an exercise statement (a markdown cell with ``{exercise}``), else None."""
    if "{exercise}" not in source:
        return None
    m = _LABEL.search(source)
    return m.group(1) if m else None


def exercise_parts(nb) -> list[dict]:
    """The exercises of a notebook as cell indices, in order: ``{"label", "statement",
    "answer" (index or None for an older chapter), "solution" (the indices of the whole solution
    block: markers, code and markdown), "solution_code", "check"}``. Raises ``ValueError`` on a
    malformed structure, naming the cell."""
    found: list[dict] = []
    current: Optional[dict] = None
    in_solution = False
    for i, cell in enumerate(nb.cells):
        tags, source = _tags(cell), cell.source
        if cell.cell_type == "markdown" and "{exercise}" in source:
            if current is not None:
                raise ValueError(f"exercise {current['label']!r} (cell {current['statement']}) has no "
                                 f"check cell before the next exercise (cell {i})")
            label = exercise_label(source)
            if label is None:
                raise ValueError(f"the exercise statement in cell {i} has no :label:")
            current = {"label": label, "statement": i, "answer": None, "solution": [],
                       "solution_code": [], "check": None}
            continue
        if current is None:
            if SOLUTION_TAG in tags or ANSWER_TAG in tags or "{solution-start}" in source:
                raise ValueError(f"cell {i} ({'/'.join(tags) or 'solution-start'}) has no exercise "
                                 f"label before it")
            continue
        if cell.cell_type == "markdown" and "{solution-start}" in source:
            in_solution = True
            current["solution"].append(i)
        elif cell.cell_type == "markdown" and "{solution-end}" in source:
            in_solution = False
            current["solution"].append(i)
        elif in_solution:
            current["solution"].append(i)
            if cell.cell_type == "code":
                current["solution_code"].append(i)
        elif cell.cell_type == "code" and SOLUTION_TAG in tags:  # a solution cell without markers
            current["solution"].append(i)
            current["solution_code"].append(i)
        elif cell.cell_type == "code" and ANSWER_TAG in tags:
            current["answer"] = i
        elif cell.cell_type == "code" and CHECK_TAG in tags:
            current["check"] = i
            if not current["solution_code"]:
                raise ValueError(f"exercise {current['label']!r} has no solution cell before its check "
                                 f"(cell {i})")
            found.append(current)
            current = None
    if current is not None:
        raise ValueError(f"exercise {current['label']!r} (cell {current['statement']}) has no check cell after it")
    return found


def find_exercises(nb) -> list[Exercise]:
    """The exercises of a notebook, in order (see :func:`exercise_parts`)."""
    out = []
    for part in exercise_parts(nb):
        code = "\n\n".join(nb.cells[i].source for i in part["solution_code"])
        idea = "\n\n".join(nb.cells[i].source for i in part["solution"]
                            if nb.cells[i].cell_type == "markdown" and "{solution-" not in nb.cells[i].source)
        answer = nb.cells[part["answer"]].source if part["answer"] is not None else make_stub(code, part["label"])
        out.append(Exercise(part["label"], code, nb.cells[part["check"]].source, answer, idea))
    return out


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
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            # a committed prediction or answer value: the stub leaves it unanswered
            out.append("\n".join(f"{t.id} = None  # your answer here" for t in node.targets))
        else:
            raise ValueError(f"solution cells may hold only imports, function definitions and "
                             f"answer values (name = ...); "
                             f"found a {type(node).__name__} at line {node.lineno}")
    return "\n\n\n".join(["\n".join(imports)] * bool(imports) + out) + "\n"


def to_student_notebook(nb):
    """A copy of ``nb`` without any solution: each exercise keeps its statement, its answer cell
    (made from the solution by :func:`make_stub` in an older chapter without one) and its check."""
    nb = nbformat.from_dict(nb)  # deep copy
    parts = exercise_parts(nb)
    drop = {i for part in parts for i in part["solution"]}
    stub_at: dict[int, dict] = {}
    for part in parts:
        if part["answer"] is None:  # older chapter: the stub takes the first solution cell's place
            stub_at[part["solution_code"][0]] = part
    cells = []
    for i, cell in enumerate(nb.cells):
        if i in stub_at:
            part = stub_at[i]
            code = "\n\n".join(nb.cells[j].source for j in part["solution_code"])
            cell.source = make_stub(code, part["label"])
            cell.metadata["tags"] = [t for t in _tags(cell) if t != SOLUTION_TAG] + [ANSWER_TAG]
            cell.outputs, cell.execution_count = [], None
            cells.append(cell)
        elif i not in drop:
            cells.append(cell)
    nb.cells = cells
    return nb


def toc_files(root: Path) -> list[str]:
    """Every ``file``/``root`` entry of ``root/_toc.yml`` (paths without suffix), in order, read
    as YAML data."""
    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text(encoding="utf-8")) or {}
    found: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    found.append(node[key])
            for value in node.values():
                if isinstance(value, (list, dict)):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(toc)
    return found


def page_title(path: Path) -> Optional[str]:
    """The first level-1 heading of a Markdown page, or of a notebook's Markdown cells; None
    when the file is missing or has none."""
    path = Path(path)
    if not path.exists():
        return None
    if path.suffix == ".ipynb":
        cells = nbformat.read(path, as_version=4).cells
        text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    else:
        text = path.read_text(encoding="utf-8")
    m = re.search(r"^#\s+(.+?)\s*$", text, flags=re.M)
    return m.group(1) if m else None


@dataclass
class Chapter:
    """A chapter notebook of the book and its exercises (from the instructor's source)."""

    name: str
    path: Path
    exercises: list[Exercise]


def default_root() -> Path:
    """The book to grade against: the current folder if it holds ``_toc.yml``, else the
    repository this package lives in."""
    for candidate in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (candidate / "_toc.yml").exists():
            return candidate
    raise FileNotFoundError("no _toc.yml in the current folder or next to the fundamentallm "
                            "package; pass --root with the book's folder")


def book_chapters(root: Optional[Path] = None) -> list[Chapter]:
    """The chapters of the book in ``root`` that have exercises, in ``_toc.yml`` order. Labels
    must be unique across the book."""
    root = Path(root) if root is not None else default_root()
    if not (root / "_toc.yml").exists():
        raise FileNotFoundError(f"root={str(root)!r} has no _toc.yml; pass the book's folder")
    chapters, seen = [], set()
    for name in toc_files(root):
        path = root / f"{name}.ipynb"
        if not path.exists():
            continue
        exercises = find_exercises(nbformat.read(path, as_version=4))
        for ex in exercises:
            if ex.label in seen:
                raise ValueError(f"exercise label {ex.label!r} appears twice in the book")
            seen.add(ex.label)
        if exercises:
            chapters.append(Chapter(path.stem, path, exercises))
    return chapters


def run_exercise(ex: Exercise) -> tuple[bool, str]:
    """Execute the exercise's code and its check in a fresh namespace *in this process*:
    (passed, message). For the book's own solutions (tests); grading runs submissions in separate
    processes (:mod:`fundamentallm.course.grader.grading`)."""
    from .. import checks

    namespace = {"checks": checks, "__name__": "__exercise__"}
    try:
        with redirect_stdout(io.StringIO()), checks.core.collect_passes() as passes:
            exec(compile(ex.code, f"<{ex.label} code>", "exec"), namespace)
            exec(compile(ex.check, f"<{ex.label} check>", "exec"), namespace)
    except Exception as e:  # a wrong answer, a stub, or a crash: all count as not passed
        return False, f"{type(e).__name__}: {e}".splitlines()[0]
    return True, passes[-1] if passes else "passed"


# --- The instructors' exercise table, generated from the exercises' own metadata ----------------

_CLASS = re.compile(r"^:class:\s*(\S+)", re.M)
_TITLE = re.compile(r"\{exercise\}\s*(.*)")
ANSWER_TAG = "answer"
TABLE_START = "<!-- exercise-table:start (generated: python -m fundamentallm.course exercise-table --write) -->"
TABLE_END = "<!-- exercise-table:end -->"


@dataclass
class ExerciseInfo:
    """What an instructor needs to know of one exercise, read from the notebook: the directive's
    label, title and ``:class:`` (its kind), the answer cell's ``exercise`` metadata (difficulty,
    minutes, the rubric of its open part) and the checks its check cell calls."""

    chapter: str
    label: str
    title: str
    kind: Optional[str]
    difficulty: Optional[int]
    minutes: Optional[int]
    rubric: Optional[str] = None
    checks: tuple = ()


_CHECK_CALL = re.compile(r"\bcheck_[A-Za-z0-9_]+")


def exercise_infos(nb, chapter: str = "") -> list[ExerciseInfo]:
    """The exercises of a notebook in order, with their kind, difficulty, minutes, rubric and
    checks (None or empty where the notebook does not declare them)."""
    found: list[ExerciseInfo] = []
    for cell in nb.cells:
        if cell.cell_type == "markdown" and "{exercise}" in cell.source:
            label = exercise_label(cell.source)
            if label is None:
                continue
            kind, title = _CLASS.search(cell.source), _TITLE.search(cell.source)
            found.append(ExerciseInfo(chapter, label, title.group(1).strip() if title else "",
                                      kind.group(1) if kind else None, None, None))
        elif cell.cell_type == "code" and ANSWER_TAG in _tags(cell) and found:
            meta = cell.get("metadata", {}).get("exercise", {})
            found[-1].difficulty = meta.get("difficulty", found[-1].difficulty)
            found[-1].minutes = meta.get("minutes", found[-1].minutes)
            found[-1].rubric = meta.get("rubric", found[-1].rubric)
        elif cell.cell_type == "code" and CHECK_TAG in _tags(cell) and found:
            names = tuple(dict.fromkeys(_CHECK_CALL.findall(cell.source)))
            found[-1].checks = tuple(dict.fromkeys(found[-1].checks + names))
    return found


def book_exercise_infos(root: Optional[Path] = None) -> list[ExerciseInfo]:
    """Every exercise of the book's chapter notebooks, in ``_toc.yml`` order."""
    root = Path(root) if root is not None else default_root()
    infos: list[ExerciseInfo] = []
    for name in toc_files(root):
        path = root / f"{name}.ipynb"
        if path.exists():
            infos += exercise_infos(nbformat.read(path, as_version=4), Path(name).name)
    return infos


def _marks(info: ExerciseInfo, self_check: set) -> str:
    """'graded', 'self-check' or 'graded + self-check' (an exercise with a checked prediction
    that counts nothing beside a graded part); '—' without a check."""
    if not info.checks:
        return "—"
    kinds = {"self-check" if c in self_check else "graded" for c in info.checks}
    return " + ".join(sorted(kinds))


def exercise_table(root: Optional[Path] = None) -> str:
    """The Markdown tables of every exercise (chapter, exercise, kind, difficulty, minutes, marks,
    wrong answers its checks reject), a count per chapter, and the rubric of every open part."""
    from ..checks import SELF_CHECK, WRONG_ANSWERS

    def cell(value, fmt=str):
        return "—" if value is None else fmt(value)

    wrong: dict[str, int] = {}
    for w in WRONG_ANSWERS:
        wrong[w.check] = wrong.get(w.check, 0) + 1
    lines = ["| Chapter | Exercise | Title | Kind | Difficulty | Minutes | Marks | Wrong answers caught |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    infos = book_exercise_infos(root)
    for info in infos:
        caught = sum(wrong.get(c, 0) for c in info.checks)
        lines.append(f"| {{doc}}`{info.chapter}` | {{ref}}`{info.label}` | {info.title} | "
                     f"{cell(info.kind)} | {cell(info.difficulty, lambda d: '★' * int(d))} | "
                     f"{cell(info.minutes)} | {_marks(info, SELF_CHECK)} | {caught} |")
    total = sum(i.minutes for i in infos if i.minutes is not None)
    graded = sum("graded" in _marks(i, SELF_CHECK) for i in infos)
    chapters = list(dict.fromkeys(i.chapter for i in infos))
    lines.append(f"\n{len(infos)} exercises in {len(chapters)} chapters, about {total / 60:.0f} hours of work "
                 f"in all (the minutes declared by each exercise); {graded} carry marks. *Wrong answers "
                 f"caught* counts the plausible wrong answers declared for the exercise's checks; "
                 f"`python -m fundamentallm.course catches` runs each of them live and prints the "
                 f"message a student reads.\n")
    lines += ["| Chapter | Exercises | Graded | Self-check only | Warm-up | Minutes |", "| --- | --- | --- | --- | --- | --- |"]
    for chapter in chapters:
        mine = [i for i in infos if i.chapter == chapter]
        lines.append(f"| {{doc}}`{chapter}` | {len(mine)} | {sum('graded' in _marks(i, SELF_CHECK) for i in mine)} | "
                     f"{sum(_marks(i, SELF_CHECK) == 'self-check' for i in mine)} | "
                     f"{sum(i.kind == 'warm-up' for i in mine)} | {sum(i.minutes or 0 for i in mine)} |")
    rubrics = [i for i in infos if i.rubric]
    if rubrics:
        lines += ["", "(instructors-rubrics)=", "### Rubrics of the open parts", "",
                  "The checks judge code and predictions; the written part of these exercises (an "
                  "explanation, a why) is yours to mark. The rubric is the exercise author's, from the "
                  "answer cell's metadata.", ""]
        lines += [f"- {{ref}}`{i.label}` ({i.title}): {i.rubric}" for i in rubrics]
    return "\n".join(lines) + "\n"


def write_exercise_table(path: Path, root: Optional[Path] = None) -> bool:
    """Rewrite the table between the markers of ``path`` (book/instructors.md); True when the file
    changed. Raises ``ValueError`` when the markers are missing."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f"{path} lacks the markers {TABLE_START!r} and {TABLE_END!r}")
    head, rest = text.split(TABLE_START, 1)
    _, tail = rest.split(TABLE_END, 1)
    new = f"{head}{TABLE_START}\n{exercise_table(root)}{TABLE_END}{tail}"
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def stored_exercise_table(path: Path) -> str:
    """The table currently stored between the markers of ``path``."""
    text = Path(path).read_text(encoding="utf-8")
    if TABLE_START not in text or TABLE_END not in text:
        raise ValueError(f"{path} lacks the markers {TABLE_START!r} and {TABLE_END!r}")
    return text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].lstrip("\n")

