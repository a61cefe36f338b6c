"""The GPU code paths, exercised on a CPU-only machine: the device switch reaches the Trainer,
and the Trainer's autocast path (bf16 on CUDA) runs, here with the CPU's opt-in bf16 autocast."""

import math

import pytest
import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.training import TrainConfig, Trainer


def _model(seed=0):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(vocab_size=16, d_model=32, num_heads=2, num_layers=1, max_seq_len=16))


def _data():
    return torch.randint(16, (2000,), generator=torch.Generator().manual_seed(0))


def test_trainer_follows_the_device_switch(monkeypatch):
    """TrainConfig(device="auto") resolves through get_device: FUNDAMENTALLM_DEVICE=meta puts the
    model on the meta device (shapes only), as =cuda would on a GPU runtime."""
    monkeypatch.setenv("FUNDAMENTALLM_DEVICE", "meta")
    trainer = Trainer(_model(), _data(), config=TrainConfig(max_steps=2, warmup_steps=0, batch_size=4,
                                                                  progress=False))
    assert trainer.device == torch.device("meta")
    assert all(p.device.type == "meta" for p in trainer.model.parameters())
    assert trainer.amp_dtype is None  # "auto": mixed precision on CUDA only


def test_cpu_bf16_autocast_through_the_config():
    """mixed_precision="bf16" is opt-in on the CPU (the branch a CUDA runtime takes by default):
    losses stay finite, weights stay float32, and the curve stays within bf16 rounding of
    float32's."""
    cfg = dict(max_steps=8, batch_size=4, warmup_steps=2, lr=3e-3, progress=False, device="cpu", seed=0)
    full = Trainer(_model(), _data(), config=TrainConfig(**cfg)).fit()
    mixed = Trainer(_model(), _data(), config=TrainConfig(mixed_precision="bf16", **cfg))
    assert mixed.amp_dtype == torch.bfloat16 and mixed.scaler is None
    history = mixed.fit()
    assert all(math.isfinite(v) for v in history["train_loss"])
    assert all(p.dtype == torch.float32 for p in mixed.model.parameters())
    # bf16 keeps 8 significant bits (eps 2^-8 = 0.4%): a loss of ~2.8 moves by a few hundredths
    for a, b in zip(full["train_loss"], history["train_loss"]):
        assert abs(a - b) <= 0.05 * abs(a), (full["train_loss"], history["train_loss"])
    assert history["train_loss"] != full["train_loss"]  # the autocast path really ran
    # "auto" and "off" stay float32 on the CPU
    for mode in ("auto", "off"):
        assert Trainer(_model(), _data(), config=TrainConfig(mixed_precision=mode, **cfg)).amp_dtype is None


@pytest.mark.parametrize("native", [True, False])
def test_bf16_native_follows_the_hardware(monkeypatch, native):
    """mixed_precision="bf16-native" (the recipes'): bf16 where the device multiplies bf16 natively
    (a CPU with AVX512-BF16 or AMX, a GPU with bf16), float32 elsewhere, where a bf16 product is
    converted in software and is several times slower than float32's; "bf16" stays bf16 anywhere."""
    import fundamentallm.training as training

    monkeypatch.setattr(training, "native_bf16", lambda device: native)
    cfg = dict(max_steps=2, batch_size=4, warmup_steps=0, progress=False, device="cpu")
    trainer = Trainer(_model(), _data(), config=TrainConfig(mixed_precision="bf16-native", **cfg))
    assert trainer.amp_dtype == (torch.bfloat16 if native else None)
    assert Trainer(_model(), _data(), config=TrainConfig(mixed_precision="bf16", **cfg)).amp_dtype == torch.bfloat16


def test_native_bf16_reads_the_cpu_flags(monkeypatch, tmp_path):
    """native_bf16("cpu") is true exactly with the avx512_bf16 or amx_bf16 flag in /proc/cpuinfo."""
    import builtins

    from fundamentallm import utils

    real_open = builtins.open
    for flags, expected in (("fpu avx avx2 fma", False), ("avx2 avx512f avx512_bf16", True),
                            ("avx512f amx_bf16 amx_tile", True)):
        info = tmp_path / "cpuinfo"
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        monkeypatch.setattr(builtins, "open", lambda path, *a, info=info, **k: real_open(
            info if path == "/proc/cpuinfo" else path, *a, **k))
        utils.cpu_has_bf16.cache_clear()
        try:
            assert utils.native_bf16("cpu") is expected and utils.native_bf16("meta") is False
        finally:
            monkeypatch.setattr(builtins, "open", real_open)
            utils.cpu_has_bf16.cache_clear()


def test_cpu_bf16_autocast_with_muon_and_sdpa():
    """The record's recipe: Muon, SDPA attention (run in float32 under CPU autocast) and bf16."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=16, d_model=32, num_heads=2, num_layers=1, max_seq_len=16,
                                          attn_impl="sdpa", qk_norm=True))
    cfg = TrainConfig(max_steps=4, batch_size=4, warmup_steps=1, progress=False, device="cpu",
                      mixed_precision="bf16", optimizer="muon")
    history = Trainer(model, _data(), config=cfg).fit()
    assert all(math.isfinite(v) for v in history["train_loss"])
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_fp16_needs_cuda_and_bf16_needs_cuda_or_cpu(monkeypatch):
    with pytest.raises(ValueError, match="mixed_precision='fp16' needs a CUDA device.*'cpu'"):
        Trainer(_model(), _data(), config=TrainConfig(mixed_precision="fp16", device="cpu", progress=False))
    monkeypatch.setenv("FUNDAMENTALLM_DEVICE", "meta")
    with pytest.raises(ValueError, match="mixed_precision='bf16' is supported on 'cuda' and 'cpu'.*'meta'"):
        Trainer(_model(), _data(), config=TrainConfig(mixed_precision="bf16", progress=False))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the branch is device-keyed)")
def test_sampling_on_cuda_with_the_chapters_cpu_generator():
    """Logits on the GPU, a seeded CPU generator (as the chapters write it): the draw happens on
    the generator's device, so the tokens equal the CPU run's for the same probabilities."""
    from fundamentallm.generation import sample_next

    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(1))
    on_cpu = sample_next(logits, temperature=0.9, generator=torch.Generator().manual_seed(5))
    on_gpu = sample_next(logits.cuda(), temperature=0.9, generator=torch.Generator().manual_seed(5))
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), on_cpu)
