"""Attention: the explicit function vs F.scaled_dot_product_attention, MultiHeadAttention vs
nn.MultiheadAttention, the SDPA fast path vs the explicit path, and the KV cache."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.attention import (
    KVCache,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from fundamentallm.positions import RotaryEmbedding

DTYPES = [torch.float32, torch.float64]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}
MAX_DIFF: dict = {}  # measured worst |ours - reference|, per comparison and dtype
MAX_DIFF_TITLE = "attention max |ours - reference|"  # printed by conftest after this file's tests


def _record(key, a, b):
    d = (a - b).abs().max().item() if a.numel() else 0.0
    MAX_DIFF[key] = max(MAX_DIFF.get(key, 0.0), d)
    bound = 1e-5 if key[1] == "torch.float32" else 1e-10
    # float32 bounds are relative to the magnitude compared (at least 1): 1e-5 is ~80 float32
    # epsilons (1.2e-7) of the largest value, room for reordered sums, not for a wrong formula
    scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
    assert d <= bound * scale, f"{key}: max |difference| {d:.2e} over {bound:.0e} x {scale:.3g}"
    return d


def _qkv(shape_q, T_k, D_v=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    *batch, T_q, D = shape_q
    q = torch.randn(*batch, T_q, D, generator=g, dtype=dtype)
    k = torch.randn(*batch, T_k, D, generator=g, dtype=dtype)
    v = torch.randn(*batch, T_k, D_v or D, generator=g, dtype=dtype)
    return q, k, v


# ---------------------------------------------------------------- scaled_dot_product_attention

SHAPES = [((5, 8), 5), ((2, 7, 16), 7), ((2, 3, 6, 4), 6), ((3, 4, 5, 8), 9), ((1, 2, 9, 8), 4),
          ((2, 1, 1, 32), 12)]


def _both(q, k, v, mask=None, is_causal=False, key="sdpa"):
    ours = scaled_dot_product_attention(q, k, v, mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=None if is_causal else mask, is_causal=is_causal)
    d = _record((key, str(q.dtype)), ours, ref)
    torch.testing.assert_close(ours, ref, **TOL[q.dtype], msg=lambda m: f"{m} (max diff {d:.3g})")
    return ours


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape_q,T_k", SHAPES, ids=str)
def test_sdpa_no_mask(shape_q, T_k, dtype):
    q, k, v = _qkv(shape_q, T_k, dtype=dtype)
    _both(q, k, v)
    _both(q, k, v[..., :3].contiguous()) if v.shape[-1] > 3 else None  # D_v != D


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("T", [1, 2, 5, 16])
def test_sdpa_causal_matches_is_causal(T, dtype):
    q, k, v = _qkv((2, 3, T, 8), T, dtype=dtype, seed=T)
    mask = causal_mask(T)
    ours = scaled_dot_product_attention(q, k, v, mask=mask)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    _record(("sdpa", str(dtype)), ours, ref)
    torch.testing.assert_close(ours, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape_q,T_k", SHAPES, ids=str)
def test_sdpa_boolean_masks(shape_q, T_k, dtype):
    q, k, v = _qkv(shape_q, T_k, dtype=dtype, seed=1)
    g = torch.Generator().manual_seed(7)
    T_q = shape_q[-2]
    for mask_shape in [(T_q, T_k), shape_q[:-2] + (T_q, T_k), (1, T_k)]:
        mask = torch.rand(mask_shape, generator=g) > 0.4
        mask[..., 0] = True  # at least one key per row (fully masked rows are tested separately)
        _both(q, k, v, mask=mask)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape_q,T_k", SHAPES, ids=str)
def test_sdpa_additive_float_masks(shape_q, T_k, dtype):
    q, k, v = _qkv(shape_q, T_k, dtype=dtype, seed=2)
    g = torch.Generator().manual_seed(8)
    T_q = shape_q[-2]
    bias = torch.randn(T_q, T_k, generator=g, dtype=dtype) * 2  # e.g. ALiBi-like biases
    _both(q, k, v, mask=bias)
    bias = bias.masked_fill(torch.rand(T_q, T_k, generator=g) > 0.6, float("-inf"))
    bias[..., 0] = 0.0
    _both(q, k, v, mask=bias)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sdpa_gradients_match(dtype):
    q, k, v = _qkv((2, 3, 6, 8), 6, dtype=dtype, seed=3)
    mask = torch.rand(6, 6, generator=torch.Generator().manual_seed(0)) > 0.3
    mask[:, 0] = True
    grads = []
    for fn in (lambda a, b, c: scaled_dot_product_attention(a, b, c, mask=mask),
               lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=mask)):
        a, b, c = (t.clone().requires_grad_(True) for t in (q, k, v))
        (fn(a, b, c) * torch.arange(8, dtype=dtype)).sum().backward()
        grads.append((a.grad, b.grad, c.grad))
    for g1, g2 in zip(*grads):
        _record(("sdpa_grad", str(dtype)), g1, g2)
        torch.testing.assert_close(g1, g2, **TOL[dtype])


def test_sdpa_weights_are_a_distribution_and_reproduce_output():
    q, k, v = _qkv((2, 4, 7, 8), 9, seed=4)
    mask = torch.rand(7, 9, generator=torch.Generator().manual_seed(1)) > 0.5
    mask[:, 3] = True
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True)
    assert w.shape == (2, 4, 7, 9)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 7))
    assert (w >= 0).all() and (w[..., ~mask] == 0).all()
    torch.testing.assert_close(out, w @ v)
    # independent formula for the weights
    ref = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(~mask, -math.inf), -1)
    torch.testing.assert_close(w, ref)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fully_masked_rows_give_zeros_and_no_nan(kind):
    q, k, v = _qkv((2, 2, 4, 8), 5, seed=5)
    keep = torch.ones(4, 5, dtype=torch.bool)
    keep[1] = False  # query 1 may attend to nothing
    keep[3, 2:] = False
    mask = keep if kind == "bool" else torch.zeros(4, 5).masked_fill(~keep, float("-inf"))
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True)
    assert not out.isnan().any() and not w.isnan().any()
    assert torch.equal(out[:, :, 1], torch.zeros_like(out[:, :, 1]))
    assert torch.equal(w[:, :, 1], torch.zeros_like(w[:, :, 1]))
    torch.testing.assert_close(w[:, :, [0, 2, 3]].sum(-1), torch.ones(2, 2, 3))
    out.pow(2).sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and torch.isfinite(t.grad).all()
    assert torch.equal(q.grad[:, :, 1], torch.zeros_like(q.grad[:, :, 1]))
    # other rows still equal PyTorch's
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out[:, :, [0, 2, 3]], ref[:, :, [0, 2, 3]])


def test_dropout_on_weights_matches_manual_dropout_with_same_seed():
    q, k, v = _qkv((2, 3, 6, 8), 6, seed=6)
    mask = causal_mask(6)
    torch.manual_seed(123)
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=0.3, return_weights=True)
    _, w0 = scaled_dot_product_attention(q, k, v, mask=mask, return_weights=True)
    torch.manual_seed(123)
    manual = F.dropout(w0, p=0.3, training=True)
    torch.testing.assert_close(w, manual)
    torch.testing.assert_close(out, manual @ v)
    # dropped entries are zero, kept ones are scaled by 1/(1-p)
    kept = w != 0
    torch.testing.assert_close(w[kept], w0[kept] / 0.7)


def test_dropout_zero_is_identity_and_statistics():
    q, k, v = _qkv((4, 4, 16, 8), 16, seed=9)
    a = scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    b = scaled_dot_product_attention(q, k, v)
    assert torch.equal(a, b)
    torch.manual_seed(0)
    _, w0 = scaled_dot_product_attention(q, k, v, return_weights=True)
    runs = torch.stack([scaled_dot_product_attention(q, k, v, dropout_p=0.25, return_weights=True)[1]
                        for _ in range(200)])
    frac_dropped = (runs == 0).float().mean().item()
    assert abs(frac_dropped - 0.25) < 0.01, frac_dropped
    # unbiased: E[dropout(w)] = w
    torch.testing.assert_close(runs.mean(0).sum(-1).mean(), torch.tensor(1.0), atol=0.01, rtol=0)
    assert (runs.mean(0) - w0).abs().mean() < 0.01


def test_sdpa_errors():
    q, k, v = _qkv((2, 5, 8), 5)
    with pytest.raises(ValueError, match="last dimension"):
        scaled_dot_product_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="number of keys"):
        scaled_dot_product_attention(q, k, v[:, :3])
    for p in (-0.1, 1.0, 2):
        with pytest.raises(ValueError, match="dropout_p"):
            scaled_dot_product_attention(q, k, v, dropout_p=p)
    with pytest.raises(ValueError, match="does not broadcast"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not broadcast"):  # would broadcast the output up
        scaled_dot_product_attention(q, k, v, mask=torch.ones(3, 2, 5, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="dtype"):  # a 0/1 integer mask would be added silently
        scaled_dot_product_attention(q, k, v, mask=torch.ones(5, 5, dtype=torch.long))


def test_causal_and_padding_masks():
    m = causal_mask(4)
    assert m.dtype == torch.bool and torch.equal(m, torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))
    am = torch.tensor([[1, 1, 0], [1, 1, 1]])
    pm = padding_mask(am)
    assert pm.shape == (2, 1, 1, 3) and pm.dtype == torch.bool
    assert torch.equal(pm[:, 0, 0], am.bool())
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        padding_mask(torch.ones(3))


# ---------------------------------------------------------------- MultiHeadAttention

def _mha(seed=0, **kw):
    torch.manual_seed(seed)
    return MultiHeadAttention(32, 4, **kw).eval()


def test_split_merge_heads_round_trip_and_layout():
    m = _mha()
    x = torch.randn(3, 7, 32)
    h = m.split_heads(x)
    assert h.shape == (3, 4, 7, 8)
    assert torch.equal(m.merge_heads(h), x)
    # head i owns channels [i*D, (i+1)*D)
    assert torch.equal(h[1, 2, 5], x[1, 5, 16:24])


def _explicit_vs_sdpa(x, rope=None, causal=False, mask=None, cache=False, dtype=torch.float32, chunks=None):
    kw = dict(causal=causal, rope=rope)
    a = _mha(seed=1, **kw).to(dtype)
    b = _mha(seed=1, use_sdpa=True, **kw).to(dtype)
    if not cache:
        y1, y2 = a(x, mask=mask), b(x, mask=mask)
    else:
        c1 = KVCache(x.shape[0], 4, 8, 32, dtype=dtype)
        c2 = KVCache(x.shape[0], 4, 8, 32, dtype=dtype)
        y1, y2 = [], []
        start = 0
        for n in chunks:
            y1.append(a(x[:, start:start + n], kv_cache=c1))
            y2.append(b(x[:, start:start + n], kv_cache=c2))
            c1.advance(n)
            c2.advance(n)
            start += n
        y1, y2 = torch.cat(y1, 1), torch.cat(y2, 1)
    _record(("mha_explicit_vs_sdpa", str(dtype)), y1, y2)
    torch.testing.assert_close(y1, y2, **TOL[dtype])
    return y1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mha_sdpa_path_equals_explicit_path(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 9, 32, dtype=dtype)
    rope = RotaryEmbedding(8, 32).to(dtype)
    am = torch.ones(2, 9, dtype=torch.long)
    am[0, :3] = 0  # left padding: with causal, query 0..2 of row 0 see nothing
    bias = torch.randn(9, 9, dtype=dtype)
    dead = torch.zeros(2, 1, 9, 9, dtype=dtype)
    dead[0, :, 4] = float("-inf")  # query 4 of row 0 sees nothing: both paths give zeros
    for causal in (False, True):
        for r in (None, rope):
            _explicit_vs_sdpa(x, rope=r, causal=causal, dtype=dtype)
            _explicit_vs_sdpa(x, rope=r, causal=causal, mask=padding_mask(am), dtype=dtype)
            _explicit_vs_sdpa(x, rope=r, causal=causal, mask=bias, dtype=dtype)
            _explicit_vs_sdpa(x, rope=r, causal=causal, mask=dead, dtype=dtype)
            _explicit_vs_sdpa(x, rope=r, causal=causal, mask=torch.rand(2, 1, 9, 9) > 0.3, dtype=dtype)
        _explicit_vs_sdpa(x, rope=rope, causal=True, cache=True, chunks=[1] * 9, dtype=dtype)
        _explicit_vs_sdpa(x, rope=rope, causal=True, cache=True, chunks=[4, 1, 3, 1], dtype=dtype)
        _explicit_vs_sdpa(x, causal=True, cache=True, chunks=[2, 5, 2], dtype=dtype)


def test_mha_sdpa_path_no_nan_for_fully_masked_rows():
    x = torch.randn(2, 6, 32, requires_grad=True)
    am = torch.ones(2, 6, dtype=torch.long)
    am[0, :2] = 0
    for use_sdpa in (False, True):
        m = _mha(seed=2, causal=True, use_sdpa=use_sdpa)
        y = m(x, mask=padding_mask(am))
        assert torch.isfinite(y).all()
        y.sum().backward()
        assert torch.isfinite(x.grad).all()
        x.grad = None


def test_mha_weights_per_head():
    m = _mha(causal=True)
    x = torch.randn(2, 5, 32)
    y, w = m(x, return_weights=True)
    assert w.shape == (2, 4, 5, 5)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 5))
    assert (w.triu(1) == 0).all()
    torch.testing.assert_close(y, m(x))
    # the sdpa path falls back to the explicit one when weights are asked for
    y2, w2 = _mha(causal=True, use_sdpa=True)(x, return_weights=True)
    torch.testing.assert_close(w2, w)


def _copy_to_torch_mha(ours: MultiHeadAttention, dtype=torch.float32) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(ours.d_model, ours.num_heads, batch_first=True, dtype=dtype).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.qkv.weight)  # (3C, C): [W_q; W_k; W_v]
        ref.in_proj_bias.copy_(ours.qkv.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_mha_equals_torch_multihead_attention(dtype, causal, padded):
    ours = _mha(seed=3, causal=causal).to(dtype)
    with torch.no_grad():  # non-zero biases so that they are checked too
        ours.qkv.bias.normal_()
        ours.out_proj.bias.normal_()
    ref = _copy_to_torch_mha(ours, dtype)
    torch.manual_seed(4)
    B, T = 3, 7
    x = torch.randn(B, T, 32, dtype=dtype)
    am = torch.ones(B, T, dtype=torch.long)
    if padded:
        am[0, 5:] = 0  # right padding
        am[2, 3:] = 0
    y, w = ours(x, mask=padding_mask(am) if padded else None, return_weights=True)
    # torch's conventions are the opposite of ours: True = NOT allowed
    attn_mask = ~causal_mask(T) if causal else None
    kpm = (am == 0) if padded else None
    y_ref, w_avg = ref(x, x, x, attn_mask=attn_mask, key_padding_mask=kpm, need_weights=True,
                       average_attn_weights=True)
    _, w_heads = ref(x, x, x, attn_mask=attn_mask, key_padding_mask=kpm, need_weights=True,
                     average_attn_weights=False)
    d = _record(("nn.MultiheadAttention", str(dtype)), y, y_ref)
    torch.testing.assert_close(y, y_ref, **TOL[dtype], msg=lambda m: f"{m} (max diff {d:.3g})")
    _record(("nn.MultiheadAttention_weights", str(dtype)), w.mean(1), w_avg)
    torch.testing.assert_close(w.mean(1), w_avg, **TOL[dtype])
    torch.testing.assert_close(w, w_heads, **TOL[dtype])


def test_mha_fused_and_separate_qkv_agree():
    fused = _mha(seed=5, causal=True)
    sep = MultiHeadAttention(32, 4, causal=True, fused_qkv=False).eval()
    with torch.no_grad():
        wq, wk, wv = fused.qkv.weight.split(32, 0)
        bq, bk, bv = fused.qkv.bias.split(32, 0)
        for proj, w, b in ((sep.q_proj, wq, bq), (sep.k_proj, wk, bk), (sep.v_proj, wv, bv)):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        sep.out_proj.load_state_dict(fused.out_proj.state_dict())
    x = torch.randn(2, 6, 32)
    torch.testing.assert_close(sep(x), fused(x))
    assert not hasattr(sep, "qkv") and not hasattr(fused, "q_proj")


@pytest.mark.parametrize("chunks", [[1] * 10, [3, 3, 4], [5, 1, 1, 3], [10]])
@pytest.mark.parametrize("use_rope", [False, True])
@pytest.mark.parametrize("use_sdpa", [False, True])
def test_mha_kv_cache_matches_full_pass(chunks, use_rope, use_sdpa):
    rope = RotaryEmbedding(8, 16) if use_rope else None
    m = _mha(seed=6, causal=True, rope=rope, use_sdpa=use_sdpa)
    x = torch.randn(2, 10, 32, generator=torch.Generator().manual_seed(1))
    full = m(x)
    cache = KVCache(2, 4, 8, 16)
    outs, start = [], 0
    for n in chunks:
        # The cache owns the position: attention writes at cache.length, the caller advances.
        outs.append(m(x[:, start:start + n], kv_cache=cache))
        cache.advance(n)
        start += n
        assert cache.length == start
    _record(("kv_cache_mha", "torch.float32"), torch.cat(outs, 1), full)
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-5, atol=1e-6)
    cache.reset()
    assert cache.length == 0
    torch.testing.assert_close(m(x[:, :4], kv_cache=cache), full[:, :4], rtol=1e-5, atol=1e-6)


def test_kv_cache_overflow_and_shape_errors():
    m = _mha(causal=True)
    cache = KVCache(2, 4, 8, max_seq_len=5)
    m(torch.randn(2, 4, 32), kv_cache=cache)
    cache.advance(4)
    before = cache.k.clone()
    with pytest.raises(ValueError, match="overflow"):
        m(torch.randn(2, 2, 32), kv_cache=cache)
    assert cache.length == 4 and torch.equal(cache.k, before)  # a failed write changes nothing
    m(torch.randn(2, 1, 32), kv_cache=cache)
    cache.advance(1)
    with pytest.raises(ValueError, match="overflow"):
        m(torch.randn(2, 1, 32), kv_cache=cache)
    with pytest.raises(ValueError, match="overflow"):
        cache.advance(1)
    with pytest.raises(ValueError, match="KV cache holds"):
        m(torch.randn(3, 1, 32), kv_cache=KVCache(2, 4, 8, 5))
    with pytest.raises(ValueError, match="layer=1"):
        _mha(causal=True, layer_idx=1)(torch.randn(2, 1, 32), kv_cache=KVCache(2, 4, 8, 5))
    with pytest.raises(ValueError, match="layer_idx=-1"):
        _mha(causal=True, layer_idx=-1)
    with pytest.raises(ValueError, match="num_layers"):
        KVCache(2, 4, 8, 5, num_layers=0)


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", "none"])
@pytest.mark.parametrize("norm_position", ["pre", "post"])
@pytest.mark.parametrize("attn_impl", ["explicit", "sdpa"])
def test_transformer_kv_cache_decoding_matches_full_pass(pos, norm_position, attn_impl):
    cfg = TransformerConfig(vocab_size=41, d_model=32, num_heads=4, num_layers=2, max_seq_len=16,
                            pos_encoding=pos, norm_position=norm_position, attn_impl=attn_impl,
                            norm="rmsnorm" if pos == "rope" else "layernorm")
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    ids = torch.randint(0, 41, (3, 16), generator=torch.Generator().manual_seed(2))
    full, _ = model(ids)
    for chunks in ([1] * 16, [5, 1, 4, 6]):
        cache = model.make_kv_cache(3)
        outs, start = [], 0
        for n in chunks:
            logits, _ = model(ids[:, start:start + n], kv_cache=cache)
            outs.append(logits)
            start += n
        _record(("kv_cache_transformer", "torch.float32"), torch.cat(outs, 1), full)
        torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="max_seq_len"):  # the cache is full: 16 positions
        model(ids[:, :1], kv_cache=cache)


def test_mha_input_and_mask_errors():
    m = _mha(causal=True)
    x = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match="d_model=32"):
        m(torch.randn(2, 5, 16))
    with pytest.raises(ValueError, match=r"\(B, T, d_model"):
        m(torch.randn(5, 32))
    for bad in (torch.ones(3, 3, dtype=torch.bool), torch.ones(5, 4), torch.ones(3, 1, 5, 5, dtype=torch.bool),
                torch.ones(2, 4, 5, 6, dtype=torch.bool)):
        with pytest.raises(ValueError, match="does not broadcast"):
            m(x, mask=bad)
        with pytest.raises(ValueError, match="does not broadcast"):
            _mha(use_sdpa=True)(x, mask=bad)
    with pytest.raises(TypeError, match="dtype"):
        m(x, mask=torch.ones(5, 5, dtype=torch.int64))
    for d_model, heads in ((32, 3), (32, 0), (30, 4)):
        with pytest.raises(ValueError, match="num_heads"):
            MultiHeadAttention(d_model, heads)


# --- Issue 18: CPU bf16 autocast runs the fused attention in float32 ----------------------------

def _spy_sdpa(monkeypatch):
    """Record the dtypes F.scaled_dot_product_attention receives."""
    seen, real = [], F.scaled_dot_product_attention

    def spy(q, k, v, *args, **kwargs):
        seen.append((q.dtype, k.dtype, v.dtype))
        autocast_at_call.append(torch.is_autocast_enabled("cpu"))
        return real(q, k, v, *args, **kwargs)

    autocast_at_call = []
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    spy.autocast_at_call = autocast_at_call
    seen_autocast[id(seen)] = autocast_at_call
    return seen


seen_autocast: dict = {}


def test_float32_qkv_under_autocast_take_the_float32_path(monkeypatch):
    """With QK-norm and value embeddings q, k and v reach the attention in float32 under
    autocast (the float32 gains and tables promote them), and autocast would still cast the fused
    kernel to bf16 -- 5x slower on the CPU. The kernel must run with autocast switched off."""
    torch.manual_seed(8)
    model = Transformer(TransformerConfig(vocab_size=16, d_model=32, num_heads=4, num_layers=1, max_seq_len=16,
                                          attn_impl="sdpa", norm="rmsnorm", pos_encoding="rope", qk_norm=True,
                                          value_embeddings=True, bias=False))
    ids = torch.randint(16, (2, 16), generator=torch.Generator().manual_seed(9))
    seen = _spy_sdpa(monkeypatch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(ids, ids)
    assert seen == [(torch.float32,) * 3] and seen_autocast[id(seen)] == [False]


@pytest.mark.parametrize("use_sdpa", [False, True])
@pytest.mark.parametrize("kv,padded", [(4, False), (2, True)])
def test_mha_under_cpu_bf16_autocast_stays_close_to_float32(monkeypatch, use_sdpa, kv, padded):
    """Under CPU autocast the SDPA path runs the attention itself in float32 (its inputs are
    cast up) and hands bf16 on; both paths stay within bf16 rounding of the float32 module."""
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 4, causal=True, num_kv_heads=kv, use_sdpa=use_sdpa,
                           rope=RotaryEmbedding(8, 16)).eval()
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(1))
    mask = padding_mask(torch.tensor([[1] * 9, [1] * 6 + [0] * 3])) if padded else None
    with torch.no_grad():
        ref = m(x, mask=mask)
        seen = _spy_sdpa(monkeypatch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = m(x, mask=mask)
    assert out.dtype == torch.bfloat16 and ref.dtype == torch.float32
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)
    assert (out.float() - ref).abs().max() > 0  # bf16 really ran (the projections)
    assert seen == ([(torch.float32,) * 3] if use_sdpa else [])


def test_sdpa_path_of_a_bf16_module_runs_in_float32(monkeypatch):
    """A module whose weights are bf16 (no autocast) also gets float32 fused attention on the
    CPU and a bf16 result."""
    torch.manual_seed(2)
    m = MultiHeadAttention(32, 4, causal=True, use_sdpa=True).eval()
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m(x)
        m = m.to(torch.bfloat16)
        seen = _spy_sdpa(monkeypatch)
        out = m(x.bfloat16())
    assert out.dtype == torch.bfloat16 and seen == [(torch.float32,) * 3]
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_float64_module_under_cpu_autocast_stays_float64(use_sdpa):
    """Autocast does not touch float64 operations, so a float64 module computes as without it
    (the float32 attention path is only for bf16 inputs)."""
    torch.manual_seed(6)
    m = MultiHeadAttention(32, 4, causal=True, num_kv_heads=2, use_sdpa=use_sdpa).double().eval()
    x = torch.randn(2, 7, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ref = m(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = m(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_transformer_under_cpu_bf16_autocast_trains():
    """A whole sdpa model under autocast: logits close to float32's, gradients reach the float32
    weights (the attention's float32 island is differentiable)."""
    torch.manual_seed(4)
    model = Transformer(TransformerConfig(vocab_size=16, d_model=32, num_heads=2, num_layers=2, max_seq_len=16,
                                          attn_impl="sdpa", norm="rmsnorm", pos_encoding="rope", qk_norm=True))
    ids = torch.randint(16, (3, 16), generator=torch.Generator().manual_seed(5))
    ref_loss = model(ids, ids)[1]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(ids, ids)[1]
    assert abs(loss.item() - ref_loss.item()) < 0.05 * ref_loss.item()
    loss.backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all()
               for p in model.parameters())
