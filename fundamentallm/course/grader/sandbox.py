"""Where the grading worker runs: under bubblewrap (``bwrap``, Debian's ``bubblewrap``) when it is
installed, else as a plain process (process-level isolation only; book/instructors.md says what
that leaves open).

Under bubblewrap the worker sees a read-only view of the Python environment (the interpreter, its
libraries, ``/usr``) and of the ``fundamentallm`` package (mounted at ``/opt/fundamentallm``, away
from the book), a private empty ``/tmp`` (size-limited), ``/proc`` of its own PID namespace and a
minimal ``/dev``: no book, no other submission, no output file, no home folder, no network, no
other process. It is killed with its parent (``--die-with-parent``) and every process it starts
dies with it (the PID namespace). ``/`` and ``/dev`` are remounted read-only, ``/tmp`` is a tmpfs of
``Limits.tmp_bytes``, and the Python folders are bound *after* ``/tmp`` is mounted, so an
environment under ``/tmp`` stays visible.

The worker runs unprivileged (:func:`confine`, before any student code): started by root, bubblewrap
keeps only the capabilities needed to change user, and the worker clears its capability bounding
set and becomes ``nobody`` (uid/gid 65534, no supplementary groups); started by a user, the worker
is that user in a user namespace, with every capability dropped (``--cap-drop ALL``). Either way it
sets ``no_new_privs`` and installs a seccomp filter (:func:`seccomp_program`) that refuses
``mount``, ``ptrace``, ``execve``, creating a process (``fork``/``vfork``/``clone`` without
``CLONE_THREAD``) and the other calls an answer never needs. One process per student, so memory
(``RLIMIT_AS``) and CPU time limits, set with ``setrlimit`` by the worker before any student code
runs, bound the student's whole process tree.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import resource
import shutil
import site
import struct
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # the fundamentallm package
SANDBOX_PACKAGE_PARENT = "/opt/fundamentallm"
NO_SANDBOX_NOTE = ("bubblewrap (bwrap) is not installed: grading with process-level isolation only "
                   "(the students' code can read files the grader can read; see book/instructors.md)")
NO_SECCOMP_NOTE = ("no seccomp filter on this machine ({why}): the students' code can start processes "
                   "and make any system call its user may (see book/instructors.md)")
ROOT_NOTE = "the grader runs as root: each worker drops to user nobody (uid 65534) with no capability"
NOBODY = 65534


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
        ok = subprocess.run([path, *_privilege_flags(), "--ro-bind", "/", "/", "--die-with-parent", "true"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return path if ok else None


def _privilege_flags() -> list[str]:
    """Namespaces and capabilities of the sandbox (see :func:`bwrap_command`); the availability
    probe uses the same, so a bubblewrap that refuses them (a setuid one) counts as missing."""
    if getattr(os, "geteuid", lambda: 1)() == 0:
        return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    return ["--unshare-all", "--cap-drop", "ALL"]


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
    submissions, the output) covered by an empty tmpfs should any bound folder contain them.

    As root: no user namespace (its root would be the host's root, with its capabilities); every
    capability is dropped but those :func:`confine` needs to become ``nobody``. As a user: a user
    namespace, every capability dropped."""
    cmd = [bwrap, *_privilege_flags(), "--die-with-parent", "--new-session", "--clearenv",
            # /tmp first: a Python environment under /tmp is bound onto it below, not hidden by it
            "--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
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
    made: set[str] = set()
    for p in binds:  # parents readable by nobody (bubblewrap would make them 0700)
        for parent in reversed(Path(p).parents):
            if str(parent) not in made and str(parent) not in ("/", "/usr") and not str(parent).startswith("/usr/"):
                made.add(str(parent))
                cmd += ["--perms", "0755", "--dir", str(parent)]
        cmd += ["--ro-bind", p, p]
    inside = f"{SANDBOX_PACKAGE_PARENT}/fundamentallm"
    # the package, without the chapters' checks (their references and answer keys): of
    # fundamentallm/checks only core.py, the worker's record of forbidden calls, is visible
    cmd += ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", SANDBOX_PACKAGE_PARENT,
            "--ro-bind", str(PACKAGE_DIR), inside, "--perms", "0755", "--size", "65536", "--tmpfs", f"{inside}/checks",
            "--ro-bind", str(PACKAGE_DIR / "checks" / "core.py"), f"{inside}/checks/core.py",
            "--remount-ro", f"{inside}/checks", "--proc", "/proc", "--dev", "/dev"]
    mounted = ["/usr", *binds]
    for h in hidden:
        h = str(Path(h).resolve())
        if any(h == m or h.startswith(m + os.sep) for m in mounted):
            cmd += ["--size", "4096", "--tmpfs", h, "--remount-ro", h]  # empty, and stays empty
    cmd += ["--remount-ro", "/dev", "--remount-ro", "/"]
    env = {"PYTHONPATH": SANDBOX_PACKAGE_PARENT, "HOME": "/tmp", "PATH": "/usr/local/bin:/usr/bin:/bin",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONNOUSERSITE": "1", "MPLBACKEND": "Agg", "LANG": "C.UTF-8", LIMITS_ENV: limits_text(limits),
           SANDBOX_ENV: "1"}
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    return cmd + ["--chdir", "/tmp", "--", sys.executable, "-s", "-m", "fundamentallm.course.grader._worker"]


