"""TransformerConfig: every field validated, presets, from_dict, ff_dim."""

import dataclasses
import math

import pytest

from fundamentallm.config import (
    ACTIVATIONS,
    ATTN_IMPLS,
    NORM_POSITIONS,
    NORMS,
    POS_ENCODINGS,
    PRESETS,
    TransformerConfig,
)

INT_FIELDS = ("vocab_size", "d_model", "num_heads", "num_layers", "max_seq_len", "d_ff")
BAD_INTS = [0, -1, -100, 1.0, 2.5, "8", True, False, float("nan")]


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", BAD_INTS, ids=repr)
def test_int_fields_reject_bad_values(field, value):
    with pytest.raises(ValueError) as err:
        TransformerConfig(**{field: value})
    msg = str(err.value)
    assert field in msg and repr(value) in msg and ">= 1" in msg


CHOICES = {
    "norm": NORMS,
    "norm_position": NORM_POSITIONS,
    "pos_encoding": POS_ENCODINGS,
    "activation": ACTIVATIONS,
    "attn_impl": ATTN_IMPLS,
}
BAD_CHOICES = ["", "LayerNorm", "batchnorm", "swish", None, 1, "alibi", "pre-ln", "flash"]


@pytest.mark.parametrize("field", sorted(CHOICES))
@pytest.mark.parametrize("value", BAD_CHOICES, ids=repr)
def test_choice_fields_reject_bad_values_and_list_allowed(field, value):
    with pytest.raises(ValueError) as err:
        TransformerConfig(**{field: value})
    msg = str(err.value)
    assert field in msg and repr(value) in msg
    for allowed in CHOICES[field]:
        assert repr(allowed) in msg


@pytest.mark.parametrize("field", sorted(CHOICES))
def test_choice_fields_accept_every_allowed_value(field):
    for value in CHOICES[field]:
        extra = {"d_model": 64, "num_heads": 4}
        cfg = TransformerConfig(**{field: value, **extra})
        assert getattr(cfg, field) == value


@pytest.mark.parametrize("field", ["bias", "tie_weights", "causal", "qk_norm", "value_embeddings"])
@pytest.mark.parametrize("value", [0, 1, "True", None, 1.0])
def test_bool_fields_reject_non_bools(field, value):
    with pytest.raises(ValueError) as err:
        TransformerConfig(**{field: value})
    assert field in str(err.value) and "True or False" in str(err.value)


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5, float("nan"), "0.1", None, True])
def test_dropout_rejects_out_of_range(value):
    with pytest.raises(ValueError, match="dropout"):
        TransformerConfig(dropout=value)


@pytest.mark.parametrize("value", [0.0, 0.1, 0.5, 0.99, 0])
def test_dropout_accepts_range(value):
    assert TransformerConfig(dropout=value).dropout == value


@pytest.mark.parametrize("value", [0.0, -1e-5, float("nan"), float("inf"), "1e-5", None, True])
def test_norm_eps_rejects_non_positive(value):
    with pytest.raises(ValueError, match="norm_eps"):
        TransformerConfig(norm_eps=value)


@pytest.mark.parametrize("value", [1.0, 0.5, 0, -10000.0, float("nan"), float("inf"), "10000", None, True])
def test_rope_base_rejects_bad(value):
    with pytest.raises(ValueError, match="rope_base"):
        TransformerConfig(rope_base=value)


@pytest.mark.parametrize("d_model,num_heads", [(10, 3), (64, 5), (128, 3), (7, 2), (4, 8)])
def test_num_heads_must_divide_d_model(d_model, num_heads):
    with pytest.raises(ValueError) as err:
        TransformerConfig(d_model=d_model, num_heads=num_heads)
    assert f"num_heads={num_heads}" in str(err.value) and f"d_model={d_model}" in str(err.value)


def test_rope_needs_even_head_dim_and_sinusoidal_even_d_model():
    with pytest.raises(ValueError, match="head_dim"):
        TransformerConfig(d_model=12, num_heads=4, pos_encoding="rope")  # head_dim 3
    with pytest.raises(ValueError, match="d_model"):
        TransformerConfig(d_model=15, num_heads=3, pos_encoding="sinusoidal")
    assert TransformerConfig(d_model=12, num_heads=4, pos_encoding="learned").head_dim == 3


