"""The grader's own files, hashed before and after a class: a change (its package, the checks,
the book) stops the class (:class:`IntegrityError`)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Sequence

from ..book import Chapter
from . import sandbox


class IntegrityError(RuntimeError):
    """The grader's own files (its package, the checks, the book) changed during the class."""


def integrity_files(book: Sequence[Chapter]) -> list[Path]:
    """The files whose change stops the class: every file of the ``fundamentallm`` package (the
    grader, the checks) and the book's chapters. Not ``__pycache__``: Python itself rewrites a
    stale ``.pyc`` when the grader first imports a module mid-class (the sandbox keeps the
    package read-only for the students' code either way)."""
    files = sorted(p for p in sandbox.PACKAGE_DIR.rglob("*")
                   if (p.is_file() or p.is_symlink()) and "__pycache__" not in p.relative_to(sandbox.PACKAGE_DIR).parts)
    return files + sorted({Path(c.path) for c in book})


def integrity_digest(book: Sequence[Chapter]) -> dict[str, str]:
    """``{path: sha256}`` of :func:`integrity_files` (a missing or unreadable file hashes as
    ``"missing"``)."""
    digest = {}
    for path in integrity_files(book):
        try:
            digest[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if not path.is_symlink() \
                else "link:" + os.readlink(path)
        except OSError:
            digest[str(path)] = "missing"
    return digest


def integrity_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Files changed, removed or added since ``before``."""
    changed = [p for p, h in before.items() if after.get(p, "missing") != h]
    changed += [p for p in after if p not in before]
    return sorted(changed)