def plain_command(workdir: Path, limits: Limits) -> tuple[list[str], dict]:
    """The worker as a plain process (no bubblewrap): started through ``sh`` so that its parent
    process is not the grader, in an empty folder, with a minimal environment."""
    env = {"PYTHONPATH": str(PACKAGE_DIR.parent), "HOME": str(workdir), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "MPLBACKEND": "Agg",
           LIMITS_ENV: limits_text(limits)}
    return ["/bin/sh", "-c", '"$0" "$@"; :', sys.executable, "-s", "-m", "fundamentallm.course.grader._worker"], env


LIMITS_ENV = "FUNDAMENTALLM_WORKER_LIMITS"
SANDBOX_ENV = "FUNDAMENTALLM_WORKER_SANDBOX"


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


# --- confinement of the worker: no privilege, no new process, a system-call filter -------------

# System calls an answer never needs (refused with EPERM), by architecture: (AUDIT_ARCH, numbers).
# clone is allowed only for threads (CLONE_THREAD); clone3 answers ENOSYS, so the C library falls
# back to clone for its threads. execve after start, fork, vfork: no child process, no new program.
_DENIED = {
    "x86_64": (0xC000003E, {
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "ptrace": 101, "execve": 59,
        "execveat": 322, "fork": 57, "vfork": 58, "unshare": 272, "setns": 308, "kexec_load": 246,
        "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176, "bpf": 321,
        "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249, "userfaultfd": 323,
        "process_vm_readv": 310, "process_vm_writev": 311, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163,
        "personality": 135, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442, "kcmp": 312},
        {"clone": 56, "clone3": 435}),
    "aarch64": (0xC00000B7, {
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "ptrace": 117, "execve": 221,
        "execveat": 281, "unshare": 97, "setns": 268, "kexec_load": 104, "kexec_file_load": 294,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "bpf": 280, "perf_event_open": 241,
        "keyctl": 219, "add_key": 217, "request_key": 218, "userfaultfd": 282, "process_vm_readv": 270,
        "process_vm_writev": 271, "open_by_handle_at": 265, "name_to_handle_at": 264, "swapon": 224,
        "swapoff": 225, "reboot": 142, "acct": 89, "personality": 92, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "process_madvise": 440,
        "mount_setattr": 442, "kcmp": 272},
        {"clone": 220, "clone3": 435}),
}
_CLONE_THREAD = 0x00010000
_RET_ALLOW, _RET_KILL = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 1, 38


