#!/usr/bin/env python3
"""Set up the course and open it, or run its tests: the README's quick start (standard library only).

    python3 start.py            # students: set up .venv, copy the chapters to work/, open JupyterLab there
    python3 start.py --all      # instructors and contributors: also the tests', book's and grader's tools
    python3 start.py test       # run the tests and every chapter (arguments after `test` go to pytest)
                                # in one pytest process per core (pytest-xdist; `test -n 0`: one process)

Set-up (each step skipped when already done; ``--reinstall`` redoes it):

1. a virtual environment in ``.venv`` (this repository's folder, ignored by git);
2. PyTorch, the build for this machine: on Linux without an NVIDIA GPU the CPU build (a plain
   ``pip install torch`` there is the CUDA build, several GB, GPU or not), preferring a wheel
   already on this machine; elsewhere pip's default build (macOS, Windows, Linux with a GPU);
3. what a student needs: the package (editable) with the chapters' extras and JupyterLab;
4. with ``--all``, and on the first ``test``: ``requirements.txt`` (pytest, Jupyter Book,
   nbgrader, ruff, playwright, ...).

Then the chapters (``colab/``, the Jupyter edition) are copied into ``work/`` (ignored by git),
where a student writes the answers: a later run adds a new chapter there, replaces a chapter the
student never changed by its newer edition, and puts the newer edition of a changed chapter
*beside* it (``NN_name.newer.ipynb``), never over it. JupyterLab opens on ``work/`` -- this
environment's own JupyterLab (``.venv``'s Python ``-m jupyterlab``), whose ``python3`` kernel is
``.venv``'s Python -- unless ``--no-open`` is given or the ``CI`` environment variable is set.
Arguments after ``open`` go to JupyterLab (``python3 start.py open --port 8899``). As root,
``--allow-root`` is added (and said). The chapters and the tests set their own torch thread count;
nothing needs to be exported first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
EDITION = ROOT / "colab"  # the Jupyter edition, committed (generated from book/)
WORK = ROOT / "work"  # the student's copy: git ignores it, nothing here writes over a changed notebook
PLACED = ".placed.json"  # in WORK: each notebook's SHA-256 as start.py last wrote it
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH = "torch>=2.6"
STUDENT = ["-e", ".[student]"]  # the package, the chapters' extras, JupyterLab (pyproject.toml)
ROLES = {"student": VENV / ".fundamentallm-installed", "all": VENV / ".fundamentallm-all-installed"}


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run(*cmd, check: bool = True, **kw) -> int:
    print("+", " ".join(map(str, cmd)), flush=True)
    rc = subprocess.run([str(c) for c in cmd], cwd=ROOT, **kw).returncode
    if check and rc != 0:
        sys.exit(f"start.py: this step failed (exit {rc}): {' '.join(map(str, cmd))}")
    return rc


def pytest_workers(py: Path, args: list[str]) -> list[str]:
    """``-n N`` for ``start.py test``: one pytest worker per core, at most 4 (each worker runs its
    tests and chapter kernels on one torch thread, so a single process leaves the other cores
    idle). None when the caller chose (``-n``, ``--numprocesses``,
    ``-p no:xdist``), on one core, or without pytest-xdist."""
    if any(a.startswith(("-n", "--numprocesses", "--dist")) or a == "no:xdist" for a in args):
        return []
    cores = os.cpu_count() or 1
    if cores < 2 or subprocess.run([str(py), "-c", "import xdist"], capture_output=True).returncode != 0:
        return []
    return ["-n", str(min(cores, 4))]


def has_nvidia_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia").exists()


def install_torch(py: Path) -> None:
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check"]
    if run(py, "-c", "import torch", check=False, stderr=subprocess.DEVNULL) == 0:
        return  # already there (kept as it is)
    if platform.system() == "Linux" and not has_nvidia_gpu():
        # The CPU build: first a wheel this machine already has (pip's find-links; no download;
        # torch's own dependencies come with the next step), else PyTorch's CPU index (about
        # 200 MB instead of several GB).
        if run(*pip, "--no-index", "--no-deps", TORCH, check=False, stderr=subprocess.DEVNULL) != 0:
            run(*pip, TORCH, "--index-url", CPU_INDEX)
    else:
        run(*pip, TORCH)


def fingerprint(role: str) -> str:
    """What the installed set depends on: a change (a ``git pull`` that adds a requirement)
    makes the next run install again."""
    parts = [" ".join(STUDENT), (ROOT / "pyproject.toml").read_text(encoding="utf-8")]
    if role == "all":
        parts.append((ROOT / "requirements.txt").read_text(encoding="utf-8"))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def installed(role: str) -> bool:
    mark = ROLES[role]
    return mark.exists() and mark.read_text().strip() == fingerprint(role)


def set_up(role: str = "student", reinstall: bool = False) -> Path:
    """Make ``.venv`` and install ``role``'s set into it: "student" (the package with the
    chapters' extras, JupyterLab) or "all" (also requirements.txt)."""
    if sys.version_info < (3, 9):  # noqa: UP036 (the user's Python, not ours)
        sys.exit(f"start.py: the course needs Python 3.9 or newer, this is {platform.python_version()}")
    py = venv_python()
    if reinstall:
        for mark in ROLES.values():
            if mark.exists():
                mark.unlink()
    if installed(role) and py.exists():
        return py
    if not py.exists():
        print(f"creating the virtual environment {VENV}", flush=True)
        try:
            venv.create(VENV, with_pip=True)
        except (subprocess.CalledProcessError, OSError) as err:
            shutil.rmtree(VENV, ignore_errors=True)
            sys.exit(f"start.py: could not create {VENV} ({err}). On Debian or Ubuntu install the "
                     f"venv module first: sudo apt install python3-venv")
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check"]
    run(*pip, "-q", "--upgrade", "pip")
    install_torch(py)
    if not installed("student"):
        run(*pip, *STUDENT)
        ROLES["student"].write_text(fingerprint("student") + "\n")
    if role == "all":
        run(*pip, "-r", "requirements.txt")
        ROLES["all"].write_text(fingerprint("all") + "\n")
    elif not installed("all"):
        print("installed what a student needs; instructors and contributors add the tests', the "
              "book's and the grader's tools with: python3 start.py --all", flush=True)
    return py


