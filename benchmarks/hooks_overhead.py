"""What the hooks of chapter 16 (``fundamentallm.hooks``) cost a forward pass.

Issue 40's target: with no hook set, the forward costs what it cost before hooks existed (within
noise). ``model.hooks`` registers PyTorch hooks on entering its ``with`` block and removes them on
leaving, so a forward outside a block runs the same code as a model never hooked. Measured here, on
one thread, interleaved round by round so that a change of the machine's load hits every variant
alike:

* ``plain`` and ``plain (again)``: the same forward twice per round; their difference is the noise;
* ``after a hooked block``: a model that has been through ``with model.hooks({every name: identity})``;
* ``empty hooks block``: a forward inside ``with model.hooks({})``;
* ``identity hooks everywhere``: inside a block with an identity hook at every name (what hooks
  cost when they are set, for reference: the pattern hook also switches off the fused attention);
* ``run_with_cache``: every activation kept.

Per forward the median of the rounds, in milliseconds of the thread's CPU time (``time.thread_time``:
less sensitive to other jobs on the machine than wall time) and of wall time.

Run:  python benchmarks/hooks_overhead.py [--rounds 30] [--save fundamentallm/results/hooks_overhead.json]
Prints a table, then one JSON line (the last line).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import torch

from fundamentallm import Transformer, TransformerConfig


def _time(fn, repeats: int) -> tuple[float, float]:
    """(thread CPU ms, wall ms) per call of ``fn``, over ``repeats`` calls."""
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(repeats):
        fn()
    return ((time.thread_time() - cpu) * 1e3 / repeats, (time.perf_counter() - wall) * 1e3 / repeats)


def main(rounds: int = 30, repeats: int = 5) -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=512, d_model=64, num_heads=4, num_layers=2, max_seq_len=64)
    model = Transformer(config).eval()
    hooked = Transformer(config).eval()
    hooked.load_state_dict(model.state_dict())
    ids = torch.randint(0, 512, (8, 64), generator=torch.Generator().manual_seed(1))
    identity = {name: (lambda a, name: None) for name in model.hook_names()}
    with torch.no_grad(), hooked.hooks(identity):
        hooked(ids)  # registered, used and removed: what a reader's model looks like afterwards

    def plain():
        return model(ids)

    def after():
        return hooked(ids)

    def empty():
        with model.hooks({}):
            return model(ids)

    def everywhere():
        with model.hooks(identity):
            return model(ids)

    def cached():
        return model.run_with_cache(ids)

    variants = {"plain": plain, "plain (again)": plain, "after a hooked block": after,
                "empty hooks block": empty, "identity hooks everywhere": everywhere, "run_with_cache": cached}
    with torch.no_grad():
        for fn in variants.values():  # warm-up
            _time(fn, 2)
        samples = {name: [] for name in variants}
        for _ in range(rounds):
            for name, fn in variants.items():
                samples[name].append(_time(fn, repeats))
    cpu_ms = {name: statistics.median(s[0] for s in v) for name, v in samples.items()}
    wall_ms = {name: statistics.median(s[1] for s in v) for name, v in samples.items()}
    base = cpu_ms["plain"]
    overhead = {name: round(100 * (ms / base - 1), 2) for name, ms in cpu_ms.items()}
    # the noise: how far apart two measurements of the very same forward land, round by round
    pairs = [abs(a[0] / b[0] - 1) * 100 for a, b in zip(samples["plain"], samples["plain (again)"])]
    return {"cpu_ms": {k: round(v, 3) for k, v in cpu_ms.items()},
            "wall_ms": {k: round(v, 3) for k, v in wall_ms.items()},
            "overhead_pct_vs_plain": overhead,
            "noise_pct_median_plain_vs_plain": round(statistics.median(pairs), 2),
            "model": {"d_model": 64, "num_heads": 4, "num_layers": 2, "vocab_size": 512, "batch": 8, "seq_len": 64},
            "rounds": rounds, "repeats_per_round": repeats, "threads": 1,
            "loadavg": [round(x, 2) for x in os.getloadavg()], "torch": torch.__version__,
            "machine": platform.machine(), "date": time.strftime("%Y-%m-%d")}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5, help="forwards per variant per round")
    parser.add_argument("--save", help="also write the JSON to this file")
    args = parser.parse_args()
    result = main(args.rounds, args.repeats)
    print(f"{'variant':28} {'CPU ms':>8} {'wall ms':>8} {'vs plain':>9}")
    for name in result["cpu_ms"]:
        print(f"{name:28} {result['cpu_ms'][name]:8.3f} {result['wall_ms'][name]:8.3f} "
              f"{result['overhead_pct_vs_plain'][name]:+8.2f}%")
    print(f"noise (median |plain / plain again - 1| per round): {result['noise_pct_median_plain_vs_plain']}%")
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    print(json.dumps(result))
