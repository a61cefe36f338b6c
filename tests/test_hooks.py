"""Hooks (fundamentallm.hooks): identity hooks change nothing, bit for bit; nothing is left behind
and nothing runs when no hook is set; hooks compose with the KV cache; replacements act (head
ablation equals zeroing the head's output weights); the pattern and the residual stream equal
Hugging Face GPT-2's ``output_attentions`` and ``output_hidden_states``."""

import copy
import logging

import pytest
import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm import hooks as hooks_module
from fundamentallm.model import TransformerClassifier

V, T = 61, 12

CONFIGS = {
    "gpt2-like": dict(),
    "llama-like (rope, gqa, rmsnorm, swiglu)": dict(pos_encoding="rope", num_kv_heads=2, norm="rmsnorm",
                                                    activation="swiglu", bias=False),
    "post-ln, value embeddings, qk-norm": dict(norm_position="post", value_embeddings=True, qk_norm=True),
}


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    args = dict(vocab_size=V, d_model=32, num_heads=4, num_layers=2, max_seq_len=T)
    return Transformer(TransformerConfig(**{**args, **kw})).eval()


def _ids(B=2, n=T, seed=1):
    return torch.randint(0, V, (B, n), generator=torch.Generator().manual_seed(seed))


def _no_hooks_left(model):
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks, module
    for block in model.blocks:
        assert "attend" not in block.attn.__dict__ and "_pattern_fns" not in block.attn.__dict__


