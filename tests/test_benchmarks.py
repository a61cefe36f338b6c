"""The benchmark scripts still run (a few steps and tokens each; their figures are measured by
running them in full, see benchmarks/README.md, never asserted here)."""

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run_script(name: str, *args: str, tmp_path: Path) -> dict:
    proc = subprocess.run([sys.executable, str(BENCHMARKS / name), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_train_budget_compare_runs_both_recipes(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 300, encoding="utf-8")
    out = run_script("train_budget.py", "--corpus", str(corpus), "--compare", "--steps", "3",
                     "--threads", "1", tmp_path=tmp_path)
    assert out["benchmark"] == "train_budget" and out["val_windows"] == 20  # 1290 val chars / 64
    for name in ("ours", "baseline"):
        run = out[name]
        assert run["steps"] == 3 and run["train_tokens"] == 3 * 12 * 64
        assert run["params"] <= 810_000 and run["val_loss"] > 0 and run["tokens_per_s"] > 0
    assert out["speed_ratio"] > 0


def test_train_budget_rejects_unknown_fields(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "train_budget.py"), "--steps", "1",
                           "--set", "learning_rate=1e-3"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0 and "unknown field 'learning_rate'" in proc.stderr


def test_generation_benchmark_runs_at_the_tiny_size(tmp_path):
    out = run_script("generation.py", "--sizes", "tiny", "--new-tokens", "6", "--repeats", "1",
                     "--threads", "1", tmp_path=tmp_path)
    (result,) = out["results"]
    assert result["size"] == "tiny" and result["new_tokens"] == 6
    assert result["params"] == result["hf_params"]
    for key in ("ours_cache_tok_s", "ours_cache_default_layout_tok_s", "ours_recompute_tok_s",
                "ours_recompute_default_layout_tok_s", "hf_cache_tok_s", "cache_speedup",
                "cache_speedup_default_layout", "vs_hf", "default_layout_vs_hf"):
        assert result[key] > 0, key
    assert result["kv_cache_bytes_per_token"] == result["kv_cache_bytes_if_mha"] == 2 * 6 * 256 * 4


def test_generation_benchmark_runs_at_the_tiny_gqa_size(tmp_path):
    out = run_script("generation.py", "--sizes", "tiny-gqa", "--new-tokens", "6", "--repeats", "1",
                     "--threads", "1", "--skip-recompute", tmp_path=tmp_path)
    (result,) = out["results"]
    assert result["params"] == result["hf_params"] and result["same_tokens_as_hf"]
    assert (result["num_heads"], result["num_kv_heads"]) == (8, 2)
    assert result["kv_cache_bytes_per_token"] * 4 == result["kv_cache_bytes_if_mha"] == 2 * 6 * 256 * 4
    assert result["vs_hf"] > 0
