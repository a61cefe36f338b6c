"""Checkpoints: safe formats, tied weights, exact resume in a new process, clear errors."""

import errno
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from fundamentallm import Transformer, TransformerClassifier, TransformerConfig
from fundamentallm.checkpoint import (
    CheckpointError,
    check_output_dir,
    load_checkpoint,
    read_meta,
    save_checkpoint,
)
from fundamentallm.tokenizers import CharacterTokenizer
from fundamentallm.training import TrainConfig

CFG = dict(vocab_size=16, d_model=32, num_heads=2, num_layers=1, max_seq_len=16, dropout=0.1)

# Shared by this process and the resuming subprocess: the same model, data and trainer config.
SETUP = """
import torch
from fundamentallm import Transformer, TransformerConfig
from fundamentallm.training import TrainConfig, Trainer

def make_trainer(optimizer="adamw", sampling="random"):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=16, d_model=32, num_heads=2, num_layers=1,
                                          max_seq_len=16, dropout=0.1))
    ids = torch.randint(16, (3000,), generator=torch.Generator().manual_seed(0))
    cfg = TrainConfig(max_steps=8, warmup_steps=2, batch_size=4, progress=False, device="cpu",
                      eval_interval=4, lr=3e-3, optimizer=optimizer, sampling=sampling)
    return Trainer(model, ids[:2500], ids[2500:], cfg)
"""


def make_trainer(optimizer="adamw", sampling="random"):
    namespace = {}
    exec(SETUP, namespace)  # noqa: S102 (our own constant source)
    return namespace["make_trainer"](optimizer, sampling)


