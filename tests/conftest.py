"""Book-wide pytest configuration: which notebooks nbmake executes, and their execution times.

``pytest`` (configured in pyproject.toml: ``testpaths = ["tests", "book"]``, ``--nbmake``) runs
the unit tests and executes the chapter notebooks, in random order (pytest-randomly). This file
adds two things nbmake lacks:

* **Only the book's chapters are executed**: a notebook is collected only when ``_toc.yml``
  lists it (or when it is named on the command line). ``_build/``, ``student_edition/``,
  ``colab/`` (the generated edition) and hidden folders are never collected (``norecursedirs``,
  and this filter as a second guard); nor is ``work/``, a student's copy (``norecursedirs``).
* **A table of notebook execution times** at the end of the run, for information only. No test
  asserts wall-clock time: a loaded or slower machine must not fail the suite. The 60 s budget
  per chapter is *measured* by ``benchmarks/chapter_times.py``; pytest only guards against hangs
  with nbmake's generous per-cell timeout (``--nbmake-timeout`` in pyproject.toml).

The hooks live in a plugin object registered globally in ``pytest_configure``: hooks in a
``tests/conftest.py`` would otherwise only apply to files under ``tests/``.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

# One torch thread per process, for the tests and for the chapter kernels nbmake starts (they
# inherit this environment): the models are tiny, and on a shared 2-core machine two threads per
# process made training steps up to 15x slower. Set here so that nobody has to export it; an
# explicit OMP_NUM_THREADS wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:  # imported already (by a plugin): the variable is read at import time
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

ROOT = Path(__file__).resolve().parents[1]
NEVER_COLLECT = {"_build", "student_edition", "colab", "node_modules"}

# A small corpus for the command-line tests (tests/test_cli*.py): code and prose, enough for a
# few training steps; the fixture writes it to a temporary working directory.
TEXT = "def add(a, b):\n    return a + b\n\n" * 40 + "The quick brown fox jumps over the lazy dog.\n" * 40


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text(TEXT, encoding="utf-8")
    return str(tmp_path / "corpus.txt")


@pytest.fixture
def chunked_logits():
    """``decode(model, ids, chunks)``: the logits of ``ids`` fed to ``model`` through one KV cache
    in chunks of the given sizes, concatenated (to compare with one full pass), and the cache."""
    import torch

    def decode(model, ids, chunks):
        cache = model.make_kv_cache(ids.shape[0])
        outs, start = [], 0
        for n in chunks:
            outs.append(model(ids[:, start:start + n], kv_cache=cache)[0])
            start += n
        return torch.cat(outs, 1), cache

    return decode


@pytest.fixture(scope="module", autouse=True)
def _report_max_differences(request):
    """After a test file's tests, print its measured worst differences (``MAX_DIFF``, filled where
    each bound is asserted), visible with ``-s``. Only a report: it asserts nothing, so it does not
    depend on which tests ran before it or in what order."""
    yield
    diffs = getattr(request.module, "MAX_DIFF", None)
    if diffs:
        title = getattr(request.module, "MAX_DIFF_TITLE", request.module.__name__)
        summary = {"/".join(k) if isinstance(k, tuple) else k: f"{v:.2e}" for k, v in sorted(diffs.items())}
        print(f"\n{title}:", summary)


def toc_files(root: Path = ROOT) -> list[str]:
    """Every ``file:``/``root:`` entry of ``_toc.yml`` (paths relative to the root, no suffix)."""
    toc = root / "_toc.yml"
    if not toc.exists():
        return []
    return re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(\S+)\s*$", toc.read_text(), flags=re.M)


class BookPlugin:
    """Collect only the toc's notebooks; report how long each one took (no assertion)."""

    def __init__(self, config: pytest.Config) -> None:
        self.rootdir = Path(config.rootpath).resolve()
        self.toc = {(self.rootdir / f"{name}.ipynb").resolve() for name in toc_files(self.rootdir)}
        self.explicit = set()
        for arg in config.args:
            path = Path(arg.split("::")[0])
            path = path if path.is_absolute() else Path(config.invocation_params.dir) / path
            if path.suffix == ".ipynb":
                self.explicit.add(path.resolve())
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
        outcome.get_result()
        path = Path(str(item.fspath)).resolve()
        try:
            name = path.relative_to(self.rootdir).as_posix()
        except ValueError:  # a notebook outside the repository, named on the command line
            name = str(path)
        self.durations[name] = call.duration

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        if not self.durations:
            return
        tr = terminalreporter
        tr.section("notebook execution times (information only; the budget is measured by "
                   "benchmarks/chapter_times.py)")
        for name, seconds in sorted(self.durations.items()):
            tr.write_line(f"{seconds:7.1f} s  {name}")
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
