#!/usr/bin/env python3
"""Set up the course and open it, or run its tests: the README's quick start (standard library only).

    python3 start.py            # make .venv, install what the course needs, open JupyterLab on the chapters
    python3 start.py test       # run the tests and every chapter (arguments after `test` go to pytest)

Set-up (skipped when already done; ``--reinstall`` redoes it):

1. a virtual environment in ``.venv`` (this repository's folder, ignored by git);
2. PyTorch, the build for this machine: on Linux without an NVIDIA GPU the CPU build (a plain
   ``pip install torch`` there is the CUDA build, several GB, GPU or not), preferring a wheel
   already on this machine; elsewhere pip's default build (macOS, Windows, Linux with a GPU);
3. ``requirements.txt``: the package (editable), the chapters' extras, Jupyter, the test and
   book tools.

Then JupyterLab opens on the chapters (``colab/``, the Jupyter edition), unless ``--no-open`` is
given or the ``CI`` environment variable is set. The chapters and the tests set their own torch
thread count; nothing needs to be exported first.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH = "torch>=2.6"
DONE = VENV / ".fundamentallm-installed"  # written once every step has succeeded


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run(*cmd, check: bool = True, **kw) -> int:
    print("+", " ".join(map(str, cmd)), flush=True)
    rc = subprocess.run([str(c) for c in cmd], cwd=ROOT, **kw).returncode
    if check and rc != 0:
        sys.exit(f"start.py: this step failed (exit {rc}): {' '.join(map(str, cmd))}")
    return rc


def has_nvidia_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia").exists()


def install_torch(py: Path) -> None:
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check"]
    if run(py, "-c", "import torch", check=False, stderr=subprocess.DEVNULL) == 0:
        return  # already there (kept as it is)
    if platform.system() == "Linux" and not has_nvidia_gpu():
        # The CPU build: first a wheel this machine already has (pip's find-links; no download;
        # torch's own dependencies come with requirements.txt), else PyTorch's CPU index (about
        # 200 MB instead of several GB).
        if run(*pip, "--no-index", "--no-deps", TORCH, check=False, stderr=subprocess.DEVNULL) != 0:
            run(*pip, TORCH, "--index-url", CPU_INDEX)
    else:
        run(*pip, TORCH)


def set_up(reinstall: bool) -> Path:
    if sys.version_info < (3, 9):  # noqa: UP036 (the user's Python, not ours)
        sys.exit(f"start.py: the course needs Python 3.9 or newer, this is {platform.python_version()}")
    py = venv_python()
    if reinstall and DONE.exists():
        DONE.unlink()
    if DONE.exists():
        return py
    if not py.exists():
        print(f"creating the virtual environment {VENV}", flush=True)
        try:
            venv.create(VENV, with_pip=True)
        except (subprocess.CalledProcessError, OSError) as err:
            shutil.rmtree(VENV, ignore_errors=True)
            sys.exit(f"start.py: could not create {VENV} ({err}). On Debian or Ubuntu install the "
                     f"venv module first: sudo apt install python3-venv")
    run(py, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--upgrade", "pip")
    install_torch(py)
    run(py, "-m", "pip", "install", "--disable-pip-version-check", "-r", "requirements.txt")
    DONE.write_text("ok\n")
    return py


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("command", nargs="?", choices=("open", "test"), default="open",
                        help="'open' (default): set up, then open JupyterLab; 'test': set up, then run pytest")
    parser.add_argument("--no-open", action="store_true", help="set up only (also when CI is set)")
    parser.add_argument("--reinstall", action="store_true", help="run the installation again")
    args, rest = parser.parse_known_args()
    if rest and args.command != "test":
        parser.error(f"unrecognized arguments: {' '.join(rest)} (only `test` passes arguments on, to pytest)")
    py = set_up(args.reinstall)
    if args.command == "test":
        return run(py, "-m", "pytest", *rest, check=False)
    if args.no_open or os.environ.get("CI"):
        print(f"set up in {VENV}; open the chapters with: python3 start.py", flush=True)
        return 0
    return run(py, "-m", "jupyter", "lab", "colab/", check=False)


if __name__ == "__main__":
    sys.exit(main())
