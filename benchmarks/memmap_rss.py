"""Peak memory (RSS) of `prepare` and of `train --data` as the corpus grows: a corpus larger than
memory trains in flat memory, because batches slice a memory-mapped uint16 file.

For each size, a text of that many bytes is generated (words drawn from a fixed list, seeded),
tokenized once by ``python -m fundamentallm prepare`` (character tokenizer: a pure-Python BPE
encodes only ~1 MB/s, too slow for a gigabyte), then ``train --data`` runs a few steps of the
nano model. Each runs in its own process; its peak RSS is the kernel's ``ru_maxrss`` for it
(``os.wait4``), split into the process's own (anonymous) memory and the pages of mapped files
(python, torch's libraries, the token file) by sampling ``/proc/PID/status``.
The files go to a temporary folder (``--workdir``) and are deleted. Prints the figures, then a
JSON line. Wall times are of a loaded machine when others run; RSS does not depend on that.

    python benchmarks/memmap_rss.py --sizes-mb 10 1000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("the of and to in is was for on that with as by at from his her it an be which this "
         "model token attention layer value query key head train data loss memory map corpus").split()


def generate_text(path: Path, size_bytes: int, seed: int = 0) -> None:
    """``size_bytes`` of space-separated words and newlines, written in 8 MB pieces."""
    rng = np.random.default_rng(seed)
    vocab = np.array([w + " " for w in WORDS] + ["\n"])
    written = 0
    with open(path, "w", encoding="ascii") as f:
        while written < size_bytes:
            piece = "".join(vocab[rng.integers(0, len(vocab), 1_500_000)])[: size_bytes - written]
            f.write(piece)
            written += len(piece)


def _status_kb(pid: int) -> dict:
    """VmRSS, RssAnon (the process's own memory) and RssFile (mapped file pages) in KB."""
    values = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    values[key] = int(rest.split()[0])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return values


def run(args: list[str], cwd: Path) -> dict:
    """Peak RSS (the kernel's ru_maxrss), peak anonymous and file-backed RSS (sampled every
    20 ms from /proc), in MB, and the seconds of ``python -m fundamentallm ARGS``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    peaks = {"RssAnon": 0, "RssFile": 0}
    with open(cwd / "log.txt", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fundamentallm", *args], cwd=cwd, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # this child's own usage
            if pid:
                break
            for key, kb in _status_kb(proc.pid).items():
                if key in peaks:
                    peaks[key] = max(peaks[key], kb)
            time.sleep(0.02)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError((cwd / "log.txt").read_text()[-2000:])
    return {"peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "peak_anon_mb": round(peaks["RssAnon"] / 1024, 1),
            "peak_file_mb": round(peaks["RssFile"] / 1024, 1), "seconds": round(seconds, 1)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", action="extend", default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workdir", default=None, help="where the corpus goes (default: a temp folder)")
    args = parser.parse_args(argv)
    results = []
    for size_mb in sorted(args.sizes_mb or [10, 1000]):
        work = Path(tempfile.mkdtemp(dir=args.workdir))
        try:
            generate_text(work / "corpus.txt", int(size_mb * 1e6))
            # a small validation split: train --data evaluates all of it at the end
            prep = run(["prepare", "corpus.txt", "--tokenizer", "char", "--out", "data",
                        "--val-fraction", str(min(0.1, 2e5 / (size_mb * 1e6)))], work)
            train = run(["train", "--data", "data", "--preset", "nano", "--steps", str(args.steps),
                         "--batch-size", "16", "--eval-interval", "0", "--no-progress", "--out", "run"], work)
            tokens = json.loads((work / "data" / "meta.json").read_text())["train_tokens"]
        finally:
            shutil.rmtree(work, ignore_errors=True)
        results.append({"corpus_mb": size_mb, "train_tokens": tokens, "prepare": prep, "train": train})
        for name, r in (("prepare", prep), ("train --data", train)):
            print(f"{size_mb:8.0f} MB corpus, {name:12}: peak RSS {r['peak_rss_mb']:6.0f} MB (own memory "
                  f"{r['peak_anon_mb']:.0f} MB, mapped file pages {r['peak_file_mb']:.0f} MB), {r['seconds']:.0f} s",
                  flush=True)
    out = {"benchmark": "memmap_rss", "steps": args.steps, "results": results,
           "load_average_1min": round(os.getloadavg()[0], 2), "cpu_count": os.cpu_count()}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
