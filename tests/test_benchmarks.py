"""The benchmark scripts still run (a few steps and tokens each; their figures are measured by
running them in full, see benchmarks/README.md, never asserted here)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fundamentallm.recipes import BUDGET, RECIPES

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
RESULTS = BENCHMARKS.parent / "fundamentallm" / "results"


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
    assert out["recipes"] == ["ours", "baseline"] and out["seeds"] == [1337]
    for name in ("ours", "baseline"):
        run = out[name]
        assert run["steps"] == 3 and run["train_tokens"] == 3 * 12 * 64
        assert run["params"] <= 810_000 and run["tokens_per_s"][0] > 0
        assert run["mean"] == run["val_loss"][0] > 0 and run["sd"] is None  # one seed: no sd
    assert out["speed_ratio"]["ours"][0] > 0


def test_train_budget_seeds_and_three_recipes(tmp_path):
    """--seeds 2 trains each recipe with seeds 1337 and 1338 and reports the mean and the sample
    sd; the same seed gives the same loss whether recipes are trained alone or interleaved."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 300, encoding="utf-8")
    out = run_script("train_budget.py", "--corpus", str(corpus), "--recipe", "record", "ours", "--compare",
                     "--seeds", "2", "--steps", "2", "--threads", "1", tmp_path=tmp_path)
    assert out["recipes"] == ["record", "ours", "baseline"] and out["seeds"] == [1337, 1338]
    for name in out["recipes"]:
        losses = out[name]["val_loss"]
        assert len(losses) == 2 and out[name]["mean"] == pytest.approx(sum(losses) / 2, abs=1e-4)
        assert out[name]["sd"] == pytest.approx(abs(losses[0] - losses[1]) / 2 ** 0.5, abs=1e-4)
        assert len(out[name]["time_s"]) == 2 and out[name]["params"] <= 810_000
    alone = run_script("train_budget.py", "--corpus", str(corpus), "--recipe", "record", "--seed", "1338",
                       "--steps", "2", "--threads", "1", tmp_path=tmp_path)
    assert alone["record"]["val_loss"] == [out["record"]["val_loss"][1]]


def test_train_budget_profile_prints_the_operator_table(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 300, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "train_budget.py"), "--corpus", str(corpus),
                           "--recipe", "record", "--profile", "2", "--threads", "1",
                           "--set", "compile=False"], cwd=tmp_path,  # compiling 7 variants: minutes
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "aten::mm" in proc.stdout and "Self CPU" in proc.stdout
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["benchmark"] == "train_budget_profile" and out["ms_per_step"]["record"] > 0
    record = out["recipes"]["record"]
    assert set(record["phases_ms"]) == {"batch", "forward", "backward", "clip", "optimizer"}
    assert record["ms_per_step"] == pytest.approx(sum(record["phases_ms"].values()), abs=0.05)
    assert "aten::mm" in [row["op"] for row in record["ops"]] and record["ops_per_step"] > 0
    assert all(0 <= row["share"] <= 1 and row["calls_per_step"] > 0 for row in record["ops"])
    # what each ingredient costs: the recipe without it, timed in turn with the full recipe
    assert set(record["ingredients_ms"]) == {"canon layers", "value embeddings", "QK-norm", "untied output layer",
                                             "Muon (vs AdamW)", "bf16 matrix products", "torch.compile"}
    assert all(v["ms_per_step_without"] > 0 for v in record["ingredients_ms"].values())


