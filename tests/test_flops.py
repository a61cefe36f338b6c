"""Compute accounting (fundamentallm/flops.py) against PyTorch's FlopCounterMode."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.flops import (
    compute_budget,
    parameter_counts,
    tokens_for_budget,
    training_flops_per_token,
)


def course_model(d_model=32, num_layers=2, vocab_size=105, seq_len=64, **kw):
    torch.manual_seed(0)
    cfg = TransformerConfig(vocab_size=vocab_size, d_model=d_model, num_heads=d_model // 8, num_layers=num_layers,
                            max_seq_len=seq_len, norm="rmsnorm", pos_encoding="rope", activation="swiglu",
                            bias=False, attn_impl="explicit", **kw)
    return Transformer(cfg)


def counted_training_flops(model, batch, seq_len):
    ids = torch.randint(0, model.config.vocab_size, (batch, seq_len + 1), generator=torch.Generator().manual_seed(0))
    with FlopCounterMode(display=False) as counter:
        _, loss = model(ids[:, :-1], targets=ids[:, 1:])
        loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("d_model,num_layers,seq_len", [(32, 2, 64), (64, 3, 32), (16, 1, 128)])
def test_training_flops_match_flop_counter_mode(d_model, num_layers, seq_len):
    """FlopCounterMode counts matrix products only (forward, and backward's two products per
    weight); our formula counts the same terms, so they agree to rounding (< 0.5 %: the
    difference would be a term we miscounted). 6·N alone misses the attention and output terms."""
    model, batch = course_model(d_model, num_layers, seq_len=seq_len), 2
    counted = counted_training_flops(model, batch, seq_len)
    ours = training_flops_per_token(model.config, seq_len)
    assert ours["total"] * batch * seq_len == pytest.approx(counted, rel=5e-3)
    n = parameter_counts(model)["non_embedding"]
    six_n = 6 * n * batch * seq_len
    assert six_n < 0.95 * counted  # the 6N rule undercounts a tiny model's FLOPs
    # N counts the norms' weights too (no matmul FLOPs), the weights term only the matrices
    assert 0 < n - ours["weights"] / 6 == (2 * num_layers + 1) * d_model


def test_parameter_counts_split_tied_embeddings_once():
    model = course_model()
    counts = parameter_counts(model)
    assert counts["total"] == model.num_parameters()
    assert counts["embedding"] == 105 * 32  # the tied token embedding / output layer, once
    untied = course_model(tie_weights=False)
    assert parameter_counts(untied)["embedding"] == 2 * 105 * 32
    assert parameter_counts(untied)["non_embedding"] == counts["non_embedding"]


def test_attention_share_is_t_over_6d():
    cfg = course_model(d_model=32, seq_len=64).config
    f = training_flops_per_token(cfg, 64)
    # SwiGLU with d_ff = 8/3 d rounded: weights ~ 6 * 24 d^2 per layer; attention 12 T d per layer
    assert f["attention"] / f["weights"] == pytest.approx(64 / (6 * 32), rel=0.03)  # d_ff rounded up to 88


def test_budget_and_tokens_are_inverse():
    assert compute_budget(1e6, 2e7) == 1.2e14
    assert tokens_for_budget(1.2e14, 1e6) == pytest.approx(2e7)


@pytest.mark.parametrize("call,message", [
    (lambda: compute_budget(0, 10), "n_params must be a positive number"),
    (lambda: tokens_for_budget(-1.0, 10), "budget must be a positive number"),
    (lambda: training_flops_per_token(course_model().config, 0), "seq_len must be a positive int"),
    (lambda: training_flops_per_token({"d_model": 4}, 8), "config must be a TransformerConfig"),
    (lambda: parameter_counts(torch.nn.Linear(2, 2)), "model must be a fundamentallm Transformer"),
])
def test_bad_inputs_name_the_parameter(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()
