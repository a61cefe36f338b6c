"""Course tools for instructors: the student edition, grading with the exercise checks, and an
nbgrader export.

Usage::

    python -m fundamentallm.course student-edition OUT_DIR [--root .] [--repository URL] [--force]
    python -m fundamentallm.course grade SUBMISSIONS [--csv scores.csv] [--details details.csv]
                                         [--timeout 60] [--chapters 02 03] [--jobs 1] [--root .]
                                         [--resume] [--seed N]
    python -m fundamentallm.course nbgrader OUT_DIR [--root .] [--points 1]
    python -m fundamentallm.course colab-edition colab [--root .] [--force]   (see course/colab.py)
    python -m fundamentallm.course catches [--chapter NN] [--json]   (what each check rejects)

Everything that decides a mark is read from the book (``_toc.yml`` and the chapter notebooks),
never from a submission. See book/instructors.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

# The names below are imported on first use (PEP 562): the grading worker imports
# fundamentallm.course.grader.wire without paying for nbformat and the rest of the instructor's tools.
_EXPORTS = {
    "book": ["ANSWER_TAG", "CHECK_TAG", "SOLUTION_TAG", "STUB_TAG", "Chapter", "Exercise", "book_chapters",
             "exercise_label", "exercise_parts", "find_exercises", "make_stub", "run_exercise",
             "to_student_notebook", "toc_files"],
    "edition": ["student_config", "student_edition", "student_toc"],
    "grader.grading": ["DEFAULT_TIMEOUT_S", "Result", "csv_safe", "grade", "grade_student", "review_source",
                "submitted_code"],
    "nbgrader": ["nbgrader_export"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE) + ["main"]


def __getattr__(name: str):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _print_table(rows: list[dict], details: list) -> None:
    print(f"{'student':30s} {'score':>9s}")
    for row in rows:
        print(f"{row['student'][:30]:30s} {row['total']:4d}/{row['out_of']:<4d}"
              + (f"  self-check {row['self_check']}/{row['self_check_of']}" if row.get("self_check_of") else ""))
    counts: dict[str, int] = {}
    for r in details:
        counts[r.status] = counts.get(r.status, 0) + 1
    print("\n" + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    review = [r for r in details if r.status == "needs review"]
    if review:
        print("\nneeds review (0 marks until you read the code):")
        for r in review:
            print(f"  {r.student} {r.label}: {r.message}")
    if any(r.status in ("failed", "not attempted", "missing") for r in details):
        print("\nthe reason of every mark: --details FILE (one row per student and exercise)")


def main(argv: Optional[list[str]] = None) -> int:
    from .edition import student_edition
    from .grader.grading import DEFAULT_TIMEOUT_S, grade
    from .nbgrader import nbgrader_export

    parser = argparse.ArgumentParser(prog="python -m fundamentallm.course", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("student-edition", help="write the book without solutions")
    p.add_argument("out_dir", type=Path)
    p.add_argument("--root", type=Path, default=Path("."), help="the book's root (holds _toc.yml)")
    p.add_argument("--repository", default=None,
                   help="URL of the repository that will hold the student edition: its Colab/Binder "
                        "and repository buttons point there (without it they are removed)")
    p.add_argument("--no-execute", action="store_true",
                   help="build the student edition without executing its notebooks")
    p.add_argument("--force", action="store_true",
                   help="write over notebooks in OUT_DIR that were edited since they were generated")
    g = sub.add_parser("grade", help="grade a folder of submissions (one folder per student)")
    g.add_argument("submissions", type=Path)
    g.add_argument("--csv", type=Path, default=None, help="one row per student: 1/0 per exercise, total, out_of")
    g.add_argument("--details", type=Path, default=None, help="one row per student and exercise, with the message")
    g.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per exercise (default 60)")
    g.add_argument("--chapters", nargs="+", action="extend", default=None, help="grade only these chapters (file name prefixes: 02 03)")
    g.add_argument("--jobs", type=int, default=1, help="students graded in parallel (default 1)")
    g.add_argument("--root", type=Path, default=None, help="the book's root (default: ./ or the package's repository)")
    g.add_argument("--resume", action="store_true",
                   help="continue the run recorded in the journal beside --csv (same seed, finished students kept)")
    g.add_argument("--seed", type=int, default=None,
                   help="the seed of the checks' inputs (default: a fresh random one, kept in the journal)")
    n = sub.add_parser("nbgrader", help="write an nbgrader source assignment per chapter")
    n.add_argument("out_dir", type=Path)
    n.add_argument("--root", type=Path, default=None, help="the book's root (holds _toc.yml)")
    n.add_argument("--points", type=float, default=1.0, help="points per exercise (default 1)")
    c = sub.add_parser("colab-edition", help="write the chapters with MyST rendered to plain Markdown")
    c.add_argument("out_dir", type=Path, help="e.g. colab (the committed edition)")
    c.add_argument("--root", type=Path, default=Path("."), help="the book's root (holds _toc.yml)")
    c.add_argument("--force", action="store_true",
                   help="write over (or delete) notebooks edited since they were generated, such as a "
                        "student's answers (without it the command refuses and writes nothing)")
    t = sub.add_parser("exercise-table", help="print the exercise table (kind, difficulty, minutes), or --write "
                                               "it into book/instructors.md")
    t.add_argument("--write", action="store_true", help="rewrite the table between the markers of book/instructors.md")
    t.add_argument("--root", type=Path, default=None, help="the book's root (holds _toc.yml)")
    k = sub.add_parser("catches", help="run each check's table of wrong answers and print what it catches, "
                                       "with the message a student reads")
    k.add_argument("--chapter", default=None, help="one chapter (02, 2, ...); default: all")
    k.add_argument("--json", action="store_true", help="one JSON object per wrong answer, one per line")
    args = parser.parse_args(argv)
    try:
        if args.command == "catches":
            import json

            from ..checks.wrong import catches, format_table

            if args.chapter is not None and not (args.chapter.isdigit() and 1 <= int(args.chapter) <= 99):
                raise ValueError(f"--chapter={args.chapter!r} must be a chapter number such as 02")
            results = catches(args.chapter)
            if args.json:
                for r in results:
                    print(json.dumps(r.as_dict()))
            else:
                print(format_table(results), end="")
            return 0 if all(r.rejected and r.message_ok for r in results) else 1
        if args.command == "exercise-table":
            from .book import default_root, exercise_table, write_exercise_table

            root = args.root if args.root is not None else default_root()
            if args.write:
                changed = write_exercise_table(Path(root) / "book" / "instructors.md", root)
                print("book/instructors.md: exercise table " + ("rewritten" if changed else "already up to date"))
            else:
                print(exercise_table(root), end="")
        elif args.command == "colab-edition":
            from .colab import colab_edition

            written = colab_edition(args.out_dir, args.root, force=args.force)
            print(f"wrote {len(written)} Colab/Jupyter notebooks to {args.out_dir}")
        elif args.command == "student-edition":
            written = student_edition(args.out_dir, args.root, args.repository, execute=not args.no_execute,
                                      force=args.force)
            jupyter = len(list((Path(args.out_dir) / "colab").glob("*.ipynb")))
            print(f"wrote {len(written)} student notebooks to {args.out_dir}/book (the book's sources) "
                  f"and their Jupyter edition to {args.out_dir}/colab ({jupyter} chapters)")
        elif args.command == "nbgrader":
            written = nbgrader_export(args.out_dir, args.root, points=args.points)
            print(f"wrote {len(written)} nbgrader assignments to {args.out_dir}/source")
        else:
            rows, details = grade(args.submissions, args.csv, args.details, root=args.root,
                                  timeout=args.timeout, chapters=args.chapters, jobs=args.jobs,
                                  seed=args.seed, resume=args.resume)
            _print_table(rows, details)
    except (FileNotFoundError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        if type(e).__name__ != "IntegrityError":
            raise
        print(f"error: {e}", file=sys.stderr)
        return 3
    return 0
