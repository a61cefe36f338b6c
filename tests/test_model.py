"""TransformerBlock, Transformer and TransformerClassifier: formulas, causality, tying, GPT-2
initialisation, the loss, pooling, and clear errors."""

import math

import pytest
import torch
import torch.nn.functional as F

from fundamentallm import (
    Transformer,
    TransformerBlock,
    TransformerClassifier,
    TransformerConfig,
    block_sublayers,
)
from fundamentallm.attention import KVCache

POS = ["learned", "sinusoidal", "rope", "none"]


def _cfg(**kw):
    base = dict(vocab_size=37, d_model=32, num_heads=4, num_layers=2, max_seq_len=16)
    return TransformerConfig(**{**base, **kw})


def _ids(B=3, T=10, V=37, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- the block, written out

def _norm(x, norm, kind, eps):
    if kind == "layernorm":
        return F.layer_norm(x, (x.shape[-1],), norm.weight, norm.bias, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm.weight


def _attention(x, attn, causal):
    B, T, C = x.shape
    H = attn.num_heads
    D = C // H
    qkv = F.linear(x, attn.qkv.weight, attn.qkv.bias)
    q, k, v = (t.reshape(B, T, H, D).permute(0, 2, 1, 3) for t in qkv.split(C, -1))
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -math.inf)
    y = torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v).permute(0, 2, 1, 3).reshape(B, T, C)
    return F.linear(y, attn.out_proj.weight, attn.out_proj.bias)


def _ff(x, ff, activation):
    h = F.linear(x, ff.up.weight, ff.up.bias)
    if activation == "swiglu":
        g = F.linear(x, ff.gate.weight, ff.gate.bias)
        h = g * torch.sigmoid(g) * h
    elif activation == "gelu":
        h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    else:
        h = torch.relu(h)
    return F.linear(h, ff.down.weight, ff.down.bias)


def _block_formula(block, x, cfg):
    def n(i, y):
        return _norm(y, getattr(block, f"norm{i}"), cfg.norm, cfg.norm_eps)

    def a(y):
        return _attention(y, block.attn, cfg.causal)

    def f(y):
        return _ff(y, block.ff, cfg.activation)

    if cfg.norm_position == "pre":
        x = x + a(n(1, x))
        return x + f(n(2, x))
    x = n(1, x + a(x))
    return n(2, x + f(x))


