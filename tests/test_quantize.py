"""Weight-only quantization (fundamentallm/quantize.py) against references written here."""

import pytest
import torch
from torch import nn

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.quantize import (
    QuantLinear,
    dequantize,
    linear_weight_bytes,
    pack_int4,
    quantize,
    quantize_model,
    unpack_int4,
)


def _w(out=6, inp=16, seed=0):
    return torch.randn(out, inp, generator=torch.Generator().manual_seed(seed))


def test_int8_per_channel_matches_a_loop():
    w = _w()
    q, scale, zero = quantize(w, bits=8)
    assert zero is None and q.dtype == torch.int8 and scale.shape == (6, 1)
    for r in range(6):
        s = w[r].abs().max().item() / 127
        expected = [max(-127, min(127, round(x / s))) for x in w[r].tolist()]
        assert q[r].tolist() == expected
    err = (dequantize(q, scale) - w).abs()
    assert bool((err <= scale / 2 + 1e-6).all())  # rounding error at most half a step


@pytest.mark.parametrize("symmetric", [True, False])
def test_int4_groups_error_is_half_a_step(symmetric):
    w = _w(4, 32) + (0.0 if symmetric else 1.0)
    q, scale, zero = quantize(w, bits=4, group_size=8, symmetric=symmetric)
    assert scale.shape == (4, 4)
    lo, hi = (-7, 7) if symmetric else (0, 15)
    assert int(q.min()) >= lo and int(q.max()) <= hi
    back = dequantize(q, scale, None if zero is None else zero)
    step = scale.repeat_interleave(8, dim=1)
    assert bool(((back - w).abs() <= step / 2 + 1e-5).all())


def test_asymmetric_beats_symmetric_on_a_shifted_weight():
    w = torch.rand(8, 64, generator=torch.Generator().manual_seed(1))  # all positive
    errs = {}
    for sym in (True, False):
        q, s, z = quantize(w, bits=4, group_size=16, symmetric=sym)
        errs[sym] = (dequantize(q, s, z) - w).pow(2).mean().item()
    assert errs[False] < errs[True]


def test_smaller_groups_smaller_error():
    w = _w(8, 128, seed=3)
    errors = [(dequantize(*quantize(w, 4, g)) - w).pow(2).mean().item() for g in (128, 32, 8)]
    assert errors[0] > errors[1] > errors[2]


@pytest.mark.parametrize("signed", [True, False])
def test_pack_unpack_round_trip(signed):
    g = torch.Generator().manual_seed(2)
    q = torch.randint(-8 if signed else 0, 8 if signed else 16, (5, 12), generator=g).to(torch.int8)
    packed = pack_int4(q)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 6)
    assert torch.equal(unpack_int4(packed, signed), q)
    assert int(packed[0, 0]) == (int(q[0, 0]) & 0xF) | ((int(q[0, 1]) & 0xF) << 4)


@pytest.mark.parametrize("bits,group,sym", [(8, None, True), (8, 16, False), (4, 16, True), (4, 8, False)])
def test_quant_linear_equals_linear_with_dequantized_weight(bits, group, sym):
    torch.manual_seed(0)
    lin = nn.Linear(32, 10)
    ql = QuantLinear.from_linear(lin, bits, group, sym)
    x = torch.randn(3, 5, 32)
    q, s, z = quantize(lin.weight, bits, group, sym)
    torch.testing.assert_close(ql(x), x @ dequantize(q, s.half().float(), z).T + lin.bias)  # float16 scales
    expected_bytes = 10 * 32 * bits // 8 + s.numel() * 2 + (0 if sym else s.numel())
    assert ql.weight_bytes() == expected_bytes


def test_quantize_model_swaps_linears_and_keeps_lm_head():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=40, d_model=32, num_heads=2, num_layers=2, max_seq_len=16))
    ids = torch.randint(0, 40, (2, 10))
    with torch.no_grad():
        before, _ = model(ids)
    fbytes = linear_weight_bytes(model)
    quantize_model(model, bits=8)
    assert isinstance(model.lm_head, nn.Linear) and not isinstance(model.lm_head, QuantLinear)
    assert sum(isinstance(m, QuantLinear) for m in model.modules()) == 2 * 4
    with torch.no_grad():
        after, _ = model(ids)
    torch.testing.assert_close(after, before, atol=0.05, rtol=0)
    # one byte per weight and a float16 scale per output row (qkv 96, out_proj 32, ff 128 and 32)
    assert linear_weight_bytes(model) == fbytes // 4 + 2 * 2 * (96 + 32 + 128 + 32)


def test_bad_arguments_name_the_parameter():
    w = _w(4, 12)
    with pytest.raises(ValueError, match="bits=9"):
        quantize(w, bits=9)
    with pytest.raises(ValueError, match="bits=3"):
        QuantLinear.from_linear(torch.nn.Linear(12, 4), bits=3)  # stored widths: 4 and 8
    with pytest.raises(ValueError, match="group_size=5"):
        quantize(w, bits=8, group_size=5)
    with pytest.raises(ValueError, match="group_size=3 must be even"):
        quantize(w, bits=4, group_size=3)
    with pytest.raises(ValueError, match="group_size=0"):
        quantize(w, group_size=0)
    with pytest.raises(ValueError, match="symmetric"):
        quantize(w, symmetric="yes")
    model = nn.Sequential(nn.Linear(12, 4), nn.Linear(4, 2))
    with pytest.raises(ValueError, match="group_size=8"):
        quantize_model(model, bits=4, group_size=8)
    assert isinstance(model[0], nn.Linear)  # nothing was changed


@pytest.mark.parametrize("bits", [2, 3, 5, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_any_width_rounds_within_half_a_step(bits, symmetric):
    """quantize computes codes of 2 to 8 bits (chapter 17's explorer sweeps them); an asymmetric
    8-bit code reaches 255, so it is stored as uint8 (int8 would wrap it)."""
    w = _w(6, 32) + 1.5  # mostly positive: the asymmetric range matters
    q, scale, zero = quantize(w, bits, 16, symmetric)
    lo, hi = (-(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1) if symmetric else (0, 2 ** bits - 1)
    assert int(q.min()) >= lo and int(q.max()) <= hi
    assert q.dtype == (torch.int8 if symmetric else torch.uint8)
    err = (dequantize(q, scale, zero) - w).abs().reshape(6, 2, 16)
    assert (err <= scale.unsqueeze(-1) / 2 + 1e-6).all()
