"""Where the grading worker runs: under bubblewrap (``bwrap``, Debian's ``bubblewrap``) when it is
installed, else as a plain process (process-level isolation only; book/instructors.md says what
that leaves open).

Under bubblewrap the worker sees a read-only view of the Python environment (the interpreter, its
libraries, ``/usr``) and of the ``fundamentallm`` package (mounted at ``/opt/fundamentallm``, away
from the book), a private empty ``/tmp`` (size-limited), ``/proc`` of its own PID namespace and a
minimal ``/dev``: no book, no other submission, no output file, no home folder, no network, no
other process. It is killed with its parent (``--die-with-parent``) and every process it starts
dies with it (the PID namespace). Memory, CPU time, file size and open files are limited with
``setrlimit`` by the worker itself, before any student code runs (soft and hard limits: the
student's code cannot raise them again).
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the fundamentallm package
SANDBOX_PACKAGE_PARENT = "/opt/fundamentallm"
NO_SANDBOX_NOTE = ("bubblewrap (bwrap) is not installed: grading with process-level isolation only "
                   "(the students' code can read files the grader can read; see book/instructors.md)")


@dataclass
class Limits:
    """Resource limits of one worker."""

    memory_bytes: int = 6 * 2 ** 30  # address space: torch maps much more than it uses
    cpu_seconds: int = 600  # the grader sets it from the number of exercises and --timeout
    file_bytes: int = 64 * 2 ** 20
    tmp_bytes: int = 128 * 2 ** 20
    open_files: int = 256


@functools.lru_cache(maxsize=1)
def bwrap_path() -> Optional[str]:
    """The bubblewrap executable, if it is installed and works here (it needs user namespaces,
    or root)."""
    path = shutil.which("bwrap")
    if path is None:
        return None
    try:
        ok = subprocess.run([path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return path if ok else None


def python_paths() -> list[str]:
    """The folders the worker's Python needs to read: the interpreter's prefixes and library
    folders (outside ``/usr``, which is mounted whole)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(sys.executable).resolve().parent)}
    paths |= {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths |= set(site.getsitepackages())
    for module in ("torch", "numpy"):
        spec = __import__(module)
        paths.add(str(Path(spec.__file__).resolve().parents[1]))
    resolved = sorted({str(Path(p).resolve()) for p in paths if p and Path(p).exists()})
    kept: list[str] = []
    for p in resolved:  # drop folders inside another kept one, and /usr
        if p == "/usr" or p.startswith("/usr/") or any(p.startswith(k + os.sep) for k in kept):
            continue
        kept.append(p)
    return kept


def bwrap_command(bwrap: str, limits: Limits, hidden: Sequence[Path]) -> list[str]:
    """The bubblewrap command line that starts the worker. ``hidden``: folders (the book, the
    submissions, the output) covered by an empty tmpfs should any bound folder contain them."""
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
           "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64"):
        p = Path("/") / name
        if p.is_symlink():
            cmd += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            cmd += ["--ro-bind", str(p), str(p)]
    for extra in ("/etc/ld.so.cache", "/etc/alternatives"):
        if Path(extra).exists():
            cmd += ["--ro-bind", extra, extra]
    binds = python_paths()
    for p in binds:
        cmd += ["--ro-bind", p, p]
    cmd += ["--ro-bind", str(PACKAGE_DIR), f"{SANDBOX_PACKAGE_PARENT}/fundamentallm",
            "--proc", "/proc", "--dev", "/dev", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    mounted = ["/usr", *binds]
    for h in hidden:
        h = str(Path(h).resolve())
        if any(h == m or h.startswith(m + os.sep) for m in mounted):
            cmd += ["--tmpfs", h]
    env = {"PYTHONPATH": SANDBOX_PACKAGE_PARENT, "HOME": "/tmp", "PATH": "/usr/local/bin:/usr/bin:/bin",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONNOUSERSITE": "1", "MPLBACKEND": "Agg", "LANG": "C.UTF-8", LIMITS_ENV: limits_text(limits)}
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    return cmd + ["--chdir", "/tmp", "--", sys.executable, "-s", "-m", "fundamentallm.course._worker"]


def plain_command(workdir: Path, limits: Limits) -> tuple[list[str], dict]:
    """The worker as a plain process (no bubblewrap): started through ``sh`` so that its parent
    process is not the grader, in an empty folder, with a minimal environment."""
    env = {"PYTHONPATH": str(PACKAGE_DIR.parent), "HOME": str(workdir), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "MPLBACKEND": "Agg",
           LIMITS_ENV: limits_text(limits)}
    return ["/bin/sh", "-c", '"$0" "$@"; :', sys.executable, "-s", "-m", "fundamentallm.course._worker"], env


LIMITS_ENV = "FUNDAMENTALLM_WORKER_LIMITS"


def limits_text(limits: Limits) -> str:
    return f"{limits.memory_bytes},{limits.cpu_seconds},{limits.file_bytes},{limits.open_files}"


def set_limits(text: str) -> None:
    """In the worker, before any student code: its resource limits (from :func:`limits_text`)."""
    memory, cpu, size, files = (int(v) for v in text.split(","))
    for what, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, size),
                        (resource.RLIMIT_NOFILE, files), (resource.RLIMIT_CORE, 0)):
        soft, hard = resource.getrlimit(what)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(what, (value, value))