def test_train_budget_speedrun_evaluations_change_nothing(tmp_path):
    """The speedrun's evaluations every few steps are outside the timed training and leave the
    run as it was: the same final loss as without them; the time to the target is the training
    time at the first evaluation at or below it, and None when no evaluation reached it."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 300, encoding="utf-8")
    common = ("--corpus", str(corpus), "--recipe", "record", "--compare", "--steps", "4", "--threads", "1")
    plain = run_script("train_budget.py", *common, "--eval-every", "0", tmp_path=tmp_path)
    timed = run_script("train_budget.py", *common, "--eval-every", "1", "--target", "2.5", tmp_path=tmp_path)
    never = run_script("train_budget.py", *common, "--eval-every", "2", "--target", "0.01", tmp_path=tmp_path)
    for name in ("record", "baseline"):
        assert timed[name]["val_loss"] == plain[name]["val_loss"] == never[name]["val_loss"]
        curve = timed[name]["val_curve"][0]
        reached = [point for point in curve if point[2] <= 2.5]
        assert reached == [curve[-1]] and all(point[2] > 2.5 for point in curve[:-1])
        assert timed[name]["time_to_target_s"] == [curve[-1][1]] and timed[name]["steps_to_target"] == [curve[-1][0]]
        assert never[name]["time_to_target_s"] == [None] and [p[0] for p in never[name]["val_curve"][0]] == [2, 4]
        assert plain[name]["val_curve"] == [[]]
    assert timed["time_to_target_ratio"]["record"] == [
        round(timed["record"]["time_to_target_s"][0] / timed["baseline"]["train_s"][0], 3)]
    assert timed["threads"] == {"record": 1, "baseline": 1} and timed["target"] == 2.5
    assert 0 < timed["versus"]["baseline"]["p_value"] <= 1


def test_train_budget_chooses_its_threads(tmp_path):
    """--threads auto (the default) picks a thread count per recipe before training and again
    for every chunk (after a few probe steps at each count); the run's numbers are those of a
    fixed thread count."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 300, encoding="utf-8")
    common = ("--corpus", str(corpus), "--recipe", "record", "--steps", "20", "--eval-every", "10")
    auto = run_script("train_budget.py", *common, tmp_path=tmp_path)
    fixed = run_script("train_budget.py", *common, "--threads", "1", tmp_path=tmp_path)
    cores = range(1, (os.cpu_count() or 1) + 1)
    assert auto["threads"]["record"] in cores and fixed["threads"] == {"record": 1}
    assert len(auto["record"]["threads_per_chunk"][0]) == 2 and set(auto["record"]["threads_per_chunk"][0]) <= set(cores)
    assert fixed["record"]["threads_per_chunk"] == [[1, 1]]
    assert auto["record"]["val_loss"] == fixed["record"]["val_loss"]


