"""Grading a class: ``python -m fundamentallm.course grade SUBMISSIONS --csv scores.csv``.

``SUBMISSIONS`` holds one folder per student; inside, any of the book's chapter notebooks (same
file names as in ``book/``, in any sub-folder). Everything that decides a mark comes from the
*book* and runs in this process: the exercise labels, the check cells, the checks themselves (their
inputs, reference, comparison) and the denominator. From a submission only the student's code is
taken, as data: for each exercise, the code cells between its statement (``:label: chNN-exK``) and
its check cell (check and solution cells excluded). Notebooks are read without following symbolic
links, and only regular files up to :data:`MAX_NOTEBOOK_BYTES`.

The student's code runs in a worker (:mod:`fundamentallm.course.grader._worker`), sandboxed by
bubblewrap when it is installed (:mod:`fundamentallm.course.grader.sandbox`). The check receives proxies
of the student's objects: calling one sends the arguments, as data (:mod:`~fundamentallm.course.grader.wire`,
no pickle), to the worker, which calls the student's function and returns data. The inputs are
drawn fresh with a random seed the grader keeps (:func:`fundamentallm.checks.core.grading_seed`).

Besides the check, the grader reads the source (never runs it here): a forbidden function named in
it fails the exercise; a dynamic construct that could hide one (``__import__``, ``importlib``,
``exec``/``eval``, ``getattr`` with a computed name, frames, profilers, threads, processes,
``ctypes``, ``os``/``sys``, dunder attributes ...) marks it "needs review": 0 marks until an
instructor reads it (``review`` column). The worker's own profiler record of forbidden calls is
a second signal.

Each exercise has a time limit (spent waiting for the worker); a hang, a crash, an exit or a
broken answer costs that exercise only, and the worker is restarted for the next one. One row per
student is always written; rows are written as students finish (and a journal beside the CSV lets
``--resume`` continue a killed run with the same seed). See book/instructors.md.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import os
import random
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from ..book import Chapter, book_chapters
from . import sandbox

# the class's records, the integrity check and the reading of a submission live one idea a module;
# their names are importable from here as before (tests and the course CLI use them)
from .integrity import IntegrityError, integrity_changes, integrity_digest, integrity_files  # noqa: F401
from .proxy import GradingAbort, NotGradable, Session, StudentError, StudentProxy, Worker
from .records import (  # noqa: F401
    FAILED,
    MISSING,
    NOT_ATTEMPTED,
    PASSED,
    REVIEW,
    Journal,
    Result,
    _row,
    _write_atomic,
    csv_safe,
    student_name,
)
from .review import review_source
from .submission import (  # noqa: F401
    MAX_CODE_CHARS,
    MAX_FILES,
    MAX_NOTEBOOK_BYTES,
    _cell_tags,
    _find_notebooks,
    _source,
    chapter_prelude,
    read_notebook_file,
    student_folders,
    submitted_code,
)

DEFAULT_TIMEOUT_S = 60.0


# --- grading one student -----------------------------------------------------------------------

@dataclass
class Item:
    """One exercise to run: the student's code and what the book says about it."""

    chapter: Chapter
    label: str
    code: str
    check: str
    prelude: str
    review: list[str] = field(default_factory=list)


class _ThreadStdout(io.TextIOBase):
    """``sys.stdout`` while grading: what a thread prints goes to its own buffer, if it has one
    (the checks print their ✓ line; several students are graded at once)."""

    def __init__(self, real) -> None:
        self.real, self.local = real, threading.local()

    def write(self, s: str) -> int:
        buf = getattr(self.local, "buf", None)
        return buf.write(s) if buf is not None else self.real.write(s)

    def flush(self) -> None:
        if getattr(self.local, "buf", None) is None:
            self.real.flush()


def _check_names(check: str) -> list[str]:
    """The names a check cell passes to the check: every name it uses except ``checks``."""
    return sorted({n.id for n in ast.walk(ast.parse(check)) if isinstance(n, ast.Name) and n.id != "checks"})


