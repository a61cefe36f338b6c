"""Checkpoints: safe formats, tied weights, exact resume in a new process, clear errors."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from fundamentallm import Transformer, TransformerClassifier, TransformerConfig
from fundamentallm.checkpoint import load_checkpoint, save_checkpoint
from fundamentallm.tokenizers import CharacterTokenizer
from fundamentallm.training import TrainConfig

CFG = dict(vocab_size=16, d_model=32, num_heads=2, num_layers=1, max_seq_len=16, dropout=0.1)

# Shared by this process and the resuming subprocess: the same model, data and trainer config.
SETUP = """
import torch
from fundamentallm import Transformer, TransformerConfig
from fundamentallm.training import TrainConfig, Trainer

def make_trainer():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=16, d_model=32, num_heads=2, num_layers=1,
                                          max_seq_len=16, dropout=0.1))
    ids = torch.randint(16, (3000,), generator=torch.Generator().manual_seed(0))
    cfg = TrainConfig(max_steps=8, warmup_steps=2, batch_size=4, progress=False, device="cpu",
                      eval_interval=4, lr=3e-3)
    return Trainer(model, ids[:2500], ids[2500:], cfg)
"""


def make_trainer():
    namespace = {}
    exec(SETUP, namespace)  # noqa: S102 (our own constant source)
    return namespace["make_trainer"]()


def test_exact_resume_in_a_new_process(tmp_path):
    full = make_trainer()
    full.fit()  # 2N = 8 steps uninterrupted

    half = make_trainer()
    half.fit(steps=4)  # N steps, then save
    tok = CharacterTokenizer.from_text("abc")
    save_checkpoint(tmp_path / "ckpt", half.model, tokenizer=tok, trainer=half, extra={"note": "half"})

    script = tmp_path / "resume.py"
    script.write_text(SETUP + textwrap.dedent(f"""
        from fundamentallm.checkpoint import load_checkpoint, save_checkpoint
        trainer = make_trainer()
        ckpt = load_checkpoint({str(tmp_path / "ckpt")!r}, model=trainer.model, trainer=trainer)
        assert ckpt.step == 4 and ckpt.extra == {{"note": "half"}} and ckpt.tokenizer.vocab_size == 5
        trainer.fit()
        save_checkpoint({str(tmp_path / "resumed")!r}, trainer.model, trainer=trainer)
    """))
    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path)

    resumed = load_checkpoint(tmp_path / "resumed")
    for name, p in full.model.state_dict().items():
        assert torch.equal(p, resumed.model.state_dict()[name]), name
    history = resumed.trainer_state["history"]
    for key in ("step", "lr", "train_loss", "grad_norm", "tokens_seen", "val_loss", "val_loss_step"):
        assert history[key] == full.history[key], key
    assert resumed.trainer_state["step"] == 8


def test_round_trip_with_tied_weights_and_fresh_model(tmp_path):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**CFG))
    save_checkpoint(tmp_path, model)
    ckpt = load_checkpoint(tmp_path)
    assert isinstance(ckpt.model, Transformer) and ckpt.config == model.config
    assert ckpt.model.lm_head.weight is ckpt.model.token_embedding.weight  # still tied
    x = torch.randint(16, (2, 8))
    model.eval()
    ckpt.model.eval()
    assert torch.equal(model(x)[0], ckpt.model(x)[0])
    assert ckpt.tokenizer is None and ckpt.step is None


def test_classifier_round_trip(tmp_path):
    cfg = TransformerConfig(**{**CFG, "causal": False})
    model = TransformerClassifier(cfg, num_classes=7, pooling="mean")
    save_checkpoint(tmp_path, model, step=3)
    ckpt = load_checkpoint(tmp_path)
    assert isinstance(ckpt.model, TransformerClassifier) and ckpt.model.num_classes == 7
    assert ckpt.step == 3
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ckpt.model.parameters()))


def test_optimizer_and_rng_restore(tmp_path):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**CFG))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(16, (2, 8)), torch.randint(16, (2, 8)))[1].backward()
    opt.step()
    save_checkpoint(tmp_path, model, optimizer=opt)
    expected = torch.rand(3)
    other = torch.optim.AdamW(model.parameters(), lr=1e-3)
    load_checkpoint(tmp_path, model=model, optimizer=other, restore_rng=True)
    assert torch.equal(torch.rand(3), expected)
    for a, b in zip(opt.state_dict()["state"].values(), other.state_dict()["state"].values()):
        assert torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])


def test_trainer_file_is_loaded_with_weights_only(tmp_path):
    torch.manual_seed(0)
    save_checkpoint(tmp_path, Transformer(TransformerConfig(**CFG)))
    torch.save({"rng": {}, "evil": TrainConfig()}, tmp_path / "trainer.pt")  # an arbitrary object
    with pytest.raises(ValueError, match="trainer.pt is corrupt or holds more than tensors"):
        load_checkpoint(tmp_path)


def test_corrupt_and_mismatched_checkpoints_are_reported(tmp_path):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**CFG))
    save_checkpoint(tmp_path, model)
    other = Transformer(TransformerConfig(**{**CFG, "d_model": 64}))
    with pytest.raises(ValueError, match="different config.*d_model"):
        load_checkpoint(tmp_path, model=other)
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    meta["config"]["num_layers"] = 2
    (tmp_path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="does not match the model: missing .*blocks.1"):
        load_checkpoint(tmp_path)
    (tmp_path / "checkpoint.json").write_text("{truncated")
    with pytest.raises(ValueError, match="checkpoint.json is corrupt"):
        load_checkpoint(tmp_path)
    save_checkpoint(tmp_path, model)
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="model.safetensors is corrupt"):
        load_checkpoint(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a checkpoint directory"):
        load_checkpoint(tmp_path / "missing")


def test_save_rejects_bad_arguments(tmp_path):
    model = Transformer(TransformerConfig(**CFG))
    with pytest.raises(TypeError, match="JSON-serialisable"):
        save_checkpoint(tmp_path, model, extra={"x": object()})
    with pytest.raises(TypeError, match="config must be a TransformerConfig"):
        save_checkpoint(tmp_path, torch.nn.Linear(2, 2))
