"""The command line, end to end in a temporary directory (tiny model, few steps, no network)."""

import json
import os
import subprocess
import sys

import pytest

from fundamentallm.__main__ import main

TINY = ["--preset", "nano", "--steps", "4", "--batch-size", "4", "--block-size", "16", "--no-progress"]


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_train_generate_evaluate(corpus, tmp_path, capsys):
    assert main(["train", "--corpus", corpus, *TINY]) == 0
    out = capsys.readouterr().out
    metrics = last_json(out)
    assert metrics["command"] == "train" and metrics["steps"] == 4 and metrics["out"] == "runs/latest"
    assert metrics["val_loss"] > 0 and "step 4/4" in out
    assert {p.name for p in (tmp_path / "runs" / "latest").iterdir()} == {
        "model.safetensors", "checkpoint.json", "tokenizer.json", "trainer.pt", "manifest.json"}

    assert main(["generate", "--prompt", "def", "--max-new-tokens", "12", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("def") and last_json(lines[-1])["new_tokens"] == 12

    assert main(["evaluate"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("runs/latest: validation loss ")  # a sentence, then the JSON line
    result = last_json(out)
    assert result["val_loss"] == pytest.approx(metrics["val_loss"], rel=1e-5)  # same split, same loss
    assert result["windows"] == (result["val_tokens"] - 1) // 16


def test_train_with_bpe(corpus, tmp_path, capsys):
    args = ["train", "--corpus", corpus, "--tokenizer", "bpe", "--vocab-size", "300", "--out", "bpe", *TINY]
    assert main(args) == 0
    assert last_json(capsys.readouterr().out)["tokenizer"] == "bpe"
    assert json.loads((tmp_path / "bpe" / "tokenizer.json").read_text())["type"] == "ByteBPETokenizer"


def test_generate_runs_as_a_module_with_no_flags(corpus, tmp_path, capsys):
    assert main(["train", "--corpus", corpus, *TINY]) == 0
    capsys.readouterr()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "fundamentallm", "generate"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert last_json(done.stdout)["new_tokens"] == 200


def test_errors_are_reported_not_raised(corpus, tmp_path, capsys):
    assert main(["generate", "--checkpoint", str(tmp_path / "missing")]) == 2
    assert "not a checkpoint directory" in capsys.readouterr().err
    assert main(["train", "--corpus", "no-such-corpus", *TINY]) == 2
    assert "known corpora" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse names the flag and lists the presets
        main(["train", "--corpus", corpus, "--preset", "huge", "--steps", "1"])
    assert "argument --preset: invalid choice: 'huge'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--tokenizer", "word"])


def test_cli_choices_agree_with_the_package():
    """The parser keeps its own copies (so --help does not import torch); they must not drift."""
    from fundamentallm import __main__ as cli
    from fundamentallm import training

    assert cli.OPTIMIZERS == training.OPTIMIZERS and cli.PRECISIONS == training.PRECISIONS


def test_train_with_muon_and_bf16_is_saved_and_kept_on_resume(corpus, tmp_path, capsys):
    """--optimizer and --mixed-precision reach the Trainer, are saved with the run, and --resume
    keeps them and refuses to change them; fp16 on the CPU is a clear error, not a traceback."""
    from fundamentallm import load_checkpoint

    assert main(["train", "--corpus", corpus, "--optimizer", "muon", "--mixed-precision", "bf16",
                 "--device", "cpu", *TINY]) == 0
    capsys.readouterr()
    state = load_checkpoint(tmp_path / "runs" / "latest").trainer_state
    assert state["config"]["optimizer"] == "muon" and state["config"]["mixed_precision"] == "bf16"
    assert [g["use_muon"] for g in state["optimizer"]["param_groups"]] == [True, False, False]
    assert main(["train", "--resume", "--mixed-precision", "off", "--no-progress"]) == 2
    assert "--mixed-precision=off (saved: bf16)" in capsys.readouterr().err
    assert main(["train", "--resume", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["train", "--corpus", corpus, "--mixed-precision", "fp16", "--device", "cpu",
                 "--out", "fp16", *TINY]) == 2
    err = capsys.readouterr().err
    assert "mixed_precision='fp16' needs a CUDA device" in err and "Traceback" not in err


def test_every_flag_the_user_gives_wins_over_the_recipe(corpus, tmp_path, capsys):
    """A recipe sets the flags' defaults; a flag the user gives wins even where it equals the
    built-in default (--batch-size 32, --seed 0, --optimizer adamw), and the flags left alone keep
    the recipe's values: in the resolved configurations and in the run that trains."""
    from fundamentallm import load_checkpoint
    from fundamentallm.__main__ import parse_args
    from fundamentallm.recipes import BUDGET, RECIPES
    from fundamentallm.run import train_configs

    flags = ["--recipe", "record", "--batch-size", "32", "--seed", "0", "--optimizer", "adamw"]
    model, train = train_configs(parse_args(["train", *flags]), vocab_size=50)
    assert (train["batch_size"], train["seed"], train["optimizer"]) == (32, 0, "adamw")
    record = RECIPES["record"]
    assert train["lr"] == record["train"]["lr"] and train["max_steps"] == BUDGET["steps"]
    assert model == {"vocab_size": 50, "max_seq_len": BUDGET["block_size"], "dropout": 0.0, **record["model"]}
    assert main(["train", "--corpus", corpus, *flags, "--steps", "1", "--no-compile", "--device", "cpu",
                 "--no-progress"]) == 0
    capsys.readouterr()
    ckpt = load_checkpoint(tmp_path / "runs" / "latest")
    config = ckpt.trainer_state["config"]
    assert (config["batch_size"], config["seed"], config["optimizer"], config["lr"]) == (32, 0, "adamw",
                                                                                          record["train"]["lr"])
    assert ckpt.extra["args"]["batch_size"] == 32 and ckpt.config.d_model == record["model"]["d_model"]


def test_recipe_help_shows_the_defaults_it_applies():
    """`train --recipe NAME --help` shows the recipe's values as the flags' defaults, and says that
    a flag you give overrides them."""
    from fundamentallm.__main__ import _build_parser, _recipe_in
    from fundamentallm.recipes import RECIPES

    assert _recipe_in(["train", "--corpus", "x", "--recipe", "ours"]) == "ours"
    assert _recipe_in(["generate", "--recipe", "ours"]) is None
    parser = _build_parser("ours")
    train = next(a for a in parser._actions if a.dest == "command").choices["train"]
    text = " ".join(train.format_help().split())
    assert "--batch-size BATCH_SIZE sequences per step (default: 12)" in text
    assert f"peak learning rate (default: {RECIPES['ours']['train']['lr']})" in text
    assert "every flag you give overrides them" in text


def test_resume_refuses_a_given_flag_even_when_it_equals_the_default(corpus, capsys):
    """--resume tells a flag the user gave from one left alone by the command line, not by its
    value: `--seed 0` (the default) against a run saved with seed 3 is refused."""
    assert main(["train", "--corpus", corpus, *TINY, "--seed", "3"]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", "--seed", "0", "--no-progress"]) == 2
    assert "--seed=0 (saved: 3)" in capsys.readouterr().err
