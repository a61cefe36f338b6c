"""Tests of fundamentallm.generation: filters vs independent references, sampling distributions,
KV cache == recomputation, streaming, stop tokens, reproducibility and errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.generation import (
    DecodingModel,
    SamplingConfig,
    apply_temperature,
    generate,
    optimize_for_decoding,
    sample_next,
    stream,
    top_k_filter,
    top_p_filter,
)
from fundamentallm.norms import LayerNorm, RMSNorm

NEG_INF = float("-inf")


def make_model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    values = dict(vocab_size=37, d_model=32, num_heads=4, num_layers=2, max_seq_len=24)
    values.update(overrides)
    model = Transformer(TransformerConfig(**values))
    # Larger-than-init weights give peaked, varied logits, so greedy decoding is not trivial
    # (with GPT-2's small init a random model repeats one token).
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.5)
    return model.eval()


# ------------------------------------------------------------------ reference implementations

def ref_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Row by row in Python: keep values >= the k-th largest of the sorted row."""
    out = torch.full_like(logits, NEG_INF)
    for i, row in enumerate(logits.reshape(-1, logits.shape[-1])):
        kth = sorted(row.tolist(), reverse=True)[min(k, len(row)) - 1]
        keep = row >= kth
        out.view(-1, logits.shape[-1])[i][keep] = row[keep]
    return out


