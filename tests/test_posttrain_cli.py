"""``python -m fundamentallm sft | dpo | grpo``: the same progress, Ctrl-C/resume, exit codes and
error behaviour as ``train`` (run in-process through ``fundamentallm.__main__.main``)."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from fundamentallm import CharacterTokenizer, Transformer, TransformerConfig
from fundamentallm import posttrain as pt
from fundamentallm.__main__ import main
from fundamentallm.checkpoint import load_checkpoint, save_checkpoint


@pytest.fixture
def base(tmp_path):
    tok = CharacterTokenizer("0123456789+=\n")  # no reserved symbols: `sft` adds them
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=tok.vocab_size, d_model=32, num_heads=4, num_layers=1,
                                          max_seq_len=16, pos_encoding="rope", norm="rmsnorm", bias=False))
    save_checkpoint(tmp_path / "base", model, tokenizer=tok)
    return tmp_path


def _run(args, capsys):
    code = main(args + ["--no-progress"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_sft_then_grpo_and_dpo(base, capsys):
    code, out, err = _run(["sft", "--checkpoint", str(base / "base"), "--out", str(base / "sft"), "--steps", "3",
                           "--batch-size", "8"], capsys)
    assert code == 0, err
    assert "added the reserved symbols" in err
    metrics = json.loads(out.strip().splitlines()[-1])
    assert metrics["command"] == "sft" and metrics["steps"] == 3
    ckpt = load_checkpoint(base / "sft")
    pt.ChatTemplate(ckpt.tokenizer)  # the saved tokenizer holds the template's tokens
    code, out, err = _run(["grpo", "--checkpoint", str(base / "sft"), "--out", str(base / "grpo"), "--steps", "2",
                           "--batch-size", "2", "--group-size", "4"], capsys)
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["command"] == "grpo"
    code, out, err = _run(["dpo", "--checkpoint", str(base / "sft"), "--out", str(base / "dpo"), "--steps", "2",
                           "--questions", "5", "--samples", "2"], capsys)
    assert code in (0, 2), err  # 2 only when no sampled answer of an untrained model was right
    if code == 2:
        assert "nothing to prefer" in err


def test_reversed_answers_train_and_are_required_of_the_next_stage(base, capsys):
    code, out, err = _run(["sft", "--checkpoint", str(base / "base"), "--out", str(base / "sft"), "--steps", "2",
                           "--batch-size", "4", "--reversed-answers"], capsys)
    assert code == 0, err
    assert load_checkpoint(base / "sft").extra["args"]["reversed_answers"] is True
    code, out, err = _run(["grpo", "--checkpoint", str(base / "sft"), "--out", str(base / "grpo"), "--steps", "1",
                           "--batch-size", "2", "--group-size", "2"], capsys)
    assert code == 2 and "--reversed-answers" in err
    code, out, err = _run(["grpo", "--checkpoint", str(base / "sft"), "--out", str(base / "grpo"), "--steps", "1",
                           "--batch-size", "2", "--group-size", "2", "--reversed-answers"], capsys)
    assert code == 0, err


def test_lora_sft_saves_a_plain_loadable_model(base, capsys):
    code, out, err = _run(["sft", "--checkpoint", str(base / "base"), "--out", str(base / "lora"), "--steps", "2",
                           "--batch-size", "4", "--lora-rank", "2"], capsys)
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["trainable_parameters"] < 2000
    assert isinstance(load_checkpoint(base / "lora").model, Transformer)
    code, _, err = _run(["sft", "--out", str(base / "lora"), "--resume"], capsys)
    assert code == 2 and "LoRA" in err


def test_ctrl_c_saves_and_resume_continues_bit_for_bit(base, capsys, monkeypatch):
    args = ["sft", "--checkpoint", str(base / "base"), "--steps", "4", "--batch-size", "8", "--save-interval", "0"]
    assert _run(args + ["--out", str(base / "whole")], capsys)[0] == 0
    original = pt.train_sft

    def interrupted(*a, on_step=None, **k):
        def step(n, m):
            if n == 2:
                os.kill(os.getpid(), signal.SIGINT)  # the handler sets a flag; the step finishes
            on_step(n, m)
        return original(*a, on_step=step, **k)

    monkeypatch.setattr(pt, "train_sft", interrupted)
    code, _, err = _run(args + ["--out", str(base / "cut")], capsys)
    assert code == 130 and "--resume" in err
    assert load_checkpoint(base / "cut").step == 2
    monkeypatch.setattr(pt, "train_sft", original)
    code, out, err = _run(["sft", "--out", str(base / "cut"), "--resume"], capsys)
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["resumed_from"] == 2
    whole, cut = load_checkpoint(base / "whole").model, load_checkpoint(base / "cut").model
    for (name, a), b in zip(whole.state_dict().items(), cut.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("args,match", [
    (["grpo", "--group-size", "1"], "group_size=1"),
    (["dpo", "--beta", "0"], "--beta: 0 must be"),
    (["grpo", "--kl-coef", "-1"], "argument --kl-coef: -1 must be a finite number >= 0"),  # before any work
    (["grpo", "--checkpoint", "{base}/base"], "lacks the chat template's reserved symbols"),
    (["sft", "--checkpoint", "{base}/missing"], "missing"),
    (["sft", "--resume"], "holds no checkpoint"),
    (["sft", "--resume", "--force"], "contradict"),
])
def test_bad_input_exits_2_naming_the_parameter(base, capsys, args, match):
    args = [a.replace("{base}", str(base)) for a in args]
    if args[0] != "sft" and "--checkpoint" not in args:
        assert _run(["sft", "--checkpoint", str(base / "base"), "--out", str(base / "sft"), "--steps", "1",
                     "--batch-size", "2"], capsys)[0] == 0
        args += ["--checkpoint", str(base / "sft")]
    if "--checkpoint" not in args:
        args += ["--checkpoint", str(base / "base")]
    try:
        code, _, err = _run(args + ["--out", str(base / "out"), "--steps", "1"], capsys)
    except SystemExit as exit_:  # argparse rejects a bad value before anything runs
        code, err = exit_.code, capsys.readouterr().err
    assert code == 2
    assert match in err
