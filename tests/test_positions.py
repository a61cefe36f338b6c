"""Positional encodings: sinusoidal (closed form in NumPy), learned, RoPE (relative-offset
property, norm preservation, equality with Hugging Face LLaMA's rotary application)."""

import numpy as np
import pytest
import torch

from fundamentallm.positions import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    create_positional_encoding,
    rotate_half,
    rotate_interleaved,
    sinusoidal_table,
)

MAX_DIFF: dict = {}
MAX_DIFF_TITLE = "positions max |ours - reference|"  # printed by conftest after this file's tests


def _record(key, a, b):
    d = (a - b).abs().max().item()
    MAX_DIFF[key] = max(MAX_DIFF.get(key, 0.0), d)
    bound = 2e-5
    # float32 bounds are relative to the magnitude compared (at least 1): 1e-5 is ~80 float32
    # epsilons (1.2e-7) of the largest value, room for reordered sums, not for a wrong formula
    scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
    assert d <= bound * scale, f"{key}: max |difference| {d:.2e} over {bound:.0e} x {scale:.3g}"
    return d


def _numpy_sinusoidal(max_seq_len, d_model):
    """Vaswani et al. (2017), section 3.5, written with explicit loops."""
    pe = np.zeros((max_seq_len, d_model))
    for pos in range(max_seq_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = np.sin(angle)
            pe[pos, 2 * i + 1] = np.cos(angle)
    return pe


# ---------------------------------------------------------------- sinusoidal

@pytest.mark.parametrize("d_model,max_seq_len", [(2, 5), (8, 16), (32, 64), (64, 200)])
def test_sinusoidal_equals_closed_form(d_model, max_seq_len):
    enc = SinusoidalPositionalEncoding(d_model, max_seq_len)
    ref = torch.from_numpy(_numpy_sinusoidal(max_seq_len, d_model))
    x = torch.zeros(2, max_seq_len, d_model)
    out = enc(x)
    _record(("sinusoidal", "float32"), out[0].double(), ref)
    torch.testing.assert_close(out[0].double(), ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(sinusoidal_table(max_seq_len, d_model).double(), ref, atol=1e-6, rtol=0)
    # it *adds* the table, with an offset for start_pos
    x = torch.randn(3, 4, d_model, dtype=torch.float64)
    out = enc.double()(x, start_pos=1)
    torch.testing.assert_close(out - x, ref[1:5].expand(3, 4, d_model), atol=1e-6, rtol=0)
    assert out.dtype == torch.float64


def test_sinusoidal_is_a_buffer_not_a_parameter():
    enc = SinusoidalPositionalEncoding(16, 32)
    assert list(enc.parameters()) == []
    assert "pe" in dict(enc.named_buffers()) and not enc.pe.requires_grad
    assert "pe" not in enc.state_dict()  # recomputed from the formula, not saved
    x = torch.randn(1, 8, 16, requires_grad=True)
    enc(x).sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x)) and enc.pe.grad is None


def test_sinusoidal_errors():
    with pytest.raises(ValueError, match="even"):
        SinusoidalPositionalEncoding(7, 10)
    enc = SinusoidalPositionalEncoding(8, 10)
    with pytest.raises(ValueError, match="max_seq_len=10"):
        enc(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match="max_seq_len=10"):
        enc(torch.zeros(1, 4, 8), start_pos=7)
    with pytest.raises(ValueError, match="start_pos"):
        enc(torch.zeros(1, 4, 8), start_pos=-1)
    assert enc(torch.zeros(1, 4, 8), start_pos=6).shape == (1, 4, 8)


# ---------------------------------------------------------------- learned

def test_learned_is_trainable_and_adds_rows():
    torch.manual_seed(0)
    enc = LearnedPositionalEncoding(16, 12)
    assert [n for n, _ in enc.named_parameters()] == ["weight"] and enc.weight.shape == (12, 16)
    assert enc.weight.requires_grad and 0.01 < enc.weight.std().item() < 0.03
    x = torch.randn(2, 5, 16)
    out = enc(x, start_pos=3)
    torch.testing.assert_close(out, x + enc.weight[3:8])
    out.pow(2).sum().backward()
    assert enc.weight.grad[3:8].abs().sum() > 0
    assert torch.equal(enc.weight.grad[:3], torch.zeros(3, 16))
    assert torch.equal(enc.weight.grad[8:], torch.zeros(4, 16))


def test_learned_error_past_max_seq_len():
    enc = LearnedPositionalEncoding(8, 6)
    assert enc(torch.zeros(1, 6, 8)).shape == (1, 6, 8)
    with pytest.raises(ValueError, match=r"max_seq_len=6") as err:
        enc(torch.zeros(1, 7, 8))
    assert "LearnedPositionalEncoding" in str(err.value)
    with pytest.raises(ValueError, match="max_seq_len=6"):
        enc(torch.zeros(1, 2, 8), start_pos=5)


