"""Per-chapter execution time: the book's 60 s budget per chapter, measured (never asserted).

Executes each chapter notebook listed in ``_toc.yml`` the way nbmake does (nbclient, a fresh
``python3`` kernel per chapter, working directory ``book/``), one chapter at a time, with one
torch thread (``OMP_NUM_THREADS=1``, as in ``.ci/run``, unless already set). Kernel start-up is
included. Chapters over the budget are listed; the exit status is 0 either way, unless a chapter
fails to execute (then 1).

Run:  python benchmarks/chapter_times.py [--budget 60] [--device cpu] [book/05_norms_residuals.ipynb ...]
Prints one line per chapter, then one JSON line (the last line):
``{"seconds": {"book/01_why_attention.ipynb": 12.3, ...}, "total_s": ..., "over_budget": [...],
"budget_s": 60, "loadavg": [...], "device": ..., "torch": ..., "omp_num_threads": "1"}``.
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


def run_chapter(path: Path, timeout_s: int = 600) -> float:
    """Execute one notebook in a fresh kernel (cwd = its folder); returns the wall time in s."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    client.execute()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every chapter of _toc.yml")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per chapter (default: 60)")
    parser.add_argument("--device", default=None,
                        help="sets FUNDAMENTALLM_DEVICE for the kernels (default: unset, i.e. auto)")
    parser.add_argument("--timeout", type=int, default=600, help="per-cell timeout in s (default: 600)")
    args = parser.parse_args(argv)
    if args.budget <= 0:
        parser.error(f"--budget={args.budget} must be > 0")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # kernels inherit the environment
    if args.device:
        os.environ["FUNDAMENTALLM_DEVICE"] = args.device
    chapters = [p.resolve() for p in args.notebooks] or toc_chapters()
    seconds, failed = {}, {}
    for path in chapters:
        name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        try:
            seconds[name] = round(run_chapter(path, args.timeout), 1)
        except Exception as e:  # report and go on: one broken chapter should not hide the others
            failed[name] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
            print(f"{'FAILED':>8s}  {name}  {failed[name]}", flush=True)
            continue
        verdict = "over budget" if seconds[name] > args.budget else "ok"
        print(f"{seconds[name]:7.1f} s  {name}  {verdict}", flush=True)
    import torch

    result = {"seconds": seconds, "total_s": round(sum(seconds.values()), 1),
              "over_budget": [n for n, s in seconds.items() if s > args.budget], "failed": failed,
              "budget_s": args.budget, "loadavg": [round(x, 2) for x in os.getloadavg()],
              "device": os.environ.get("FUNDAMENTALLM_DEVICE", "auto"), "torch": torch.__version__,
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}
    print(json.dumps(result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
