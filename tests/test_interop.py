"""Hugging Face parity: GPT-2, LLaMA (MHA and GQA, Llama-3 RoPE scaling), Qwen2, Mistral and
Mixtral with random weights (no downloads) imported into our Transformer give the same logits and
the same greedy generations."""

import logging

import pytest
import torch

transformers = pytest.importorskip("transformers")

from fundamentallm import Transformer  # noqa: E402
from fundamentallm.interop import (  # noqa: E402
    convert_rope_style,
    from_hf_gpt2,
    from_hf_llama,
    permute_rope_weights,
)

logging.getLogger("transformers").setLevel(logging.ERROR)  # small vocabularies: bos/eos warnings

V, C, L, H, T = 97, 48, 3, 4, 24
# Measured max |ours - HF| of the logits (float32 unless noted), filled as the tests run.
MAX_DIFF: dict = {}
MAX_DIFF_TITLE = "interop max |ours - HF| logits"  # printed by conftest after this file's tests


def _record(key, a, b):
    d = (a - b).abs().max().item()
    MAX_DIFF[key] = max(MAX_DIFF.get(key, 0.0), d)
    bound = 1e-4
    # float32 bounds are relative to the magnitude compared (at least 1): 1e-4 is ~800 float32
    # epsilons (1.2e-7) of the largest value, room for reordered sums, not for a wrong formula
    scale = max(1.0, b.abs().max().item()) if b.numel() else 1.0
    assert d <= bound * scale, f"{key}: max |difference| {d:.2e} over {bound:.0e} x {scale:.3g}"
    return d