def seccomp_unavailable() -> Optional[str]:
    """Why no seccomp filter can be installed here (None when it can)."""
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    if platform.machine() not in _DENIED:
        return f"no system-call table for {platform.machine()}"
    return None


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def seccomp_program(machine: Optional[str] = None) -> bytes:
    """The classic-BPF seccomp program (``struct sock_filter[]``) of the worker, for ``machine``
    (``platform.machine()``): another architecture's system calls kill the process; the calls of
    :data:`_DENIED` fail with EPERM; ``clone`` without ``CLONE_THREAD`` fails with EPERM and
    ``clone3`` with ENOSYS; everything else is allowed."""
    arch, denied, clone = _DENIED[machine or platform.machine()]
    ld_w_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    numbers = sorted(set(denied.values()))
    # layout: 0 ld arch; 1 jeq arch; 2 ret kill; 3 ld nr; [4 jge x32]; jeq each denied; jeq clone3;
    # jeq clone; ret allow; [clone:] ld arg0; jset THREAD; ret eperm; ret allow; [deny:] ret eperm;
    # [enosys:] ret enosys
    head = [_bpf(ld_w_abs, 0, 0, 4), _bpf(jeq, 1, 0, arch), _bpf(ret, 0, 0, _RET_KILL), _bpf(ld_w_abs, 0, 0, 0)]
    checks: list[tuple] = []
    if arch == 0xC000003E:
        checks.append(("deny_ge", 0x40000000))  # x32 system calls
    checks += [("deny", n) for n in numbers] + [("enosys", clone["clone3"]), ("clone", clone["clone"])]
    n_checks = len(checks)
    # after the checks: ret allow (1), clone block (4), deny (1), enosys (1)
    body = []
    for i, (kind, nr) in enumerate(checks):
        left = n_checks - i - 1  # checks after this one
        to_clone = left + 1  # skip the remaining checks and "ret allow"
        to_deny = left + 1 + 4
        to_enosys = to_deny + 1
        if kind == "deny_ge":
            body.append(_bpf(jge, to_deny, 0, nr))
        elif kind == "deny":
            body.append(_bpf(jeq, to_deny, 0, nr))
        elif kind == "enosys":
            body.append(_bpf(jeq, to_enosys, 0, nr))
        else:
            body.append(_bpf(jeq, to_clone, 0, nr))
    tail = [_bpf(ret, 0, 0, _RET_ALLOW),
            _bpf(ld_w_abs, 0, 0, 16), _bpf(jset, 1, 0, _CLONE_THREAD), _bpf(ret, 0, 0, 0x00050000 | _EPERM),
            _bpf(ret, 0, 0, _RET_ALLOW),
            _bpf(ret, 0, 0, 0x00050000 | _EPERM), _bpf(ret, 0, 0, 0x00050000 | _ENOSYS)]
    return b"".join(head + body + tail)


def confine(drop_root: bool = True) -> list[str]:
    """In the worker, before any student code: drop every privilege (as root, with ``drop_root``:
    clear the capability bounding set, become ``nobody``; then an empty capability set), set
    ``no_new_privs`` and install the seccomp filter. Returns what could not be done (empty when
    everything was); raises ``OSError`` if root could not drop its privileges."""
    missing: list[str] = []
    if not sys.platform.startswith("linux"):
        return [f"not Linux ({sys.platform}): no capability, no_new_privs or seccomp"]
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 24, 38, 22, 2
    if os.geteuid() == 0 and not drop_root:
        missing.append("the worker runs as root (no bubblewrap to drop privileges in)")
    if os.geteuid() == 0 and drop_root:
        for cap in range(64):
            if libc.prctl(pr_capbset_drop, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # EINVAL: no such cap
                raise OSError(ctypes.get_errno(), f"could not drop capability {cap} from the bounding set")
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
        if os.geteuid() == 0 or os.getegid() == 0:
            raise OSError("the worker is still root")
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(b"\0" * 24)  # effective, permitted, inheritable: all zero (x2)
    if libc.capset(ctypes.c_char_p(header), data) != 0:
        missing.append(f"capset failed (errno {ctypes.get_errno()})")
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        missing.append(f"no_new_privs failed (errno {ctypes.get_errno()})")
    why = seccomp_unavailable()
    if why is None:
        program = seccomp_program()
        filters = ctypes.create_string_buffer(program)
        fprog = struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(filters))
        if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.c_char_p(fprog), 0, 0) != 0:
            missing.append(f"the seccomp filter could not be installed (errno {ctypes.get_errno()})")
    else:
        missing.append(why)
    return missing
