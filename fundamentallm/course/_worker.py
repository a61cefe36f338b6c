"""The grading worker: ``python -m fundamentallm.course._worker JOB RESULTS``.

Runs in its own process, one per student (a fresh one after a crash or a timeout). ``JOB`` is a
JSON list of ``{"label", "code", "check"}``: the student's code for each exercise and the check
cell *from the book*. For each exercise it appends ``{"start": label}`` and then
``{"label", "passed", "message"}`` to ``RESULTS`` (JSON lines), so the parent can time each
exercise and knows which one was running if the process dies. Everything the student's code
raises, ``SystemExit`` and ``KeyboardInterrupt`` included, fails only that exercise.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys


def _first_line(text: str) -> str:
    lines = [line for line in str(text).splitlines() if line.strip()]
    return lines[0][:500] if lines else ""


def run_one(label: str, code: str, check: str, checks_module) -> tuple[bool, str]:
    """Execute the student's ``code`` and then the book's ``check`` in a fresh namespace."""
    namespace = {"checks": checks_module, "__name__": "__exercise__"}
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            exec(compile(code, f"<submission {label}>", "exec"), namespace)  # noqa: S102
            exec(compile(check, f"<check {label}>", "exec"), namespace)  # noqa: S102
    except BaseException as e:  # a wrong answer, a stub, a crash, SystemExit: this exercise fails
        name = type(e).__name__
        if isinstance(e, SystemExit):
            return False, f"SystemExit({e.code!r}): the submission tried to stop the grader"
        return False, f"{name}: {_first_line(e)}" if _first_line(e) else name
    printed = [line for line in buf.getvalue().splitlines() if line.startswith("✓")]
    return True, printed[-1] if printed else "passed"


def main(job_path: str, results_path: str) -> None:
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    out = open(results_path, "a", encoding="utf-8")  # noqa: SIM115

    def emit(record: dict) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()

    from fundamentallm import checks  # imported before any student code runs

    for item in job:
        emit({"start": item["label"]})
        passed, message = run_one(item["label"], item["code"], item["check"], checks)
        emit({"label": item["label"], "passed": passed, "message": message})
    out.close()
    sys.stdout.flush()
    os._exit(0)  # do not wait for threads the student's code may have left running


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