def test_permutation_p_value():
    sys.path.insert(0, str(BENCHMARKS))
    from record import permutation_p_value

    assert permutation_p_value([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(1 / 252)
    assert permutation_p_value([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == 1.0
    assert permutation_p_value([1.0] * 5, [1.0] * 5) == 1.0  # ties never make a record
    # one new run worse than one old run: 4 of the 252 splits are at least as good
    assert permutation_p_value([1, 2, 3, 4, 7], [5, 6, 8, 9, 10]) == pytest.approx(4 / 252)
    with pytest.raises(ValueError, match="at least one loss"):
        permutation_p_value([], [1.0])


def test_train_budget_rejects_unknown_fields(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "train_budget.py"), "--steps", "1",
                           "--set", "learning_rate=1e-3"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0 and "unknown field 'learning_rate'" in proc.stderr


def test_train_budget_no_compile_needs_a_compiled_recipe(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "train_budget.py"), "--steps", "1", "--recipe", "ours",
                           "--no-compile"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0 and "--no-compile: none of ['ours'] uses torch.compile" in proc.stderr
    # a variant that already turns the compiler off has no uncompiled twin to add
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "train_budget.py"), "--steps", "1", "--recipe",
                           "record+compile=False", "--no-compile"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0 and "uses torch.compile" in proc.stderr


def test_generation_benchmark_runs_at_the_tiny_size(tmp_path):
    out = run_script("generation.py", "--sizes", "tiny", "--new-tokens", "6", "--repeats", "1",
                     "--threads", "1", "--batch", "1", "3", "--profile", tmp_path=tmp_path)
    result, batched = out["results"]
    assert (result["batch"], batched["batch"]) == (1, 3)
    # without the cache at batch 1 only; tokens/s counts every sequence's tokens
    assert "ours_recompute_tok_s" not in batched and batched["ours_cache_tok_s"] > 0 and batched["vs_hf"] > 0
    for r in (result, batched):  # where a step's time goes, in parts that add up to the whole
        for split in r["profile_ms_per_step"].values():
            parts = [v for k, v in split.items() if k != "total (profiled)"]
            assert abs(sum(parts) - split["total (profiled)"]) < 0.01 * split["total (profiled)"] + 0.01
            assert split["matrix products"] > 0
    assert out["memory_read_gb_s"] > 0
    assert result["weight_bytes"] == 4 * result["params"]
    assert result["size"] == "tiny" and result["new_tokens"] == 6
    assert result["params"] == result["hf_params"]
    for key in ("ours_cache_tok_s", "ours_cache_default_layout_tok_s", "ours_recompute_tok_s",
                "ours_recompute_default_layout_tok_s", "hf_cache_tok_s", "cache_speedup",
                "cache_speedup_default_layout", "vs_hf", "default_layout_vs_hf"):
        assert result[key] > 0, key
    assert result["kv_cache_bytes_per_token"] == result["kv_cache_bytes_if_mha"] == 2 * 6 * 256 * 4


def test_host_syncs_benchmark_counts_at_most_one_read_per_step_and_token(tmp_path):
    out = run_script("host_syncs.py", tmp_path=tmp_path)
    counts, n = out["counts"], out["new_tokens"]
    assert counts["public forward + backward"] == 1
    assert counts["Trainer.train_step (2 micro-batches)"] == 1
    for name, value in counts.items():
        if name.startswith("generate"):
            assert value <= n + 2, name  # the call's checks, and with stop one per token


@pytest.mark.parametrize("script,args,message", [
    ("train_budget.py", ["--steps", "0"], "argument --steps"),
    ("train_budget.py", ["--threads", "-1"], "argument --threads"),
    ("train_budget.py", ["--threads", "many"], "neither 'auto' nor an integer"),
    ("train_budget.py", ["--steps", "1", "--target", "0"], "--target 0.0: must be a loss > 0"),
    ("train_budget.py", ["--steps", "1", "--set", "lr"], "expected FIELD=VALUE"),
    ("train_budget.py", ["--steps", "1", "--set", "lr=-1"], "--set or --steps: lr=-1 must be a finite number > 0"),
    ("train_budget.py", ["--steps", "1", "--set", "d_model=7"], "--set: "),
    # a repeated --set adds to the first (argparse's default keeps only the last, silently)
    ("train_budget.py", ["--steps", "1", "--set", "d_model=7", "--set", "lr=1e-3"], "--set: "),
    ("train_budget.py", ["--steps", "1", "--recipe", "fastest", "--recipe", "ours"], "argument --recipe"),
    ("train_budget.py", ["--steps", "1", "--recipe", "record+samplin=random"], "unknown field 'samplin'"),
    ("train_budget.py", ["--steps", "1", "--recipe", "ours", "record+sampling=shuffle"],
     "sampling='shuffle' is not supported"),
    ("train_budget.py", ["--steps", "1", "--recipe", "fastest"], "argument --recipe"),
    ("train_budget.py", ["--steps", "1", "--seeds", "0"], "argument --seeds"),
    ("train_budget.py", ["--steps", "1", "--recipe", "baseline", "--compare"], "--compare trains the baseline next"),
    ("train_budget.py", ["--steps", "1", "--set", "optimizer=sgd"], "optimizer='sgd' is not supported"),
    ("generation.py", ["--repeats", "0"], "argument --repeats"),
    ("generation.py", ["--new-tokens", "-3"], "argument --new-tokens"),
    ("explorers.py", ["--repeats", "0"], "argument --repeats"),
])
def test_benchmark_flags_are_validated(tmp_path, script, args, message):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_chapter_9_prints_the_stored_train_budget_result():
    """The figures chapter 9 gives come from fundamentallm/results/ (a code cell loads and prints
    them), never from numbers typed into its prose."""
    stored = json.loads((RESULTS / "train_budget_python-docs.json").read_text())
    nb = json.loads((BENCHMARKS.parent / "book" / "09_training.ipynb").read_text())
    prose = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert 'results.load("train_budget_python-docs")' in code and 'bench[recipe]' in code
    for recipe in ("ours", "baseline"):
        assert f"{stored[recipe]['mean']:.3f}" not in prose, f"{recipe}'s loss typed into the prose"
    assert stored["corpus"] == "python-docs"


def test_records_are_the_stored_runs():
    """records.json (what the records page shows) is what `python benchmarks/record.py` writes
    from the saved train_budget runs it names: every entry copied from its run, its recipe the
    script's, the budget's rules the script's constants."""
    sys.path.insert(0, str(BENCHMARKS))
    from record import COPIED, records_table

    stored = json.loads((RESULTS / "records.json").read_text())
    sources = {e["corpus"]: e["source"] for e in stored["records"]}
    assert stored == records_table(sources, BENCHMARKS.parent)
    rules = stored["rules"]
    assert (rules["steps"], rules["batch_size"], rules["block_size"], rules["max_params"]) == (
        BUDGET["steps"], BUDGET["batch_size"], BUDGET["block_size"], BUDGET["max_params"])
    for entry in stored["records"]:
        run = json.loads((BENCHMARKS.parent / entry["source"]).read_text())
        assert run["seeds"] == entry["seeds"] and len(entry["seeds"]) >= rules["seeds"]
        assert all(entry[key] == run[entry["recipe"]][key] for key in COPIED)
        assert entry["baseline_val_loss"] == run["baseline"]["val_loss"]
        assert entry["model"] == RECIPES[entry["recipe"]]["model"]
        assert run["overrides"] == {} and entry["params"] <= rules["max_params"]


def test_cli_recipe_trains_what_the_benchmark_trains(tmp_path):
    """`python -m fundamentallm train --recipe record` is the benchmark's run of that recipe (the
    records page's): the same model, data, seed and settings give the same validation loss."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 300, encoding="utf-8")
    bench = run_script("train_budget.py", "--corpus", str(corpus), "--recipe", "record", "--steps", "3",
                       "--threads", "1", "--set", "compile=False", tmp_path=tmp_path)
    proc = subprocess.run([sys.executable, "-m", "fundamentallm", "train", "--recipe", "record", "--corpus",
                           str(corpus), "--steps", "3", "--out", str(tmp_path / "run"), "--no-progress",
                           "--no-compile"],  # compiled or not, the same on both sides (compiling: tests/test_training.py)
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FUNDAMENTALLM_DEVICE": "cpu"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    cli = json.loads(proc.stdout.strip().splitlines()[-1])
    assert cli["parameters"] == bench["record"]["params"]
    assert round(cli["val_loss"], 4) == bench["record"]["val_loss"][0]


def test_a_recipe_variant_is_the_recipe_with_its_overrides(tmp_path):
    """`--recipe NAME+FIELD=VALUE` trains NAME with that field changed, beside other recipes in one
    run (how a candidate is measured against the recipe it changes): the same loss as `--set`
    gives, and the first recipe's comparison with the variant in `versus`."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("To be, or not to be, that is the question.\n" * 300, encoding="utf-8")
    common = ("--corpus", str(corpus), "--steps", "3", "--threads", "1")
    both = run_script("train_budget.py", *common, "--recipe", "ours", "ours+lr=0.01+sampling='epoch'",
                      tmp_path=tmp_path)
    alone = run_script("train_budget.py", *common, "--recipe", "ours", "--set", "lr=0.01", "sampling=epoch",
                       tmp_path=tmp_path)
    variant = "ours+lr=0.01+sampling='epoch'"
    assert both["recipes"] == ["ours", variant] and set(both["versus"]) == {variant}
    assert both[variant]["val_loss"] == alone["ours"]["val_loss"] != both["ours"]["val_loss"]


def test_ablations_are_consistent():
    stored = json.loads((RESULTS / "ablations.json").read_text())
    for row in [stored["reference"], *stored["rows"]]:
        assert len(row["val_loss"]) == len(stored["seeds"]) == 3
        assert row["mean"] == pytest.approx(sum(row["val_loss"]) / 3, abs=1e-4)


def test_chapter_times_reports_each_notebook(tmp_path):
    import nbformat

    good, bad = tmp_path / "good.ipynb", tmp_path / "bad.ipynb"
    for path, code in ((good, "x = sum(i * i for i in range(2_000_000))"), (bad, "raise RuntimeError('planted')")):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(code)]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, path)
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "chapter_times.py"), str(good), str(bad),
                           "--budget", "1e9", "--save", str(tmp_path / "saved.json")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]  # a failing chapter is reported, and fails the run
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert list(out["seconds"]) == [str(good)] and out["seconds"][str(good)] > 0
    assert list(out["failed"]) == [str(bad)] and "planted" in out["failed"][str(bad)]
    assert out["over_budget"] == [] and out["budget_s"] == 1e9 and out["omp_num_threads"]
    # The kernel's CPU time (user + system): the loop above costs some.
    assert list(out["cpu_seconds"]) == [str(good)] and 0 < out["cpu_seconds"][str(good)]
    assert json.loads((tmp_path / "saved.json").read_text()) == out  # --save stores what it printed


