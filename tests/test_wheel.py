"""The package runs outside the repository: built as a wheel, installed (not editable) into a
fresh virtual environment, and EVERY chapter of the Colab/Jupyter edition (``colab/``, rendered
here from the working tree's book by the installed package's ``colab-edition``) and the records
page, copied to an empty folder, executed there: what a reader on Colab runs, with nothing of a
clone beside it (a chapter that reads a file only a clone has fails here).

The edition is the students' (stubs in the answer cells, solutions as text), so this is also
the student edition's end-to-end run: every unattempted exercise's check prints its one line
and no `Out: True` (tests/test_course.py checks that the two editions hold the same code).

Cost: the wheel build and the venv are quick; the chapters and the records page run up to four
at a time (each in its own kernel, one per CPU core), so the test costs about what executing
the book costs;
marked ``slow``: ``pytest -m "not slow"`` skips it. The venv is clean (no system
site-packages): it holds the wheel, and only the distributions the wheel declares (``[book]``
extra included) and what they declare in turn, linked from this machine's environment, so that
an undeclared import fails here as it would for a user. No network. The package itself comes
only from the wheel, which the test checks inside every kernel.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
# pages executed at once, each in its own kernel (the chapters use one torch thread)
JOBS = max(1, min(4, (os.cpu_count() or 1)))

EXECUTE = r"""
import json, sys
from pathlib import Path
import nbformat
from nbclient import NotebookClient

venv = sys.argv[1]
for name in sys.argv[2:]:  # one page per process when the test runs several at once
    nb = nbformat.read(name, as_version=4)
    # First, in the kernel itself: the package must be the wheel's copy inside the venv.
    probe = ("import sys, fundamentallm\n"
             f"assert fundamentallm.__file__.startswith({venv!r}), fundamentallm.__file__\n"
             f"assert sys.prefix == {venv!r}, sys.prefix")
    nb.cells.insert(0, nbformat.v4.new_code_cell(probe))
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(Path(name).resolve().parent)}}).execute()
    Path("../executed").mkdir(exist_ok=True)
    nbformat.write(nb, Path("../executed") / name)  # outside the folder the pages run in
    print(json.dumps({"executed": name}), flush=True)
"""


# The test's own harness, not the course's: the venv's Python runs EXECUTE, which needs nbclient.
HARNESS = ["nbclient"]


def declared_closure(requirements: list[str], extra: str) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions that ``requirements`` (a distribution's ``Requires-Dist``,
    with ``extra`` asked for) name, and those they name, and so on: what pip would install,
    taken from this environment."""
    from packaging.requirements import Requirement

    found: dict[str, importlib.metadata.Distribution] = {}
    seen: set = set()
    todo = [(Requirement(r), extra) for r in requirements]
    while todo:
        req, asked = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": asked}):
            continue  # another extra's, or another platform's
        dist = importlib.metadata.distribution(req.name)  # PackageNotFoundError: not installed here
        key = (dist.metadata["Name"].lower(), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        found[key[0]] = dist
        for sub in dist.requires or []:
            todo += [(Requirement(sub), e) for e in (req.extras or {""})]
    return found


def link_into(venv_site: Path, dists) -> None:
    """Symlink each distribution's top-level files (and its metadata) into the venv."""
    for dist in dists:
        if dist.files is None:
            raise AssertionError(f"{dist.metadata['Name']} lists no files (RECORD); cannot link it")
        site = Path(dist.locate_file(""))
        for top in {f.parts[0] for f in dist.files if f.parts and f.parts[0] != ".."}:
            target = venv_site / top
            if not target.exists() and (site / top).exists():
                target.symlink_to(site / top)


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_chapters_outside_the_repository(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(OMP_NUM_THREADS="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")

    def run(*cmd, cwd):
        proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=1200)
        assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout

    # 1. a wheel of the working tree (a copy: building must not write into the repository)
    src, wheels = tmp_path / "src", tmp_path / "wheels"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "_build", "build", "dist", "*.egg-info", "__pycache__", "colab", "student_edition", ".*"))
    # without build isolation when setuptools is here (no network needed), else pip fetches it
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    run(sys.executable, "-m", "pip", "wheel", ".", "--no-deps", *isolation, "-q", "-w", wheels, cwd=src)
    (wheel,) = wheels.glob("fundamentallm-*.whl")

    # 2. a clean venv, the wheel installed into it, then exactly what the wheel declares
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    declared = json.loads(run(python, "-c", "import json, importlib.metadata as m; "
                              "print(json.dumps(m.requires('fundamentallm')))", cwd=tmp_path))
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    cwd=tmp_path).strip())
    link_into(site, {**declared_closure(declared, "book"), **declared_closure(HARNESS, "")}.values())
    where = json.loads(run(python, "-c", "import json, fundamentallm, sys; "
                           "print(json.dumps([fundamentallm.__file__, sys.prefix]))", cwd=tmp_path))
    assert Path(where[0]).is_relative_to(venv) and Path(where[1]) == venv, where
    assert "site-packages" in where[0]  # an installed copy, not a path into a source tree

    # 3. the Colab edition of every chapter, written by the installed package from the source
    # copy's book into an empty folder, and the records page beside it; executed there by the
    # venv's Python and kernel, JOBS pages at a time
    work = tmp_path / "work"
    run(python, "-m", "fundamentallm.course", "colab-edition", work, "--root", src, cwd=tmp_path)
    chapters = sorted(p.name for p in work.glob("*.ipynb"))
    # every chapter of the book: 01_... to NN_..., as many as _toc.yml numbers (15 today)
    assert [c[:2] for c in chapters] == [f"{i:02d}" for i in range(1, len(chapters) + 1)], chapters
    assert len(chapters) == len(list((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))) >= 15, chapters
    shutil.copy(ROOT / "book" / "records.ipynb", work)
    pages = [*chapters, "records.ipynb"]
    assert not [p for p in work.iterdir() if p.suffix != ".ipynb"], "the edition must be notebooks only"
    failed, running, todo = [], [], list(pages)
    while todo or running:
        while todo and len(running) < JOBS:
            name = todo.pop(0)
            running.append((name, subprocess.Popen([str(python), "-c", EXECUTE, str(venv), name], cwd=work,
                                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                   text=True)))
        name, proc = running.pop(0)
        out, err = proc.communicate(timeout=1200)
        executed = [json.loads(line)["executed"] for line in out.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or executed != [name]:
            failed.append(f"{name}:\n{err[-3000:]}")
    assert not failed, "pages that fail outside the repository:\n" + "\n".join(failed)

    # 4. the edition is the students' (stubs, no solutions run): every unattempted exercise's
    # check printed its one line and no `Out: True`. The student edition's code cells are the
    # same (tests/test_course.py), so this run is its end-to-end run too.
    for name in chapters:
        nb = nbformat.read(tmp_path / "executed" / name, as_version=4)
        checks = [c for c in nb.cells if "check" in c.metadata.get("tags", [])]
        assert checks, f"{name}: no exercise checks"
        for cell in checks:
            text = "".join(o.get("text", "") for o in cell.outputs)
            assert "not attempted yet" in text and len(text.strip().splitlines()) == 1, f"{name}: {text}"
            assert not [o for o in cell.outputs if o.get("output_type") == "execute_result"], name
