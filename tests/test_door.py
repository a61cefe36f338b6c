"""The decode contract and the checks at the door: explicit ``token_positions`` through the model
(the KV-cache path included), bad inputs named once at the public entry, and the number of host
reads of a training step and of a generated token (counted with ``utils.count_host_syncs``)."""

import pytest
import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.generation import generate
from fundamentallm.positions import RotaryEmbedding
from fundamentallm.training import TrainConfig, Trainer
from fundamentallm.utils import count_host_syncs, inputs_checked, values_checked


def _model(pos="rope", **kw):
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=23, d_model=32, num_heads=4, num_layers=2, max_seq_len=24,
                            dropout=0.0, pos_encoding=pos, **kw)
    return Transformer(cfg).eval()


def _ids(B=2, T=9, seed=1):
    return torch.randint(0, 23, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("pos", ["rope", "learned", "sinusoidal"])
def test_default_positions_equal_explicit_arange(pos):
    model, ids = _model(pos), _ids()
    full = model(ids)[0]
    for p in (torch.arange(9), torch.arange(9).expand(2, 9)):
        assert torch.equal(model(ids, token_positions=p)[0], full)


def test_rope_scores_depend_only_on_offsets_so_a_shift_changes_nothing():
    """RoPE rotates queries and keys by their positions: shifting every position of a row by the
    same amount leaves the logits unchanged (up to rounding); a learned table does not."""
    ids = _ids(B=1).expand(2, 9)
    shifted = torch.stack([torch.arange(9), torch.arange(9) + 11])  # (B, T): row 1 starts at 11
    out = _model("rope")(ids, token_positions=shifted)[0]
    torch.testing.assert_close(out[1], out[0], rtol=1e-4, atol=1e-5)
    learned = _model("learned")(ids, token_positions=shifted)[0]
    assert not torch.allclose(learned[1], learned[0], atol=1e-3)


@pytest.mark.parametrize("attn_impl", ["explicit", "sdpa"])
def test_left_padding_with_positions_equals_the_unpadded_prompt(attn_impl):
    """A left-padded row, its padding masked and its positions counted from its first real
    token (Hugging Face's convention), gives the unpadded row's logits."""
    model = _model("rope", attn_impl=attn_impl)
    ids = _ids(B=1, T=6)
    pad = 3
    padded = torch.cat([torch.zeros(1, pad, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, pad, dtype=torch.long), torch.ones(1, 6, dtype=torch.long)], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(padded, attention_mask=mask, token_positions=positions)[0][:, pad:]
    torch.testing.assert_close(out, model(ids)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_kv_cache_with_token_positions_equals_the_full_pass(pos):
    model, ids = _model(pos), _ids()
    positions = torch.stack([torch.arange(9) + 2, torch.arange(9) + 5])
    full = model(ids, token_positions=positions)[0]
    cache = model.make_kv_cache(2)
    parts, start = [], 0
    for n in (4, 1, 3, 1):
        parts.append(model(ids[:, start:start + n], kv_cache=cache,
                           token_positions=positions[:, start:start + n])[0])
        start += n
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-4, atol=1e-5)


BAD_POSITIONS = [  # (token_positions for ids of shape (2, 9), error type, message)
    (torch.arange(10), ValueError, r"token_positions must have shape \(T,\) = \(9,\)"),
    (torch.arange(9).expand(3, 9), ValueError, r"token_positions must have shape"),
    (torch.arange(9) + 20, ValueError, r"token_positions holds 24, outside \[0, max_seq_len=24\)"),
    (torch.arange(9) - 1, ValueError, r"token_positions holds -1"),
    (torch.arange(9).float(), TypeError, r"token_positions must be an integer torch.Tensor"),
    ([0, 1, 2], TypeError, r"token_positions must be an integer torch.Tensor"),
]


@pytest.mark.parametrize("positions, error, message", BAD_POSITIONS)
def test_bad_token_positions_are_named(positions, error, message):
    with pytest.raises(error, match=message):
        _model("rope")(_ids(), token_positions=positions)


@pytest.mark.parametrize("positions, error, message", BAD_POSITIONS[2:5])
def test_rotary_embedding_alone_checks_its_positions(positions, error, message):
    rope = RotaryEmbedding(8, 24)
    with pytest.raises(error, match=message):
        rope(torch.zeros(2, 4, 9, 8), token_positions=positions)
    out = rope(torch.ones(2, 4, 9, 8), token_positions=torch.arange(9).expand(2, 9))
    assert torch.equal(out, rope(torch.ones(2, 4, 9, 8)))


def test_the_rotary_module_is_one_registered_submodule_without_state():
    model = _model("rope")
    assert all(block.attn.rope is model.rope for block in model.blocks)
    assert [i for i, block in enumerate(model.blocks)] == [b.attn.layer_idx for b in model.blocks]
    assert not any("rope" in k for k in model.state_dict())
    assert sum(isinstance(m, RotaryEmbedding) for m in model.modules()) == 1  # modules() yields it once


def test_inputs_checked_skips_only_the_value_reads():
    model, ids = _model(), _ids()
    bad = ids.clone()
    bad[0, 0] = 99
    with pytest.raises(ValueError, match="token id 99 is outside the vocabulary"):
        model(bad)
    with inputs_checked(model):
        with pytest.raises(ValueError, match="input_ids must have shape"):
            model(ids[0])  # shapes are still checked
        with count_host_syncs() as counted:
            model(ids, ids)
        assert counted["syncs"] == 0
    assert not values_checked(model)  # the mark ends with the block
    with count_host_syncs() as counted:
        model(ids, ids)
    assert counted["syncs"] == 1  # the door: every value check in one read


def test_logits_to_keep_and_next_token_logits():
    model, ids = _model(), _ids()
    full = model(ids)[0]
    torch.testing.assert_close(model(ids, logits_to_keep=3)[0], full[:, -3:])
    torch.testing.assert_close(model.next_token_logits(ids), full[:, -1])
    with pytest.raises(ValueError, match="logits_to_keep=-1 must be an integer >= 0"):
        model(ids, logits_to_keep=-1)
    with pytest.raises(ValueError, match="logits_to_keep=1 cannot be combined with targets"):
        model(ids, ids, logits_to_keep=1)


def test_a_training_step_reads_the_host_once():
    model = _model()
    data = torch.randint(0, 23, (400,), generator=torch.Generator().manual_seed(0))
    trainer = Trainer(model, data, config=TrainConfig(max_steps=3, batch_size=4, block_size=16,
                                                      grad_accum_steps=2, warmup_steps=0, progress=False))
    for _ in range(2):
        with count_host_syncs() as counted:
            trainer.train_step()
        assert counted["syncs"] <= 1, counted


@pytest.mark.parametrize("kw", [dict(greedy=True), dict(temperature=0.8, top_k=5, top_p=0.9)])
def test_generation_reads_the_host_at_most_once_per_token(kw):
    model, n = _model(), 12
    with count_host_syncs() as counted:
        generate(model, _ids(T=4), n, generator=torch.Generator().manual_seed(0), **kw)
    assert counted["syncs"] <= n, counted


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=float("inf")), r"temperature=inf must be finite"),
    (dict(generator=5), r"generator=5 must be None or a torch.Generator"),
])
def test_bad_generation_arguments_are_named(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        generate(_model(), _ids(T=4), 3, **kwargs)


@pytest.mark.parametrize("overrides, field", [
    (dict(vocab_size=10**11), "vocab_size=100000000000"),
    (dict(d_model=2**20, num_heads=2**10, num_layers=1000, max_seq_len=8), "num_layers=1000"),
])
def test_a_model_too_large_for_memory_names_the_field_before_allocating(overrides, field):
    cfg = TransformerConfig(**{**dict(vocab_size=23, d_model=32, num_heads=4, num_layers=2, max_seq_len=24),
                               **overrides})
    with pytest.raises(ValueError, match=field):
        Transformer(cfg)


@pytest.mark.parametrize("pos", ["rope", "learned", "sinusoidal"])
def test_explicit_positions_are_checked_once_at_the_door(pos):
    model = _model(pos)
    with count_host_syncs() as counted:
        model(_ids(), token_positions=torch.arange(9))
    assert counted["syncs"] == 1  # the door's one read, not one per layer


@pytest.mark.parametrize("attn_impl", ["explicit", "sdpa"])
def test_the_padding_mask_is_checked_once_at_the_door_not_per_layer(attn_impl, monkeypatch):
    """The door turns ``attention_mask`` into the key-padding mask and checks it; the layers a
    model builds check neither it nor their input again. A layer used on its own still does, and a
    bad mask is still named, at the door (issue 39, item 5)."""
    from fundamentallm import attention

    calls = []
    check = attention._check_mask
    monkeypatch.setattr(attention, "_check_mask", lambda *a: calls.append(1) or check(*a))
    model, ids = _model(attn_impl=attn_impl), _ids()
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    model(ids, attention_mask=mask)
    assert calls == []
    with pytest.raises(ValueError, match="attention_mask must hold only 1"):
        model(ids, attention_mask=mask * 2)
    layer = attention.MultiHeadAttention(32, 4, causal=True)
    layer(torch.randn(2, 9, 32), mask=attention.padding_mask(mask))
    assert calls == [1]
    with pytest.raises(ValueError, match="expects input"):
        layer(torch.randn(2, 9, 16))


def test_the_cache_room_is_checked_once_per_forward_not_per_layer(monkeypatch):
    """The door checks that the new keys fit the cache (batch, heads, width, room) once; the
    layers then write unchecked. A cache too small for the model is still named at the door."""
    from fundamentallm.cache import KVCache

    calls = []
    check = KVCache.check_room
    monkeypatch.setattr(KVCache, "check_room", lambda self, *a: calls.append(a) or check(self, *a))
    model, ids = _model(), _ids()
    cache = model.make_kv_cache(2)
    model(ids, kv_cache=cache)
    assert len(calls) == 1 and len(model.blocks) == 2
    small = KVCache(2, 4, 8, max_seq_len=10, num_layers=2)
    model(ids, kv_cache=small)
    with pytest.raises(ValueError, match=r"KV cache overflow: 9 cached \+ 9 new positions > max_seq_len=10"):
        model(ids, kv_cache=small)
    with pytest.raises(ValueError, match=r"KV cache holds \(B, H_kv, D\) = \(3, 4, 8\)"):
        model(ids, kv_cache=KVCache(3, 4, 8, max_seq_len=24, num_layers=2))