def _perturb_norms(model, seed):
    """HF initialises norm weights to 1 and biases to 0; randomise them so they are checked."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name or "norm" in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.2)


def _gpt2(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=H,
                                  initializer_range=0.1, bos_token_id=0, eos_token_id=0, **kw)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    _perturb_norms(model, seed)
    return model


def _llama(seed=0, **kw):
    torch.manual_seed(seed)
    args = dict(vocab_size=V, hidden_size=C, intermediate_size=80, num_hidden_layers=L,
                num_attention_heads=H, num_key_value_heads=H, max_position_embeddings=T,
                rms_norm_eps=1e-5, rope_theta=500.0, initializer_range=0.1, bos_token_id=0,
                eos_token_id=0, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**args, **kw})).eval()
    _perturb_norms(model, seed)
    return model


def _ids(B=3, n=T, seed=1):
    return torch.randint(0, V, (B, n), generator=torch.Generator().manual_seed(seed))


def _compare_logits(hf, ours, key, ids=None, atol=1e-4):
    ids = _ids() if ids is None else ids
    with torch.no_grad():
        ref = hf(ids).logits
        mine, _ = ours(ids)
    assert ref.std() > 0.3, "logits too small for a meaningful comparison"
    d = _record(key, mine, ref)
    assert d <= atol, f"{key}: max |ours - HF| = {d:.3g} > {atol}"
    return d


# ---------------------------------------------------------------- GPT-2

def test_gpt2_logits_match_full_length_batch():
    hf = _gpt2()
    ours = from_hf_gpt2(hf)
    c = ours.config
    assert (c.norm, c.pos_encoding, c.activation, c.bias, c.tie_weights, c.norm_position) == \
        ("layernorm", "learned", "gelu", True, True, "pre")
    assert (c.vocab_size, c.d_model, c.num_heads, c.num_layers, c.max_seq_len, c.ff_dim) == (V, C, H, L, T, 4 * C)
    assert ours.lm_head.weight is ours.token_embedding.weight and not ours.training
    _compare_logits(hf, ours, "gpt2")
    _compare_logits(hf, ours, "gpt2", ids=_ids(B=5, n=7, seed=3))


def test_gpt2_from_state_dict_and_without_prefix():
    hf = _gpt2(seed=1, n_inner=72, layer_norm_epsilon=1e-4)
    with pytest.raises(ValueError, match="num_heads is required"):
        from_hf_gpt2(hf.state_dict())
    ours = from_hf_gpt2(hf.state_dict(), num_heads=H, layer_norm_eps=1e-4)
    assert ours.config.ff_dim == 72 and ours.config.norm_eps == 1e-4
    _compare_logits(hf, ours, "gpt2")
    # a GPT2Model state dict has no "transformer." prefix and no lm_head
    ours2 = from_hf_gpt2(hf.transformer.state_dict(), num_heads=H, layer_norm_eps=1e-4)
    _compare_logits(hf, ours2, "gpt2")


def test_gpt2_float64():
    hf = _gpt2(seed=2).double()
    ours = from_hf_gpt2(hf)
    assert ours.lm_head.weight.dtype == torch.float32  # our model is built in float32 ...
    ours = ours.double()  # ... and converted like any nn.Module
    ids = _ids()
    with torch.no_grad():
        d = _record("gpt2 float64", ours(ids)[0], hf(ids).logits)
    assert d < 1e-10


def test_gpt2_padding_mask_matches():
    hf = _gpt2(seed=3)
    ours = from_hf_gpt2(hf)
    ids = _ids(B=2, n=12)
    am = torch.ones_like(ids)
    am[1, 8:] = 0
    with torch.no_grad():
        ref = hf(ids, attention_mask=am).logits
        mine, _ = ours(ids, attention_mask=am)
    _record("gpt2", mine[0], ref[0])
    _record("gpt2", mine[1, :8], ref[1, :8])
    torch.testing.assert_close(mine[0], ref[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(mine[1, :8], ref[1, :8], atol=1e-4, rtol=0)


def _greedy(model: Transformer, ids, n, use_cache):
    """Greedy decoding written out, independent of fundamentallm.generation."""
    out = ids
    cache = model.make_kv_cache(ids.shape[0]) if use_cache else None
    step_in = ids
    with torch.no_grad():
        for _ in range(n):
            logits, _ = model(step_in if use_cache else out, kv_cache=cache)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], 1)
            step_in = nxt
    return out


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_greedy_generation_matches_hf_generate(arch):
    hf = _gpt2(seed=4) if arch == "gpt2" else _llama(seed=4)
    ours = from_hf_gpt2(hf) if arch == "gpt2" else from_hf_llama(hf)
    prompt = _ids(B=2, n=6, seed=5)
    n = 10
    with torch.no_grad():
        ref = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                          do_sample=False, eos_token_id=None, pad_token_id=0)
    assert ref.shape == (2, 6 + n)
    for use_cache in (False, True):
        assert torch.equal(_greedy(ours, prompt, n, use_cache), ref)
        assert torch.equal(ours.generate(prompt, n, greedy=True, use_cache=use_cache), ref)


def test_gpt2_rejects_unsupported_configs():
    for kw, word in ((dict(activation_function="relu"), "activation_function"),
                     (dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
                     (dict(scale_attn_weights=False), "scale_attn_weights")):
        with pytest.raises(ValueError, match=f"unsupported Hugging Face configuration: {word}"):
            from_hf_gpt2(_gpt2(**kw))
    with pytest.raises(ValueError, match="disagrees"):
        from_hf_gpt2(_gpt2(), num_heads=2)
    with pytest.raises(TypeError, match="state dict"):
        from_hf_gpt2(42)
    with pytest.raises(ValueError, match="wte.weight"):
        from_hf_gpt2(_llama().state_dict(), num_heads=H)
    with pytest.raises(ValueError, match="model_type"):
        from_hf_gpt2(_llama())


# ---------------------------------------------------------------- LLaMA

@pytest.mark.parametrize("tie", [False, True])
def test_llama_logits_match_full_length_batch(tie):
    hf = _llama(seed=5, tie_word_embeddings=tie)
    ours = from_hf_llama(hf)
    c = ours.config
    assert (c.norm, c.pos_encoding, c.activation, c.bias, c.tie_weights, c.norm_position) == \
        ("rmsnorm", "rope", "swiglu", False, tie, "pre")
    assert (c.norm_eps, c.rope_base, c.ff_dim, c.max_seq_len) == (1e-5, 500.0, 80, T)
    assert (ours.lm_head.weight is ours.token_embedding.weight) == tie
    _compare_logits(hf, ours, "llama")
    _compare_logits(hf, ours, "llama", ids=_ids(B=4, n=9, seed=6))


def test_llama_from_state_dict():
    hf = _llama(seed=6)
    ours = from_hf_llama(hf.state_dict(), config=hf.config)
    _compare_logits(hf, ours, "llama")
    ours2 = from_hf_llama(hf.state_dict(), num_heads=H, rms_norm_eps=1e-5, rope_theta=500.0)
    assert not ours2.config.tie_weights  # lm_head differs from the embedding
    _compare_logits(hf, ours2, "llama")
    with pytest.raises(ValueError, match="num_heads"):
        from_hf_llama(hf.state_dict())


def test_llama_kv_cache_decoding_matches_hf():
    hf = _llama(seed=7)
    ours = from_hf_llama(hf)
    ids = _ids(B=2, n=T, seed=8)
    cache = ours.make_kv_cache(2)
    with torch.no_grad():
        steps = torch.cat([ours(ids[:, t:t + 1], kv_cache=cache)[0] for t in range(T)], 1)
        ref = hf(ids).logits
    d = _record("llama kv-cache", steps, ref)
    assert d <= 1e-4


@pytest.mark.parametrize("kw,word", [
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 500.0, "factor": 2.0}), "rope_type"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(attention_bias=True), "attention_bias"),
    (dict(mlp_bias=True), "mlp_bias"),
    (dict(head_dim=16), "head_dim"),
])
def test_llama_rejects_unsupported_configs(kw, word):
    with pytest.raises(ValueError, match="unsupported Hugging Face configuration") as err:
        from_hf_llama(_llama(**kw))
    assert word in str(err.value)


def test_llama_rejects_bad_state_dict_and_wrong_type():
    gqa = _llama(num_key_value_heads=2)
    with pytest.raises(ValueError, match="k_proj maps to 24 channels"):
        from_hf_llama(gqa.state_dict(), num_heads=3)  # head_dim 16 does not divide 24
    with pytest.raises(TypeError):
        from_hf_llama([1, 2, 3])
    with pytest.raises(ValueError, match="model_type"):
        from_hf_llama(_gpt2())


# ---------------------------------------------------------------- the modern family

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
WINDOW = 7  # < T and < prompt + new tokens: the window matters at full context and in decoding


def _modern(arch, seed=0, **kw):
    """A small random model of each family, with grouped-query attention (4 query, 2 KV heads)."""
    torch.manual_seed(seed)
    args = dict(vocab_size=V, hidden_size=C, intermediate_size=80, num_hidden_layers=L,
                num_attention_heads=H, num_key_value_heads=2, max_position_embeddings=T,
                rms_norm_eps=1e-5, initializer_range=0.1, bos_token_id=0, eos_token_id=0,
                tie_word_embeddings=False)
    if arch == "llama3":
        cls, cfg = transformers.LlamaForCausalLM, transformers.LlamaConfig(
            **{**args, "rope_parameters": dict(LLAMA3_ROPE), **kw})
    elif arch == "qwen2":
        cls, cfg = transformers.Qwen2ForCausalLM, transformers.Qwen2Config(**{**args, **kw})
    elif arch == "mistral":
        cls, cfg = transformers.MistralForCausalLM, transformers.MistralConfig(
            **{**args, "sliding_window": WINDOW, "head_dim": C // H, **kw})
    else:
        cls, cfg = transformers.MixtralForCausalLM, transformers.MixtralConfig(
            **{**args, "sliding_window": None, "head_dim": C // H, "num_local_experts": 4,
               "num_experts_per_tok": 2, **kw})
    model = cls(cfg).eval()
    _perturb_norms(model, seed)
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():  # HF zeroes biases at init; make Qwen2's Q/K/V biases matter
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
    return model


MODERN = ["llama3", "qwen2", "mistral", "mixtral"]


@pytest.mark.parametrize("tie", [False, True])
def test_llama_gqa_logits_match(tie):
    hf = _modern("llama3", seed=3, tie_word_embeddings=tie, rope_parameters={"rope_type": "default",
                                                                            "rope_theta": 500.0})
    ours = from_hf_llama(hf)
    assert (ours.config.kv_heads, ours.config.tie_weights, ours.config.rope_scaling) == (2, tie, None)
    assert ours.blocks[0].attn.qkv.weight.shape == (C + 2 * 2 * (C // H), C)
    _compare_logits(hf, ours, "llama gqa")


@pytest.mark.parametrize("arch", MODERN)
def test_modern_logits_match_full_length_batch(arch):
    hf = _modern(arch, seed=11)
    ours = from_hf_llama(hf)
    c = ours.config
    assert c.kv_heads == 2
    assert c.rope_scaling == ({k: v for k, v in LLAMA3_ROPE.items() if k != "rope_theta"}
                              if arch == "llama3" else None)
    assert (c.attn_qkv_bias, c.sliding_window, c.moe_experts) == (
        arch == "qwen2", WINDOW if arch == "mistral" else None, 4 if arch == "mixtral" else 0)
    _compare_logits(hf, ours, arch)
    _compare_logits(hf, ours, arch, ids=_ids(B=2, n=13, seed=12))


@pytest.mark.parametrize("arch", MODERN)
def test_modern_state_dict_import(arch):
    """From a bare state dict: KV heads, biases and experts are read off the weights."""
    hf = _modern(arch, seed=13)
    ours = from_hf_llama(hf.state_dict(), config=hf.config)
    _compare_logits(hf, ours, arch)


@pytest.mark.parametrize("arch", MODERN)
def test_modern_kv_cache_greedy_equals_hf_generate(arch):
    hf = _modern(arch, seed=21)
    ours = from_hf_llama(hf)
    prompt = _ids(B=2, n=6, seed=22)
    n = 12  # 18 positions: past the Mistral window and the original Llama-3 context of 16
    with torch.no_grad():
        ref = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                          do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(_greedy(ours, prompt, n, use_cache=True), ref)
    assert torch.equal(ours.generate(prompt, n, greedy=True, use_cache=True), ref)
    # and one token at a time through the cache gives the full-context logits
    ids = _ids(B=2, n=T, seed=23)
    cache = ours.make_kv_cache(2)
    with torch.no_grad():
        steps = torch.cat([ours(ids[:, t:t + 1], kv_cache=cache)[0] for t in range(T)], 1)
        ref_logits = hf(ids).logits
    assert _record(f"{arch} kv-cache", steps, ref_logits) <= 1e-4


def test_modern_rejections():
    with pytest.raises(ValueError, match="use_sliding_window"):
        from_hf_llama(_modern("qwen2", use_sliding_window=True, sliding_window=4, max_window_layers=1))
    with pytest.raises(ValueError, match="router_jitter_noise"):
        from_hf_llama(_modern("mixtral", router_jitter_noise=0.1))


# ---------------------------------------------------------------- RoPE conventions (Meta layout)

@pytest.mark.parametrize("kv_heads", [H, 2])
def test_meta_interleaved_weights_permuted_into_a_half_model(kv_heads):
    """HF's checkpoint = Meta's checkpoint with q/k rows permuted (convert_llama_weights_to_hf).
    Undo that permutation to get Meta-layout weights: an interleaved model with them equals HF,
    a half model with them does not, and permute_rope_weights(to="half") brings them back."""
    hf = _llama(seed=8, num_key_value_heads=kv_heads)
    half = from_hf_llama(hf)
    c = half.config
    meta = {k: v.clone() for k, v in hf.state_dict().items()}
    for i in range(L):
        for p, n in (("q", H), ("k", kv_heads)):
            key = f"model.layers.{i}.self_attn.{p}_proj.weight"
            meta[key] = permute_rope_weights(meta[key], n, to="interleaved")
    assert not torch.equal(meta["model.layers.0.self_attn.q_proj.weight"],
                           hf.state_dict()["model.layers.0.self_attn.q_proj.weight"])
    wrong = from_hf_llama(meta, config=hf.config)  # Meta weights read as if half: wrong logits
    with torch.no_grad():
        assert (wrong(_ids())[0] - hf(_ids()).logits).abs().max() > 1e-3
    inter = Transformer(type(c).from_dict({**c.to_dict(), "rope_style": "interleaved"}))
    inter.load_state_dict(wrong.state_dict())
    _compare_logits(hf, inter.eval(), "llama_meta_interleaved")
    # the HF conversion's permutation, applied by the package, gives the half model back
    back = {k: v.clone() for k, v in meta.items()}
    for i in range(L):
        for p, n in (("q", H), ("k", kv_heads)):
            key = f"model.layers.{i}.self_attn.{p}_proj.weight"
            back[key] = permute_rope_weights(back[key], n, to="half")
            assert torch.equal(back[key], hf.state_dict()[key])
    converted = convert_rope_style(inter, "half")
    assert converted.config.rope_style == "half"
    _compare_logits(hf, converted.eval(), "llama_meta_to_half")
    _compare_logits(hf, convert_rope_style(converted, "interleaved").eval(), "llama_half_to_interleaved")


def test_permute_rope_weights_is_hf_permute_and_inverts():
    """Equal to the ``permute`` of transformers' convert_llama_weights_to_hf.py, written out."""
    def hf_permute(w, n_heads, dim1, dim2):
        return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)

    w = torch.randn(4 * 6, 10, generator=torch.Generator().manual_seed(0))
    assert torch.equal(permute_rope_weights(w, 4), hf_permute(w, 4, 24, 10))
    assert torch.equal(permute_rope_weights(permute_rope_weights(w, 4), 4, to="interleaved"), w)
    b = torch.arange(24.0)
    assert torch.equal(permute_rope_weights(b, 4), hf_permute(b[:, None], 4, 24, 1)[:, 0])
