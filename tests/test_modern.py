"""The modern-decoder options: grouped-query attention, sliding window, RoPE scaling, Q/K/V bias,
mixture of experts, QK-norm, value embeddings -- each checked against a written-out reference
and its invalid values."""

import math

import pytest
import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.attention import (
    KVCache,
    MultiHeadAttention,
    allowed_keys,
    scaled_dot_product_attention,
    sliding_window_mask,
)
from fundamentallm.moe import MoEFeedForward, load_balancing_loss
from fundamentallm.positions import RotaryEmbedding, rope_frequencies

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def _cfg(**kw):
    args = dict(vocab_size=31, d_model=32, num_heads=4, num_layers=2, max_seq_len=24, norm="rmsnorm",
                pos_encoding="rope", activation="swiglu", bias=False)
    return TransformerConfig(**{**args, **kw})


@pytest.mark.parametrize("kv", [1, 2, 4])
@pytest.mark.parametrize("use_sdpa", [False, True])
def test_gqa_equals_mha_with_repeated_kv_heads(kv, use_sdpa):
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 4, causal=True, num_kv_heads=kv, use_sdpa=use_sdpa).eval()
    assert m.qkv.weight.shape == (32 + 2 * kv * 8, 32)
    x = torch.randn(2, 9, 32)
    q, k, v = m.project_qkv(x)
    assert q.shape == (2, 4, 9, 8) and k.shape == v.shape == (2, kv, 9, 8)
    # written out: query head h reads key/value head h // (4 // kv)
    heads = [scaled_dot_product_attention(q[:, h], k[:, h // (4 // kv)], v[:, h // (4 // kv)],
                                          mask=torch.ones(9, 9, dtype=torch.bool).tril()) for h in range(4)]
    ref = m.out_proj(m.merge_heads(torch.stack(heads, 1)))
    torch.testing.assert_close(m(x), ref, rtol=1e-5, atol=1e-6)


def test_sliding_window_masks():
    assert torch.equal(sliding_window_mask(5, 2), torch.tensor(
        [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]], dtype=torch.bool))
    assert torch.equal(sliding_window_mask(6, 6), torch.ones(6, 6, dtype=torch.bool).tril())
    # a cached step: the last 3 queries of 8 positions, window 4
    assert torch.equal(allowed_keys(3, 8, 5, window=4), sliding_window_mask(8, 4)[5:])


@pytest.mark.parametrize("attn_impl", ["explicit", "sdpa"])
@pytest.mark.parametrize("kv", [1, 2])
def test_sliding_window_and_gqa_cached_decoding_equals_full_pass(attn_impl, kv):
    torch.manual_seed(1)
    model = Transformer(_cfg(num_kv_heads=kv, sliding_window=5, attn_impl=attn_impl)).eval()
    ids = torch.randint(0, 31, (3, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full, _ = model(ids)
        for chunks in ([1] * 24, [7, 1, 9, 7]):
            cache = model.make_kv_cache(3)
            assert cache.k.shape == (2, 3, kv, 24, 8)  # only the KV heads are stored
            assert cache.bytes_per_token() == 2 * 2 * 3 * kv * 8 * 4
            outs, start = [], 0
            for n in chunks:
                outs.append(model(ids[:, start:start + n], kv_cache=cache)[0])
                start += n
            assert cache.length == 24
            torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-5, atol=1e-5)
        # the window is real: with 2 layers of window 5, the last token reaches back 2 * 4 = 8
        # positions (to 15); position 14 cannot change its logits, position 15 can
        changed = ids.clone()
        changed[:, 14] = (changed[:, 14] + 1) % 31
        assert torch.allclose(model(changed)[0][:, -1], full[:, -1])
        changed[:, 15] = (changed[:, 15] + 1) % 31
        assert not torch.allclose(model(changed)[0][:, -1], full[:, -1])


def test_sliding_window_training_gradients_stay_in_window():
    torch.manual_seed(3)
    model = Transformer(_cfg(num_layers=1, sliding_window=3, pos_encoding="learned"))
    emb = model.token_embedding.weight
    ids = torch.arange(10).unsqueeze(0)
    x = model.token_embedding(ids).detach().requires_grad_(True)
    a = model.blocks[0].attn(x)
    a[0, 9].sum().backward()
    touched = x.grad[0].abs().sum(-1) > 0
    assert touched.tolist() == [False] * 7 + [True] * 3
    assert emb.shape == (31, 32)


def test_rope_frequencies_linear_and_llama3():
    base = rope_frequencies(16, 500.0)
    torch.testing.assert_close(rope_frequencies(16, 500.0, {"rope_type": "linear", "factor": 4.0}), base / 4)
    scaled = rope_frequencies(16, 500.0, LLAMA3)
    wavelen = 2 * math.pi / base
    fast, slow = wavelen < 64 / 4, wavelen > 64 / 1
    assert fast.any() and slow.any() and (~fast & ~slow).any()
    torch.testing.assert_close(scaled[fast], base[fast])  # local pairs kept
    torch.testing.assert_close(scaled[slow], base[slow] / 8)  # long-range pairs slowed 8x
    mid = ~fast & ~slow
    assert ((scaled[mid] < base[mid]) & (scaled[mid] > base[mid] / 8)).all()
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf_cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, rope_parameters={
        "rope_theta": 500.0, **LLAMA3})
    hf_inv, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_cfg, "cpu")
    torch.testing.assert_close(scaled.float(), hf_inv.float())
    rope = RotaryEmbedding(16, 32, 500.0, scaling=LLAMA3)
    assert rope.cos.shape == (32, 16)


