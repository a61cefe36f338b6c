"""What the benchmark scripts share: writing a result as JSON with the date and the machine, for
the book and the README to quote (``--save PATH``)."""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path

import torch

from fundamentallm.speedrun import permutation_p_value  # noqa: F401  (re-exported: the rule's test lives in the package)


def save_result(out: dict, path: str) -> None:
    """Write the JSON result, with the UTC date and the machine, for the book and README to quote."""
    record = {**out, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                         f"{'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU only'}"}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=1) + "\n")


# --- the records table the book's records page reads (fundamentallm/results/records.json) -----------------------
WHO = {"record": "FundamentaLLM", "ours": "FundamentaLLM",
       "baseline": "nanoGPT's CPU recipe (Karpathy), rebuilt with this package"}
WHAT = {
    "record": "3 x 144, 6 heads, RoPE, RMSNorm, SwiGLU 368, QK-norm, value embeddings, canon layers (embeddings, "
              "before each attention and feed-forward), untied head, Muon 0.03 (weight decay 0.15, 4 Newton-Schulz "
              "steps) + AdamW 3.5e-3, bf16 autocast where native, torch.compile, windows drawn without replacement",
    "ours": "3 x 144, RoPE, RMSNorm, SwiGLU, AdamW 2.5e-3, bf16 autocast where native",
    "baseline": "4 x 128, LayerNorm, learned positions, GELU, AdamW 1e-3, float32",
}
RULE = ("a new record, of the fixed budget (validation loss) or of the speedrun (time_to_target_s), is "
        "measured against the current record in one interleaved --compare run on one machine with at least "
        "5 seeds each, and counts when a one-sided exact permutation test gives p < 0.01 (for the fixed "
        "budget, its summed training time no longer than the record's); the stored entries were accepted "
        "under the first rule: a mean lower by more than twice the larger seed standard deviation, and a "
        "total wall time no longer than the baseline's in the same --compare run")
# Copied from the run for each recipe (the test checks that the copy is exact), and the baseline's.
COPIED = ("val_loss", "mean", "sd", "params", "time_s", "train_s", "tokens_per_s", "time_to_target_s",
          "steps_to_target", "val_curve")


def records_table(sources: dict[str, str], root: Path) -> dict:
    """``records.json`` from the stored ``train_budget`` runs ``sources`` (corpus -> path relative
    to the repository ``root``), every recipe of each run, with the budget's rules."""
    from fundamentallm.recipes import BUDGET, RECIPES

    rules = {"train_tokens": BUDGET["steps"] * BUDGET["batch_size"] * BUDGET["block_size"],
             "steps": BUDGET["steps"], "batch_size": BUDGET["batch_size"], "block_size": BUDGET["block_size"],
             "max_params": BUDGET["max_params"], "val_split": BUDGET["val_fraction"], "seeds": 3,
             "new_record_seeds": 5, "p_value": 0.01, "rule": RULE}
    records = []
    for corpus, source in sources.items():
        run = json.loads((root / source).read_text())
        rules["speedrun_target"] = run["target"]
        for name in run["recipes"]:
            result, baseline = run[name], run["baseline"]
            records.append({
                "corpus": corpus, "recipe": name, "who": WHO[name], "what": WHAT[name],
                "model": RECIPES[name]["model"], "train": json.loads(json.dumps(RECIPES[name]["train"])),
                "seeds": run["seeds"], **{key: result[key] for key in COPIED},
                "baseline_val_loss": baseline["val_loss"], "baseline_time_s": baseline["time_s"],
                "baseline_train_s": baseline["train_s"], "baseline_val_curve": baseline["val_curve"],
                "compile_s": run.get("compile_s", {}).get(name, 0.0),  # its first compilation, before the clock
                "threads": run["threads"][name], "cpu": run["cpu"], "cpu_bf16": run["cpu_bf16"],
                "date": run["date"], "machine": run["machine"], "torch": run["torch"], "source": source,
                "command": f"python benchmarks/train_budget.py --corpus {corpus} --recipe {name} --compare "
                           f"--seeds {len(run['seeds'])}"})
    return {"rules": rules, "records": records}


if __name__ == "__main__":  # python benchmarks/record.py: rewrite fundamentallm/results/records.json from the runs
    root = Path(__file__).resolve().parent.parent
    table = records_table({"tinyshakespeare": "fundamentallm/results/train_budget_tinyshakespeare.json",
                           "python-docs": "fundamentallm/results/train_budget_python-docs.json"}, root)
    (root / "fundamentallm" / "results" / "records.json").write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {len(table['records'])} entries")