# ---------------------------------------------------------------- RoPE

def _numpy_rope(x, positions, base, style="half"):
    """Rotate pair i by pos * base^(-2i/D). "half": the pair is channels (i, i + D/2) (GPT-NeoX);
    "interleaved": channels (2i, 2i + 1) (Su et al. 2021, Meta's LLaMA)."""
    x = np.asarray(x, dtype=np.float64)
    D = x.shape[-1]
    out = np.empty_like(x)
    for t, pos in enumerate(positions):
        for i in range(D // 2):
            theta = pos * base ** (-2 * i / D)
            c0, c1 = (i, i + D // 2) if style == "half" else (2 * i, 2 * i + 1)
            a, b = x[..., t, c0], x[..., t, c1]
            out[..., t, c0] = a * np.cos(theta) - b * np.sin(theta)
            out[..., t, c1] = a * np.sin(theta) + b * np.cos(theta)
    return out


@pytest.mark.parametrize("style", ["half", "interleaved"])
@pytest.mark.parametrize("head_dim,base", [(2, 10000.0), (8, 10000.0), (16, 500.0), (64, 1e6)])
@pytest.mark.parametrize("start_pos", [0, 5])
def test_rope_equals_closed_form(head_dim, base, start_pos, style):
    rope = RotaryEmbedding(head_dim, 40, base=base, style=style)
    assert rope.style == style
    x = torch.randn(2, 3, 9, head_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out = rope(x, start_pos)
    ref = torch.from_numpy(_numpy_rope(x.numpy(), range(start_pos, start_pos + 9), base, style))
    _record((f"rope_closed_form_{style}", "float64"), out, ref)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-6)  # cos/sin tables are float32


def test_rope_position_zero_is_identity_and_rotate_half():
    rope = RotaryEmbedding(8, 4)
    x = torch.randn(1, 2, 1, 8)
    assert torch.equal(rope(x), x)
    v = torch.arange(1.0, 9.0)
    assert torch.equal(rotate_half(v), torch.tensor([-5.0, -6, -7, -8, 1, 2, 3, 4]))


@pytest.mark.parametrize("head_dim,base", [(8, 10000.0), (32, 10000.0), (16, 100.0)])
def test_rope_score_depends_only_on_offset(head_dim, base):
    g = torch.Generator().manual_seed(1)
    rope = RotaryEmbedding(head_dim, 64, base=base).double()
    q = torch.randn(head_dim, dtype=torch.float64, generator=g)
    k = torch.randn(head_dim, dtype=torch.float64, generator=g)
    # the same q and k placed at every position 0..63
    qs = rope(q.expand(1, 1, 64, head_dim).contiguous())[0, 0]  # (64, D)
    ks = rope(k.expand(1, 1, 64, head_dim).contiguous())[0, 0]
    scores = qs @ ks.T  # scores[m, n] = <R_m q, R_n k>
    checked = 0
    for offset in range(-20, 21):
        ref = None
        for m in range(max(0, offset), min(64, 64 + offset)):
            n = m - offset
            if ref is None:
                ref = scores[m, n]
            torch.testing.assert_close(scores[m, n], ref, atol=1e-6, rtol=1e-6)
            checked += 1
    assert checked > 2000
    # ...and it does depend on the offset (so the test above is not vacuous)
    assert (scores[10, 10] - scores[10, 3]).abs() > 1e-3
    assert (scores[10, 10] - scores[10, 11]).abs() > 1e-3


def test_rope_preserves_norm_and_is_linear():
    rope = RotaryEmbedding(16, 50)
    x = torch.randn(2, 4, 50, 16, dtype=torch.float64)
    y = rope.double()(x)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rope(2 * x + y), 2 * rope(x) + rope(y))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("head_dim,theta", [(8, 10000.0), (16, 500000.0), (32, 10.0)])
@pytest.mark.parametrize("start_pos", [0, 7])
def test_rope_equals_hugging_face_llama(dtype, head_dim, theta, start_pos):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    H, T, max_len = 3, 20, 64
    cfg = transformers.LlamaConfig(hidden_size=H * head_dim, num_attention_heads=H, num_key_value_heads=H,
                                   max_position_embeddings=max_len, intermediate_size=8, num_hidden_layers=1,
                                   vocab_size=10, rope_theta=theta)
    hf_rope = LlamaRotaryEmbedding(cfg)
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, H, T, head_dim, dtype=dtype, generator=g)
    k = torch.randn(2, H, T, head_dim, dtype=dtype, generator=g)
    position_ids = torch.arange(start_pos, start_pos + T).expand(2, T)
    cos, sin = hf_rope(q, position_ids)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    ours = RotaryEmbedding(head_dim, max_len, base=theta)
    q_ours, k_ours = ours(q, start_pos), ours(k, start_pos)
    _record(("rope_vs_hf_llama", str(dtype)), q_ours, q_hf)
    _record(("rope_vs_hf_llama", str(dtype)), k_ours, k_hf)
    # HF builds the angles in float32; ours in float64 rounded to float32: ~1 ulp of the angle
    torch.testing.assert_close(q_ours, q_hf, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(k_ours, k_hf, atol=2e-5, rtol=1e-5)


def test_rope_errors():
    with pytest.raises(ValueError, match="even"):
        RotaryEmbedding(7, 10)
    rope = RotaryEmbedding(8, 10)
    with pytest.raises(ValueError, match="head_dim=8"):
        rope(torch.zeros(1, 1, 3, 6))
    with pytest.raises(ValueError, match="max_seq_len=10"):
        rope(torch.zeros(1, 1, 11, 8))
    with pytest.raises(ValueError, match="max_seq_len=10"):
        rope(torch.zeros(1, 1, 3, 8), start_pos=8)


# ---------------------------------------------------------------- factory

def test_factory_types():
    assert isinstance(create_positional_encoding("learned", 16, 8), LearnedPositionalEncoding)
    assert isinstance(create_positional_encoding("sinusoidal", 16, 8), SinusoidalPositionalEncoding)
    r = create_positional_encoding("rope", 16, 8, head_dim=4, base=500.0)
    assert isinstance(r, RotaryEmbedding) and r.head_dim == 4 and r.base == 500.0 and r.max_seq_len == 8
    assert create_positional_encoding("rope", 16, 8).head_dim == 16
    assert create_positional_encoding("none", 16, 8) is None


@pytest.mark.parametrize("kind", ["alibi", "Learned", "", None, "absolute"])
def test_factory_rejects_unknown(kind):
    with pytest.raises(ValueError) as err:
        create_positional_encoding(kind, 16, 8)
    msg = str(err.value)
    assert repr(kind) in msg and all(repr(k) in msg for k in ("learned", "sinusoidal", "rope", "none"))


# ---------------------------------------------------------------- RoPE conventions

def _meta_apply_rotary_emb(x, positions, base):
    """Meta's LLaMA reference (llama/model.py): channel pairs (2i, 2i+1) as complex numbers
    times ``exp(i·pos·θ_i)``. x: (B, H, T, D), float64."""
    D = x.shape[-1]
    freqs = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    freqs_cis = torch.polar(torch.ones(len(positions), D // 2, dtype=torch.float64),
                            torch.outer(torch.tensor(positions, dtype=torch.float64), freqs))  # (T, D/2)
    x_ = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(x_ * freqs_cis).flatten(-2)


@pytest.mark.parametrize("head_dim,start_pos", [(2, 0), (16, 3), (64, 11)])
def test_rope_interleaved_equals_meta_reference(head_dim, start_pos):
    rope = RotaryEmbedding(head_dim, 32, base=500.0, style="interleaved").double()
    x = torch.randn(2, 3, 7, head_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ref = _meta_apply_rotary_emb(x, list(range(start_pos, start_pos + 7)), 500.0)
    _record(("rope_vs_meta_interleaved", "float64"), rope(x, start_pos), ref)
    torch.testing.assert_close(rope(x, start_pos), ref, atol=1e-6, rtol=1e-6)
    assert torch.equal(rotate_interleaved(torch.arange(1.0, 7.0)), torch.tensor([-2.0, 1, -4, 3, -6, 5]))


@pytest.mark.parametrize("head_dim", [2, 8, 32])
def test_rope_styles_are_one_rotation_up_to_a_permutation(head_dim):
    """interleaved(x) = P^-1 half(P x), P the permutation that sends channel 2i to i and 2i+1
    to i + D/2; and the two conventions give different outputs (so the test can fail)."""
    D = head_dim
    perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])  # half channel j <- interleaved perm[j]
    half = RotaryEmbedding(D, 16, style="half").double()
    inter = RotaryEmbedding(D, 16, style="interleaved").double()
    x = torch.randn(1, 2, 16, D, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    out = torch.empty_like(x)
    out[..., perm] = half(x[..., perm])
    torch.testing.assert_close(inter(x), out, atol=1e-12, rtol=0)
    if D > 2:
        assert (inter(x) - half(x)).abs().max() > 0.1


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_factory_and_config_pass_the_style(style):
    from fundamentallm import Transformer, TransformerConfig

    assert create_positional_encoding("rope", 16, 8, head_dim=4, rope_style=style).style == style
    model = Transformer(TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=1,
                                          pos_encoding="rope", rope_style=style))
    assert model.rope.style == style and TransformerConfig().rope_style == "half"