def test_qkv_bias_independent_of_bias():
    m = Transformer(_cfg(qkv_bias=True))
    assert m.blocks[0].attn.qkv.bias is not None and m.blocks[0].attn.out_proj.bias is None
    assert Transformer(_cfg(bias=True, qkv_bias=False)).blocks[0].attn.qkv.bias is None
    assert Transformer(_cfg(bias=True)).blocks[0].attn.qkv.bias is not None  # None follows bias


def test_load_balancing_loss_bounds():
    E, N, k = 4, 64, 2
    uniform = torch.full((N, E), 1 / E)
    idx = torch.stack([torch.arange(N) % E, (torch.arange(N) + 1) % E], 1)
    assert load_balancing_loss(uniform, idx, E).item() == pytest.approx(k)
    collapsed = torch.zeros(N, E)
    collapsed[:, :2] = 0.5
    worst = load_balancing_loss(collapsed, torch.tensor([[0, 1]] * N), E)
    assert worst.item() == pytest.approx(k * E / 2) and worst > k


def test_moe_feedforward_equals_written_out_mixture():
    torch.manual_seed(4)
    moe = MoEFeedForward(16, 24, num_experts=4, top_k=2).eval()
    x = torch.randn(2, 5, 16)
    y = moe(x)
    assert y.shape == x.shape and moe.expert_counts.sum() == 2 * 5 * 2
    flat = x.reshape(-1, 16)
    probs = torch.softmax(moe.router(flat), -1)
    ref = torch.zeros_like(flat)
    for n in range(flat.shape[0]):
        top = probs[n].topk(2)
        for p, e in zip(top.values / top.values.sum(), top.indices):
            ref[n] += p * moe.experts[int(e)](flat[n:n + 1])[0]
    torch.testing.assert_close(y.reshape(-1, 16), ref, rtol=1e-5, atol=1e-6)
    assert moe.aux_loss.item() >= 2 - 1e-6


def test_moe_transformer_loss_carries_aux_in_training_only():
    torch.manual_seed(5)
    model = Transformer(_cfg(moe_experts=4, moe_top_k=2, moe_aux_loss_coef=0.5))
    ids = torch.randint(0, 31, (2, 12), generator=torch.Generator().manual_seed(6))
    _, train_loss = model(ids, ids)
    aux = model.moe_aux_loss()
    model.eval()
    logits, eval_loss = model(ids, ids)
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
    torch.testing.assert_close(eval_loss, ce)
    torch.testing.assert_close(train_loss.detach(), ce + 0.5 * aux.detach())
    model.train()
    model(ids, ids)[1].backward()
    assert model.blocks[0].ff.router.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("kw,word", [
    (dict(num_kv_heads=3), "num_kv_heads=3"),
    (dict(num_kv_heads=0), "num_kv_heads=0"),
    (dict(sliding_window=0), "sliding_window=0"),
    (dict(sliding_window=4, causal=False), "causal"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 2.0}), "rope_type"),
    (dict(rope_scaling={"rope_type": "linear"}), "missing"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0, "x": 1}), "unknown"),
    (dict(rope_scaling={"rope_type": "linear", "factor": -1.0}), "factor"),
    (dict(rope_scaling={**LLAMA3, "low_freq_factor": 5.0}), "low_freq_factor"),
    (dict(rope_scaling={"rope_type": "linear", "factor": 2.0}, pos_encoding="learned"), "pos_encoding='rope'"),
    (dict(rope_scaling="llama3"), "dict"),
    (dict(qkv_bias=1), "qkv_bias"),
    (dict(moe_experts=1), "moe_experts=1"),
    (dict(moe_experts=-2), "moe_experts"),
    (dict(moe_experts=4, moe_top_k=5), "moe_top_k=5"),
    (dict(moe_aux_loss_coef=-0.1), "moe_aux_loss_coef"),
])
def test_invalid_modern_options(kw, word):
    with pytest.raises(ValueError) as err:
        _cfg(**kw)
    assert word in str(err.value)