def test_generation_benchmark_runs_at_the_tiny_gqa_size(tmp_path):
    out = run_script("generation.py", "--sizes", "tiny-gqa", "--new-tokens", "6", "--repeats", "1",
                     "--threads", "1", "--skip-recompute", "--batch", "1", tmp_path=tmp_path)
    (result,) = out["results"]
    assert result["params"] == result["hf_params"] and result["same_tokens_as_hf"]
    assert (result["num_heads"], result["num_kv_heads"]) == (8, 2)
    assert result["kv_cache_bytes_per_token"] * 4 == result["kv_cache_bytes_if_mha"] == 2 * 6 * 256 * 4
    assert result["vs_hf"] > 0


def test_tokenizer_training_and_memmap_rss_run(tmp_path):
    """Issue 28's two benchmarks, at toy sizes (their figures: benchmarks/README.md)."""
    out = run_script("tokenizer_training.py", "--mb", "0.05", "--vocab-size", "300", tmp_path=tmp_path)
    assert out["benchmark"] == "tokenizer_training" and out["vocab_size"] == 300
    assert out["seconds_per_mb"] > 0 and 0.04 < out["megabytes"] <= 0.05
    out = run_script("memmap_rss.py", "--sizes-mb", "0.3", "--steps", "1", "--workdir", str(tmp_path),
                     tmp_path=tmp_path)
    (row,) = out["results"]
    assert row["train_tokens"] > 200_000 and row["train"]["peak_rss_mb"] >= row["train"]["peak_anon_mb"] > 0
    assert not any(p.name.startswith("tmp") for p in tmp_path.iterdir())  # the corpus was deleted