@pytest.mark.parametrize("optimizer,sampling", [("adamw", "random"), ("muon", "random"), ("adamw", "epoch")])
def test_exact_resume_in_a_new_process(tmp_path, optimizer, sampling):
    full = make_trainer(optimizer, sampling)
    full.fit()  # 2N = 8 steps uninterrupted

    half = make_trainer(optimizer, sampling)
    half.fit(steps=4)  # N steps, then save
    tok = CharacterTokenizer.from_text("abc")
    save_checkpoint(tmp_path / "ckpt", half.model, tokenizer=tok, trainer=half, extra={"note": "half"})

    script = tmp_path / "resume.py"
    script.write_text(SETUP + textwrap.dedent(f"""
        from fundamentallm.checkpoint import CheckpointError, check_output_dir, load_checkpoint, save_checkpoint
        trainer = make_trainer({optimizer!r}, {sampling!r})
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
    assert resumed.trainer_state["config"]["optimizer"] == optimizer
    groups = resumed.trainer_state["optimizer"]["param_groups"]
    assert [g.get("use_muon") for g in groups] == ([True, False, False] if optimizer == "muon" else [None] * 2)


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


def test_trainer_file_is_read_only_when_asked_for(tmp_path, monkeypatch):
    """Generating needs the weights only: trainer.pt (optimizer moments) is neither hashed nor
    read until the training state is asked for."""
    model = small_model()
    save_checkpoint(tmp_path, model, optimizer=torch.optim.AdamW(model.parameters()), step=1)
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(a[0]) or real_load(*a, **k))
    ckpt = load_checkpoint(tmp_path)
    assert calls == []
    assert ckpt.trainer_state is None and len(calls) == 1  # read now (saved without a trainer)
    assert read_meta(tmp_path)["step"] == 1


def test_trainer_file_is_loaded_with_weights_only(tmp_path):
    torch.manual_seed(0)
    save_checkpoint(tmp_path, Transformer(TransformerConfig(**CFG)))
    torch.save({"rng": {}, "evil": TrainConfig()}, tmp_path / "trainer.pt")  # an arbitrary object
    with pytest.raises(CheckpointError, match="trainer.pt does not match the SHA-256"):
        load_checkpoint(tmp_path)  # the manifest catches the swap first
    with pytest.raises(ValueError, match="trainer.pt is corrupt or holds more than tensors"):
        _ = load_checkpoint(tmp_path, verify=False).trainer_state  # and weights_only refuses the object anyway


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
    with pytest.raises(CheckpointError, match="checkpoint.json does not match the SHA-256"):
        load_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="does not match the model: missing .*blocks.1"):
        load_checkpoint(tmp_path, verify=False)
    (tmp_path / "checkpoint.json").write_text("{truncated")
    with pytest.raises(ValueError, match="checkpoint.json is corrupt"):
        load_checkpoint(tmp_path, verify=False)
    save_checkpoint(tmp_path, model)
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors does not match"):
        load_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="model.safetensors is corrupt"):
        load_checkpoint(tmp_path, verify=False)
    with pytest.raises(FileNotFoundError, match="not a checkpoint directory"):
        load_checkpoint(tmp_path / "missing")


def test_save_rejects_bad_arguments(tmp_path):
    model = Transformer(TransformerConfig(**CFG))
    with pytest.raises(TypeError, match="JSON-serialisable"):
        save_checkpoint(tmp_path, model, extra={"x": object()})
    with pytest.raises(TypeError, match="config must be a TransformerConfig"):
        save_checkpoint(tmp_path, torch.nn.Linear(2, 2))



# --- Atomic, verified checkpoints (issue 15) ------------------------------------------------------

def small_model(seed=0):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(**CFG))


def same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_manifest_records_every_file_and_the_step(tmp_path):
    save_checkpoint(tmp_path / "c", small_model(), tokenizer=CharacterTokenizer.from_text("abc"), step=5)
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert manifest["step"] == 5
    assert set(manifest["files"]) == {"model.safetensors", "checkpoint.json", "tokenizer.json", "trainer.pt"}
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())
    assert [p.name for p in tmp_path.iterdir()] == ["c"]  # no staging or aside directory left


def test_a_flipped_bit_is_caught_and_the_file_named(tmp_path):
    model = small_model()
    save_checkpoint(tmp_path / "c", model, tokenizer=CharacterTokenizer.from_text("abcdef"), step=1)
    weights = tmp_path / "c" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-2] ^= 0x40  # an exponent bit of the last float32: a weight of ~1e36, still a valid file
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors does not match the SHA-256"):
        load_checkpoint(tmp_path / "c")
    save_checkpoint(tmp_path / "c", model, tokenizer=CharacterTokenizer.from_text("abcdef"), step=1)
    tok = tmp_path / "c" / "tokenizer.json"
    tok.write_text(tok.read_text().replace("abc", "abd"))  # a shifted vocabulary
    with pytest.raises(CheckpointError, match="tokenizer.json does not match"):
        load_checkpoint(tmp_path / "c")


def test_files_from_different_saves_are_refused(tmp_path):
    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    save_checkpoint(tmp_path / "a", model, optimizer=opt, step=2)
    torch.rand(1)  # the saved RNG state differs, as it would after more training
    save_checkpoint(tmp_path / "b", model, optimizer=opt, step=6)
    (tmp_path / "b" / "trainer.pt").write_bytes((tmp_path / "a" / "trainer.pt").read_bytes())
    with pytest.raises(CheckpointError, match="trainer.pt does not match"):
        _ = load_checkpoint(tmp_path / "b").trainer_state  # read (and verified) when asked for
    (tmp_path / "b" / "trainer.pt").unlink()
    with pytest.raises(CheckpointError, match="trainer.pt is missing"):
        load_checkpoint(tmp_path / "b")
    save_checkpoint(tmp_path / "c", model, step=3)
    CharacterTokenizer.from_text("ab").save(tmp_path / "c" / "tokenizer.json")  # not in the manifest
    with pytest.raises(CheckpointError, match="tokenizer.json is not in manifest.json"):
        load_checkpoint(tmp_path / "c")


def test_a_checkpoint_without_manifest_needs_verify_false(tmp_path):
    model = small_model()
    save_checkpoint(tmp_path / "c", model)
    (tmp_path / "c" / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="no manifest.json.*verify=False"):
        load_checkpoint(tmp_path / "c")
    assert same_weights(load_checkpoint(tmp_path / "c", verify=False).model, model)
    with pytest.raises(TypeError, match="verify"):
        load_checkpoint(tmp_path / "c", verify="no")


def test_a_missing_config_field_is_not_filled_with_its_default(tmp_path):
    save_checkpoint(tmp_path / "c", small_model())
    meta = json.loads((tmp_path / "c" / "checkpoint.json").read_text())
    del meta["config"]["rope_base"]
    (tmp_path / "c" / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"lacks field\(s\) \['rope_base'\]"):
        load_checkpoint(tmp_path / "c", verify=False)


def test_rope_style_is_saved_and_older_checkpoints_load_as_half(tmp_path):
    cfg = TransformerConfig(vocab_size=16, d_model=16, num_heads=2, num_layers=1, max_seq_len=8,
                            pos_encoding="rope", rope_style="interleaved")
    save_checkpoint(tmp_path / "c", Transformer(cfg))
    meta = json.loads((tmp_path / "c" / "checkpoint.json").read_text())
    assert meta["config"]["rope_style"] == "interleaved"
    assert load_checkpoint(tmp_path / "c").model.rope.style == "interleaved"
    del meta["config"]["rope_style"]  # a checkpoint written before the field existed
    (tmp_path / "c" / "checkpoint.json").write_text(json.dumps(meta))
    assert load_checkpoint(tmp_path / "c", verify=False).config.rope_style == "half"


def test_non_finite_weights_and_a_too_small_vocabulary_are_refused(tmp_path):
    model = small_model()
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("nan")
    save_checkpoint(tmp_path / "nan", model)
    with pytest.raises(CheckpointError, match="non-finite values.*token_embedding"):
        load_checkpoint(tmp_path / "nan")
    big = CharacterTokenizer.from_text("abcdefghijklmnopqrstuvwxyz")  # 28 ids, the model has 16
    with pytest.raises(ValueError, match="tokenizer.vocab_size=28 exceeds the model's vocab_size=16"):
        save_checkpoint(tmp_path / "tok", small_model(), tokenizer=big)
    with pytest.raises(TypeError, match="tokenizer must be"):
        save_checkpoint(tmp_path / "tok", small_model(), tokenizer="abc")
    with pytest.raises(ValueError, match="step=-1"):
        save_checkpoint(tmp_path / "tok", small_model(), step=-1)


def test_output_paths_are_checked(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a directory"):
        save_checkpoint(tmp_path / "file", small_model())
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "thesis.tex").write_text("precious")
    with pytest.raises(ValueError, match="non-empty directory that is not a checkpoint"):
        save_checkpoint(tmp_path / "notes", small_model())
    assert (tmp_path / "notes" / "thesis.tex").read_text() == "precious"
    with pytest.raises(ValueError, match="cannot create its parent"):
        check_output_dir(tmp_path / "file" / "sub" / "ckpt")
    if os.geteuid() != 0:  # root ignores permissions
        (tmp_path / "ro").mkdir(mode=0o500)
        with pytest.raises(ValueError, match="not writable"):
            check_output_dir(tmp_path / "ro" / "ckpt")
    with pytest.raises(TypeError, match="path"):
        check_output_dir("")


def test_a_full_disk_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    import fundamentallm.checkpoint as ckpt_module

    old = small_model(0)
    save_checkpoint(tmp_path / "c", old, step=1)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt_module.torch, "save", full_disk)
    with pytest.raises(OSError, match="No space left on device.*previous checkpoint there.*unchanged"):
        save_checkpoint(tmp_path / "c", small_model(1), step=2)
    monkeypatch.undo()
    loaded = load_checkpoint(tmp_path / "c")
    assert loaded.step == 1 and same_weights(loaded.model, old)
    assert [p.name for p in tmp_path.iterdir()] == ["c"]  # the half-written copy was removed


KILL_CHILD = """
import os, signal, sys
import torch
import fundamentallm.checkpoint as ck
from fundamentallm import Transformer, TransformerConfig

def model(seed):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(vocab_size=16, d_model=32, num_heads=2, num_layers=1, max_seq_len=16))

path, phase = sys.argv[1], sys.argv[2]
ck.save_checkpoint(path, model(1), step=1)
die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
if phase == "writing":  # in the middle of writing the new files
    ck.torch.save = die
elif phase == "between-renames":  # the old checkpoint renamed aside, the new one not yet in place
    real = os.replace
    calls = []
    def replace(src, dst):
        calls.append(src)
        if len(calls) == 2:
            die()
        real(src, dst)
    ck.os.replace = replace
elif phase == "before-cleanup":  # the new checkpoint in place, the old one not yet deleted
    import fundamentallm.atomic as atomic
    atomic._fsync = lambda p: die() if str(p) == os.path.dirname(os.path.abspath(path)) else None
ck.save_checkpoint(path, model(2), step=2)
print("not killed")
"""


@pytest.mark.parametrize("phase,step", [("writing", 1), ("between-renames", 1), ("before-cleanup", 2)])
def test_sigkill_during_a_save_leaves_a_loadable_checkpoint(tmp_path, phase, step):
    script = tmp_path / "child.py"
    script.write_text(KILL_CHILD)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "run" / "ckpt"), phase],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr
    if phase == "between-renames":  # only the old checkpoint, renamed aside, is complete
        with pytest.warns(UserWarning, match="a save was interrupted"):
            loaded = load_checkpoint(tmp_path / "run" / "ckpt")
    else:
        loaded = load_checkpoint(tmp_path / "run" / "ckpt")
    assert loaded.step == step
    save_checkpoint(tmp_path / "run" / "ckpt", small_model(), step=3)  # and the next save cleans up
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["ckpt"]
    assert load_checkpoint(tmp_path / "run" / "ckpt").step == 3


LOOP_CHILD = """
import sys
import torch
from fundamentallm import Transformer, TransformerConfig
from fundamentallm.checkpoint import save_checkpoint

torch.manual_seed(0)
model = Transformer(TransformerConfig(vocab_size=64, d_model=128, num_heads=2, num_layers=2, max_seq_len=64))
step = 0
while True:
    save_checkpoint(sys.argv[1], model, step=step)
    print(step, flush=True)
    step += 1
"""


def test_sigkill_at_random_moments_of_repeated_saves(tmp_path):
    """Kill a process that saves in a loop at random moments: the checkpoint always loads."""
    script = tmp_path / "loop.py"
    script.write_text(LOOP_CHILD)
    rng = random.Random(0)
    for trial in range(3):
        path = tmp_path / f"trial{trial}" / "ckpt"
        child = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "0"  # the first save is complete
            for _ in range(rng.randrange(1, 8)):
                child.stdout.readline()
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
            child.stdout.close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the kill may fall between the two renames
            assert load_checkpoint(path).step >= 0


def test_a_truncated_trainer_file_is_named(tmp_path):
    save_checkpoint(tmp_path / "c", small_model(), step=1)
    blob = (tmp_path / "c" / "trainer.pt").read_bytes()
    (tmp_path / "c" / "trainer.pt").write_bytes(blob[:100])
    with pytest.raises(CheckpointError, match="trainer.pt does not match"):
        load_checkpoint(tmp_path / "c")
    with pytest.raises(CheckpointError, match="trainer.pt is corrupt"):  # not OSError [Errno 22]
        _ = load_checkpoint(tmp_path / "c", verify=False).trainer_state


def test_a_read_only_parent_is_found_by_a_real_write(tmp_path, monkeypatch):
    """os.access says yes to root and on read-only mounts; the probe directory is a real write."""
    from pathlib import Path

    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if ".probe-" in self.name:
            raise PermissionError(13, "Permission denied")
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(ValueError, match="ro' is not writable \\(Permission denied\\)"):
        save_checkpoint(tmp_path / "ro" / "ckpt", small_model())