def test_kv_cache_constructor_errors():
    with pytest.raises(ValueError, match="num_kv_heads"):
        KVCache(1, 0, 8, 16)
    with pytest.raises(ValueError, match="sliding_window"):
        MultiHeadAttention(32, 4, causal=False, sliding_window=3)
    with pytest.raises(ValueError, match="num_kv_heads"):
        MultiHeadAttention(32, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_experts"):
        MoEFeedForward(8, 8, num_experts=1)
    with pytest.raises(ValueError, match="top_k"):
        MoEFeedForward(8, 8, num_experts=2, top_k=3)


def test_modern_config_checkpoint_roundtrip(tmp_path):
    from fundamentallm import load_checkpoint, save_checkpoint

    cfg = _cfg(num_kv_heads=2, sliding_window=6, rope_scaling=dict(LLAMA3), qkv_bias=True, moe_experts=3)
    torch.manual_seed(7)
    model = Transformer(cfg).eval()
    save_checkpoint(tmp_path / "ckpt", model, config=cfg)
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.config == cfg
    other = Transformer(loaded.config).eval()
    load_checkpoint(tmp_path / "ckpt", model=other)
    ids = torch.randint(0, 31, (2, 10), generator=torch.Generator().manual_seed(8))
    torch.testing.assert_close(other(ids)[0], model(ids)[0])


# --- Issue 18: QK-norm, value embeddings, ReLU² -----------------------------------------------------

def _rms(t, gain, eps):
    return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps) * gain


def _rope(t, base=10000.0):
    """Half-rotation RoPE written out: channel i pairs with i + D/2, angle pos · base^(-2i/D)."""
    T, D = t.shape[-2], t.shape[-1]
    inv = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv).float()  # (T, D/2)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = t[..., :D // 2], t[..., D // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def _attend(q, k, v, groups):
    """Causal softmax attention, query head h reading key/value head h // groups."""
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = q @ k.mT / math.sqrt(q.shape[-1])
    T = q.shape[-2]
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("use_sdpa", [False, True])
@pytest.mark.parametrize("with_ve", [False, True])
def test_qk_norm_and_value_embeds_equal_written_out_attention(use_sdpa, with_ve):
    """QK-norm: an RMSNorm (its own gain per channel) on every head's q and k, before RoPE;
    value embeddings: (B, T, H_kv·D) added to the values, split into the key/value heads."""
    torch.manual_seed(9)
    m = MultiHeadAttention(32, 4, causal=True, num_kv_heads=2, qk_norm=True, norm_eps=1e-5,
                           rope=RotaryEmbedding(8, 16), use_sdpa=use_sdpa).eval()
    with torch.no_grad():  # gains away from 1, different for q and k
        m.q_norm.weight.uniform_(0.5, 2.0)
        m.k_norm.weight.uniform_(0.5, 2.0)
    assert m.q_norm.weight.shape == m.k_norm.weight.shape == (8,)
    g = torch.Generator().manual_seed(10)
    x = torch.randn(2, 9, 32, generator=g)
    ve = torch.randn(2, 9, 16, generator=g) if with_ve else None
    with torch.no_grad():
        wq, wk, wv = m.qkv.weight.split([32, 16, 16])
        bq, bk, bv = m.qkv.bias.split([32, 16, 16])
        q = (x @ wq.T + bq).view(2, 9, 4, 8).transpose(1, 2)
        k = (x @ wk.T + bk).view(2, 9, 2, 8).transpose(1, 2)
        v = (x @ wv.T + bv + (ve if with_ve else 0)).view(2, 9, 2, 8).transpose(1, 2)
        q = _rope(_rms(q, m.q_norm.weight, 1e-5))
        k = _rope(_rms(k, m.k_norm.weight, 1e-5))
        y = _attend(q, k, v, 2).transpose(1, 2).reshape(2, 9, 32)
        ref = y @ m.out_proj.weight.T + m.out_proj.bias
        torch.testing.assert_close(m(x, value_embeds=ve), ref, rtol=1e-5, atol=1e-5)
    plain = MultiHeadAttention(32, 4, causal=True, num_kv_heads=2, rope=RotaryEmbedding(8, 16)).eval()
    plain.load_state_dict({k: v for k, v in m.state_dict().items() if "_norm" not in k})
    assert not torch.allclose(plain(x), m(x))  # the norm changes the output
    assert plain.q_norm is None and sum(p.numel() for p in m.parameters()) - sum(
        p.numel() for p in plain.parameters()) == 16