@pytest.mark.parametrize("kw", CONFIGS.values(), ids=CONFIGS.keys())
def test_identity_hooks_equal_the_plain_forward_bit_for_bit(kw):
    model, ids = _model(**kw), _ids()
    with torch.no_grad():
        plain, _ = model(ids)
        seen = []
        identity = {name: (lambda a, name: seen.append(name)) for name in model.hook_names()}
        same = {name: (lambda a, name: a) for name in model.hook_names()}  # returns the activation itself
        for fns in (identity, same):
            with model.hooks(fns):
                hooked, _ = model(ids)
            assert torch.equal(hooked, plain)
        logits, cache = model.run_with_cache(ids)
    assert seen == model.hook_names()  # every point reached once, in the documented order
    assert torch.equal(logits, plain) and list(cache) == model.hook_names()
    B, H, C = ids.shape[0], model.config.num_heads, model.config.d_model
    for i in range(2):
        assert cache[f"blocks.{i}.attn.hook_pattern"].shape == (B, H, T, T)
        assert cache[f"blocks.{i}.attn.hook_z"].shape == (B, T, H, C // H)
        assert cache[f"blocks.{i}.hook_resid_post"].shape == (B, T, C)
    _no_hooks_left(model)


def test_cache_is_consistent_with_the_forward():
    """The named activations add up: resid_post = resid_pre + attn_out + mlp_out (pre-LN); the
    pattern's rows sum to 1 and are causal; attn_out is z through out_proj; the final norm of the
    last resid_post is ln_final, and the unembedding of that is the logits."""
    model, ids = _model(), _ids()
    with torch.no_grad():
        logits, cache = model.run_with_cache(ids)
        for i, block in enumerate(model.blocks):
            c = {k.split(f"blocks.{i}.")[-1]: v for k, v in cache.items() if k.startswith(f"blocks.{i}.")}
            torch.testing.assert_close(c["hook_resid_post"], c["hook_resid_pre"] + c["hook_attn_out"] + c["hook_mlp_out"])
            p = c["attn.hook_pattern"]
            torch.testing.assert_close(p.sum(-1), torch.ones(p.shape[:-1]))
            assert torch.equal(p.triu(1), torch.zeros_like(p))
            torch.testing.assert_close(block.attn.out_proj(c["attn.hook_z"].flatten(-2)), c["hook_attn_out"])
        torch.testing.assert_close(model.norm_f(cache["blocks.1.hook_resid_post"]), cache["ln_final.hook_normalized"])
        torch.testing.assert_close(model.lm_head(cache["ln_final.hook_normalized"]), logits)
        torch.testing.assert_close(cache["blocks.0.hook_resid_pre"],
                                   cache["hook_embed"] + model.pos_encoding.weight[:T])


def test_names_select_and_forward_kwargs_pass_through():
    model, ids = _model(), _ids()
    _, cache = model.run_with_cache(ids, names="blocks.1.attn.hook_pattern")
    assert list(cache) == ["blocks.1.attn.hook_pattern"]
    _, cache = model.run_with_cache(ids, names=lambda n: n.endswith("hook_pattern"))
    assert list(cache) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    _, cache = model.run_with_cache(ids, names=["ln_final.hook_normalized", "hook_embed"])
    assert list(cache) == ["hook_embed", "ln_final.hook_normalized"]  # in the order computed
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    _, cache = model.run_with_cache(ids, names=["blocks.0.attn.hook_pattern"], attention_mask=mask)
    assert torch.equal(cache["blocks.0.attn.hook_pattern"][0, :, :, :3], torch.zeros(4, T, 3))


def test_no_hooks_set_adds_nothing_to_the_forward(monkeypatch):
    """The plain forward never enters the hook machinery: every hook is removed on leaving the
    block (also after an exception), and the attention's own function is back."""
    model, ids = _model(attn_impl="sdpa"), _ids()
    with pytest.raises(RuntimeError, match="boom"):
        with model.hooks({"blocks.0.attn.hook_pattern": lambda a, n: None,
                          "blocks.1.hook_mlp_out": lambda a, n: None}):
            assert model.blocks[0].attn.use_sdpa is False  # the pattern needs the explicit path
            raise RuntimeError("boom")
    _no_hooks_left(model)
    assert all(block.attn.use_sdpa for block in model.blocks)
    _, cache = model.run_with_cache(ids, names="blocks.0.attn.hook_pattern")
    _no_hooks_left(model)
    assert all(block.attn.use_sdpa for block in model.blocks)

    def fail(*args, **kwargs):
        raise AssertionError("the hook machinery ran in a forward without hooks")
    monkeypatch.setattr(hooks_module, "_apply", fail)
    monkeypatch.setattr(hooks_module, "scaled_dot_product_attention", fail)
    model(ids)
    model.attention_maps(ids)


def test_nested_hooks_and_lists_compose_in_order():
    model, ids = _model(), _ids()
    order = []
    with model.hooks({"blocks.0.hook_attn_out": [lambda a, n: order.append(1), lambda a, n: a * 2]}):
        with model.hooks({"blocks.0.hook_attn_out": lambda a, n: order.append(3) or a + 1}):
            _, cache = model.run_with_cache(ids, names="blocks.0.hook_attn_out")
            with model.hooks({"blocks.0.attn.hook_pattern": lambda a, n: order.append("p")}):
                model(ids)
        assert "attend" not in model.blocks[0].attn.__dict__
    _no_hooks_left(model)
    assert order == [1, 3, "p", 1, 3]
    _, plain = model.run_with_cache(ids, names="blocks.0.hook_attn_out")
    torch.testing.assert_close(cache["blocks.0.hook_attn_out"], plain["blocks.0.hook_attn_out"] * 2 + 1)


@pytest.mark.parametrize("kw", [dict(), dict(pos_encoding="rope", num_kv_heads=2)], ids=["mha", "gqa-rope"])
def test_hooks_compose_with_the_kv_cache(kw):
    """Decoding one token at a time with a pattern-reading hook gives, step by step, the rows of
    the uncached run's pattern; the logits agree, and so does every other cached activation."""
    model, ids = _model(**kw), _ids(B=2, n=9)
    with torch.no_grad():
        full_logits, full = model.run_with_cache(ids)
        rows = {0: [], 1: []}
        with model.hooks({f"blocks.{i}.attn.hook_pattern": (lambda a, n, i=i: rows[i].append(a.clone()))
                          for i in range(2)}):
            kv = model.make_kv_cache(2)
            prefix = 4
            step_logits = [model(ids[:, :prefix], kv_cache=kv)[0]]
            for t in range(prefix, ids.shape[1]):
                step_logits.append(model(ids[:, t:t + 1], kv_cache=kv)[0])
    torch.testing.assert_close(torch.cat(step_logits, 1), full_logits)
    for i in range(2):
        pattern = full[f"blocks.{i}.attn.hook_pattern"]  # (B, H, T, T)
        first = rows[i][0]
        assert first.shape == (2, 4, prefix, prefix)
        torch.testing.assert_close(first, pattern[:, :, :prefix, :prefix])
        for t, step in zip(range(prefix, ids.shape[1]), rows[i][1:]):
            assert step.shape == (2, 4, 1, t + 1)
            torch.testing.assert_close(step[:, :, 0], pattern[:, :, t, :t + 1])
    # run_with_cache itself accepts the KV cache
    kv = model.make_kv_cache(2)
    model.run_with_cache(ids[:, :5], kv_cache=kv)
    _, last = model.run_with_cache(ids[:, 5:6], kv_cache=kv, names="blocks.1.hook_resid_post")
    torch.testing.assert_close(last["blocks.1.hook_resid_post"][:, 0], full["blocks.1.hook_resid_post"][:, 5])


@pytest.mark.parametrize("kw", [dict(), dict(pos_encoding="rope", num_kv_heads=2)], ids=["mha", "gqa-rope"])
def test_a_cached_decode_with_replacing_hooks_equals_the_uncached_run(kw):
    """Hooks that change the forward (a head zero-ablated, a residual stream scaled, a pattern
    sharpened) give the same logits when the sequence is decoded one token at a time with the KV
    cache as in one uncached forward, and identity hooks give the plain cached decode exactly."""
    model, ids = _model(**kw), _ids(B=2, n=9)

    def ablate(z, name):
        z = z.clone()
        z[:, :, 1] = 0.0  # (B, T, H, D)
        return z

    def sharpen(pattern, name):  # rows still sum to 1; each row's own keys only
        sharp = pattern ** 2
        return sharp / sharp.sum(-1, keepdim=True)

    fns = {"blocks.0.attn.hook_z": ablate, "blocks.1.hook_resid_pre": lambda x, n: 1.5 * x,
           "blocks.1.attn.hook_pattern": sharpen}
    identity = {name: (lambda a, name: a) for name in model.hook_names()}

    def decode(hooks):
        with model.hooks(hooks):
            kv = model.make_kv_cache(2)
            steps = [model(ids[:, :3], kv_cache=kv)[0]]
            steps += [model(ids[:, t:t + 1], kv_cache=kv)[0] for t in range(3, ids.shape[1])]
        return torch.cat(steps, 1)

    with torch.no_grad():
        plain, _ = model(ids)
        with model.hooks(fns):
            uncached, _ = model(ids)
        cached = decode(fns)
        assert torch.equal(decode(identity), decode({}))
    assert (uncached - plain).abs().max() > 1e-3  # the hooks changed the output
    torch.testing.assert_close(cached, uncached)
    _no_hooks_left(model)


def test_zero_ablating_a_head_equals_zeroing_its_output_weights():
    model, ids = _model(), _ids()
    layer, head, D = 1, 2, model.config.head_dim

    def ablate(z, name):
        z = z.clone()
        z[:, :, head] = 0.0  # (B, T, H, D)
        return z

    with torch.no_grad():
        plain, _ = model(ids)
        with model.hooks({f"blocks.{layer}.attn.hook_z": ablate}):
            ablated, _ = model(ids)
        manual = copy.deepcopy(model)
        manual.blocks[layer].attn.out_proj.weight[:, head * D:(head + 1) * D] = 0.0
        expected, _ = manual(ids)
    assert (ablated - plain).abs().max() > 1e-4  # the head mattered
    torch.testing.assert_close(ablated, expected)


def test_replacing_the_pattern_and_patching_the_residual_stream():
    model, ids = _model(), _ids()
    corrupt = _ids(seed=7)
    with torch.no_grad():
        clean_logits, clean = model.run_with_cache(ids)
        corrupt_logits, _ = model(corrupt)
        # patching every position of the stream entering block 0 gives the clean run exactly
        with model.hooks({"blocks.0.hook_resid_pre": lambda a, n: clean[n]}):
            patched, _ = model(corrupt)
        assert torch.equal(patched, clean_logits) and not torch.equal(corrupt_logits, clean_logits)
        # a uniform causal pattern in layer 0 is the mean of the values so far
        uniform = torch.ones(T, T).tril()
        uniform = uniform / uniform.sum(-1, keepdim=True)
        with model.hooks({"blocks.0.attn.hook_pattern": lambda a, n: uniform.expand_as(a)}):
            _, cache = model.run_with_cache(ids, names=["blocks.0.attn.hook_pattern", "blocks.0.attn.hook_z"])
        assert torch.equal(cache["blocks.0.attn.hook_pattern"][0, 0], uniform)
        x = model.blocks[0].norm1(clean["blocks.0.hook_resid_pre"])
        _, _, v = model.blocks[0].attn.project_qkv(x)  # (B, H, T, D)
        torch.testing.assert_close(cache["blocks.0.attn.hook_z"], (uniform @ v).transpose(1, 2))


def test_attention_maps_and_the_classifier_run_with_hooks():
    model, ids = _model(), _ids()
    maps = model.attention_maps(ids)
    with model.hooks({name: (lambda a, n: a) for name in model.hook_names()}):
        hooked = model.attention_maps(ids)
    assert all(torch.equal(a, b) for a, b in zip(maps, hooked))
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=V, d_model=32, num_heads=4, num_layers=2, max_seq_len=T, causal=False)
    clf = TransformerClassifier(cfg, num_classes=3).eval()
    logits, cache = clf.run_with_cache(ids)
    assert torch.equal(logits, clf(ids)[0]) and cache["blocks.1.attn.hook_pattern"].shape == (2, 4, T, T)


