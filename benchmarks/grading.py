"""Grading time of a class: N synthetic honest students x the book's chapters, graded by
``python -m fundamentallm.course grade`` (measured, never asserted).

Each student's notebooks are the book's chapters with the solution cells kept as the student's
code (the answer cell, then the book's solution: an honest student who wrote the book's answer).
Every exercise should pass (a self-check item too); anything else is listed as a false failure.
Issue 38's target: 30 students x 15 chapters in at most 10 minutes on 2 cores (``--jobs 2``).

With ``--stubs`` each student hands in the student edition unchanged (every answer cell a stub):
every exercise should score zero, and anything that passes is listed as a false pass.

Run:  python benchmarks/grading.py [--students 30] [--jobs 2] [--chapters 02 03] [--timeout 60] [--stubs]
Prints one line per status, the students' times, then one JSON line (the last line):
``{"students": N, "chapters": C, "exercises": E, "seconds": ..., "s_per_student": ...,
"extrapolated_30x15_s": ..., "false_failures": [...], "jobs": J, "loadavg": [...], "loadavg_start": [...],
"cpu_s": ..., "cpu_s_per_student": ..., "sandbox": ..., "false_passes": [...]}``. ``cpu_s`` is the CPU time of the grader and
its workers: on a machine shared with other jobs the wall time grows with the load, the CPU time
much less; divided by the cores (with ``--jobs`` = cores) it is what the class costs idle.
The extrapolation to 30 x 15 scales the measured time by students and by exercises (it assumes
the chapters not graded cost what the graded ones cost per exercise): run the full class to know.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def honest_notebook(path: Path):
    """The book's chapter with its solution code cells counted as the student's code."""
    from fundamentallm.course.book import SOLUTION_TAG, exercise_parts

    nb = nbformat.read(path, as_version=4)
    for part in exercise_parts(nb):
        for j in part["solution_code"]:
            cell = nb.cells[j]
            cell.metadata["tags"] = [t for t in cell.metadata.get("tags", []) if t != SOLUTION_TAG]
    return nb


def stub_notebook(path: Path):
    """The student edition of the book's chapter, handed in unanswered."""
    from fundamentallm.course.book import to_student_notebook

    return to_student_notebook(nbformat.read(path, as_version=4))


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the sandboxed workers)."""
    import resource

    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--chapters", nargs="+", action="extend", default=None,
                        help="chapter file-name prefixes (default: every chapter)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per exercise")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stubs", action="store_true",
                        help="hand in the student edition's stubs: every exercise should score zero")
    args = parser.parse_args(argv)
    if args.students < 1 or args.jobs < 1:
        parser.error("--students and --jobs must be >= 1")

    from fundamentallm.course import book_chapters, grade, sandbox

    chapters = book_chapters(ROOT)
    if args.chapters:
        chapters = [c for c in chapters if any(c.path.name.startswith(p) for p in args.chapters)]
    if not chapters:
        parser.error(f"--chapters {args.chapters} matches no chapter")
    exercises = sum(len(c.exercises) for c in chapters)
    all_exercises = sum(len(c.exercises) for c in book_chapters(ROOT))
    with tempfile.TemporaryDirectory(prefix="fundamentallm-grading-bench-") as tmp:
        subs = Path(tmp) / "submissions"
        make = stub_notebook if args.stubs else honest_notebook
        notebooks = {c.path.name: make(c.path) for c in chapters}
        for i in range(args.students):
            folder = subs / f"student_{i:03d}"
            folder.mkdir(parents=True)
            for name, nb in notebooks.items():
                nbformat.write(nb, folder / name)
        started, load_start = time.monotonic(), [round(x, 2) for x in os.getloadavg()]
        cpu_start = _cpu_seconds()
        rows, details = grade(subs, Path(tmp) / "out" / "scores.csv", root=ROOT, timeout=args.timeout,
                              chapters=[c.path.name[:2] for c in chapters], jobs=args.jobs, seed=args.seed,
                              quiet=False)
        seconds = time.monotonic() - started
        cpu = _cpu_seconds() - cpu_start
    counts: dict[str, int] = {}
    for r in details:
        counts[r.status] = counts.get(r.status, 0) + 1
    for status, n in sorted(counts.items()):
        print(f"{status:>14s}: {n}")
    false = [] if args.stubs else sorted({f"{r.label}: {r.status}: {r.message[:160]}" for r in details
                                          if not r.passed})
    for line in false:
        print("false failure:", line)
    false_passes = sorted({f"{r.label}: {r.message[:160]}" for r in details if r.passed}) if args.stubs else []
    for line in false_passes:
        print("false pass:", line)
    per_student = seconds / args.students
    extrapolated = seconds * (30 / args.students) * (all_exercises / max(exercises, 1))
    print(f"{args.students} students x {len(chapters)} chapters ({exercises} exercises each) in {seconds:.1f} s "
          f"with --jobs {args.jobs}; extrapolated to 30 x {len(book_chapters(ROOT))}: {extrapolated / 60:.1f} min")
    print(json.dumps({"students": args.students, "chapters": len(chapters), "exercises": exercises,
                      "seconds": round(seconds, 1), "s_per_student": round(per_student, 1),
                      "extrapolated_30x15_s": round(extrapolated, 1), "false_failures": false, "jobs": args.jobs,
                      "loadavg": [round(x, 2) for x in os.getloadavg()], "loadavg_start": load_start,
                      "cpu_s": round(cpu, 1), "cpu_s_per_student": round(cpu / args.students, 1),
                      "sandbox": "bubblewrap" if sandbox.bwrap_path() else "none", "cpus": os.cpu_count(),
                      "false_passes": false_passes, "stubs": args.stubs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
