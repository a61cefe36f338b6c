"""The class's records: one :class:`Result` per exercise, a student's CSV row, the journal that
lets a killed run resume with the same seed and rows."""

from __future__ import annotations

import csv
import json
import os
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

PASSED, FAILED, NOT_ATTEMPTED, REVIEW, MISSING = "passed", "failed", "not attempted", "needs review", "missing"


@dataclass
class Result:
    """One student's result for one exercise. ``status``: passed, failed, not attempted, needs
    review (0 marks until an instructor reads the code) or missing."""

    student: str
    chapter: str
    label: str
    passed: bool
    message: str
    status: str = ""

    def __post_init__(self) -> None:
        if not self.status:
            self.status = PASSED if self.passed else FAILED


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "|", "%")


def csv_safe(value):
    """A CSV cell that a spreadsheet will not run as a formula (OWASP's advice: prefix with ')."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _row(student: str, results: list[Result], labels: list[str], self_checks: frozenset = frozenset()) -> dict:
    """One student's row: 1/0 per exercise; ``total``/``out_of`` over the graded exercises only;
    ``self_check``/``self_check_of`` for the self-check items (no marks); ``review``."""
    row: dict[str, Any] = {"student": student}
    row.update({r.label: int(r.passed) for r in results})
    row["total"] = sum(int(r.passed) for r in results if r.label not in self_checks)
    row["out_of"] = sum(1 for lab in labels if lab not in self_checks)
    row["self_check"] = sum(int(r.passed) for r in results if r.label in self_checks)
    row["self_check_of"] = sum(1 for lab in labels if lab in self_checks)
    row["review"] = " ".join(r.label for r in results if r.status == REVIEW)
    return row


def student_name(folder: Path) -> str:
    """A student's name as text: the folder's name, any byte that is not UTF-8 written as ``\\xNN``."""
    name = os.fsencode(Path(folder).name)
    return name.decode("utf-8", "backslashreplace")


def _write_atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        write(csv.writer(f))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Journal:
    """``<csv>.journal.jsonl``: the seed, then one line per student started and finished, so a
    killed run resumes with the same seed and the same rows."""

    def __init__(self, path: Path, seed: Optional[int], labels: list[str], resume: bool) -> None:
        self.path, self.lock = path, threading.Lock()
        self.done: dict[str, list[Result]] = {}
        self.starts: dict[str, int] = {}
        self.solo: dict[str, int] = {}  # starts while no other student was graded
        lines = []
        if path.exists():
            lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            finished = bool(lines) and lines[-1].get("finished") is True
            if not resume and not finished:
                raise ValueError(f"{path} holds a grading run that did not finish; pass --resume to "
                                 f"continue it, or delete the file to start again")
        if resume and lines:
            head = lines[0]
            if head.get("labels") != labels:
                raise ValueError(f"{path} was written for other exercises; delete it to start again")
            self.seed = int(head["seed"])
            for line in lines[1:]:
                if "started" in line:
                    self.starts[line["started"]] = self.starts.get(line["started"], 0) + 1
                    if line.get("solo"):
                        self.solo[line["started"]] = self.solo.get(line["started"], 0) + 1
                elif "student" in line:
                    self.done[line["student"]] = [Result(**r) for r in line["results"]]
            self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115
        else:
            self.seed = seed if seed is not None else random.SystemRandom().randrange(2 ** 62)
            self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115
            self._write({"seed": self.seed, "labels": labels})

    def _write(self, record: dict) -> None:
        with self.lock:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
            os.fsync(self.file.fileno())

    def started(self, student: str, solo: bool = False) -> None:
        self._write({"started": student, **({"solo": True} if solo else {})})

    def finished(self, student: str, results: list[Result]) -> None:
        self._write({"student": student, "results": [r.__dict__ for r in results]})

    def close(self, complete: bool) -> None:
        if complete:
            self._write({"finished": True})
        self.file.close()