def _check_options(check: str) -> tuple[tuple[str, ...], bool]:
    """(forbidden names, pure) of the checks a check cell calls."""
    from ... import checks

    forbidden: list[str] = []
    pure = True
    for node in ast.walk(ast.parse(check)):
        if isinstance(node, ast.Attribute) and node.attr in checks.CHECKS:
            forbidden += list(checks.FORBIDDEN.get(node.attr, ()))
    return tuple(dict.fromkeys(forbidden)), pure


def _check_by_hand(check: str) -> bool:
    """Whether a check cell calls a check whose statement asks for a derivation by hand (the
    worker then also refuses complex arithmetic: see ``by_hand`` in ``exercise_check``)."""
    from ... import checks

    return any(isinstance(node, ast.Attribute) and node.attr in checks.BY_HAND for node in ast.walk(ast.parse(check)))


class StudentGrader:
    """Grades one student's items one by one, in a worker restarted after any failure."""

    def __init__(self, name: str, limits: sandbox.Limits, hidden: Sequence[Path], timeout: float,
                 stdout: _ThreadStdout) -> None:
        self.name, self.limits, self.hidden, self.timeout, self.stdout = name, limits, hidden, timeout, stdout
        self.worker: Optional[Worker] = None
        self.loaded: dict[str, list[Item]] = {}  # chapter -> items loaded fine (replayed after a restart)

    def _fresh_worker(self, chapter: str) -> Worker:
        """A new worker holding the chapter's earlier answers that loaded fine (as in the
        notebook, a later answer may use an earlier one's functions)."""
        for replay in (True, False):
            self.close()
            self.worker = Worker(self.limits, self.hidden)
            if not replay:
                self.loaded[chapter] = []
                return self.worker
            try:
                for item in self.loaded.get(chapter, []):
                    self.worker.budget = self.timeout
                    self.worker.request({"op": "load", "chapter": chapter, "label": item.label,
                                         "code": item.code, "prelude": item.prelude, "names": []})
                return self.worker
            except GradingAbort:
                continue
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def grade(self, item: Item) -> Result:
        chapter = item.chapter.name
        try:
            result = self._grade(item)
        except NotGradable as e:
            result = self._result(item, False, f"the grader cannot run this check: {e}; please review", REVIEW)
        except GradingAbort as e:
            self.close()
            result = self._result(item, False, f"{e}" if str(e) else "the grading process stopped", FAILED)
        except Exception as e:  # a failure of the grader itself: say so, never lose the row
            self.close()
            result = self._result(item, False, f"the grader could not run this check ({type(e).__name__}: "
                                               f"{str(e)[:300]}); please review", REVIEW)
        if item.review and result.status != MISSING:
            verdict = "the check passed" if result.passed else f"the check: {result.message}"
            result = self._result(item, False, "needs review: the code uses " + "; ".join(item.review[:5])
                                  + f" ({verdict})", REVIEW)
        del chapter  # the answers that loaded fine stay in self.loaded: the next worker replays them
        return result

    def _result(self, item: Item, passed: bool, message: str, status: str) -> Result:
        return Result(self.name, item.chapter.name, item.label, passed, message[:1000], status)

    def _grade(self, item: Item) -> Result:
        from ... import checks

        chapter = item.chapter.name
        forbidden, pure = _check_options(item.check)
        try:
            hits, review = review_source(item.code, forbidden)
        except SyntaxError as e:
            return self._result(item, False, f"your code has a syntax error (line {e.lineno}: {e.msg})", FAILED)
        except (RecursionError, ValueError) as e:
            return self._result(item, False, f"your code could not be read ({type(e).__name__})", REVIEW)
        item.review = review
        if hits:
            return self._result(item, False, f"this exercise asks you not to use {hits[0]}; write it with "
                                             f"basic operations instead", FAILED)
        worker = self.worker if self.worker is not None else self._fresh_worker(chapter)
        worker.budget = self.timeout
        worker.timeout_message = f"timed out after {self.timeout:g} s"
        names = _check_names(item.check)
        reply, buffers = worker.request({"op": "load", "chapter": chapter, "label": item.label, "code": item.code,
                                         "prelude": item.prelude, "names": names})
        session = Session(worker, forbidden, pure, by_hand=_check_by_hand(item.check))
        try:
            values = session._reply(reply, buffers, "answer")
        except NotImplementedError:
            return self._result(item, False, "not attempted yet (your code raises NotImplementedError)",
                                NOT_ATTEMPTED)
        except Exception as e:  # the answer's code raised when it ran
            kind = type(e).__name__ if not isinstance(e, StudentError) else str(e).split(":", 1)[0]
            return self._result(item, False, f"your code raised {kind} when it ran: {str(e)[:300]}", FAILED)
        self.loaded.setdefault(chapter, []).append(item)
        namespace: dict[str, Any] = {"checks": checks}
        for name in names:
            value = values.get(name) if isinstance(values, dict) else None
            if isinstance(value, StudentProxy) and value._hid == 0:
                return self._result(item, False, f"`{name}` is not defined by your answer", NOT_ATTEMPTED)
            if isinstance(value, StudentProxy):
                value.__name__ = value.__qualname__ = name
            namespace[name] = value
        self.stdout.local.buf = io.StringIO()  # what the check prints is not shown
        try:
            with checks.core.collect_passes() as passes:
                exec(compile(item.check, f"<check {item.label}>", "exec"), namespace)  # noqa: S102  (the book's cell)
        except checks.NotAttempted as e:
            return self._result(item, False, str(e), NOT_ATTEMPTED)
        except checks.CheckFailed as e:
            return self._result(item, False, str(e), FAILED)
        finally:
            self.stdout.local.buf = None
        if session.forbidden_seen:
            return self._result(item, False, session.forbidden_seen, FAILED)
        return self._result(item, True, passes[-1] if passes else "passed", PASSED)


