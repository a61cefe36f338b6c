"""Grading a class: ``python -m fundamentallm.course grade SUBMISSIONS --csv scores.csv``.

``SUBMISSIONS`` holds one folder per student; inside, any of the book's chapter notebooks (same
file names as in ``book/``, in any sub-folder). Everything that decides a mark comes from the
*book*: the exercise labels, the check cells and the denominator. From a submission only the
student's code is taken, matched by exercise label: the code cells between the exercise's
statement (``:label: chNN-exK``) and the next check cell or exercise.

Each student runs in a fresh Python process (:mod:`fundamentallm.course._worker`), with a time
limit per exercise; a crash, a hang, ``SystemExit``, ``os._exit``, an unreadable notebook or a
missing cell costs that student that exercise, with the reason in the details. The worker runs in
its own process group, which is killed when it is done. Nothing a submission does reaches the
grader's memory or the CSV files, which are written after every student has run.

This executes the submitted code with the instructor's permissions: see book/instructors.md for
what that does not protect against.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import nbformat

from .book import CHECK_TAG, Chapter, book_chapters, exercise_label

DEFAULT_TIMEOUT_S = 60.0
STARTUP_S = 120.0  # importing torch in a fresh process, on a busy machine


@dataclass
class Result:
    """One student's result for one exercise."""

    student: str
    chapter: str
    label: str
    passed: bool
    message: str


# --- reading a submission ---------------------------------------------------------------------

def submitted_code(nb, label: str) -> Optional[str]:
    """The student's code for exercise ``label``: the code cells after the markdown cell that
    declares ``:label: label``, up to the next check cell or exercise statement. ``None`` when the
    label is not in the notebook."""
    cells = list(nb.cells)
    start = next((i for i, c in enumerate(cells)
                  if c.cell_type == "markdown" and exercise_label(c.source) == label), None)
    if start is None:
        return None
    code = []
    for cell in cells[start + 1:]:
        if cell.cell_type == "markdown" and exercise_label(cell.source) is not None:
            break
        if cell.cell_type == "code":
            if CHECK_TAG in cell.get("metadata", {}).get("tags", []):
                break
            code.append(cell.source)
    return "\n\n".join(code)


def _read_notebook(path: Path):
    """The notebook at ``path``, or the reason it cannot be read."""
    try:
        return nbformat.reads(path.read_text(encoding="utf-8"), as_version=4), None
    except Exception as e:  # not JSON, not a notebook, not UTF-8, unreadable ...
        return None, f"the notebook could not be read ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"


def student_folders(submissions: Path) -> list[Path]:
    """One folder per student (hidden folders ignored). Raises ``FileNotFoundError`` /
    ``ValueError`` when ``submissions`` is missing or holds no student folder."""
    submissions = Path(submissions)
    if not submissions.is_dir():
        raise FileNotFoundError(f"submissions={str(submissions)!r}: no such folder; it must hold one "
                                f"folder per student")
    folders = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise ValueError(f"submissions={str(submissions)!r} holds no student folder; put each "
                         f"student's notebooks in a folder named after the student")
    return folders


# --- running one student in a fresh process ---------------------------------------------------