def _tolerance(expected: torch.Tensor) -> dict:
    """Tolerances for comparing with ``expected``, scaled by its largest magnitude: float32 keeps
    about 7 significant digits (eps 1.2e-7), and a reordered sum of a few dozen terms differs by a
    few eps *of the largest term*. The random norm weights and biases below give activations of
    4 to 95 (measured), so a fixed atol=1e-5 allowed under 1 eps of the largest one and failed on
    some CPUs (AMD EPYC: 1.6e-5; here up to 3e-5 on an element of magnitude ~95, passed by rtol).
    1e-5 x the scale (~80 eps of it) still catches any wrong formula, whose error is O(scale)."""
    scale = max(1.0, expected.abs().max().item())
    if expected.dtype == torch.float64:
        return dict(rtol=1e-10, atol=1e-10 * scale)
    return dict(rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("norm_position", ["pre", "post"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("activation", ["gelu", "relu", "swiglu"])
@pytest.mark.parametrize("causal", [True, False])
def test_block_equals_formula(dtype, norm_position, norm, activation, causal):
    cfg = _cfg(norm_position=norm_position, norm=norm, activation=activation, causal=causal, norm_eps=1e-4)
    torch.manual_seed(0)
    block = TransformerBlock(cfg).to(dtype).eval()
    with torch.no_grad():
        for p in block.parameters():  # non-trivial norms and biases
            p.normal_(1.0 if p.dim() == 1 else 0.0, 0.3)
    x = torch.randn(2, 9, 32, dtype=dtype, generator=torch.Generator().manual_seed(1))
    expected = _block_formula(block, x, cfg)
    torch.testing.assert_close(block(x), expected, **_tolerance(expected))


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_block_sublayers_rebuild_a_block_from_its_weights(norm):
    """The sublayers built from a block's state dicts (data, as the chapters' block exercises get
    them) compute the block; a name other than attn/ff is a norm of the config's kind."""
    torch.manual_seed(0)
    config = {"d_model": 16, "num_heads": 4, "norm": norm}
    block = TransformerBlock(TransformerConfig(**config)).eval()
    with torch.no_grad():
        block.norm1.weight.add_(torch.randn(16))  # not the initial gains: the weights are used
    weights = {name: getattr(block, name).state_dict() for name in ("attn", "ff", "norm1", "norm2")}
    weights["extra"] = block.norm2.state_dict()
    m = block_sublayers(config, weights)
    assert list(m) == ["attn", "ff", "norm1", "norm2", "extra"] and not any(mod.training for mod in m.values())
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        h = x + m["attn"](m["norm1"](x))
        torch.testing.assert_close(h + m["ff"](m["norm2"](h)), block(x))
        torch.testing.assert_close(m["extra"](x), block.norm2(x))
    with pytest.raises(TypeError, match="weights must be a dict"):
        block_sublayers(config, [weights["attn"]])
    with pytest.raises(RuntimeError, match="Missing key"):
        block_sublayers(config, {"attn": {}})


def test_transformer_equals_formula():
    """Embeddings + positions -> blocks -> final norm -> tied output projection, written out."""
    cfg = _cfg(num_layers=3)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    ids = _ids()
    x = model.token_embedding.weight[ids] + model.pos_encoding.weight[: ids.shape[1]]
    for block in model.blocks:
        x = _block_formula(block, x, cfg)
    x = F.layer_norm(x, (32,), model.norm_f.weight, model.norm_f.bias, cfg.norm_eps)
    logits = x @ model.token_embedding.weight.T
    torch.testing.assert_close(model(ids)[0], logits, **_tolerance(logits))


# ---------------------------------------------------------------- causality

@pytest.mark.parametrize("pos", POS)
@pytest.mark.parametrize("norm_position", ["pre", "post"])
@pytest.mark.parametrize("attn_impl", ["explicit", "sdpa"])
def test_causality(pos, norm_position, attn_impl):
    cfg = _cfg(pos_encoding=pos, norm_position=norm_position, attn_impl=attn_impl)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    ids = _ids(B=2, T=12)
    logits, _ = model(ids)
    for t in (0, 5, 11):
        changed = ids.clone()
        changed[:, t] = (changed[:, t] + 1) % cfg.vocab_size
        new, _ = model(changed)
        assert torch.equal(new[:, :t], logits[:, :t]), f"changing token {t} changed earlier logits"
        assert not torch.allclose(new[:, t], logits[:, t])  # ...and it does change position t


# ---------------------------------------------------------------- tying, counting, init

def _expected_params(cfg: TransformerConfig) -> int:
    C, V, L, T, F_ = cfg.d_model, cfg.vocab_size, cfg.num_layers, cfg.max_seq_len, cfg.ff_dim
    b = cfg.bias
    norm = C + (C if (b and cfg.norm == "layernorm") else 0)
    attn = 4 * C * C + (4 * C if b else 0)
    n_mats = 3 if cfg.activation == "swiglu" else 2
    ff = n_mats * C * F_ + ((n_mats - 1) * F_ + C if b else 0)
    per_block = 2 * norm + attn + ff
    total = V * C + L * per_block + (norm if cfg.norm_position == "pre" else 0)
    total += T * C if cfg.pos_encoding == "learned" else 0
    total += 0 if cfg.tie_weights else V * C
    return total


@pytest.mark.parametrize("kw", [dict(), dict(tie_weights=False), dict(norm="rmsnorm", bias=False),
                                dict(activation="swiglu", pos_encoding="rope"),
                                dict(norm_position="post", pos_encoding="sinusoidal"),
                                dict(activation="relu", pos_encoding="none", num_layers=3)])
def test_parameter_count_independent(kw):
    cfg = _cfg(**kw)
    model = Transformer(cfg)
    assert model.num_parameters() == _expected_params(cfg)
    assert model.num_parameters(trainable_only=True) == _expected_params(cfg)


def test_weight_tying_shares_storage_and_gradients():
    model = Transformer(_cfg())
    assert model.lm_head.weight is model.token_embedding.weight
    assert model.lm_head.weight.data_ptr() == model.token_embedding.weight.data_ptr()
    names = [n for n, _ in model.named_parameters()]
    assert "token_embedding.weight" in names and "lm_head.weight" not in names  # counted once
    _, loss = model(_ids(), targets=_ids(seed=1))
    loss.backward()
    assert model.token_embedding.weight.grad is not None
    untied = Transformer(_cfg(tie_weights=False))
    assert untied.lm_head.weight.data_ptr() != untied.token_embedding.weight.data_ptr()
    assert untied.num_parameters() - model.num_parameters() == 37 * 32


def test_gpt2_initialisation_statistics():
    L = 4
    cfg = TransformerConfig(vocab_size=512, d_model=128, num_heads=4, num_layers=L, max_seq_len=64)
    torch.manual_seed(0)
    model = Transformer(cfg)
    resid = 0.02 / math.sqrt(2 * L)

    def close(t, std, rel=0.05):
        assert abs(t.std().item() - std) < rel * std and abs(t.mean().item()) < 0.1 * std, (t.std(), std)

    close(model.token_embedding.weight, 0.02)
    close(model.pos_encoding.weight, 0.02, rel=0.1)
    for block in model.blocks:
        close(block.attn.qkv.weight, 0.02)
        close(block.ff.up.weight, 0.02)
        close(block.attn.out_proj.weight, resid)  # residual projections: 0.02 / sqrt(2L)
        close(block.ff.down.weight, resid)
        for lin in (block.attn.qkv, block.attn.out_proj, block.ff.up, block.ff.down):
            assert torch.equal(lin.bias, torch.zeros_like(lin.bias))
        for norm in (block.norm1, block.norm2):
            assert torch.equal(norm.weight, torch.ones(128)) and torch.equal(norm.bias, torch.zeros(128))
    untied = Transformer(TransformerConfig(**{**cfg.to_dict(), "tie_weights": False}))
    close(untied.lm_head.weight, 0.02)


def test_same_seed_same_model_and_logits():
    cfg = _cfg(pos_encoding="rope", activation="swiglu")
    outs = []
    for _ in range(2):
        torch.manual_seed(42)
        model = Transformer(cfg).eval()
        outs.append((model.state_dict(), model(_ids())[0]))
    for k in outs[0][0]:
        assert torch.equal(outs[0][0][k], outs[1][0][k]), k
    assert torch.equal(outs[0][1], outs[1][1])
    torch.manual_seed(43)
    assert not torch.equal(Transformer(cfg).eval()(_ids())[0], outs[0][1])


def test_sdpa_model_equals_explicit_model():
    for pos in POS:
        torch.manual_seed(0)
        a = Transformer(_cfg(pos_encoding=pos)).eval()
        torch.manual_seed(0)
        b = Transformer(_cfg(pos_encoding=pos, attn_impl="sdpa")).eval()
        am = torch.ones(3, 10, dtype=torch.long)
        am[1, 6:] = 0
        torch.testing.assert_close(a(_ids())[0], b(_ids())[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a(_ids(), attention_mask=am)[0], b(_ids(), attention_mask=am)[0],
                                   rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- loss

def test_loss_equals_cross_entropy_and_ignore_index():
    torch.manual_seed(0)
    model = Transformer(_cfg()).eval()
    ids, targets = _ids(), _ids(seed=1)
    logits, loss = model(ids, targets)
    ref = F.cross_entropy(logits.reshape(-1, 37), targets.reshape(-1))
    torch.testing.assert_close(loss, ref)
    # independent: mean negative log-probability of the targets
    logp = logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]
    torch.testing.assert_close(loss, -logp.mean())
    masked = targets.clone()
    masked[:, :4] = -100
    masked[0] = -100
    _, loss2 = model(ids, masked)
    keep = masked != -100
    torch.testing.assert_close(loss2, -logp[keep].mean())
    assert model(ids)[1] is None
    # untrained model: loss close to log(vocab_size)
    assert abs(loss.item() - math.log(37)) < 0.1


def test_attention_maps_and_loss_backward():
    model = Transformer(_cfg(num_layers=3)).eval()
    logits, loss = model(_ids(T=7), _ids(T=7, seed=2))
    atts = model.attention_maps(_ids(T=7))
    assert logits.shape == (3, 7, 37) and len(atts) == 3
    assert all(a.shape == (3, 4, 7, 7) for a in atts)
    assert all(torch.allclose(a.sum(-1), torch.ones(3, 4, 7)) for a in atts)
    # the maps are the weights the forward uses: row 0 of a causal map attends to token 0 only
    assert all(torch.equal(a[..., 0, 1:], torch.zeros(3, 4, 6)) for a in atts)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_attention_mask_right_padding_matches_unpadded():
    torch.manual_seed(0)
    model = Transformer(_cfg()).eval()
    ids = _ids(B=2, T=10)
    am = torch.ones(2, 10, dtype=torch.long)
    am[1, 6:] = 0
    logits, _ = model(ids, attention_mask=am)
    torch.testing.assert_close(logits[1, :6], model(ids[1:, :6])[0][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits[0], model(ids[:1])[0][0], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- classifier

def _clf(pooling, seed=0, **kw):
    torch.manual_seed(seed)
    return TransformerClassifier(_cfg(causal=False, **kw), num_classes=3, pooling=pooling).eval()


@pytest.mark.parametrize("pooling", ["first", "mean"])
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_classifier_padding_gives_unpadded_logits(pooling, pos):
    model = _clf(pooling, pos_encoding=pos)
    ids = _ids(B=2, T=10)
    am = torch.ones(2, 10, dtype=torch.long)
    am[0, 6:] = 0
    padded = ids.clone()
    padded[0, 6:] = 0  # whatever the padding id is, it must not matter
    logits, _ = model(padded, attention_mask=am)
    torch.testing.assert_close(logits[0], model(ids[:1, :6])[0][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logits[1], model(ids[1:])[0][0], rtol=1e-5, atol=1e-5)
    padded[0, 6:] = 5
    torch.testing.assert_close(model(padded, attention_mask=am)[0], logits, rtol=1e-5, atol=1e-5)


def test_classifier_pooling_formulas_and_loss():
    ids = _ids(B=4, T=8)
    for pooling in ("first", "mean"):
        model = _clf(pooling)
        h = model.hidden_states(ids)
        pooled = h[:, 0] if pooling == "first" else h.mean(1)
        logits, loss = model(ids, targets=torch.tensor([0, 1, 2, 1]))
        torch.testing.assert_close(logits, model.head(pooled))
        torch.testing.assert_close(loss, F.cross_entropy(logits, torch.tensor([0, 1, 2, 1])))
        assert logits.shape == (4, 3)


def test_classifier_is_bidirectional():
    model = _clf("first")
    ids = _ids(B=1, T=10)
    h = model.hidden_states(ids)
    changed = ids.clone()
    changed[0, 9] = (changed[0, 9] + 1) % 37
    assert not torch.allclose(model.hidden_states(changed)[:, 0], h[:, 0])
    assert not torch.allclose(model(changed)[0], model(ids)[0])


def test_classifier_errors():
    with pytest.raises(ValueError, match="causal=False"):
        TransformerClassifier(_cfg(), num_classes=2)
    with pytest.raises(ValueError, match="pooling"):
        TransformerClassifier(_cfg(causal=False), num_classes=2, pooling="max")
    for n in (1, 0, 2.0):
        with pytest.raises(ValueError, match="num_classes"):
            TransformerClassifier(_cfg(causal=False), num_classes=n)
    with pytest.raises(TypeError, match="TransformerConfig"):
        TransformerClassifier({"d_model": 32}, num_classes=2)
    with pytest.raises(ValueError, match="attention_mask"):
        _clf("mean")(_ids(B=2, T=6), attention_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"targets must have shape \(B,\)"):
        _clf("mean")(_ids(B=2, T=6), targets=torch.zeros(2, 6, dtype=torch.long))


# ---------------------------------------------------------------- errors

def test_input_errors():
    model = Transformer(_cfg())
    with pytest.raises(ValueError, match="max_seq_len=16"):
        model(_ids(T=17))
    with pytest.raises(ValueError, match=r"token id 37 is outside the vocabulary \[0, 37\)"):
        model(torch.tensor([[1, 37]]))
    with pytest.raises(ValueError, match="token id -1"):
        model(torch.tensor([[1, -1]]))
    with pytest.raises(ValueError, match=r"shape \(B, T\)"):
        model(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"shape \(B, T\)"):
        model(torch.zeros(1, 2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="integer tensor"):
        model(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(TypeError, match="torch.Tensor"):
        model([[1, 2]])
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="targets"):
        model(_ids(T=5), targets=_ids(T=4))
    for bad in (torch.ones(3, 9), torch.ones(2, 10), torch.ones(10)):
        with pytest.raises(ValueError, match="attention_mask"):
            model(_ids(B=3, T=10), attention_mask=bad)
    with pytest.raises(ValueError, match="kv_cache has 1 layers"):
        model(_ids(), kv_cache=KVCache(3, 4, 8, 16))
    with pytest.raises(TypeError, match="KVCache"):
        model(_ids(), kv_cache=[KVCache(3, 4, 8, 16)])
    with pytest.raises(TypeError, match="TransformerConfig"):
        Transformer(dict(vocab_size=10))


@pytest.mark.parametrize("kw,field", [(dict(d_model=30, num_heads=4), "num_heads"),
                                      (dict(norm="batchnorm"), "norm"),
                                      (dict(activation="tanh"), "activation"),
                                      (dict(pos_encoding="alibi"), "pos_encoding"),
                                      (dict(norm_position="sandwich"), "norm_position")])
def test_config_errors_reach_the_user(kw, field):
    with pytest.raises(ValueError, match=field):
        Transformer(_cfg(**kw))


def test_dropout_train_vs_eval():
    torch.manual_seed(0)
    model = Transformer(_cfg(dropout=0.2))
    ids = _ids()
    model.eval()
    assert torch.equal(model(ids)[0], model(ids)[0])
    model.train()
    torch.manual_seed(1)
    a = model(ids)[0]
    torch.manual_seed(1)
    b = model(ids)[0]
    assert torch.equal(a, b) and not torch.allclose(a, model(ids)[0])


# ---------------------------------------------------------------- bad inputs (issue 15)

def test_targets_must_be_integer_ids_in_range():
    model, ids = Transformer(_cfg()), _ids()
    with pytest.raises(TypeError, match="targets must be an integer tensor.*float32"):
        model(ids, targets=ids.float())  # would be truncated to other ids
    with pytest.raises(TypeError, match="targets must be a torch.Tensor"):
        model(ids, targets=ids.tolist())
    with pytest.raises(ValueError, match=r"targets contain 37, outside \[0, 37\)"):
        model(ids, targets=torch.full_like(ids, 37))
    with pytest.raises(ValueError, match=r"targets contain -3, outside"):
        model(ids, targets=torch.full_like(ids, -3))
    with pytest.raises(ValueError, match="targets are all -100.*NaN"):
        model(ids, targets=torch.full_like(ids, -100))
    some = torch.full_like(ids, -100)
    some[0, 0] = 5
    assert torch.isfinite(model(ids, targets=some)[1])  # -100 elsewhere is fine


def test_input_id_dtypes_batches_and_masks():
    model, ids = Transformer(_cfg()), _ids()
    model.eval()
    torch.testing.assert_close(model(ids.to(torch.int8))[0], model(ids)[0])  # int8 is an integer
    with pytest.raises(TypeError, match="input_ids must be an integer tensor, got dtype torch.float64"):
        model(ids.double())
    with pytest.raises(ValueError, match=r"batch of 0 sequences \(shape \(0, 10\)\)"):
        model(ids[:0])
    for bad in (float("nan"), float("inf"), 0.5):
        mask = torch.ones(ids.shape)
        mask[0, 0] = bad
        with pytest.raises(ValueError, match="attention_mask must hold only 1 .* and 0"):
            model(ids, attention_mask=mask)


def test_classifier_targets_are_checked():
    model = TransformerClassifier(_cfg(causal=False), num_classes=3)
    ids = _ids()
    with pytest.raises(ValueError, match=r"targets contain 3, outside \[0, 3\)"):
        model(ids, targets=torch.tensor([0, 1, 3]))
    with pytest.raises(TypeError, match="targets must be an integer tensor"):
        model(ids, targets=torch.tensor([0.0, 1.0, 2.0]))


def test_a_position_table_that_cannot_fit_is_refused():
    with pytest.raises(ValueError, match=r"max_seq_len=1000000000 with d_model=32 needs 119 GiB"):
        Transformer(_cfg(max_seq_len=10**9))
