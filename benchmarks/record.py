"""What the benchmark scripts share: writing a result as JSON with the date and the machine, for
the book and the README to quote (``--save PATH``)."""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

import torch


def save_result(out: dict, path: str) -> None:
    """Write the JSON result, with the UTC date and the machine, for the book and README to quote."""
    record = {**out, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                         f"{'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU only'}"}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=1) + "\n")


def permutation_p_value(new: list[float], old: list[float]) -> float:
    """One-sided exact permutation test that ``new`` losses are lower than ``old``: the share of
    all ways to split the pooled losses into groups of the two sizes whose mean difference
    (first group minus second) is at most the observed one. No assumption on the distribution;
    with 5 seeds each the smallest possible value is 1/252 (every new run below every old one).

    The records page's rule: a new record needs p < 0.01 with >= 5 seeds each, measured against
    the previous record in one interleaved run (``train_budget.py --recipe NEW record --compare
    --seeds 5``)."""
    from itertools import combinations

    if len(new) < 1 or len(old) < 1:
        raise ValueError(f"need at least one loss in each group, got {len(new)} new and {len(old)} old")
    pooled = [*new, *old]
    observed = sum(new) / len(new) - sum(old) / len(old)
    total = sum(pooled)
    hits = count = 0
    for group in combinations(range(len(pooled)), len(new)):
        first = sum(pooled[i] for i in group)
        diff = first / len(new) - (total - first) / len(old)
        hits += diff <= observed + 1e-12  # ties count against the new recipe
        count += 1
    return hits / count