def test_value_embeddings_in_the_model():
    """One nn.Embedding(vocab, H_kv·D) per layer; with those tables at zero the model computes
    exactly what the same weights without value embeddings compute."""
    torch.manual_seed(11)
    cfg = _cfg(num_kv_heads=2, value_embeddings=True)
    model = Transformer(cfg).eval()
    assert len(model.value_embeds) == 2
    assert all(isinstance(e, torch.nn.Embedding) and e.weight.shape == (31, 16) for e in model.value_embeds)
    plain = Transformer(_cfg(num_kv_heads=2)).eval()
    assert plain.value_embeds is None
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("value_embeds")})
    ids = torch.randint(0, 31, (2, 12), generator=torch.Generator().manual_seed(12))
    with torch.no_grad():
        assert not torch.allclose(model(ids)[0], plain(ids)[0])
        for e in model.value_embeds:
            e.weight.zero_()
        torch.testing.assert_close(model(ids)[0], plain(ids)[0], rtol=0, atol=0)
    # and every table is trained
    model(ids, ids)[1].backward()
    assert all(e.weight.grad is not None and e.weight.grad.abs().sum() > 0 for e in model.value_embeds)


def test_qk_norm_and_value_embeddings_parameter_counts():
    base = Transformer(_cfg(num_kv_heads=2)).num_parameters()
    L, D, kv, V = 2, 8, 2, 31
    assert Transformer(_cfg(num_kv_heads=2, qk_norm=True)).num_parameters() == base + L * 2 * D
    assert Transformer(_cfg(num_kv_heads=2, value_embeddings=True)).num_parameters() == base + L * V * kv * D
    both = Transformer(_cfg(num_kv_heads=2, qk_norm=True, value_embeddings=True))
    assert both.num_parameters() == base + L * 2 * D + L * V * kv * D


@pytest.mark.parametrize("attn_impl", ["explicit", "sdpa"])
def test_qk_norm_value_embeddings_cached_decoding_equals_full_pass(attn_impl, chunked_logits):
    from fundamentallm.generation import generate

    torch.manual_seed(13)
    model = Transformer(_cfg(num_kv_heads=2, qk_norm=True, value_embeddings=True, attn_impl=attn_impl,
                             activation="relu2", tie_weights=False)).eval()
    with torch.no_grad():  # non-trivial gains and value tables
        for name, p in model.named_parameters():
            if "_norm" in name:
                p.uniform_(0.5, 2.0)
    ids = torch.randint(0, 31, (3, 24), generator=torch.Generator().manual_seed(14))
    with torch.no_grad():
        full, _ = model(ids)
        for chunks in ([1] * 24, [7, 1, 9, 7]):
            torch.testing.assert_close(chunked_logits(model, ids, chunks)[0], full, rtol=1e-5, atol=1e-5)
        maps = model.attention_maps(ids)  # the return_weights path runs with both options too
        assert len(maps) == 2 and maps[0].shape == (3, 4, 24, 24)
        torch.testing.assert_close(maps[1].sum(-1), torch.ones(3, 4, 24))
        assert torch.equal(maps[0].triu(1), torch.zeros_like(maps[0]))
    prompt = ids[:, :5]
    with_cache = generate(model, prompt, 15, greedy=True, use_cache=True)
    without = generate(model, prompt, 15, greedy=True, use_cache=False)
    assert with_cache.shape == (3, 20) and torch.equal(with_cache, without)


def test_qk_norm_value_embeddings_relu2_checkpoint_roundtrip(tmp_path):
    from fundamentallm import load_checkpoint, save_checkpoint

    cfg = _cfg(num_kv_heads=2, qk_norm=True, value_embeddings=True, activation="relu2", tie_weights=False)
    assert cfg.ff_dim == 4 * 32  # ReLU² keeps the 4·d_model default
    torch.manual_seed(15)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        model.blocks[0].attn.q_norm.weight.fill_(1.5)
    save_checkpoint(tmp_path / "ckpt", model, config=cfg)
    loaded = load_checkpoint(tmp_path / "ckpt")
    assert loaded.config == cfg and loaded.config.qk_norm and loaded.config.value_embeddings
    assert loaded.config.activation == "relu2"
    assert torch.equal(loaded.model.blocks[0].attn.q_norm.weight, model.blocks[0].attn.q_norm.weight)
    assert torch.equal(loaded.model.value_embeds[1].weight, model.value_embeds[1].weight)
    ids = torch.randint(0, 31, (2, 10), generator=torch.Generator().manual_seed(16))
    torch.testing.assert_close(loaded.model.eval()(ids)[0], model(ids)[0], rtol=0, atol=0)


@pytest.mark.parametrize("kw,word", [
    (dict(qk_norm=1), "qk_norm"),
    (dict(qk_norm="yes"), "qk_norm"),
    (dict(value_embeddings=None), "value_embeddings"),
    (dict(value_embeddings=True, causal=False), "causal=True"),
])
def test_invalid_qk_norm_and_value_embeddings(kw, word):
    with pytest.raises(ValueError) as err:
        _cfg(**kw)
    assert word in str(err.value)
