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
