"""LayerNorm / RMSNorm equal torch.nn.LayerNorm / torch.nn.RMSNorm in outputs and gradients."""

import pytest
import torch
from torch import nn

from fundamentallm.norms import LayerNorm, RMSNorm, make_norm

SHAPES = [(7,), (3, 16), (2, 5, 32), (2, 3, 4, 8), (1, 1, 3)]
EPS = [1e-5, 1e-6, 1e-2, 0.5]
DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}

# Measured worst-case |ours - torch| over all cases below (filled in as tests run; reported in
# assertion messages and by test_report_max_differences).
MAX_DIFF: dict = {}
MAX_DIFF_TITLE = "norms max |ours - torch|"  # printed by conftest after this file's tests


def _record(key, a, b):
    d = (a - b).abs().max().item() if a.numel() else 0.0
    MAX_DIFF[key] = max(MAX_DIFF.get(key, 0.0), d)
    bound = 1e-5 if key[2] == "torch.float32" else 1e-12
    # float32 bounds are relative to the magnitude compared (at least 1): 1e-5 is ~80 float32
    # epsilons (1.2e-7) of the largest value, room for reordered sums, not for a wrong formula
    scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
    assert d <= bound * scale, f"{key}: max |difference| {d:.2e} over {bound:.0e} x {scale:.3g}"
    return d


def _randomise(*modules, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in modules[0].named_parameters():
            value = torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5 + (1.0 if name == "weight" else 0.0)
            for m in modules:
                getattr(m, name).copy_(value)


def _compare(ours, ref, x, key):
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    y1, y2 = ours(x1), ref(x2)
    tol = TOL[x.dtype]
    d = _record((key, "out", str(x.dtype)), y1, y2)
    torch.testing.assert_close(y1, y2, **tol, msg=lambda m: f"{m} (max diff {d:.3g})")
    g = torch.randn(y1.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    (y1 * g).sum().backward()
    (y2 * g).sum().backward()
    _record((key, "grad", str(x.dtype)), x1.grad, x2.grad)
    torch.testing.assert_close(x1.grad, x2.grad, **tol)
    for (name, p1), (_, p2) in zip(ours.named_parameters(), ref.named_parameters()):
        _record((key, "grad", str(x.dtype)), p1.grad, p2.grad)
        torch.testing.assert_close(p1.grad, p2.grad, **tol, msg=lambda m, n=name: f"{n}.grad: {m}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_matches_torch(shape, eps, dtype, bias):
    torch.manual_seed(0)
    dim = shape[-1]
    ours = LayerNorm(dim, eps=eps, bias=bias).to(dtype)
    ref = nn.LayerNorm(dim, eps=eps, bias=bias).to(dtype)
    _randomise(ours, ref, seed=2)
    x = torch.randn(shape, dtype=dtype) * 3 + 1.5  # off-centre, not unit-variance
    _compare(ours, ref, x, "layernorm")
    assert (ours.bias is None) == (not bias)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rmsnorm_matches_torch(shape, eps, dtype):
    torch.manual_seed(0)
    dim = shape[-1]
    ours = RMSNorm(dim, eps=eps).to(dtype)
    ref = nn.RMSNorm(dim, eps=eps).to(dtype)
    _randomise(ours, ref, seed=3)
    x = torch.randn(shape, dtype=dtype) * 2 + 0.7
    _compare(ours, ref, x, "rmsnorm")
    assert [n for n, _ in ours.named_parameters()] == ["weight"]


def test_layernorm_of_one_feature_is_exactly_the_bias():
    # x - mean(x) is exactly 0 for dim=1, so the output is the bias and every gradient but the
    # bias's is 0 (torch's fused kernel leaves float32 round-off of ~1e-4 here, amplified by
    # rsqrt(eps); ours is exact).
    norm = LayerNorm(1, eps=1e-6)
    with torch.no_grad():
        norm.bias.fill_(0.25)
        norm.weight.fill_(3.0)
    x = torch.randn(4, 5, 1, requires_grad=True)
    y = norm(x)
    assert torch.equal(y, torch.full_like(y, 0.25))
    y.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x)) and norm.weight.grad.item() == 0.0
    assert norm.bias.grad.item() == 20.0


def test_layernorm_default_init_gives_zero_mean_unit_variance():
    x = torch.randn(4, 9, 64, dtype=torch.float64) * 5 + 3
    y = LayerNorm(64)(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(4, 9, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(4, 9, dtype=torch.float64), atol=1e-5, rtol=0)


def test_rmsnorm_default_init_gives_unit_rms_and_no_recentring():
    x = torch.randn(4, 9, 64, dtype=torch.float64) * 5 + 3
    y = RMSNorm(64)(x)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(4, 9, dtype=torch.float64), atol=1e-5, rtol=0)
    assert y.mean(-1).abs().min() > 0.1  # RMSNorm keeps the mean direction


def test_norms_are_scale_invariant():
    x = torch.randn(3, 16, dtype=torch.float64)
    for norm in (LayerNorm(16, eps=1e-12), RMSNorm(16, eps=1e-12)):
        torch.testing.assert_close(norm(x), norm(7.5 * x))


def test_defaults_and_make_norm():
    assert LayerNorm(8).eps == 1e-5 and RMSNorm(8).eps == 1e-6
    assert isinstance(make_norm("layernorm", 8, eps=1e-3), LayerNorm)
    assert make_norm("layernorm", 8, bias=False).bias is None
    r = make_norm("rmsnorm", 8, eps=1e-4)
    assert isinstance(r, RMSNorm) and r.eps == 1e-4
    for bad in ("batchnorm", "LayerNorm", "", None):
        with pytest.raises(ValueError) as err:
            make_norm(bad, 8)
        assert repr(bad) in str(err.value) and "'layernorm'" in str(err.value) and "'rmsnorm'" in str(err.value)


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_bad_inputs(cls):
    norm = cls(8)
    with pytest.raises(ValueError, match="last dimension is 7"):
        norm(torch.randn(2, 7))
    with pytest.raises(TypeError, match="floating-point"):
        norm(torch.ones(2, 8, dtype=torch.long))
    with pytest.raises(TypeError, match="floating-point"):
        norm([[1.0] * 8])
    for dim in (0, -3, 2.0, "8"):
        with pytest.raises(ValueError, match="dim"):
            cls(dim)
    for eps in (0.0, -1e-5):
        with pytest.raises(ValueError, match="eps"):
            cls(8, eps=eps)
