"""The command line under interruption, divergence and bad input (issue 15; issue 13's CLI items).

Every run is tiny (the nano preset, 16-token windows, a few steps). tests/README.md lists the
probes these tests cover.
"""

import argparse
import json
import os
import signal
import subprocess
import sys

import pytest
import torch

from fundamentallm.__main__ import _build_parser, main
from fundamentallm.checkpoint import load_checkpoint
from fundamentallm.doctor import notebook_imports, report

TINY = ["--preset", "nano", "--batch-size", "4", "--block-size", "16", "--no-progress"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
       "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(__file__)),
                                                   os.environ.get("PYTHONPATH")]))}


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_ctrl_c_saves_and_resume_continues_bit_for_bit(corpus, tmp_path, capsys):
    """A real SIGINT to a training subprocess, then --resume in this process, equals one run."""
    args = ["train", "--corpus", corpus, *TINY, "--steps", "40", "--eval-interval", "1", "--save-interval", "0"]
    child = subprocess.Popen([sys.executable, "-m", "fundamentallm", *args, "--out", "cut"], cwd=tmp_path,
                             env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in child.stdout:
            if line.startswith("step 3/40"):
                child.send_signal(signal.SIGINT)
                break
        out, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, err
    assert "interrupted: saved step" in err and "--resume --out cut" in err and "Traceback" not in err
    stopped = load_checkpoint(tmp_path / "cut").step
    assert 3 <= stopped < 40

    assert main(["train", "--resume", "--out", "cut", "--no-progress"]) == 0
    assert last_json(capsys.readouterr().out)["resumed_from"] == stopped
    assert main([*args, "--out", "full"]) == 0
    resumed, full = load_checkpoint(tmp_path / "cut"), load_checkpoint(tmp_path / "full")
    assert resumed.step == full.step == 40
    for name, tensor in full.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
    for key in ("train_loss", "grad_norm", "lr", "val_loss", "val_loss_step", "tokens_seen"):
        assert resumed.trainer_state["history"][key] == full.trainer_state["history"][key], key


def test_interval_checkpoints_and_refusing_to_overwrite_another_run(corpus, tmp_path, capsys):
    assert main(["train", "--corpus", corpus, *TINY, "--steps", "6", "--save-interval", "2"]) == 0
    capsys.readouterr()
    assert main(["train", "--corpus", corpus, *TINY, "--steps", "8"]) == 2
    assert "already holds a run (step 6" in capsys.readouterr().err
    assert main(["train", "--resume", "--steps", "9"]) == 2
    assert "--steps=9 (saved: 6)" in capsys.readouterr().err
    assert main(["train", "--resume", "--force"]) == 2
    assert "contradict" in capsys.readouterr().err
    assert main(["train", "--resume", "--out", "nothing-here"]) == 2
    assert "holds no checkpoint to continue" in capsys.readouterr().err
    assert main(["train", "--corpus", corpus, *TINY, "--steps", "3", "--force"]) == 0
    assert load_checkpoint(tmp_path / "runs" / "latest").step == 3


def test_divergence_exits_1_and_keeps_the_last_good_checkpoint(corpus, tmp_path, capsys):
    code = main(["train", "--corpus", corpus, *TINY, "--steps", "20", "--lr", "1e6", "--save-interval", "1"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "training diverged at step" in err and "lr=" in err and "smaller lr" in err
    assert "the last good checkpoint is runs/latest (step" in err
    ckpt = load_checkpoint(tmp_path / "runs" / "latest")  # loads: its weights are finite
    assert all(torch.isfinite(p).all() for p in ckpt.model.parameters())


def test_the_output_path_is_checked_before_training(corpus, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(["train", "--corpus", corpus, *TINY, "--steps", "2", "--out", "afile"]) == 2
    err = capsys.readouterr().err
    assert "is not a directory" in err and "step" not in err  # before the first step
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    assert main(["train", "--corpus", corpus, *TINY, "--steps", "2", "--out", "notes"]) == 2
    assert "not a checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("argv,flag", [
    (["train", "--steps", "-5"], "--steps"), (["train", "--steps", "0"], "--steps"),
    (["train", "--lr", "inf"], "--lr"), (["train", "--lr", "nan"], "--lr"), (["train", "--lr", "0"], "--lr"),
    (["train", "--batch-size", "0"], "--batch-size"), (["train", "--dropout", "1"], "--dropout"),
    (["train", "--val-fraction", "0"], "--val-fraction"), (["train", "--val-fraction", "1.5"], "--val-fraction"),
    (["train", "--warmup-steps", "-1"], "--warmup-steps"), (["train", "--save-interval", "-2"], "--save-interval"),
    (["train", "--block-size", "0"], "--block-size"), (["train", "--preset", "huge"], "--preset"),
    (["train", "--seed", "-1"], "--seed"), (["train", "--eval-interval", "x"], "--eval-interval"),
    (["generate", "--max-new-tokens", "1e11"], "--max-new-tokens"), (["generate", "--temperature", "0"], "--temperature"),
    (["generate", "--top-p", "1.5"], "--top-p"), (["generate", "--top-k", "0"], "--top-k"),
    (["evaluate", "--val-fraction", "0"], "--val-fraction"), (["evaluate", "--batch-size", "-1"], "--batch-size"),
])
def test_bad_flags_are_rejected_by_name(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_warmup_longer_than_the_run_and_eval_interval_zero(corpus, tmp_path, capsys):
    assert main(["train", "--corpus", corpus, *TINY, "--steps", "4", "--warmup-steps", "9"]) == 2
    assert "--warmup-steps=9 must not exceed --steps=4" in capsys.readouterr().err
    assert main(["train", "--corpus", corpus, *TINY, "--steps", "3", "--eval-interval", "0"]) == 0
    history = load_checkpoint(tmp_path / "runs" / "latest").trainer_state["history"]
    assert history["val_loss_step"] == [3]  # 0 means: only at the end (not replaced by a default)


def test_generate_from_a_nan_model_and_a_mismatched_tokenizer_fail_clearly(corpus, tmp_path, capsys):
    from fundamentallm.checkpoint import save_checkpoint
    from fundamentallm.tokenizers import CharacterTokenizer

    assert main(["train", "--corpus", corpus, *TINY, "--steps", "2"]) == 0
    ckpt = load_checkpoint(tmp_path / "runs" / "latest")
    with torch.no_grad():
        ckpt.model.lm_head.weight[0, 0] = float("nan")
    save_checkpoint(tmp_path / "nan", ckpt.model, tokenizer=ckpt.tokenizer)
    capsys.readouterr()
    assert main(["generate", "--checkpoint", "nan", "--greedy"]) == 2
    assert "non-finite values" in capsys.readouterr().err
    save_checkpoint(tmp_path / "small", load_checkpoint(tmp_path / "runs" / "latest").model,
                    tokenizer=CharacterTokenizer.from_text("ab"), extra={"corpus": corpus})
    assert main(["evaluate", "--checkpoint", "small"]) == 2
    assert "the tokenizer has 4 tokens but the model" in capsys.readouterr().err


def test_help_is_instant_and_shows_every_default():
    code = "import sys\nfrom fundamentallm.__main__ import _build_parser\n_build_parser().format_help()\n" \
           "print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr  # torch is imported only inside the commands
    parser = _build_parser()
    subparsers = dict(next(a for a in parser._actions if a.dest == "command").choices)
    for name, sub in list(subparsers.items()):  # a command with actions of its own (record try): each action
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                subparsers.update({f"{name} {verb}": p for verb, p in action.choices.items()})
                del subparsers[name]
    for name, sub in subparsers.items():
        text = sub.format_help()
        for action in sub._actions:
            if action.dest != "help":
                assert action.help, f"{name} {action.option_strings} has no help"
                shown = "a newline" if action.default == "\n" else action.default
                assert f"(default: {shown})" in " ".join(text.split()), (name, action.dest)
    assert ":class:" not in parser.format_help() and "``" not in parser.format_help()


def test_progress_lines_and_time_estimate(corpus, capsys):
    assert main(["train", "--corpus", corpus, *TINY, "--steps", "8", "--eval-interval", "4"]) == 0
    out = capsys.readouterr().out
    assert "left for 3 steps" in out and "s/step, from the first 5" in out
    assert "step 4/8" in out and "step 8/8" in out


def test_doctor_reports_versions_and_chapter_imports(tmp_path, capsys):
    nb = {"cells": [
        {"cell_type": "code", "source": ["try:\n", "    import fundamentallm\n", "except ImportError:\n",
                                         "    !pip install fundamentallm\n"]},
        {"cell_type": "code", "source": ["%matplotlib inline\n", "import numpy as np\n",
                                         "from no_such_module_xyz.sub import thing\n"]},
        {"cell_type": "markdown", "source": ["import notcode"]},
    ]}
    (tmp_path / "01_x.ipynb").write_text(json.dumps(nb))
    assert notebook_imports(tmp_path / "01_x.ipynb") == ["fundamentallm", "numpy", "no_such_module_xyz"]
    result = report(str(tmp_path))
    assert result["chapters"] == {"01_x.ipynb": ["no_such_module_xyz"]} and not result["ok"]
    assert result["packages"]["torch"] == torch.__version__.split("+")[0] or result["packages"]["torch"]
    assert main(["doctor", "--book", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "MISSING: no_such_module_xyz" in out and "device" in out and "Python" in out
    assert last_json(out)["command"] == "doctor"


def test_unseen_prompt_characters_warn_and_a_tiny_split_is_reported(corpus, tmp_path, capsys):
    assert main(["train", "--corpus", corpus, *TINY, "--steps", "2"]) == 0
    capsys.readouterr()
    assert main(["generate", "--prompt", "déf", "--max-new-tokens", "3"]) == 0
    assert "never saw, read as <unk>: ['é']" in capsys.readouterr().err
    assert main(["evaluate", "--val-fraction", "0.001"]) == 2
    assert "fewer than one window" in capsys.readouterr().err


def test_ctrl_c_outside_the_training_loop_exits_130_without_a_traceback(monkeypatch, capsys):
    import fundamentallm.__main__ as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_doctor", interrupted)
    assert main(["doctor"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted (Ctrl-C); checkpoints saved before it are intact"


def test_resume_finds_a_checkpoint_a_kill_left_aside(corpus, tmp_path, capsys):
    assert main(["train", "--corpus", corpus, *TINY, "--steps", "6", "--save-interval", "2"]) == 0
    full = load_checkpoint(tmp_path / "runs" / "latest")
    # A kill between a save's two renames leaves only the old checkpoint, renamed aside:
    (tmp_path / "runs" / "latest").rename(tmp_path / "runs" / ".latest.previous")
    with pytest.warns(UserWarning, match="a save was interrupted"):
        assert main(["train", "--resume", "--no-progress"]) == 0
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["latest"]
    again = load_checkpoint(tmp_path / "runs" / "latest")
    assert again.step == 6 and all(torch.equal(a, b) for a, b in zip(
        full.model.state_dict().values(), again.model.state_dict().values()))
