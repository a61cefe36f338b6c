"""FeedForward: GELU (tanh, as GPT-2), ReLU, ReLU² and SwiGLU equal independent functional formulas."""

import math

import pytest
import torch

from fundamentallm.feedforward import FeedForward


def _gelu_tanh(x):
    """GPT-2's gelu_new, written out (Hendrycks & Gimpel 2016, eq. for the tanh approximation)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def _linear(x, w, b):
    return x @ w.T + (b if b is not None else 0)


def _ff(seed, dtype, **kw):
    torch.manual_seed(seed)
    ff = FeedForward(**kw).to(dtype).eval()
    with torch.no_grad():  # non-zero biases, larger weights: exercise the non-linear regime
        for p in ff.parameters():
            p.normal_(0, 0.5)
    return ff


DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12)}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5, 16), (2, 7, 16), (2, 3, 4, 16)], ids=str)
def test_gelu_relu_match_formula(dtype, bias, shape):
    x = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(1))
    for act, fn in (("gelu", _gelu_tanh), ("relu", lambda h: h.clamp(min=0)),
                    ("relu2", lambda h: h.clamp(min=0) * h.clamp(min=0))):  # Primer's squared ReLU
        ff = _ff(0, dtype, d_model=16, d_ff=40, activation=act, bias=bias)
        ref = _linear(fn(_linear(x, ff.up.weight, ff.up.bias)), ff.down.weight, ff.down.bias)
        torch.testing.assert_close(ff(x), ref, **TOL[dtype])
        assert ff.gate is None and (ff.up.bias is None) == (not bias)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_swiglu_matches_formula(dtype, bias):
    x = torch.randn(3, 6, 16, dtype=dtype, generator=torch.Generator().manual_seed(2))
    ff = _ff(1, dtype, d_model=16, d_ff=24, activation="swiglu", bias=bias)
    gate = _linear(x, ff.gate.weight, ff.gate.bias)
    swish = gate * torch.sigmoid(gate)  # SiLU / Swish-1 (Shazeer 2020)
    ref = _linear(swish * _linear(x, ff.up.weight, ff.up.bias), ff.down.weight, ff.down.bias)
    torch.testing.assert_close(ff(x), ref, **TOL[dtype])
    assert ff.gate.weight.shape == (24, 16) and ff.up.weight.shape == (24, 16) and ff.down.weight.shape == (16, 24)


def _activation_curve(activation, x):
    """The feed-forward layer of width 1 with unit weights: y = act(x)."""
    ff = _ff(0, torch.float64, d_model=1, d_ff=1, activation=activation, bias=False)
    with torch.no_grad():
        ff.up.weight.fill_(1.0)
        ff.down.weight.fill_(1.0)
    return ff(x[:, None])[:, 0]


def test_gelu_is_the_tanh_approximation_not_erf():
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    y = _activation_curve("gelu", x)
    torch.testing.assert_close(y, _gelu_tanh(x))
    erf = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    assert (y - erf).abs().max() > 1e-5  # the two GELUs differ: we use GPT-2's


def test_relu2_is_the_square_of_relu():
    x = torch.linspace(-3, 3, 61, dtype=torch.float64)
    y = _activation_curve("relu2", x)
    assert torch.equal(y[x <= 0], torch.zeros_like(y[x <= 0]))
    torch.testing.assert_close(y[x > 0], x[x > 0] ** 2, rtol=1e-15, atol=0)


def test_parameter_counts():
    d, f = 16, 40
    assert sum(p.numel() for p in FeedForward(d, f, "relu2").parameters()) == 2 * d * f + f + d
    assert sum(p.numel() for p in FeedForward(d, f, "gelu").parameters()) == 2 * d * f + f + d
    assert sum(p.numel() for p in FeedForward(d, f, "swiglu", bias=False).parameters()) == 3 * d * f


def test_dropout_only_in_training():
    ff = _ff(0, torch.float32, d_model=8, d_ff=16, activation="relu", dropout=0.5)
    x = torch.randn(4, 10, 8)
    ff.eval()
    assert torch.equal(ff(x), ff(x))
    ff.train()
    torch.manual_seed(0)
    y = ff(x)
    assert (y == 0).float().mean() > 0.3


@pytest.mark.parametrize("activation", ["swish", "GELU", "tanh", "", None])
def test_bad_activation(activation):
    with pytest.raises(ValueError) as err:
        FeedForward(8, 16, activation=activation)
    assert repr(activation) in str(err.value) and "'swiglu'" in str(err.value) and "'gelu'" in str(err.value)


@pytest.mark.parametrize("kw", [dict(d_model=0, d_ff=4), dict(d_model=4, d_ff=-1), dict(d_model=4.0, d_ff=4)])
def test_bad_sizes(kw):
    with pytest.raises(ValueError, match="must be a positive integer"):
        FeedForward(**kw)