def _worker_env() -> dict:
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parents[2])  # the fundamentallm we run
    env["PYTHONPATH"] = os.pathsep.join([package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["MPLBACKEND"] = "Agg"
    return env


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _run_worker(items: list[dict], timeout: float, workdir: Path) -> tuple[dict, Optional[str], str]:
    """Run ``items`` in one worker process. Returns (results by label, the label that was running
    when the process died or timed out (or None), why it stopped)."""
    job = workdir / "job.json"
    results_file = workdir / "results.jsonl"
    job.write_text(json.dumps(items), encoding="utf-8")
    results_file.write_text("", encoding="utf-8")
    log = open(workdir / "worker.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "fundamentallm.course._worker", str(job), str(results_file)],
                            cwd=workdir, env=_worker_env(), stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    expected = {item["label"] for item in items}
    results: dict[str, tuple[bool, str]] = {}
    current, started_at, offset, buffer = None, time.monotonic(), 0, ""
    reason = ""
    try:
        while True:
            exited = proc.poll() is not None
            with open(results_file, encoding="utf-8", errors="replace") as f:
                f.seek(offset)
                chunk = f.read()
                offset = f.tell()
            buffer += chunk
            *lines, buffer = buffer.split("\n")
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(record, dict):
                    continue
                if record.get("start") in expected:
                    current, started_at = record["start"], time.monotonic()
                elif record.get("label") in expected and record.get("label") == current \
                        and isinstance(record.get("passed"), bool) and isinstance(record.get("message"), str):
                    results[current] = (record["passed"], record["message"][:1000])
                    current = None
            if exited:
                if current is not None or len(results) < len(items):
                    tail = (workdir / "worker.log").read_bytes()[-300:].decode("utf-8", "replace").strip()
                    reason = (f"the grading process ended (exit code {proc.returncode}) during this "
                              f"exercise" + (f": {tail.splitlines()[-1]}" if tail else ""))
                break
            limit = timeout if current is not None else STARTUP_S
            if time.monotonic() - started_at > limit:
                reason = (f"timed out after {timeout:g} s" if current is not None
                          else f"the grading process did not start within {STARTUP_S:g} s")
                break
            time.sleep(0.02)
    finally:
        _kill_group(proc)
        log.close()
    return results, current, reason


def read_submission(name: str, folder: Path, chapters: Sequence[Chapter]) -> tuple[dict[str, Result], list[dict]]:
    """Read one student's folder: (results already decided -- missing notebooks or exercises,
    unreadable notebooks --, the items to run: the student's code and the book's check)."""
    found: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.ipynb")):
        if ".ipynb_checkpoints" not in path.parts:
            found.setdefault(path.name, path)
    results: dict[str, Result] = {}
    items: list[dict] = []
    for chapter in chapters:
        path = found.get(chapter.path.name)
        nb, why = (None, f"no {chapter.path.name} in the submission") if path is None else _read_notebook(path)
        for ex in chapter.exercises:
            code = submitted_code(nb, ex.label) if nb is not None else None
            if nb is not None and code is None:
                why_ex = f"exercise {ex.label} is missing from {chapter.path.name}"
            else:
                why_ex = why
            if code is None:
                results[ex.label] = Result(name, chapter.name, ex.label, False, why_ex or "missing")
            else:
                items.append({"label": ex.label, "code": code, "check": ex.check, "chapter": chapter.name})
    return results, items


def run_submission(name: str, chapters: Sequence[Chapter], results: dict[str, Result], items: list[dict],
                   timeout: float = DEFAULT_TIMEOUT_S) -> list[Result]:
    """Run a student's ``items`` in fresh worker processes: one :class:`Result` per exercise of
    the book, in book order."""
    results = dict(results)
    chapter_of = {item["label"]: item["chapter"] for item in items}
    with tempfile.TemporaryDirectory(prefix="fundamentallm-grade-") as tmp:
        pending = items
        run = 0
        while pending:
            run += 1
            workdir = Path(tmp) / f"run{run}"
            workdir.mkdir()
            done, culprit, reason = _run_worker(pending, timeout, workdir)
            for label, (passed, message) in done.items():
                results[label] = Result(name, chapter_of[label], label, passed, message)
            if culprit is not None:
                results[culprit] = Result(name, chapter_of[culprit], culprit, False, reason)
            elif not done:  # died before any exercise started (or between): give up
                for item in pending:
                    if item["label"] not in results:
                        results[item["label"]] = Result(name, item["chapter"], item["label"], False,
                                                        reason or "the grading process stopped early")
            pending = [item for item in pending if item["label"] not in results]
    return [results[ex.label] for chapter in chapters for ex in chapter.exercises]


def grade_student(name: str, folder: Path, chapters: Sequence[Chapter], timeout: float = DEFAULT_TIMEOUT_S) -> list[Result]:
    """Grade one student's folder against the book's ``chapters``."""
    return run_submission(name, chapters, *read_submission(name, folder, chapters), timeout=timeout)


# --- the class ---------------------------------------------------------------------------------

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def csv_safe(value):
    """A CSV cell that a spreadsheet will not run as a formula (OWASP's advice: prefix with ')."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def grade(submissions: Path, csv_path: Optional[Path] = None, details_path: Optional[Path] = None,
          root: Optional[Path] = None, timeout: float = DEFAULT_TIMEOUT_S,
          chapters: Optional[Sequence[str]] = None, jobs: int = 1) -> tuple[list[dict], list[Result]]:
    """Grade every student folder in ``submissions`` against the book in ``root``.

    Returns (one row per student: ``student``, one 1/0 column per exercise label, ``total``,
    ``out_of``; the details, one :class:`Result` per student and exercise). ``chapters`` restricts
    grading to chapters whose file name starts with one of them (``["02", "03_multi"]``)."""
    if not timeout > 0:
        raise ValueError(f"timeout={timeout!r} must be a positive number of seconds")
    if jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be >= 1")
    folders = student_folders(submissions)
    book = book_chapters(root)
    if chapters:
        book = [c for c in book if any(c.path.name.startswith(str(p)) for p in chapters)]
        if not book:
            raise ValueError(f"chapters={list(chapters)!r} matches no chapter of the book")
    labels = [ex.label for c in book for ex in c.exercises]
    # Every submission is read before any runs: a submission cannot edit a later one on disk.
    read = [read_submission(f.name, f, book) for f in folders]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        per_student = list(pool.map(lambda fr: run_submission(fr[0].name, book, *fr[1], timeout=timeout),
                                    zip(folders, read)))
    rows, details = [], []
    for folder, results in zip(folders, per_student):
        row = {"student": folder.name}
        row.update({r.label: int(r.passed) for r in results})
        row["total"] = sum(int(r.passed) for r in results)
        row["out_of"] = len(labels)
        rows.append(row)
        details.extend(results)
    if csv_path is not None:
        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["student", *labels, "total", "out_of"])
            for row in rows:
                writer.writerow([csv_safe(row["student"]), *(row[lab] for lab in labels), row["total"], row["out_of"]])
    if details_path is not None:
        with open(details_path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["student", "chapter", "exercise", "passed", "message"])
            for r in details:
                writer.writerow([csv_safe(r.student), r.chapter, r.label, int(r.passed), csv_safe(r.message)])
    return rows, details
