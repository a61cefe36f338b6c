"""Peak memory (RSS) of `prepare` and of `train --data` as the corpus grows: a corpus larger than
memory trains in flat memory, because batches slice a memory-mapped uint16 file.

For each size, a text of that many bytes is generated (words drawn from a fixed list, seeded),
tokenized once by ``python -m fundamentallm prepare`` (character tokenizer: a pure-Python BPE
encodes only ~1 MB/s, too slow for a gigabyte), then ``train --data`` runs a few steps of the
nano model. Each runs in its own process; its peak RSS is the kernel's ``ru_maxrss`` for it
(``os.wait4``).
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


def run(args: list[str], cwd: Path) -> tuple[float, float]:
    """-> (peak RSS in MB, seconds) of ``python -m fundamentallm ARGS`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    with open(cwd / "log.txt", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fundamentallm", *args], cwd=cwd, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own resource usage
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError((cwd / "log.txt").read_text()[-2000:])
    return usage.ru_maxrss / 1024, seconds  # ru_maxrss is in KB on Linux


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[10, 1000])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workdir", default=None, help="where the corpus goes (default: a temp folder)")
    args = parser.parse_args(argv)
    results = []
    for size_mb in sorted(args.sizes_mb):
        work = Path(tempfile.mkdtemp(dir=args.workdir))
        try:
            generate_text(work / "corpus.txt", int(size_mb * 1e6))
            # a small validation split: train --data evaluates all of it at the end
            prep_rss, prep_s = run(["prepare", "corpus.txt", "--tokenizer", "char", "--out", "data",
                                    "--val-fraction", str(min(0.1, 2e5 / (size_mb * 1e6)))], work)
            train_rss, train_s = run(["train", "--data", "data", "--preset", "nano", "--steps", str(args.steps),
                                      "--batch-size", "16", "--eval-interval", "0", "--no-progress",
                                      "--out", "run"], work)
            tokens = json.loads((work / "data" / "meta.json").read_text())["train_tokens"]
        finally:
            shutil.rmtree(work, ignore_errors=True)
        row = {"corpus_mb": size_mb, "train_tokens": tokens, "prepare_peak_rss_mb": round(prep_rss, 1),
               "prepare_s": round(prep_s, 1), "train_peak_rss_mb": round(train_rss, 1), "train_s": round(train_s, 1)}
        results.append(row)
        print(f"{size_mb:8.0f} MB corpus ({tokens} train tokens): prepare peak RSS {prep_rss:.0f} MB "
              f"({prep_s:.0f} s), train --data peak RSS {train_rss:.0f} MB ({train_s:.0f} s)", flush=True)
    out = {"benchmark": "memmap_rss", "steps": args.steps, "results": results,
           "load_average_1min": round(os.getloadavg()[0], 2), "cpu_count": os.cpu_count()}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