def ref_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Row by row in Python: walk tokens by decreasing probability until the mass reaches p."""
    out = torch.full_like(logits, NEG_INF)
    flat = logits.reshape(-1, logits.shape[-1])
    for i, row in enumerate(flat):
        probs = torch.softmax(row.double(), dim=-1).tolist()
        order = sorted(range(len(probs)), key=lambda j: -probs[j])
        mass = 0.0
        for j in order:
            if mass >= p:
                break
            out.view(-1, logits.shape[-1])[i, j] = row[j]
            mass += probs[j]
    return out


# ------------------------------------------------------------------ filters

@pytest.mark.parametrize("k", [1, 2, 5, 10, 11, 50])
def test_top_k_matches_reference(k):
    torch.manual_seed(1)
    logits = torch.randn(4, 11)
    torch.testing.assert_close(top_k_filter(logits, k), ref_top_k(logits, k))


def test_top_k_keeps_k_tokens_and_batched_dims():
    torch.manual_seed(2)
    logits = torch.randn(2, 3, 20)
    out = top_k_filter(logits, 4)
    assert out.shape == logits.shape
    assert torch.equal(torch.isfinite(out).sum(-1), torch.full((2, 3), 4))
    # the kept values are unchanged and are the 4 largest
    torch.testing.assert_close(torch.topk(out, 4).values, torch.topk(logits, 4).values)


def test_top_k_keeps_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0]])
    out = top_k_filter(logits, 1)
    assert torch.equal(torch.isfinite(out), torch.tensor([[False, True, True, False]]))


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.8, 0.95, 0.999, 1.0])
def test_top_p_matches_reference(p):
    torch.manual_seed(3)
    logits = torch.randn(5, 13) * 2
    torch.testing.assert_close(top_p_filter(logits, p), ref_top_p(logits, p))


def test_top_p_known_answer():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    assert torch.isfinite(top_p_filter(logits, 0.5)).tolist() == [[True, False, False, False]]
    assert torch.isfinite(top_p_filter(logits, 0.6)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(top_p_filter(logits, 0.8)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(top_p_filter(logits, 0.81)).tolist() == [[True, True, True, False]]
    # the order of the vocabulary does not matter
    perm = torch.tensor([2, 0, 3, 1])
    assert torch.isfinite(top_p_filter(logits[:, perm], 0.6)).tolist() == [[False, True, False, True]]


def test_top_p_always_keeps_the_most_likely_token():
    torch.manual_seed(4)
    logits = torch.randn(8, 30) * 5
    out = top_p_filter(logits, 1e-9)
    assert torch.equal(torch.isfinite(out).sum(-1), torch.ones(8, dtype=torch.long))
    assert torch.equal(out.argmax(-1), logits.argmax(-1))


def test_apply_temperature():
    logits = torch.tensor([[1.0, 2.0, 4.0]])
    torch.testing.assert_close(apply_temperature(logits, 0.5), logits * 2)
    torch.testing.assert_close(apply_temperature(logits, 1.0), logits)
    # tau -> 0 tends to one-hot on the argmax; large tau to uniform
    torch.testing.assert_close(torch.softmax(apply_temperature(logits, 1e-3), -1), torch.tensor([[0.0, 0.0, 1.0]]))
    torch.testing.assert_close(torch.softmax(apply_temperature(logits, 1e6), -1), torch.full((1, 3), 1 / 3))


# ------------------------------------------------------------------ sampling distributions

def test_sample_next_greedy_is_argmax():
    torch.manual_seed(5)
    logits = torch.randn(16, 50)
    assert torch.equal(sample_next(logits, greedy=True), logits.argmax(-1))


@pytest.mark.parametrize("kwargs", [dict(top_k=1), dict(top_p=1e-6), dict(temperature=1e-4),
                                    dict(top_k=5, top_p=1e-6, temperature=3.0)])
def test_degenerate_sampling_equals_greedy(kwargs):
    torch.manual_seed(6)
    logits = torch.randn(64, 40) * 3
    g = torch.Generator().manual_seed(0)
    assert torch.equal(sample_next(logits, generator=g, **kwargs), logits.argmax(-1))


def test_sampling_frequencies_follow_the_filtered_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]])
    n = 20000
    g = torch.Generator().manual_seed(0)
    for kwargs in (dict(), dict(temperature=0.7), dict(top_k=3), dict(top_p=0.8)):
        draws = sample_next(logits.expand(n, -1), generator=g, **kwargs)
        freq = torch.bincount(draws, minlength=5).double() / n
        expected = logits / kwargs.get("temperature", 1.0)
        if "top_k" in kwargs:
            expected = ref_top_k(expected, kwargs["top_k"])
        if "top_p" in kwargs:
            expected = ref_top_p(expected, kwargs["top_p"])
        expected = torch.softmax(expected.double(), -1)[0]
        # 4 standard errors of a binomial proportion at n draws
        tol = 4 * (expected * (1 - expected) / n).sqrt() + 1e-9
        assert torch.all((freq - expected).abs() <= tol), (kwargs, freq, expected)


def test_same_generator_seed_same_samples():
    torch.manual_seed(7)
    logits = torch.randn(8, 30)
    a = sample_next(logits, top_k=10, generator=torch.Generator().manual_seed(3))
    b = sample_next(logits, top_k=10, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


# ------------------------------------------------------------------ the KV cache

CONFIGS = [
    dict(pos_encoding="learned"),
    dict(pos_encoding="sinusoidal"),
    dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False),
    dict(pos_encoding="rope", attn_impl="sdpa"),
    dict(pos_encoding="learned", attn_impl="sdpa", norm_position="post"),
]


@pytest.mark.parametrize("overrides", CONFIGS)
def test_cached_logits_equal_full_recompute(overrides):
    model = make_model(**overrides)
    torch.manual_seed(8)
    seq = torch.randint(0, 37, (3, 20))
    with torch.no_grad():
        full, _ = model(seq)  # (B, T, V)
        cache = model.make_kv_cache(3)
        prefill, _ = model(seq[:, :7], kv_cache=cache)
        steps = [model(seq[:, t:t + 1], kv_cache=cache)[0] for t in range(7, 20)]
    cached = torch.cat([prefill] + steps, dim=1)
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attn_impl", ["explicit", "sdpa"])
def test_cache_in_chunks_and_sdpa_equal_explicit(attn_impl):
    # Chunks of several tokens after a cache offset use the (T, T_k) causal mask; the fused
    # path (is_causal / no mask for one query) must agree with the explicit one.
    model = make_model(pos_encoding="rope")
    other = make_model(pos_encoding="rope", attn_impl=attn_impl)
    other.load_state_dict(model.state_dict())
    seq = torch.randint(0, 37, (2, 15), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full, _ = model(seq)
        cache = other.make_kv_cache(2)
        parts = [other(seq[:, a:b], kv_cache=cache)[0] for a, b in ((0, 5), (5, 9), (9, 10), (10, 15))]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("overrides", CONFIGS)
def test_greedy_with_cache_equals_recompute(overrides):
    model = make_model(**overrides)
    torch.manual_seed(9)
    prompt = torch.randint(0, 37, (3, 5))
    with_cache = generate(model, prompt, 15, greedy=True, use_cache=True)
    without = generate(model, prompt, 15, greedy=True, use_cache=False)
    assert with_cache.shape == (3, 20)
    assert torch.equal(with_cache, without)
    # and both equal a hand-written loop over full forwards
    seq = prompt
    with torch.no_grad():
        for _ in range(15):
            seq = torch.cat([seq, model(seq)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(with_cache, seq)
    assert len(set(seq[:, 5:].flatten().tolist())) > 3  # non-trivial sequences


@pytest.mark.parametrize("overrides", [dict(), dict(pos_encoding="rope", activation="swiglu", bias=False,
                                                     norm="rmsnorm")])
def test_optimize_for_decoding_changes_only_the_layout(overrides, tmp_path):
    from fundamentallm import load_checkpoint, save_checkpoint

    model = make_model(**overrides)
    fast = make_model(**overrides)
    fast.load_state_dict(model.state_dict())
    assert optimize_for_decoding(fast) is fast
    # Wide layers (out > in) became column-major, the others kept nn.Linear's layout.
    for (name, a), (_, b) in zip(model.named_modules(), fast.named_modules()):
        if isinstance(a, torch.nn.Linear):
            wide = a.out_features > a.in_features
            assert b.weight.shape == a.weight.shape, name
            assert b.weight.t().is_contiguous() == wide and b.weight.is_contiguous() != wide, name
    assert fast.lm_head.weight is fast.token_embedding.weight  # still tied
    # Each norm is still the package's class, computed by one fused PyTorch function.
    norms = [m for m in fast.modules() if isinstance(m, (LayerNorm, RMSNorm))]
    assert len(norms) == len([m for m in model.modules() if isinstance(m, (LayerNorm, RMSNorm))]) > 0
    fused = "rms_norm" if overrides.get("norm") == "rmsnorm" else "layer_norm"
    for slow_norm, fast_norm in zip([m for m in model.modules() if isinstance(m, (LayerNorm, RMSNorm))], norms):
        x = torch.randn(3, fast_norm.dim)
        with _FunctionNames() as seen:
            y = fast_norm(x)
        assert seen.names == [fused], seen.names
        torch.testing.assert_close(y, slow_norm(x))
    for key, value in model.state_dict().items():
        assert torch.equal(fast.state_dict()[key], value), key
    assert len(list(fast.parameters())) == len(list(model.parameters()))
    # Same outputs up to rounding, same greedy tokens, with and without the cache.
    seq = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(fast(seq)[0], model(seq)[0], rtol=1e-5, atol=1e-5)
    prompt = seq[:1, :4]
    expected = generate(model, prompt, 15, greedy=True)
    assert torch.equal(generate(fast, prompt, 15, greedy=True), expected)
    assert torch.equal(generate(fast, prompt, 15, greedy=True, use_cache=False), expected)
    assert optimize_for_decoding(fast) is fast  # idempotent
    # Checkpoints and training still work: a saved optimized model loads as an ordinary one.
    save_checkpoint(tmp_path / "ckpt", fast)
    loaded = load_checkpoint(tmp_path / "ckpt").model
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    fast.train()
    opt = torch.optim.AdamW(fast.parameters(), lr=1e-3)
    _, loss = fast(seq[:, :-1], targets=seq[:, 1:])
    loss.backward()
    opt.step()
    assert all(torch.isfinite(p).all() for p in fast.parameters())


class _FunctionNames(torch.overrides.TorchFunctionMode):
    """The names of the torch functions called inside the block."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def test_optimize_for_decoding_rejects_non_modules():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        optimize_for_decoding("gpt2")


