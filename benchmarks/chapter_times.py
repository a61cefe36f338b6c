"""Per-chapter execution time: the book's 60 s budget per chapter, measured (never asserted).

Executes each chapter notebook listed in ``_toc.yml`` the way nbmake does (nbclient, a fresh
``python3`` kernel per chapter, working directory ``book/``), one chapter at a time, with one
torch thread (``OMP_NUM_THREADS=1``, as in ``.ci/run``, unless already set). Kernel start-up is
included. Beside the wall time it reports the CPU time of each chapter's kernel (user + system, its
children included): on a machine shared with other jobs the wall time grows with the load, the CPU
time of a one-thread kernel much less, so it is the figure to compare across runs. Chapters over the budget are listed; the exit status is 0 either way, unless a chapter
fails to execute (then 1).

Run:  python benchmarks/chapter_times.py [--budget 60] [--device cpu] [--save PATH] [book/05_norms_residuals.ipynb ...]
Prints one line per chapter, then one JSON line (the last line):
``{"seconds": {"book/01_why_attention.ipynb": 12.3, ...}, "total_s": ..., "cpu_seconds": {...},
"total_cpu_s": ..., "over_budget": [...] (by CPU time), "over_budget_wall": [...],
"budget_s": 60, "loadavg": [...], "loadavg_start": [...], "cpu": ..., "date": ..., "device": ...,
"torch": ..., "omp_num_threads": "1"}``. ``--save fundamentallm/results/chapter_times.json`` stores it
(the figures README quotes, checked by ``tests/test_start.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def toc_chapters(root: Path = ROOT) -> list[Path]:
    toc = (root / "_toc.yml").read_text(encoding="utf-8")
    files = re.findall(r"^\s*-?\s*file:\s*(\S+)\s*$", toc, flags=re.M)
    return [root / f"{f}.ipynb" for f in files if (root / f"{f}.ipynb").exists()]


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), or the platform's description elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


_RUSAGE = ("import json as _j, resource as _r\n"
           "print(_j.dumps([sum(getattr(_r.getrusage(w), f) for w in (_r.RUSAGE_SELF, _r.RUSAGE_CHILDREN)"
           " for f in ('ru_utime', 'ru_stime'))]))")


def run_chapter(path: Path, timeout_s: int = 600) -> tuple[float, float]:
    """Execute one notebook in a fresh kernel (cwd = its folder). Returns (wall s, CPU s): the CPU
    time of the kernel and its children (user + system, read by one extra cell appended at the end),
    which a loaded machine inflates far less than the wall time."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(_RUSAGE))
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    client.execute()
    wall = time.perf_counter() - t0
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    return wall, json.loads(out.strip().splitlines()[-1])[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every chapter of _toc.yml")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per chapter (default: 60)")
    parser.add_argument("--device", default=None,
                        help="sets FUNDAMENTALLM_DEVICE for the kernels (default: unset, i.e. auto)")
    parser.add_argument("--timeout", type=int, default=600, help="per-cell timeout in s (default: 600)")
    parser.add_argument("--save", default=None, metavar="PATH", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    if args.budget <= 0:
        parser.error(f"--budget={args.budget} must be > 0")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # kernels inherit the environment
    if args.device:
        os.environ["FUNDAMENTALLM_DEVICE"] = args.device
    chapters = [p.resolve() for p in args.notebooks] or toc_chapters()
    seconds, cpu_seconds, failed = {}, {}, {}
    load_start = [round(x, 2) for x in os.getloadavg()]
    for path in chapters:
        name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        try:
            wall, cpu = run_chapter(path, args.timeout)
            seconds[name], cpu_seconds[name] = round(wall, 1), round(cpu, 1)
        except Exception as e:  # report and go on: one broken chapter should not hide the others
            failed[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
            print(f"{'FAILED':>8s}  {name}  {failed[name]}", flush=True)
            continue
        verdict = ("over budget" if cpu_seconds[name] > args.budget else
                   "over budget by wall time (loaded?)" if seconds[name] > args.budget else "ok")
        print(f"{seconds[name]:7.1f} s  ({cpu_seconds[name]:5.1f} s CPU)  {name}  {verdict}", flush=True)
    import torch

    result = {"seconds": seconds, "total_s": round(sum(seconds.values()), 1),
              "cpu_seconds": cpu_seconds, "total_cpu_s": round(sum(cpu_seconds.values()), 1),
              # over the budget by CPU time (what the chapter costs on an idle machine with one
              # thread), and by the wall time of this run (which a loaded machine inflates)
              "over_budget": [n for n, s in cpu_seconds.items() if s > args.budget],
              "over_budget_wall": [n for n, s in seconds.items() if s > args.budget], "failed": failed,
              "budget_s": args.budget, "loadavg": [round(x, 2) for x in os.getloadavg()],
              "loadavg_start": load_start, "cpu": cpu_model(), "cores": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "device": os.environ.get("FUNDAMENTALLM_DEVICE", "auto"), "torch": torch.__version__,
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    print(json.dumps(result))
    if args.save:
        Path(args.save).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