BAD = [
    (lambda m: m.hooks({"blocks.0.attn.pattern": lambda a, n: None}), ValueError,
     r"unknown hook name 'blocks.0.attn.pattern' \(did you mean 'blocks.0.attn.hook_pattern'\?\).*"
     r"hook_embed, blocks.0.hook_resid_pre, .*ln_final.hook_normalized"),
    (lambda m: m.hooks({"blocks.2.hook_resid_pre": lambda a, n: None}), ValueError,
     r"unknown hook name 'blocks.2.hook_resid_pre'.*2-layer model"),
    (lambda m: m.run_with_cache(_ids(), names=["hook_embed", "resid"]), ValueError, r"unknown hook name 'resid'"),
    (lambda m: m.run_with_cache(_ids(), names=3), TypeError, r"names must be None .* got int"),
    (lambda m: m.hooks([("hook_embed", print)]), TypeError, r"fns must be a dict .* got list"),
    (lambda m: m.hooks({"hook_embed": 1.0}), TypeError, r"fns\['hook_embed'\] must be a callable .* got float"),
    (lambda m: m.hooks({"hook_embed": lambda a, n: a[:, :1]}), ValueError,
     r"hook on 'hook_embed' returned shape \(2, 1, 32\); a replacement must have the activation's shape \(2, 12, 32\)"),
    (lambda m: m.hooks({"blocks.1.attn.hook_pattern": lambda a, n: 0.0}), TypeError,
     r"hook on 'blocks.1.attn.hook_pattern' returned float; it must return None .* or a torch.Tensor"),
]


