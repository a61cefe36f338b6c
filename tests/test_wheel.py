"""The package runs outside the repository: built as a wheel, installed (not editable) into a
fresh virtual environment, with chapters copied to an empty folder and executed there.

Cost: about 2-4 minutes on 2 cores (wheel build, venv, four chapters, one per part of the book);
marked ``slow``: ``pytest -m "not slow"`` skips it. No network: the venv reuses this machine's
installed dependencies (``--system-site-packages``: torch, transformers, ipykernel, ...); the
package itself comes only from the wheel, which the test checks inside every kernel.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# One chapter per part of _toc.yml (Attention, Building, Training and generation, Going deeper),
# the shorter ones of each part.
CHAPTERS = ["02_attention_by_hand", "05_norms_residuals", "08_tokens_data", "11_backprop_by_hand"]

EXECUTE = r"""
import json, sys
from pathlib import Path
import nbformat
from nbclient import NotebookClient

venv = sys.argv[1]
for name in sys.argv[2:]:
    nb = nbformat.read(name, as_version=4)
    # First, in the kernel itself: the package must be the wheel's copy inside the venv.
    probe = ("import sys, fundamentallm\n"
             f"assert fundamentallm.__file__.startswith({venv!r}), fundamentallm.__file__\n"
             f"assert sys.prefix == {venv!r}, sys.prefix")
    nb.cells.insert(0, nbformat.v4.new_code_cell(probe))
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(Path(name).resolve().parent)}}).execute()
    print(json.dumps({"executed": name}), flush=True)
"""


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

    # 2. a fresh venv, the wheel installed into it (dependencies from this machine's site-packages)
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--system-site-packages", venv, cwd=tmp_path)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    where = json.loads(run(python, "-c", "import json, fundamentallm, sys; "
                           "print(json.dumps([fundamentallm.__file__, sys.prefix]))", cwd=tmp_path))
    assert Path(where[0]).is_relative_to(venv) and Path(where[1]) == venv, where
    assert "site-packages" in where[0]  # an installed copy, not a path into a source tree

    # 3. chapters copied into an empty folder, executed there by the venv's Python and kernel
    work = tmp_path / "work"
    work.mkdir()
    for name in CHAPTERS:
        shutil.copy(ROOT / "book" / f"{name}.ipynb", work)
    out = run(python, "-c", EXECUTE, venv, *[f"{name}.ipynb" for name in CHAPTERS], cwd=work)
    assert [json.loads(line)["executed"] for line in out.splitlines() if line.startswith("{")] == \
        [f"{name}.ipynb" for name in CHAPTERS]
