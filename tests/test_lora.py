"""fundamentallm.lora against Hugging Face peft's LoRA layer (same weights, same outputs), and
apply/merge/save/load on the course's Transformer."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.lora import (
    LoRALinear,
    apply_lora,
    load_lora,
    lora_state_dict,
    merge_lora,
    merged_copy,
    save_lora,
)


def _model(seed=0):
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(vocab_size=20, d_model=32, num_heads=4, num_layers=2, max_seq_len=16,
                                         pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False))


@pytest.mark.parametrize("bias,rank,alpha", [(True, 4, 8.0), (False, 2, 16.0), (True, 8, 8.0)])
def test_lora_linear_equals_peft(bias, rank, alpha):
    peft = pytest.importorskip("peft", reason="peft is a test-only dependency (requirements.txt)")
    from peft import LoraConfig
    from peft.tuners.lora import Linear as PeftLoraLinear

    torch.manual_seed(0)
    base = nn.Linear(12, 20, bias=bias)
    ours = LoRALinear(copy.deepcopy(base), rank=rank, alpha=alpha)
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0)
    try:
        theirs = PeftLoraLinear(copy.deepcopy(base), adapter_name="default", config=config, r=rank, lora_alpha=alpha)
    except TypeError:  # peft < 0.18 takes the options without a config
        theirs = PeftLoraLinear(copy.deepcopy(base), adapter_name="default", r=rank, lora_alpha=alpha)
    with torch.no_grad():
        ours.lora_B.normal_()  # B starts at zero in both; give it values so the update shows
        theirs.lora_A["default"].weight.copy_(ours.lora_A)
        theirs.lora_B["default"].weight.copy_(ours.lora_B)
    x = torch.randn(3, 5, 12)
    torch.testing.assert_close(ours(x), theirs(x))
    ours.merge()
    theirs.merge()
    torch.testing.assert_close(ours.base.weight, theirs.base_layer.weight)
    torch.testing.assert_close(ours(x), theirs(x))
    assert peft.__version__


def test_initial_adapter_is_the_identity_and_only_adapters_train():
    model = _model()
    reference = copy.deepcopy(model)
    names = apply_lora(model, ["attn.qkv", "ff.down"], rank=4)
    assert names == ["blocks.0.attn.qkv", "blocks.0.ff.down", "blocks.1.attn.qkv", "blocks.1.ff.down"]
    ids = torch.randint(0, 20, (2, 10))
    torch.testing.assert_close(model(ids)[0], reference(ids)[0])
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.endswith(("lora_A", "lora_B")) for n in trainable)
    assert model.num_parameters(trainable_only=True) == 2 * 4 * ((32 + 96) + (32 + model.config.ff_dim))


def test_merge_unmerge_and_merged_copy_give_the_same_logits():
    model = _model()
    apply_lora(model, ["attn.qkv", "attn.out_proj", "ff.up", "ff.gate", "ff.down"], rank=2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_B"):
                p.normal_(0, 0.1)
    ids = torch.randint(0, 20, (2, 10))
    adapted = model(ids)[0]
    plain = merged_copy(model)
    assert not any("lora" in k for k in plain.state_dict())
    fresh = _model(seed=1)
    fresh.load_state_dict(plain.state_dict())  # the original architecture
    torch.testing.assert_close(fresh(ids)[0], adapted, atol=1e-5, rtol=1e-5)
    before = copy.deepcopy(model.state_dict())
    merge_lora(model)
    torch.testing.assert_close(model(ids)[0], adapted, atol=1e-5, rtol=1e-5)
    for layer in [m for m in model.modules() if isinstance(m, LoRALinear)]:
        layer.unmerge()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], atol=1e-6, rtol=1e-6)


def test_adapters_save_and_load_alone(tmp_path):
    model = _model()
    apply_lora(model, ["attn.qkv"], rank=3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_B"):
                p.normal_()
    save_lora(tmp_path / "adapter.safetensors", model)
    other = _model()
    apply_lora(other, ["attn.qkv"], rank=3)
    load_lora(tmp_path / "adapter.safetensors", other)
    for k, v in lora_state_dict(model).items():
        torch.testing.assert_close(lora_state_dict(other)[k], v)
    wrong = _model()
    apply_lora(wrong, ["ff.down"], rank=3)
    with pytest.raises(ValueError, match="apply_lora with the same targets"):
        load_lora(tmp_path / "adapter.safetensors", wrong)


@pytest.mark.parametrize("kwargs,match", [
    ({"targets": ["attn.nothing"]}, r"targets=\['attn.nothing'\] name no nn.Linear"),
    ({"targets": []}, "targets=.*non-empty"),
    ({"targets": "attn.qkv"}, "targets=.*non-empty list"),
    ({"targets": ["attn.qkv"], "rank": 0}, "rank=0"),
    ({"targets": ["attn.qkv"], "alpha": -1.0}, "alpha=-1.0"),
])
def test_bad_arguments_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        apply_lora(_model(), **kwargs)


def test_save_without_adapters_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no LoRA adapters"):
        save_lora(tmp_path / "a.safetensors", _model())