@pytest.mark.parametrize("make, error, message", BAD)
def test_bad_hooks_raise_clear_errors(make, error, message):
    model = _model()
    with pytest.raises(error, match=message):
        with make(model):  # the run_with_cache rows raise before entering
            model(_ids())
    _no_hooks_left(model)


# --------------------------------------------------------------- Hugging Face GPT-2 parity

def test_pattern_and_residual_stream_equal_hugging_face_gpt2():
    transformers = pytest.importorskip("transformers")
    from fundamentallm.interop import from_hf_gpt2

    logging.getLogger("transformers").setLevel(logging.ERROR)
    torch.manual_seed(0)
    L = 3
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=48, n_layer=L, n_head=4,
                                  initializer_range=0.1, bos_token_id=0, eos_token_id=0)
    cfg._attn_implementation = "eager"  # the fused kernels return no attention weights
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    ours = from_hf_gpt2(hf)
    ids = _ids(B=3)
    with torch.no_grad():
        ref = hf(ids, output_attentions=True, output_hidden_states=True)
        logits, cache = ours.run_with_cache(ids)
    torch.testing.assert_close(logits, ref.logits, atol=1e-4, rtol=0)
    assert len(ref.attentions) == L and len(ref.hidden_states) == L + 1
    for i in range(L):
        torch.testing.assert_close(cache[f"blocks.{i}.attn.hook_pattern"], ref.attentions[i], atol=1e-5, rtol=0)
        # HF's hidden_states[i] is the stream entering block i ...
        torch.testing.assert_close(cache[f"blocks.{i}.hook_resid_pre"], ref.hidden_states[i], atol=1e-5, rtol=0)
    for i in range(L - 1):
        torch.testing.assert_close(cache[f"blocks.{i}.hook_resid_post"], ref.hidden_states[i + 1], atol=1e-5, rtol=0)
    # ... and its last entry has the final LayerNorm applied already
    torch.testing.assert_close(cache["ln_final.hook_normalized"], ref.hidden_states[L], atol=1e-5, rtol=0)


def test_the_stored_benchmark_finds_no_cost_when_no_hook_is_set():
    """benchmarks/hooks_overhead.py's stored run (issue 40: the hooks cost nothing when none are
    set): a model that has been through a hooks block, and an empty block, run within the noise
    of two measurements of the same plain forward."""
    from fundamentallm import results

    run = results.load("hooks_overhead")
    noise = run["noise_pct_median_plain_vs_plain"]
    for variant in ("after a hooked block", "empty hooks block"):
        assert abs(run["overhead_pct_vs_plain"][variant]) <= max(noise, 2.0), (variant, run)
