"""Book-wide pytest configuration: which notebooks nbmake executes, and the per-chapter budget.

``pytest`` (configured in pyproject.toml: ``testpaths = ["tests", "book"]``, ``--nbmake``) runs
the unit tests and then executes the chapter notebooks. This file adds two things nbmake lacks:

* **Only the book's chapters are executed**: a notebook is collected only when ``_toc.yml``
  lists it (or when it is named on the command line). ``_build/``, ``student_edition/`` and
  hidden folders are never collected (``norecursedirs``, and this filter as a second guard).
* **A 60 s budget per notebook.** nbmake's ``--nbmake-timeout`` is a *per-cell* timeout (it is
  passed to ``nbclient.NotebookClient(timeout=...)``, which applies it to each cell), so a chapter
  of many 50 s cells would pass it. Here the wall time of each notebook's run (kernel start
  included) is measured, a notebook over budget fails, and a durations table is printed at the
  end of the run. The budget can be changed with ``FUNDAMENTALLM_NOTEBOOK_BUDGET_S``.

The hooks live in a plugin object registered globally in ``pytest_configure``: hooks in a
``tests/conftest.py`` would otherwise only apply to files under ``tests/``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUDGET_S = 60.0
NEVER_COLLECT = {"_build", "student_edition", "node_modules"}


def toc_files(root: Path = ROOT) -> list[str]:
    """Every ``file:``/``root:`` entry of ``_toc.yml`` (paths relative to the root, no suffix)."""
    toc = root / "_toc.yml"
    if not toc.exists():
        return []
    return re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(\S+)\s*$", toc.read_text(), flags=re.M)


def notebook_budget_s() -> float:
    raw = os.environ.get("FUNDAMENTALLM_NOTEBOOK_BUDGET_S", "")
    if not raw:
        return DEFAULT_BUDGET_S
    try:
        value = float(raw)
    except ValueError:
        raise pytest.UsageError(
            f"FUNDAMENTALLM_NOTEBOOK_BUDGET_S={raw!r} must be a number of seconds") from None
    if value <= 0:
        raise pytest.UsageError(f"FUNDAMENTALLM_NOTEBOOK_BUDGET_S={raw!r} must be > 0")
    return value


class BookPlugin:
    """Collect only the toc's notebooks; time each one against the budget."""

    def __init__(self, config: pytest.Config) -> None:
        self.rootdir = Path(config.rootpath).resolve()
        self.toc = {(self.rootdir / f"{name}.ipynb").resolve() for name in toc_files(self.rootdir)}
        self.explicit = set()
        for arg in config.args:
            path = Path(arg.split("::")[0])
            path = path if path.is_absolute() else Path(config.invocation_params.dir) / path
            if path.suffix == ".ipynb":
                self.explicit.add(path.resolve())
        self.budget_s = notebook_budget_s()
        self.durations: dict[str, float] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config):
        path = Path(collection_path).resolve()
        if NEVER_COLLECT.intersection(path.parts):
            return True
        if path.suffix == ".ipynb":
            if ".ipynb_checkpoints" in path.parts:
                return True
            if path not in self.toc and path not in self.explicit:
                return True
        return None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        if call.when != "call" or not getattr(item, "nbmake", False):
            return
        report = outcome.get_result()
        name = Path(str(item.fspath)).resolve().relative_to(self.rootdir).as_posix()
        self.durations[name] = call.duration
        if report.passed and call.duration > self.budget_s:
            report.outcome = "failed"
            report.longrepr = (
                f"{name} executed in {call.duration:.1f} s, over the {self.budget_s:.0f} s budget "
                f"per chapter (book/CONTRIBUTING.md): make its experiments smaller")

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        if not self.durations:
            return
        tr = terminalreporter
        tr.section(f"notebook execution times (budget {self.budget_s:.0f} s per notebook)")
        for name, seconds in sorted(self.durations.items()):
            verdict = "OVER BUDGET" if seconds > self.budget_s else "ok"
            tr.write_line(f"{seconds:7.1f} s  {verdict:11s}  {name}")
        tr.write_line(f"{sum(self.durations.values()):7.1f} s  total ({len(self.durations)} notebooks)")


@pytest.fixture(autouse=True)
def _restore_environment():
    """A test may not leak changes of ``os.environ`` into later tests. The notebooks run after
    the unit tests in the same pytest process, and their kernels inherit its environment: e.g.
    ``set_seed(2**40 + 7)`` writes ``PYTHONHASHSEED=1099511627783``, out of Python's range, and
    every later kernel then dies at start ("Kernel died before replying to kernel_info")."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("fundamentallm-book"):
        config.pluginmanager.register(BookPlugin(config), "fundamentallm-book")
