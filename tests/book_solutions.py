"""The book's solution cells as functions, for the check tests: the correct answers are written
once, in the book (``book_solution("ch02-ex2", "softmax_rows")``)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fundamentallm.course import book_chapters

ROOT = Path(__file__).resolve().parents[1]


@cache
def _exercises() -> dict:
    return {ex.label: ex for chapter in book_chapters(ROOT) for ex in chapter.exercises}


@cache
def _namespace(label: str) -> dict:
    namespace: dict = {"__name__": f"book_{label.replace('-', '_')}"}
    exec(compile(_exercises()[label].code, f"<book {label}>", "exec"), namespace)
    return namespace


def book_solution(label: str, name: str):
    """The function ``name`` defined by the solution cell of exercise ``label`` in the book."""
    return _namespace(label)[name]


def book_functions(prefix: str) -> dict[str, str]:
    """{function name: exercise label} for the solution cells of chapter ``prefix`` ("ch02")."""
    import ast

    out = {}
    for label, ex in _exercises().items():
        if label.startswith(prefix + "-"):
            for node in ast.parse(ex.code).body:
                if isinstance(node, ast.FunctionDef):
                    out[node.name] = label
    return out
