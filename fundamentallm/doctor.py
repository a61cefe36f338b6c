"""``python -m fundamentallm doctor``: what a student pastes into a bug report.

It reports the Python and PyTorch versions, the device the package would use, the versions of
the book's dependencies, and, for every chapter notebook it can find, whether each module the
chapter imports resolves in this environment. The modules are read from the notebooks
themselves (the ``import``/``from`` lines of their code cells), so the list never goes stale.
Nothing here imports a chapter's modules: a module is checked with ``importlib.util.find_spec``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any, Optional

# The distributions the book needs beyond the standard library (requirements.txt's runtime part);
# the import name is given where it differs from the distribution's name.
BOOK_DEPENDENCIES = ("torch", "numpy", "matplotlib", "tqdm", "safetensors", "transformers",
                     "ipykernel", "ipywidgets", "nbformat", "jupyter-book", "nbmake")


def _version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _code_without_magics(source: str) -> str:
    """Jupyter's ``!shell`` and ``%magic`` lines are not Python: keep the indentation, drop the rest."""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        lines.append(line[:len(line) - len(stripped)] + "pass" if stripped[:1] in ("!", "%") else line)
    return "\n".join(lines)


def notebook_imports(path: Path) -> list[str]:
    """The top-level modules a notebook's code cells import, in order of first appearance."""
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    found: list[str] = []
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", []))
        try:
            tree = ast.parse(_code_without_magics(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in found:
                    found.append(top)
    return found


def find_book(book: Optional[str] = None) -> Optional[Path]:
    """``book``, or ``book/`` beside the package (a repository checkout), or ``./book``."""
    candidates = [Path(book)] if book else [Path(__file__).resolve().parents[1] / "book", Path("book")]
    return next((c for c in candidates if c.is_dir() and any(c.glob("*.ipynb"))), None)


def _device() -> dict[str, Any]:
    import torch

    from .utils import get_device

    info = {"device": str(get_device("auto")), "cuda": torch.cuda.is_available(),
            "threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name(0)
        info["cuda_version"] = torch.version.cuda
    return info


def report(book: Optional[str] = None) -> dict[str, Any]:
    """Everything ``doctor`` prints, as a dict (the last line of its output is this, as JSON)."""
    result: dict[str, Any] = {
        "python": sys.version.split()[0], "platform": platform.platform(),
        "fundamentallm": str(Path(__file__).resolve().parent),
        "packages": {dist: _version(dist) for dist in BOOK_DEPENDENCIES},
    }
    try:
        result.update(_device())
    except ImportError as err:  # torch itself is missing: still report the rest
        result["device"] = f"unknown ({err})"
    folder = find_book(book)
    result["book"] = str(folder) if folder else None
    chapters = {}
    for nb in sorted(folder.glob("*.ipynb")) if folder else []:
        missing = [m for m in notebook_imports(nb) if importlib.util.find_spec(m) is None]
        chapters[nb.name] = missing
    result["chapters"] = chapters
    result["ok"] = all(not m for m in chapters.values()) and result["packages"]["torch"] is not None
    return result


def format_report(result: dict[str, Any]) -> list[str]:
    """Human-readable lines of :func:`report`."""
    lines = [f"Python        {result['python']}  ({result['platform']})",
             f"fundamentallm {result['fundamentallm']}",
             f"device        {result.get('device')}  (CUDA available: {result.get('cuda')}, "
             f"torch threads: {result.get('threads')}, OMP_NUM_THREADS={result.get('OMP_NUM_THREADS')})"]
    if result.get("cuda_device"):
        lines.append(f"GPU           {result['cuda_device']} (CUDA {result['cuda_version']})")
    lines.append("packages:")
    lines += [f"  {dist:<14}{version or 'NOT INSTALLED'}" for dist, version in result["packages"].items()]
    if result["book"] is None:
        lines.append("chapters: book/ not found (pass --book DIR to check a folder of notebooks)")
    else:
        lines.append(f"chapters ({result['book']}):")
        for name, missing in result["chapters"].items():
            lines.append(f"  {name:<32}" + ("imports ok" if not missing else f"MISSING: {', '.join(missing)}"))
    lines.append("all good" if result["ok"] else "problems found: install what is marked above "
                 "(pip install -r requirements.txt)")
    return lines