def read_submission(name: str, folder: Path, chapters: Sequence[Chapter],
                    preludes: Optional[dict] = None) -> tuple[dict[str, Result], list[Item]]:
    """Read one student's folder as data: (results already decided -- missing notebooks or
    exercises, unreadable notebooks --, the items to run)."""
    preludes = preludes if preludes is not None else {c.name: chapter_prelude(c) for c in chapters}
    results: dict[str, Result] = {}
    items: list[Item] = []
    if Path(folder).is_symlink():
        found, folder_why = {}, "the student's folder is a symbolic link (not followed)"
    else:
        found, folder_why = _find_notebooks(Path(folder)), None
    for chapter in chapters:
        path = found.get(chapter.path.name)
        if path is None:
            nb, why = None, folder_why or f"no {chapter.path.name} in the submission"
        else:
            nb, why = read_notebook_file(path)
        for ex in chapter.exercises:
            code = submitted_code(nb, ex.label) if nb is not None else None
            if nb is not None and code is None:
                why = f"exercise {ex.label} is missing from {chapter.path.name}"
            if code is not None and len(code) > MAX_CODE_CHARS:
                code, why = None, f"the code of {ex.label} is longer than {MAX_CODE_CHARS} characters"
            if code is None:
                results[ex.label] = Result(name, chapter.name, ex.label, False, why or "missing", MISSING)
            else:
                items.append(Item(chapter, ex.label, code, ex.check, preludes[chapter.name]))
    return results, items


def grade_student(name: str, folder: Path, chapters: Sequence[Chapter], timeout: float = DEFAULT_TIMEOUT_S,
                  limits: Optional[sandbox.Limits] = None, hidden: Sequence[Path] = (),
                  preludes: Optional[dict] = None) -> list[Result]:
    """Grade one student's folder against the book's ``chapters``: one :class:`Result` per
    exercise, in book order. Call it inside :func:`grading_context` (``grade`` does)."""
    if not isinstance(sys.stdout, _ThreadStdout):
        with grading_context(random.SystemRandom().randrange(2 ** 62)):
            return grade_student(name, folder, chapters, timeout, limits, hidden, preludes)
    results, items = read_submission(name, folder, chapters, preludes)
    # CPU time of one worker: a backstop for its whole life, never shorter than its exercises' limits
    limits = dataclasses.replace(limits or sandbox.Limits(), cpu_seconds=int(timeout * (len(items) + 2)) + 120)
    grader = StudentGrader(name, limits, hidden, timeout, sys.stdout)
    try:
        for item in items:
            results[item.label] = grader.grade(item)
    finally:
        grader.close()
    return [results[ex.label] for chapter in chapters for ex in chapter.exercises]


