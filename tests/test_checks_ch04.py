"""The chapter 4 exercise checks: they pass a correct answer and fail, with CheckFailed, a stub
and plausible wrong answers."""

from __future__ import annotations

import math

import pytest
import torch
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

# --- correct answers ---------------------------------------------------------------------------


embedding_lookup = book_solution("ch04-ex1", "embedding_lookup")


def embedding_lookup_one_hot(ids, weight):
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= weight.shape[0]):
        raise ValueError(f"ids must lie in [0, {weight.shape[0]})")
    return torch.nn.functional.one_hot(ids, weight.shape[0]).to(weight.dtype) @ weight


sinusoidal_encoding = book_solution("ch04-ex2", "sinusoidal_encoding")


rotate_half = book_solution("ch04-ex3", "rotate_half")


apply_rope = book_solution("ch04-ex4", "apply_rope")


# --- wrong answers -----------------------------------------------------------------------------

def stub(*args, **kwargs):
    raise NotImplementedError


def embedding_lookup_detached(ids, weight):
    return embedding_lookup(ids, weight.detach())


def embedding_lookup_unvalidated(ids, weight):
    return weight[ids % weight.shape[0]]


def sinusoidal_swapped(max_seq_len, d_model, base=10000.0):
    pe = sinusoidal_encoding(max_seq_len, d_model, base)
    return torch.stack((pe[:, 1::2], pe[:, 0::2]), -1).flatten(1)  # cos first


def sinusoidal_wrong_exponent(max_seq_len, d_model, base=10000.0):
    if d_model % 2:
        raise ValueError(f"d_model={d_model} must be even")
    pos = torch.arange(max_seq_len, dtype=torch.float64)[:, None]
    freqs = base ** (-torch.arange(d_model // 2, dtype=torch.float64) / d_model)  # i/d, not 2i/d
    pe = torch.zeros(max_seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freqs), torch.cos(pos * freqs)
    return pe


def sinusoidal_ignores_base(max_seq_len, d_model, base=10000.0):
    return sinusoidal_encoding(max_seq_len, d_model)


def rotate_interleaved(x):
    if x.shape[-1] % 2:
        raise ValueError(f"the last dimension {x.shape[-1]} must be even")
    return torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)  # GPT-J pairing


def rotate_half_wrong_sign(x):
    return -rotate_half(x)


def apply_rope_interleaved(x, positions, base=10000.0):
    D = x.shape[-1]
    freqs = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = (positions.double()[:, None] * freqs).repeat_interleave(2, -1)
    return x * angles.cos().to(x.dtype) + rotate_interleaved(x) * angles.sin().to(x.dtype)


def apply_rope_from_zero(x, positions, base=10000.0):
    return apply_rope(x, torch.arange(x.shape[-2]), base)  # ignores the given positions


def apply_rope_negative_angle(x, positions, base=10000.0):
    return apply_rope(x, -positions, base)


# --- tests -------------------------------------------------------------------------------------

CASES = [
    ("check_embedding_lookup", [embedding_lookup, embedding_lookup_one_hot],
     [embedding_lookup_detached, embedding_lookup_unvalidated]),
    ("check_sinusoidal_encoding", [sinusoidal_encoding],
     [sinusoidal_swapped, sinusoidal_wrong_exponent, sinusoidal_ignores_base]),
    ("check_rotate_half", [rotate_half], [rotate_interleaved, rotate_half_wrong_sign]),
    ("check_apply_rope", [apply_rope],
     [apply_rope_interleaved, apply_rope_from_zero, apply_rope_negative_angle]),
]


@pytest.mark.parametrize("name,correct,wrong", CASES, ids=[c[0] for c in CASES])
def test_check_passes_correct_answers(name, correct, wrong, capsys):
    for fn in correct:
        assert getattr(checks, name)(fn) is True
        assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("name,correct,wrong", CASES, ids=[c[0] for c in CASES])
def test_check_fails_a_stub(name, correct, wrong):
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        getattr(checks, name)(stub)


@pytest.mark.parametrize("name,correct,wrong", CASES, ids=[c[0] for c in CASES])
def test_check_fails_wrong_answers(name, correct, wrong):
    for fn in wrong:
        with pytest.raises(CheckFailed, match=name):
            getattr(checks, name)(fn)


def test_messages_say_what_is_wrong():
    with pytest.raises(CheckFailed, match="differentiable"):
        checks.check_embedding_lookup(embedding_lookup_detached)
    with pytest.raises(CheckFailed, match="ValueError"):
        checks.check_embedding_lookup(embedding_lookup_unvalidated)
    with pytest.raises(CheckFailed, match="not interleaved"):
        checks.check_rotate_half(rotate_interleaved)
    with pytest.raises(CheckFailed, match="base=100"):
        checks.check_sinusoidal_encoding(sinusoidal_ignores_base)


def test_references_agree_with_the_package():
    """The checks' independent references equal fundamentallm's implementations."""
    from fundamentallm.checks.ch04 import _ref_rope, _ref_sinusoidal
    from fundamentallm.positions import RotaryEmbedding, sinusoidal_table

    torch.testing.assert_close(_ref_sinusoidal(12, 8, 10000.0).float(), sinusoidal_table(12, 8))
    x = torch.randn(2, 3, 12, 8)
    torch.testing.assert_close(_ref_rope(x, torch.arange(12), 10000.0).float(),
                               RotaryEmbedding(8, 16)(x), atol=1e-5, rtol=1e-5)
    assert math.isclose(float(_ref_rope(torch.ones(1, 2), torch.tensor([0]), 10.0).sum()), 2.0)


def test_checks_are_registered():
    for name, *_ in CASES:
        assert name in checks.CHECKS


# --- ALiBi biases ---------------------------------------------------------------------------------

def _alibi(num_heads, T):
    slopes = 2.0 ** (-8.0 * torch.arange(1, num_heads + 1) / num_heads)
    offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # i - j
    bias = -slopes[:, None, None] * offset
    return bias.masked_fill(offset < 0, float("-inf"))


def _alibi_not_causal(num_heads, T):
    return _alibi(num_heads, T).nan_to_num(neginf=0.0)


def _alibi_one_slope(num_heads, T):
    return _alibi(1, T).expand(num_heads, T, T)


def test_check_alibi_bias():
    assert checks.check_alibi_bias(_alibi) is True
    with pytest.raises(CheckFailed, match="-inf"):
        checks.check_alibi_bias(_alibi_not_causal)
    with pytest.raises(CheckFailed, match="same slope"):
        checks.check_alibi_bias(_alibi_one_slope)
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.check_alibi_bias(stub)