# --------------------------------------------------------------------------- the work folder

def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)  # never a half-written notebook


def generated(data: bytes) -> bool:
    """Whether a notebook of the edition is the generator's output: its cells match the stamp the
    generator put in it (fundamentallm.course.colab.stamp; the same SHA-256, computed here with
    the standard library). A notebook edited in colab/ -- a student's answers -- is not."""
    try:
        nb = json.loads(data.decode("utf-8"))
        recorded = nb["metadata"]["fundamentallm"]["generated"]
        cells = [[c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"]]
                 for c in nb["cells"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        return False
    return hashlib.sha256(json.dumps(cells, ensure_ascii=False).encode("utf-8")).hexdigest() == recorded


def git_clean(folder: Path) -> set:
    """The names of the files in ``folder`` that git tracks and that are unchanged since the last
    commit (none when git or the repository is missing)."""
    def git(*args) -> list:
        proc = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise OSError(proc.stderr)
        return [Path(line).name for line in proc.stdout.splitlines() if line.strip()]
    try:
        tracked = set(git("ls-files", "--", "."))
        changed = set(git("diff", "--name-only", "HEAD", "--", "."))
    except (OSError, subprocess.SubprocessError):
        return set()
    return tracked - changed


def sync_work(edition: Path = EDITION, work: Path = WORK) -> list[str]:
    """Copy the Jupyter edition into ``work``, never over a notebook the student changed;
    returns one line per thing done. ``work/.placed.json`` holds each notebook's SHA-256 as this
    function wrote it from the generated edition: a file that no longer matches was changed by the
    student and is kept. A notebook someone edited in ``colab/`` (answers written there before
    ``work/`` existed: neither its stamp, :func:`generated`, nor git says it is the generator's)
    is copied once, as the student's, and never replaced."""
    first = not work.exists()
    work.mkdir(parents=True, exist_ok=True)
    ledger_path = work / PLACED
    try:
        placed = json.loads(ledger_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        placed = {}
    notes: list[str] = []
    committed = git_clean(edition) if edition.is_dir() else set()  # an older generator's, unstamped
    for src in sorted(edition.glob("*.ipynb")):
        data = src.read_bytes()
        new, pristine = _sha(data), generated(data) or src.name in committed
        dst = work / src.name
        if not dst.exists():
            _write(dst, data)
            if pristine:
                placed[dst.name] = new
            else:
                placed.pop(dst.name, None)
                notes.append(f"work/{dst.name}: copied with the changes made in colab/{src.name} (your answers?)")
            if pristine and not first:
                notes.append(f"work/{dst.name}: new chapter")
            continue
        if not pristine or placed.get(dst.name) == new:
            continue  # not an edition (someone's changes), or this edition is already here
        current = _sha(dst.read_bytes())
        if current == new:
            placed[dst.name] = new
        elif current == placed.get(dst.name):  # a copy the student never changed
            _write(dst, data)
            placed[dst.name] = new
            notes.append(f"work/{dst.name}: updated to the newer edition (you had not changed it)")
        else:  # the student's work: the newer edition goes beside it
            k = 1
            while True:
                beside = work / f"{src.stem}.newer{'' if k == 1 else f'-{k}'}.ipynb"
                if not beside.exists() or _sha(beside.read_bytes()) in (new, placed.get(beside.name)):
                    break
                k += 1
            _write(beside, data)
            placed[dst.name] = placed[beside.name] = new
            notes.append(f"work/{dst.name}: you changed it, so it is kept as it is; the newer edition "
                         f"is beside it as work/{beside.name}")
    _write(ledger_path, (json.dumps(placed, indent=1, sort_keys=True) + "\n").encode())
    if first:
        notes.insert(0, f"copied the chapters to {work.name}/: your copy to work in (git ignores it, "
                        f"and start.py never writes over a notebook you changed)")
    return notes


# --------------------------------------------------------------------------- JupyterLab

def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(py: Path, args: list[str], root_user: bool) -> list[str]:
    """``.venv``'s own JupyterLab on ``work/``, its only kernel ``python3``."""
    cmd = [str(py), "-m", "jupyterlab", f"--ServerApp.root_dir={WORK}",
           "--KernelSpecManager.allowed_kernelspecs=python3"]
    if root_user:
        cmd.append("--allow-root")
    return cmd + list(args)


def lab_env(py: Path) -> dict:
    """``.venv``'s kernel specs first: its ``python3`` (``python -m ipykernel_launcher``, which
    jupyter_client runs with the server's own interpreter) wins over one a user or another
    Jupyter registered under the same name (``~/.local/share/jupyter/kernels/python3``)."""
    share = str(VENV / "share" / "jupyter")
    old = os.environ.get("JUPYTER_PATH")
    return {**os.environ, "JUPYTER_PATH": os.pathsep.join([share] + ([old] if old else [])),
            "JUPYTER_PREFER_ENV_PATH": "1"}


def open_lab(py: Path, args: list[str]) -> int:
    root_user = is_root()
    if root_user:
        print("start.py: running as root, so JupyterLab gets --allow-root", flush=True)
    cmd = lab_command(py, args, root_user)
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=lab_env(py))
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:  # JupyterLab answers Ctrl-C itself (it asks, then stops)
            continue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("command", nargs="?", choices=("open", "test"), default="open",
                        help="'open' (default): set up, then open JupyterLab on work/; 'test': set up "
                             "everything, then run pytest")
    parser.add_argument("--all", action="store_true",
                        help="also install requirements.txt: the tests, the book build, the grader, nbgrader")
    parser.add_argument("--no-open", action="store_true", help="set up only (also when CI is set)")
    parser.add_argument("--reinstall", action="store_true", help="run the installation again")
    args, rest = parser.parse_known_args()
    if args.command == "test":
        py = set_up("all", args.reinstall)
        return run(py, "-m", "pytest", *pytest_workers(py, rest), *rest, check=False)
    if rest and "open" not in sys.argv[1:]:
        parser.error(f"unrecognized arguments: {' '.join(rest)} (arguments go on after `open`, to "
                     f"JupyterLab, and after `test`, to pytest)")
    py = set_up("all" if args.all else "student", args.reinstall)
    for note in sync_work():
        print(note, flush=True)
    if args.no_open or os.environ.get("CI"):
        print(f"set up in {VENV}; open the chapters with: python3 start.py", flush=True)
        return 0
    return open_lab(py, rest)


if __name__ == "__main__":
    sys.exit(main())