def test_sampling_with_cache_equals_recompute_for_the_same_seed():
    model = make_model(pos_encoding="rope")
    prompt = torch.randint(0, 37, (2, 4), generator=torch.Generator().manual_seed(0))
    a = generate(model, prompt, 12, temperature=0.9, top_k=8, generator=torch.Generator().manual_seed(1))
    b = generate(model, prompt, 12, temperature=0.9, top_k=8, use_cache=False,
                 generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)


def test_sliding_window_beyond_max_seq_len():
    # 6 + 40 tokens > max_seq_len=24: the cache fills, then both paths slide the window.
    model = make_model(pos_encoding="learned")
    prompt = torch.randint(0, 37, (2, 6), generator=torch.Generator().manual_seed(0))
    a = generate(model, prompt, 40, greedy=True)
    b = generate(model, prompt, 40, greedy=True, use_cache=False)
    assert a.shape == (2, 46)
    assert torch.equal(a, b)
    seq = prompt
    with torch.no_grad():
        for _ in range(40):
            seq = torch.cat([seq, model(seq[:, -24:])[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(a, seq)


def test_truncate_conditions_on_the_last_tokens():
    model = make_model()
    long_prompt = torch.randint(0, 37, (1, 30), generator=torch.Generator().manual_seed(0))
    out = generate(model, long_prompt, 5, greedy=True, truncate=True)
    assert out.shape == (1, 35)
    assert torch.equal(out[:, :30], long_prompt)
    ref = generate(model, long_prompt[:, -24:], 5, greedy=True)
    assert torch.equal(out[:, 30:], ref[:, 24:])


# ------------------------------------------------------------------ API behaviour

def test_stream_equals_generate():
    model = make_model(pos_encoding="rope")
    prompt = torch.randint(0, 37, (2, 4), generator=torch.Generator().manual_seed(0))
    tokens = list(stream(model, prompt, 10, top_p=0.9, generator=torch.Generator().manual_seed(5)))
    assert len(tokens) == 10 and all(t.shape == (2,) and t.dtype == torch.long for t in tokens)
    out = generate(model, prompt, 10, top_p=0.9, generator=torch.Generator().manual_seed(5))
    assert torch.equal(out, torch.cat([prompt] + [t[:, None] for t in tokens], dim=1))


def test_stream_is_lazy_and_restores_grad_mode():
    model = make_model()
    it = stream(model, torch.tensor([[1, 2, 3]]), 3, greedy=True)
    first = next(it)
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    assert not first.is_inference()
    assert len(list(it)) == 2


def test_generate_1d_prompt_and_zero_tokens():
    model = make_model()
    prompt = torch.tensor([3, 1, 4])
    out = generate(model, prompt, 4, greedy=True)
    assert out.shape == (7,)
    assert torch.equal(out, generate(model, prompt[None], 4, greedy=True)[0])
    assert torch.equal(generate(model, prompt[None], 0), prompt[None])


def test_same_seed_same_samples_global_rng():
    model = make_model()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    torch.manual_seed(123)
    a = generate(model, prompt, 10)
    torch.manual_seed(123)
    b = generate(model, prompt, 10)
    c = generate(model, prompt, 10)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_generate_restores_training_mode_and_output_is_usable_with_autograd():
    model = make_model(dropout=0.2)
    model.train()
    out = generate(model, torch.tensor([[1, 2]]), 3, greedy=True)
    assert model.training
    # eval mode during generation: greedy is deterministic despite dropout
    assert torch.equal(out, generate(model, torch.tensor([[1, 2]]), 3, greedy=True))
    _, loss = model(out[:, :-1], targets=out[:, 1:])
    loss.backward()  # would fail if out were an inference tensor
    assert model.token_embedding.weight.grad is not None


def test_model_generate_delegates():
    model = make_model()
    prompt = torch.tensor([[1, 2, 3]])
    assert torch.equal(model.generate(prompt, 5, greedy=True), generate(model, prompt, 5, greedy=True))


def test_works_with_any_module_returning_logits():
    class Bigram(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(10, 10)

        def forward(self, ids):
            return self.table(ids)  # (B, T, V), no tuple, no cache

    torch.manual_seed(0)
    m = Bigram()
    assert isinstance(make_model(), DecodingModel) and not isinstance(m, DecodingModel)  # the cached path's protocol
    out = generate(m, torch.tensor([[1]]), 5, greedy=True)
    expected = [1]
    for _ in range(5):
        expected.append(int(m.table.weight[expected[-1]].argmax()))
    assert out.tolist() == [expected]


# ------------------------------------------------------------------ stop tokens

def test_stop_tokens_pad_finished_rows_and_end_early():
    model = make_model()
    prompt = torch.randint(0, 37, (4, 3), generator=torch.Generator().manual_seed(0))
    free = generate(model, prompt, 15, greedy=True)
    # stop on the token that row 0 generates first
    stop_id = int(free[0, 3])
    out = generate(model, prompt, 15, greedy=True, stop=stop_id)
    for row_free, row in zip(free, out):
        new_free, new = row_free[3:].tolist(), row[3:].tolist()
        if stop_id in new_free:
            i = new_free.index(stop_id)
            assert new[:i + 1] == new_free[:i + 1]  # identical up to and incl. the stop token
            assert all(t == stop_id for t in new[i:])  # then padded with it
        else:
            assert new == new_free[:len(new)]
    finished = [stop_id in r[3:].tolist() for r in free]
    if all(finished):
        last = max(r[3:].tolist().index(stop_id) for r in free)
        assert out.shape[1] == 3 + last + 1  # ends as soon as every row has finished
    else:
        assert out.shape[1] == 18


def test_all_rows_stop_immediately():
    model = make_model()
    prompt = torch.tensor([[1, 2], [3, 4]])
    first = generate(model, prompt, 1, greedy=True)[:, 2].tolist()
    out = generate(model, prompt, 10, greedy=True, stop=first)
    assert out.shape == (2, 3)
    assert out[:, 2].tolist() == first


def test_stream_stops_too():
    model = make_model()
    prompt = torch.tensor([[1, 2]])
    first = int(generate(model, prompt, 1, greedy=True)[0, 2])
    assert len(list(stream(model, prompt, 10, greedy=True, stop=[first]))) == 1


# ------------------------------------------------------------------ errors

@pytest.mark.parametrize("kwargs, name", [
    (dict(temperature=0.0), "temperature"),
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_k=0), "top_k"),
    (dict(top_k=2.5), "top_k"),
    (dict(top_k=True), "top_k"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(max_new_tokens=2.0), "max_new_tokens"),
    (dict(stop="x"), "stop"),
    (dict(stop=[-1]), "stop"),
    (dict(greedy=1), "greedy"),
])
def test_bad_parameters_raise_value_error_naming_them(kwargs, name):
    model = make_model()
    prompt = torch.tensor([[1, 2, 3]])
    kwargs = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(ValueError, match=name):
        generate(model, prompt, **kwargs)
    with pytest.raises(ValueError, match=name):
        stream(model, prompt, **kwargs)  # validated at the call, before the first token


def test_temperature_zero_suggests_greedy():
    with pytest.raises(ValueError, match="greedy=True"):
        generate(make_model(), torch.tensor([[1]]), 2, temperature=0)


def test_prompt_longer_than_context_raises_without_truncate():
    model = make_model()
    with pytest.raises(ValueError, match="max_seq_len=24.*truncate=True"):
        generate(model, torch.zeros(1, 25, dtype=torch.long), 1)


def test_bad_input_ids():
    model = make_model()
    with pytest.raises(TypeError, match="input_ids"):
        generate(model, [[1, 2]], 2)
    with pytest.raises(TypeError, match="input_ids"):
        generate(model, torch.zeros(1, 2), 2)
    with pytest.raises(ValueError, match="input_ids"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 2)


def test_filter_errors():
    logits = torch.randn(2, 5)
    with pytest.raises(ValueError, match="top_k"):
        top_k_filter(logits, 0)
    with pytest.raises(ValueError, match="top_p"):
        top_p_filter(logits, -0.1)
    with pytest.raises(ValueError, match="temperature"):
        apply_temperature(logits, 0)
    with pytest.raises(TypeError, match="logits"):
        top_k_filter(torch.ones(2, 5, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="logits"):
        sample_next(torch.randn(2, 3, 5))


def test_filters_agree_with_softmax_renormalisation():
    # after filtering, the softmax equals the original probabilities renormalised over the kept set
    torch.manual_seed(10)
    logits = torch.randn(3, 12)
    for filtered in (top_k_filter(logits, 4), top_p_filter(logits, 0.7)):
        keep = torch.isfinite(filtered)
        probs = F.softmax(logits, -1) * keep
        torch.testing.assert_close(F.softmax(filtered, -1), probs / probs.sum(-1, keepdim=True))


# --- bad inputs (issue 15) -------------------------------------------------------------------------

def test_non_finite_logits_raise_instead_of_printing_nothing():
    model = make_model()
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    prompt = torch.tensor([[1, 2, 3]])
    for kwargs in (dict(greedy=True), dict(temperature=0.8)):
        with pytest.raises(ValueError, match="logits are not finite"):
            generate(model, prompt, 5, **kwargs)
    with pytest.raises(ValueError, match="logits are not finite"):
        sample_next(torch.full((1, 4), NEG_INF))  # every token masked


def test_a_tiny_temperature_samples_the_argmax_instead_of_failing():
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.5, -1.0, 0.0]])
    token = sample_next(logits, temperature=1e-300, generator=torch.Generator().manual_seed(0))
    assert token.tolist() == [1, 0]


