"""The stored benchmark results the book shows, shipped inside the package (package data), so that
a chapter run from the wheel (Colab, an empty folder) reads the same numbers as a clone.

One source of truth: the benchmarks (``benchmarks/*.py --save``, ``benchmarks/record.py``) write
here, and every chapter and the records page read through :func:`load`.
"""

from __future__ import annotations

import json
from pathlib import Path

DIR = Path(__file__).resolve().parent


def names() -> list[str]:
    """The stored results, by name (the file name without ``.json``), sorted."""
    return sorted(p.stem for p in DIR.glob("*.json"))


def path(name: str) -> Path:
    """The file of the stored result ``name`` (e.g. ``"posttrain"``)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (one of {names()}), got {type(name).__name__}")
    file = DIR / f"{name}.json"
    if name != Path(name).name or not file.is_file():
        raise ValueError(f"name must be one of {names()}, got {name!r}")
    return file


def load(name: str):
    """The stored result ``name`` (e.g. ``"posttrain"``, ``"records"``), parsed from its JSON."""
    return json.loads(path(name).read_text(encoding="utf-8"))