def test_stored_results_ship_in_the_package_with_one_loader():
    """The results the chapters and the records page show are package data
    (fundamentallm/results/*.json, declared in pyproject.toml), read through one loader, so that
    a page run from the wheel (Colab) finds them; no page reads benchmarks' folder or ../."""
    from fundamentallm import results

    assert {"posttrain", "records", "ablations", "train_budget_python-docs"} <= set(results.names())
    assert results.load("posttrain") == json.loads((RESULTS / "posttrain.json").read_text())
    for bad in ("nope", "../posttrain", "posttrain.json"):
        with pytest.raises(ValueError, match="name must be one of .*posttrain"):
            results.load(bad)
    with pytest.raises(TypeError, match="name must be a str"):
        results.load(3)
    assert '"fundamentallm.results" = ["*.json"]' in (BENCHMARKS.parent / "pyproject.toml").read_text()
    for page in sorted((BENCHMARKS.parent / "book").glob("*.ipynb")):
        code = "".join("".join(c["source"]) for c in json.loads(page.read_text())["cells"]
                       if c["cell_type"] == "code")
        assert "benchmarks/results" not in code and '"benchmarks"' not in code, page.name


def test_scaling_report_refits_the_stored_sweep(tmp_path):
    """--report trains nothing: it refits the stored runs (a few bootstrap resamples here) and
    prints the exponents; the JSON is not rewritten without --save."""
    before = (RESULTS / "scaling.json").read_bytes()
    out = run_script("scaling.py", "--report", "--n-boot", "3", tmp_path=tmp_path)
    assert out["benchmark"] == "scaling" and out["runs"] >= 20 and out["cpu_s"] > 0
    assert 0 < out["a"] < 1.5 and out["a"] + out["b"] == pytest.approx(1.0)
    assert out["alpha"] > 0 and out["beta"] > 0 and out["E"] > 0
    assert (RESULTS / "scaling.json").read_bytes() == before


def test_inference_runs(tmp_path):
    out = run_script("inference.py", "--target", "nano", "--steps", "2", "--draft-steps", "2", "--tokens", "6",
                     "--no-big", "--repeats", "1", "--ks", "1", "2", "--drafts", "16x1", "--requests", "3",
                     tmp_path=tmp_path)
    assert out["benchmark"] == "inference" and set(out["speculative"]["16x1"]) >= {"1", "2", "parameters"}
    assert out["quantization"]["int8/row"]["ratio"] < 0.27 and out["quantization"]["int4/32 asym"]["ratio"] < 0.16
    assert out["paged"]["paged"] < out["paged"]["contiguous"]
    assert out["continuous_batching"]["outputs_equal_alone"] and "torchao" in str(out["torchao_int8"])
