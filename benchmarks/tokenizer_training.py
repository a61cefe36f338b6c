"""Byte-level BPE training speed: seconds per MB of text at a 10k vocabulary, one core.

The text is the first ``--mb`` MB of the Python standard library's own source files (sorted by
path; present wherever Python is, no network), so it has the variety of real text rather than
one file repeated. Prints the figures, then a JSON line. Measure on an idle machine: the time
is wall-clock, and a loaded machine reads slower.

    python benchmarks/tokenizer_training.py --mb 5 --vocab-size 10000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fundamentallm.tokenizers import ByteBPETokenizer  # noqa: E402


def stdlib_text(megabytes: float) -> str:
    """The first ``megabytes`` MB (10^6 bytes of UTF-8) of the standard library's .py files."""
    root, parts, size = Path(sysconfig.get_paths()["stdlib"]), [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(text)
        size += len(text.encode("utf-8"))
        if size >= megabytes * 1e6:
            break
    data = "".join(parts).encode("utf-8")[: int(megabytes * 1e6)]
    return data.decode("utf-8", errors="ignore")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=5.0)
    parser.add_argument("--vocab-size", type=int, default=10_000)
    parser.add_argument("--tie", default="lexicographic")
    args = parser.parse_args(argv)
    text = stdlib_text(args.mb)
    mb = len(text.encode("utf-8")) / 1e6
    start = time.perf_counter()
    tok = ByteBPETokenizer().train(text, args.vocab_size, special_tokens=["<|endoftext|>"], tie=args.tie)
    seconds = time.perf_counter() - start
    result = {"benchmark": "tokenizer_training", "megabytes": round(mb, 3), "vocab_size": tok.vocab_size,
              "tie": args.tie, "seconds": round(seconds, 2), "seconds_per_mb": round(seconds / mb, 3),
              "cpu_count": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2)}
    print(f"trained {tok.vocab_size} ids on {mb:.2f} MB in {seconds:.1f} s: {seconds / mb:.2f} s per MB "
          f"(load average {result['load_average_1min']} on {result['cpu_count']} cores)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