def test_rope_odd_head_dim_message():
    with pytest.raises(ValueError, match="even head_dim"):
        TransformerConfig(d_model=15, num_heads=3, pos_encoding="rope")


def test_defaults_valid_and_head_dim():
    cfg = TransformerConfig()
    assert cfg.head_dim * cfg.num_heads == cfg.d_model
    assert cfg.qk_norm is False and cfg.value_embeddings is False  # the new options are opt-in
    assert cfg.d_ff is None and cfg.ff_dim == 4 * cfg.d_model


@pytest.mark.parametrize("d_model", [8, 16, 24, 64, 96, 100, 128, 256, 768, 4096])
def test_ff_dim_rules(d_model):
    gelu = TransformerConfig(d_model=d_model, num_heads=4, activation="gelu")
    relu = TransformerConfig(d_model=d_model, num_heads=4, activation="relu")
    relu2 = TransformerConfig(d_model=d_model, num_heads=4, activation="relu2")
    swiglu = TransformerConfig(d_model=d_model, num_heads=4, activation="swiglu")
    assert gelu.ff_dim == relu.ff_dim == relu2.ff_dim == 4 * d_model
    # 8/3 d_model rounded UP to a multiple of 8 (independent computation with exact rationals)
    expected = 8 * math.ceil(8 * d_model / 3 / 8)
    assert swiglu.ff_dim == expected
    assert swiglu.ff_dim % 8 == 0 and swiglu.ff_dim >= 8 * d_model / 3
    # an explicit d_ff always wins
    assert TransformerConfig(d_model=d_model, num_heads=4, activation="swiglu", d_ff=33).ff_dim == 33


def test_ff_dim_swiglu_keeps_parameter_count_close():
    d = 384
    cfg = TransformerConfig(d_model=d, num_heads=6, activation="swiglu")
    assert abs(3 * d * cfg.ff_dim - 2 * d * 4 * d) / (8 * d * d) < 0.02


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets(name):
    cfg = TransformerConfig.preset(name, vocab_size=65)
    assert cfg.vocab_size == 65
    for key, value in PRESETS[name].items():
        if key != "vocab_size":
            assert getattr(cfg, key) == value


def test_preset_overrides_and_errors():
    cfg = TransformerConfig.preset("nano", pos_encoding="rope", norm="rmsnorm")
    assert cfg.pos_encoding == "rope" and cfg.norm == "rmsnorm" and cfg.d_model == 64
    assert TransformerConfig.preset("gpt2").vocab_size == 50257
    with pytest.raises(ValueError) as err:
        TransformerConfig.preset("huge")
    assert "huge" in str(err.value) and all(p in str(err.value) for p in PRESETS)
    with pytest.raises(ValueError, match="unknown"):
        TransformerConfig.preset("nano", n_layer=3)
    with pytest.raises(ValueError, match="num_heads"):
        TransformerConfig.preset("nano", num_heads=5)


def test_from_dict_round_trip_and_unknown_keys():
    cfg = TransformerConfig(vocab_size=99, d_model=32, num_heads=2, activation="swiglu", d_ff=40)
    d = cfg.to_dict()
    assert set(d) == {f.name for f in dataclasses.fields(TransformerConfig)}
    assert TransformerConfig.from_dict(d) == cfg
    for bad in ({"n_embd": 32}, {"d_model": 32, "heads": 2}, {"Dropout": 0.1}):
        with pytest.raises(ValueError) as err:
            TransformerConfig.from_dict(bad)
        assert list(set(bad) - {"d_model"})[0] in str(err.value) and "known fields" in str(err.value)


def test_from_dict_validates_values():
    with pytest.raises(ValueError, match="dropout"):
        TransformerConfig.from_dict({"dropout": 2.0})


def test_new_options_round_trip_and_value_embeddings_need_causal():
    cfg = TransformerConfig(vocab_size=50, d_model=32, num_heads=4, activation="relu2", qk_norm=True,
                            value_embeddings=True)
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError) as err:
        TransformerConfig(value_embeddings=True, causal=False)
    assert "value_embeddings=True" in str(err.value) and "causal=True" in str(err.value)
    assert TransformerConfig(qk_norm=True, causal=False).qk_norm  # QK-norm works in an encoder too