def test_stop_outside_the_vocabulary_and_huge_outputs_are_refused():
    model, prompt = make_model(), torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"stop=999 holds token id 999, outside the vocabulary \[0, 37\)"):
        generate(model, prompt, 5, stop=999)
    with pytest.raises(ValueError, match=r"stop=\[3, 40\] holds token id 40"):
        stream(model, prompt, 5, stop=[3, 40])
    with pytest.raises(ValueError, match="max_new_tokens=100000000000 would make an output"):
        generate(model, prompt, 10**11)


def test_numpy_and_tensor_scalars_are_accepted():
    import numpy as np

    model, prompt = make_model(), torch.tensor([[1, 2, 3]])
    a = generate(model, prompt, np.int64(4), greedy=True)
    b = generate(model, prompt, torch.tensor(4), top_k=np.int32(5), temperature=np.float32(0.5),
                 generator=torch.Generator().manual_seed(0))
    assert a.shape == b.shape == (1, 7)


# ------------------------------------------------------------------ ragged prompts (attention_mask)

def left_pad(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of different lengths -> left-padded ids and their attention_mask, (B, T) each."""
    T = max(len(p) for p in prompts)
    ids, mask = torch.zeros(len(prompts), T, dtype=torch.long), torch.zeros(len(prompts), T, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p):], mask[i, T - len(p):] = torch.tensor(p), 1
    return ids, mask


def logits_seen(monkeypatch) -> list[torch.Tensor]:
    """Record the next-token logits of every decoding step (what the sampler receives)."""
    import fundamentallm.generation as generation

    seen, sample = [], generation._sample
    monkeypatch.setattr(generation, "_sample", lambda logits, *a: seen.append(logits.clone()) or sample(logits, *a))
    return seen


@pytest.mark.parametrize("overrides", [dict(pos_encoding="rope", num_kv_heads=2),
                                       dict(pos_encoding="learned", attn_impl="explicit")])
@pytest.mark.parametrize("use_cache", [True, False])
def test_ragged_prompts_in_one_batch_equal_each_prompt_alone(overrides, use_cache, monkeypatch):
    """Left-padded prompts with their attention_mask decode as each prompt decodes alone: the
    same greedy tokens and the same next-token logits at every step, through the cache's prefill
    and decode steps and past max_seq_len (the sliding window)."""
    model = make_model(**overrides)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]]
    ids, mask = left_pad(prompts)
    n = model.config.max_seq_len  # every row outgrows the context
    seen = logits_seen(monkeypatch)
    out = generate(model, ids, n, greedy=True, use_cache=use_cache, attention_mask=mask)
    batch = torch.stack(seen, 1)  # (B, n, V)
    assert out.shape == (3, ids.shape[1] + n) and torch.equal(out[:, :ids.shape[1]], ids)
    for i, p in enumerate(prompts):
        seen.clear()
        alone = generate(model, torch.tensor(p), n, greedy=True, use_cache=use_cache)
        assert out[i, ids.shape[1]:].tolist() == alone[len(p):].tolist()
        torch.testing.assert_close(batch[i], torch.cat(seen, 0), rtol=1e-4, atol=1e-4)


def test_ragged_prompts_sample_with_stop_and_stream():
    """A mask of ones changes nothing; stream takes the mask too; each row stops at its own
    stop token."""
    model = make_model()
    ids, mask = left_pad([[1, 2, 3, 4], [5, 6]])
    full = torch.randint(0, 37, (2, 4), generator=torch.Generator().manual_seed(0))
    plain = generate(model, full, 6, generator=torch.Generator().manual_seed(1))
    assert torch.equal(generate(model, full, 6, generator=torch.Generator().manual_seed(1),
                                attention_mask=torch.ones(2, 4, dtype=torch.long)), plain)
    streamed = torch.stack(list(stream(model, ids, 6, greedy=True, attention_mask=mask)), 1)
    out = generate(model, ids, 6, greedy=True, attention_mask=mask)
    assert torch.equal(streamed, out[:, 4:])
    stop = int(out[1, 4])  # row 1 stops at its first new token
    stopped = generate(model, ids, 6, greedy=True, attention_mask=mask, stop=stop)
    assert (stopped[1, 4:] == stop).all()


@pytest.mark.parametrize("mask, overrides, error, message", [
    (torch.ones(2, 4), {}, TypeError, "attention_mask must be an integer or bool"),
    (torch.ones(2, 3, dtype=torch.long), {}, ValueError, r"attention_mask must have the prompts' shape \(B, T\) = \(2, 4\)"),
    (torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]), {}, ValueError, "0 \\(padding\\) then 1 \\(tokens\\)"),
    (torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1]]), {}, ValueError, "at least one token"),
    (torch.tensor([[0, 2, 1, 1], [1, 1, 1, 1]]), {}, ValueError, "0 \\(padding\\) then 1 \\(tokens\\)"),
    (torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]), dict(canon="attn", pos_encoding="rope"), ValueError, "canon layers"),
])
def test_bad_attention_masks_are_named(mask, overrides, error, message):
    with pytest.raises(error, match=message):
        generate(make_model(**overrides), torch.ones(2, 4, dtype=torch.long), 2, attention_mask=mask)


def test_attention_mask_refuses_truncate():
    with pytest.raises(ValueError, match="truncate=True cannot be combined with attention_mask"):
        generate(make_model(), torch.ones(1, 30, dtype=torch.long), 1, truncate=True,
                 attention_mask=torch.ones(1, 30, dtype=torch.long))


def test_one_sampling_configuration_equals_the_separate_options():
    """SamplingConfig carries temperature, top-k, top-p and greedy through the decoder, checked
    once when made: it samples what the separate arguments sample, and cannot be mixed with them."""
    model, ids = make_model(), torch.tensor([[1, 2, 3]])
    config = SamplingConfig(temperature=0.7, top_k=5, top_p=0.9)
    via_config = generate(model, ids, 8, sampling=config, generator=torch.Generator().manual_seed(0))
    assert torch.equal(via_config, generate(model, ids, 8, temperature=0.7, top_k=5, top_p=0.9,
                                            generator=torch.Generator().manual_seed(0)))
    streamed = list(stream(model, ids, 8, sampling=config, generator=torch.Generator().manual_seed(0)))
    assert torch.equal(torch.stack(streamed, 1), via_config[:, 3:])
    with pytest.raises(ValueError, match="either as sampling=SamplingConfig"):
        generate(model, ids, 2, sampling=SamplingConfig(greedy=True), top_k=3)
    with pytest.raises(TypeError, match="must be None or a SamplingConfig"):
        generate(model, ids, 2, sampling={"top_k": 3})


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=0.0), "temperature=0.0 must be > 0"),
    (dict(top_k=0), "top_k=0 must be None or an integer >= 1"),
    (dict(top_p=1.5), r"top_p=1.5 must be None or a number in \(0, 1\]"),
    (dict(greedy="yes"), "greedy='yes' must be True or False"),
])
def test_a_bad_sampling_configuration_is_refused_when_made(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingConfig(**kwargs)
