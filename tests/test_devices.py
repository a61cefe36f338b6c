"""The GPU code paths, exercised on a CPU-only machine: the device switch reaches the Trainer,
and the Trainer's autocast path (bf16 on CUDA) runs, here with CPU autocast."""

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
    assert trainer.amp_dtype is None  # mixed precision is for CUDA only


@pytest.mark.parametrize("amp_dtype", [torch.bfloat16])
def test_trainer_autocast_path_on_cpu(amp_dtype):
    """The Trainer's mixed-precision branch (what a CUDA runtime takes by default) trains: losses
    stay finite, weights stay float32, and the curve stays within bf16 rounding of float32's."""
    cfg = dict(max_steps=8, batch_size=4, warmup_steps=2, lr=3e-3, progress=False, device="cpu", seed=0)
    full = Trainer(_model(), _data(), config=TrainConfig(**cfg)).fit()
    mixed = Trainer(_model(), _data(), config=TrainConfig(**cfg))
    mixed.amp_dtype = amp_dtype  # what _resolve_precision returns on a bf16-capable GPU
    history = mixed.fit()
    assert all(math.isfinite(v) for v in history["train_loss"])
    assert all(p.dtype == torch.float32 for p in mixed.model.parameters())
    # bf16 keeps 8 significant bits (eps 2^-8 = 0.4%): a loss of ~2.8 moves by a few hundredths
    for a, b in zip(full["train_loss"], history["train_loss"]):
        assert abs(a - b) <= 0.05 * abs(a), (full["train_loss"], history["train_loss"])
    assert history["train_loss"] != full["train_loss"]  # the autocast path really ran



@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the branch is device-keyed)")
def test_sampling_on_cuda_with_the_chapters_cpu_generator():
    """Logits on the GPU, a seeded CPU generator (as the chapters write it): the draw happens on
    the generator's device, so the tokens equal the CPU run's for the same probabilities."""
    from fundamentallm.generation import sample_next

    logits = torch.randn(3, 11, generator=torch.Generator().manual_seed(1))
    on_cpu = sample_next(logits, temperature=0.9, generator=torch.Generator().manual_seed(5))
    on_gpu = sample_next(logits.cuda(), temperature=0.9, generator=torch.Generator().manual_seed(5))
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), on_cpu)
