"""Canon layers (``TransformerConfig(canon=...)``): the layer against ``F.conv1d`` and autograd,
its places in the model, cached decoding, the optimizer it lands in, and its invalid values."""

from types import SimpleNamespace

import pytest
import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.canon import CanonLayer, reference_canon
from fundamentallm.generation import generate
from fundamentallm.training import TrainConfig, make_optimizer, muon_parameters


def _cfg(**kw):
    args = dict(vocab_size=31, d_model=32, num_heads=4, num_layers=2, max_seq_len=24, norm="rmsnorm",
                pos_encoding="rope", activation="swiglu", bias=False)
    return TransformerConfig(**{**args, **kw})


def _randomise(model, seed=0):
    """Canon weights away from their zero start (a zero layer is the identity and proves little)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, CanonLayer):
                module.weight.copy_(0.5 * torch.randn(module.weight.shape, generator=g))


@pytest.mark.parametrize("kernel", [1, 2, 4, 7])
def test_layer_equals_depthwise_conv1d(kernel):
    """x + a causal depthwise convolution: torch's conv1d with groups=d_model on the sequence
    padded with kernel - 1 zeros on the left; written out for one channel and position too."""
    layer = CanonLayer(12, kernel)
    assert layer.weight.shape == (12, kernel) and torch.equal(layer.weight, torch.zeros(12, kernel))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(12, kernel, generator=g))
    x = torch.randn(3, 10, 12, generator=g)
    y = layer(x)
    torch.testing.assert_close(y, reference_canon(x, layer.weight))
    c, t = 5, 6  # y[t] = x[t] + sum_j w[j] x[t - K + 1 + j]
    expected = x[0, t, c] + sum(layer.weight[c, j] * x[0, t - kernel + 1 + j, c]
                                for j in range(kernel) if t - kernel + 1 + j >= 0)
    torch.testing.assert_close(y[0, t, c], expected)
    # causal: changing a later token changes nothing before it
    x2 = x.clone()
    x2[:, 7] += 1.0
    torch.testing.assert_close(layer(x2)[:, :7], y[:, :7], rtol=0, atol=0)


@pytest.mark.parametrize("kernel", [1, 3])
def test_layer_gradients_match_autograd_in_float64(kernel):
    """The written-out backward pass: finite differences (gradcheck) agree with it, with and
    without a cached past, and so does autograd through conv1d."""
    from torch.func import functional_call

    layer = CanonLayer(5, kernel, key="k").double()
    g = torch.Generator().manual_seed(2)
    w = torch.randn(5, kernel, dtype=torch.float64, generator=g, requires_grad=True)
    x = torch.randn(2, 6, 5, dtype=torch.float64, generator=g, requires_grad=True)
    past = torch.randn(2, kernel - 1, 5, dtype=torch.float64, generator=g)
    assert torch.autograd.gradcheck(lambda x, w: functional_call(layer, {"weight": w}, (x,)), (x, w))
    assert torch.autograd.gradcheck(
        lambda x, w: functional_call(layer, {"weight": w}, (x, SimpleNamespace(conv={"k": past}, length=3))),
        (x, w))
    assert torch.autograd.gradcheck(reference_canon, (x, w))
    grad = torch.randn(2, 6, 5, dtype=torch.float64, generator=g)
    ours = torch.autograd.grad(functional_call(layer, {"weight": w}, (x,)), (x, w), grad)
    theirs = torch.autograd.grad(reference_canon(x, w), (x, w), grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_zero_canon_model_equals_plain_model_and_parameter_count():
    """New canon layers start at zero, so a model with them computes what the same weights compute
    without them; each place adds kernel x d_model parameters (embed once, attn/ffn per layer)."""
    torch.manual_seed(2)
    plain = Transformer(_cfg()).eval()
    base = plain.num_parameters()
    for canon, places in (("embed", 1), ("ffn", 2), ("attn+ffn", 4), ("embed+attn+ffn", 5)):
        model = Transformer(_cfg(canon=canon, canon_kernel=3)).eval()
        assert model.num_parameters() == base + places * 3 * 32
        missing = model.load_state_dict(plain.state_dict(), strict=False).missing_keys
        assert missing and all("canon" in k for k in missing)
        ids = torch.randint(0, 31, (2, 12), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            torch.testing.assert_close(model(ids)[0], plain(ids)[0], rtol=0, atol=0)
            _randomise(model)
            assert not torch.allclose(model(ids)[0], plain(ids)[0])
        model(ids, ids)[1].backward()  # every canon layer is trained
        assert all(m.weight.grad is not None and m.weight.grad.abs().sum() > 0
                   for m in model.modules() if isinstance(m, CanonLayer))


@pytest.mark.parametrize("canon", ["embed", "attn", "ffn", "embed+ffn", "embed+attn+ffn"])
@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_cached_decoding_equals_full_pass(canon, norm_position, chunked_logits):
    """The cache keeps each convolution's last inputs, so one token at a time, or chunks of any
    size, give the full pass's logits; a reset cache starts a new sequence."""
    torch.manual_seed(4)
    model = Transformer(_cfg(canon=canon, norm_position=norm_position, num_kv_heads=2, qk_norm=True,
                             value_embeddings=True, attn_impl="sdpa")).eval()
    _randomise(model, 5)
    ids = torch.randint(0, 31, (3, 24), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        full, _ = model(ids)
        for chunks in ([1] * 24, [7, 1, 2, 9, 5]):
            logits, cache = chunked_logits(model, ids, chunks)
            torch.testing.assert_close(logits, full, rtol=1e-5, atol=1e-5)
            cache.reset()  # a new sequence: the stored inputs of the old one must not leak in
            other = ids.flip(1)
            torch.testing.assert_close(model(other[:, :5], kv_cache=cache)[0], model(other[:, :5])[0],
                                       rtol=1e-5, atol=1e-5)
    prompt = ids[:, :4]
    assert torch.equal(generate(model, prompt, 12, greedy=True, use_cache=True),
                       generate(model, prompt, 12, greedy=True, use_cache=False))


def test_canon_weights_train_with_adamw_not_muon():
    """They are per-channel filters, not hidden matrices: Muon leaves them to its AdamW group."""
    model = Transformer(_cfg(canon="embed+ffn"))
    canon = {id(m.weight) for m in model.modules() if isinstance(m, CanonLayer)}
    assert len(canon) == 3 and not canon & {id(p) for p in muon_parameters(model)}
    opt = make_optimizer(model, TrainConfig(optimizer="muon", max_steps=10, warmup_steps=0))
    adamw = [g for g in opt.param_groups if not g["use_muon"] and g["weight_decay"] > 0]
    assert canon <= {id(p) for p in adamw[0]["params"]}


def test_config_round_trip_and_checkpoint(tmp_path):
    from fundamentallm import load_checkpoint, save_checkpoint

    cfg = _cfg(canon="embed+ffn", canon_kernel=5)
    assert cfg.canon_places == ("embed", "ffn") and _cfg().canon_places == ()
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg
    torch.manual_seed(7)
    model = Transformer(cfg).eval()
    _randomise(model, 8)
    save_checkpoint(tmp_path / "ckpt", model, config=cfg)
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.config == cfg
    ids = torch.randint(0, 31, (2, 10), generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(loaded.model.eval()(ids)[0], model(ids)[0], rtol=0, atol=0)


@pytest.mark.parametrize("kw,word", [
    (dict(canon="embeddings"), "'embed', 'attn', 'ffn'"),
    (dict(canon="ffn+ffn"), "canon='ffn+ffn'"),
    (dict(canon=""), "canon=''"),
    (dict(canon=["embed"]), "canon=['embed']"),
    (dict(canon="ffn", causal=False), "causal=True"),
    (dict(canon_kernel=0), "canon_kernel"),
    (dict(canon_kernel=True), "canon_kernel"),
    (dict(canon_kernel=2.0), "canon_kernel"),
])
def test_invalid_canon_settings(kw, word):
    with pytest.raises(ValueError) as err:
        _cfg(**kw)
    assert word in str(err.value)


def test_invalid_layer_arguments():
    for kw in (dict(d_model=0), dict(d_model=4, kernel_size=0), dict(d_model=4, kernel_size=2.5)):
        with pytest.raises(ValueError, match="must be an integer >= 1"):
            CanonLayer(**kw)