# --- the class ---------------------------------------------------------------------------------

@contextlib.contextmanager
def grading_context(seed: int):
    """The grader's process-wide setting while it grades: fresh check inputs from ``seed``,
    printing by thread."""
    from ...checks.core import grading_seed

    previous = sys.stdout
    sys.stdout = _ThreadStdout(previous)
    try:
        with grading_seed(seed):
            yield
    finally:
        sys.stdout = previous


def self_check_labels(chapters: Sequence[Chapter]) -> set[str]:
    """The labels of self-check items: exercises whose check cell calls only checks of
    :data:`fundamentallm.checks.core.SELF_CHECK` (they count no marks)."""
    from ...checks.core import SELF_CHECK

    labels = set()
    for chapter in chapters:
        for ex in chapter.exercises:
            names = re.findall(r"\bchecks\.(check_\w+)", ex.check or "")
            if names and all(n in SELF_CHECK for n in names):
                labels.add(ex.label)
    return labels


def grade(submissions: Path, csv_path: Optional[Path] = None, details_path: Optional[Path] = None,
          root: Optional[Path] = None, timeout: float = DEFAULT_TIMEOUT_S,
          chapters: Optional[Sequence[str]] = None, jobs: int = 1, seed: Optional[int] = None,
          resume: bool = False, limits: Optional[sandbox.Limits] = None,
          quiet: bool = False) -> tuple[list[dict], list[Result]]:
    """Grade every student folder in ``submissions`` against the book in ``root``.

    Returns (one row per student: ``student``, one 1/0 column per exercise label, ``total``,
    ``out_of``, ``review`` -- the labels that need review --; the details, one :class:`Result`
    per student and exercise). ``chapters`` restricts grading to chapters whose file name starts
    with one of them (``["02", "03_multi"]``). With ``csv_path``, the CSV files are rewritten
    after every student and a journal beside them records the seed and each finished student;
    ``resume=True`` continues the run it records."""
    if not timeout > 0:
        raise ValueError(f"timeout={timeout!r} must be a positive number of seconds")
    if jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be >= 1")
    if resume and csv_path is None:
        raise ValueError("resume=True needs csv_path (the journal sits beside the CSV file)")
    folders = student_folders(submissions)
    names = [student_name(f) for f in folders]
    book = book_chapters(root)
    if chapters:
        book = [c for c in book if any(c.path.name.startswith(str(p)) for p in chapters)]
        if not book:
            raise ValueError(f"chapters={list(chapters)!r} matches no chapter of the book")
    labels = [ex.label for c in book for ex in c.exercises]
    self_checks = frozenset(self_check_labels(book))
    if sandbox.bwrap_path() is None and not quiet:
        print(sandbox.NO_SANDBOX_NOTE, file=sys.stderr)
    elif getattr(os, "geteuid", lambda: 1)() == 0 and not quiet:
        print(sandbox.ROOT_NOTE, file=sys.stderr)
    if sandbox.seccomp_unavailable() is not None and not quiet:
        print(sandbox.NO_SECCOMP_NOTE.format(why=sandbox.seccomp_unavailable()), file=sys.stderr)
    hidden = [Path(submissions), *(p.parent for p in (csv_path, details_path) if p is not None),
              *(c.path.parent for c in book), *(c.path.parent.parent for c in book)]
    preludes = {c.name: chapter_prelude(c) for c in book}
    for out in (csv_path, details_path):
        if out is not None:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
    journal = Journal(Path(str(csv_path) + ".journal.jsonl"), seed, labels, resume) if csv_path is not None else None
    run_seed = journal.seed if journal is not None else (seed if seed is not None else random.SystemRandom().randrange(2 ** 62))
    if not quiet:  # kept in the journal too; --seed N draws the same inputs again
        print(f"the checks' inputs are drawn with --seed {run_seed}", file=sys.stderr)
    done: dict[str, list[Result]] = dict(journal.done) if journal is not None else {}
    write_lock = threading.Lock()
    baseline = integrity_digest(book)
    stopped: list[str] = []  # the message that stopped the class

    def write_files() -> None:
        with write_lock:
            finished = [(n, done[n]) for n in names if n in done]
            if csv_path is not None:
                def scores(w):
                    w.writerow(["student", *labels, "total", "out_of", "self_check", "self_check_of", "review"])
                    for n, results in finished:
                        row = _row(n, results, labels, self_checks)
                        w.writerow([csv_safe(n), *(row[lab] for lab in labels), row["total"], row["out_of"],
                                    row["self_check"], row["self_check_of"], row["review"]])
                _write_atomic(Path(csv_path), scores)
            if details_path is not None:
                def details(w):
                    w.writerow(["student", "chapter", "exercise", "passed", "status", "message"])
                    for _, results in finished:
                        for r in results:
                            w.writerow([csv_safe(r.student), r.chapter, r.label, int(r.passed), r.status, csv_safe(r.message)])
                _write_atomic(Path(details_path), details)

    def one(folder: Path, solo: bool = False) -> None:
        name = student_name(folder)
        if name in done or stopped:
            return
        if journal is not None:
            # a student whose grading was cut short is graded again alone (a classmate graded
            # beside one that stopped the grader is innocent); one stopped again while alone, or
            # three times, is not graded a third time
            if journal.solo.get(name, 0) >= 1 or journal.starts.get(name, 0) >= 3:
                results = [Result(name, c.name, ex.label, False, "grading this student stopped the grader "
                                  "(also when graded alone); 0 marks, please review", REVIEW)
                           for c in book for ex in c.exercises]
                done[name] = results
                journal.finished(name, results)
                write_files()
                return
            journal.started(name, solo)
        try:
            results = grade_student(name, folder, book, timeout, limits, hidden, preludes)
        except Exception as e:  # never lose a student's row
            results = [Result(name, c.name, ex.label, False, f"the grader failed on this student "
                              f"({type(e).__name__}: {str(e)[:200]}); please review", REVIEW)
                       for c in book for ex in c.exercises]
        with write_lock:
            if not stopped:
                changes = integrity_changes(baseline, integrity_digest(book))
                if changes:
                    stopped.append(
                        f"the grader's own files changed while {name!r} was graded ({', '.join(changes[:5])}"
                        f"{' ...' if len(changes) > 5 else ''}): the class is stopped and nothing graded from "
                        f"then on is written as a mark (rows already written stand); restore the files "
                        f"(git checkout, or reinstall the package), review {name!r}'s submission by hand, "
                        f"then run again with --resume")
            if stopped:
                return
        done[name] = results
        if journal is not None:
            journal.finished(name, results)
        write_files()

    complete = False
    try:
        if integrity_changes(baseline, integrity_digest(book)):
            raise IntegrityError("the grader's files changed before the class started")
        with grading_context(run_seed):
            suspects = [f for f in folders if journal is not None and student_name(f) not in done
                        and journal.starts.get(student_name(f), 0) >= 1]
            for folder in suspects:  # cut short before: alone, first
                one(folder, solo=True)
            rest = [f for f in folders if f not in suspects]
            if jobs == 1:
                for folder in rest:
                    one(folder)
            else:
                with ThreadPoolExecutor(max_workers=jobs) as pool:
                    list(pool.map(one, rest))
        complete = not stopped
    finally:
        if journal is not None:
            journal.close(complete)
    write_files()
    if stopped:
        raise IntegrityError(stopped[0])
    rows = [_row(n, done[n], labels, self_checks) for n in names]
    details_out = [r for n in names for r in done[n]]
    return rows, details_out
