"""The chapter 7 exercise checks: they pass a correct answer and fail, with CheckFailed, a stub
and plausible wrong answers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed
from fundamentallm.checks.ch07 import _GPT2_SMALL_PARAMETERS

# --- correct answers -----------------------------------------------------------------------------


feed_forward = book_solution("ch07-ex1", "feed_forward")


swiglu = book_solution("ch07-ex2", "swiglu")


count_parameters = book_solution("ch07-ex3", "count_parameters")


causal_leak_test = book_solution("ch07-ex4", "causal_leak_test")


# --- wrong answers -------------------------------------------------------------------------------

def stub(*args, **kwargs):
    raise NotImplementedError


def feed_forward_exact_gelu(x, w_up, b_up, w_down, b_down):
    return F.gelu(x @ w_up.T + b_up) @ w_down.T + b_down  # erf GELU, not GPT-2's tanh one


def feed_forward_relu(x, w_up, b_up, w_down, b_down):
    return F.relu(x @ w_up.T + b_up) @ w_down.T + b_down


def swiglu_gate_swapped(x, w_gate, w_up, w_down):
    return ((x @ w_gate.T) * F.silu(x @ w_up.T)) @ w_down.T


def swiglu_sigmoid(x, w_gate, w_up, w_down):
    return (torch.sigmoid(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T  # GLU, not SwiGLU


def count_parameters_no_positions(config):
    return count_parameters({**config, "pos_encoding": "none"})  # forgets the position table


def count_parameters_head_always(config):
    return count_parameters({**config, "tie_weights": False})  # counts the tied matrix twice


def count_parameters_gpt2_only(config):
    d, f = config["d_model"], 4 * config["d_model"]
    V, L = config["vocab_size"], config["num_layers"]
    return V * d + config["max_seq_len"] * d + L * (4 * d + 4 * d * d + 4 * d + 2 * d * f + f + d) + 2 * d


def leak_last_token_only(model_fn, input_ids, vocab_size, atol=1e-6):
    base = model_fn(input_ids)
    T = input_ids.shape[1]
    out = torch.zeros(T, T, dtype=torch.bool)
    ids = input_ids.clone()
    ids[0, -1] = (ids[0, -1] + 1) % vocab_size
    out[-1] = (model_fn(ids) - base).abs().amax(-1)[0] > atol
    return out


def leak_in_place(model_fn, input_ids, vocab_size, atol=1e-6):
    base = model_fn(input_ids)
    T = input_ids.shape[1]
    out = torch.zeros(T, T, dtype=torch.bool)
    ids = input_ids.clone()
    for t in range(T):  # never restores the previous change
        ids[0, t] = (ids[0, t] + 1) % vocab_size
        out[t] = (model_fn(ids) - base).abs().amax(-1)[0] > atol
    return out


def leak_mutates_input(model_fn, input_ids, vocab_size, atol=1e-6):
    base = model_fn(input_ids.clone())
    T = input_ids.shape[1]
    out = torch.zeros(T, T, dtype=torch.bool)
    for t in range(T):
        old = int(input_ids[0, t])
        input_ids[0, t] = (old + 1) % vocab_size
        out[t] = (model_fn(input_ids) - base).abs().amax(-1)[0] > atol
    input_ids[0, 0] = (input_ids[0, 0] + 3) % vocab_size  # leaves the caller's tensor changed
    return out


# --- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("check, fn", [
    (checks.check_feed_forward, feed_forward),
    (checks.check_swiglu, swiglu),
    (checks.check_count_parameters, count_parameters),
    (checks.check_causal_leak_test, causal_leak_test),
])
def test_correct_answers_pass(check, fn, capsys):
    assert check(fn) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("check", [checks.check_feed_forward, checks.check_swiglu,
                                   checks.check_count_parameters, checks.check_causal_leak_test])
def test_stub_fails_with_a_clear_message(check):
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        check(stub)


@pytest.mark.parametrize("check, fn, message", [
    (checks.check_feed_forward, feed_forward_exact_gelu, "not to use torch.nn.functional.gelu"),
    (checks.check_feed_forward, feed_forward_relu, "elements differ"),
    (checks.check_swiglu, swiglu_gate_swapped, "elements differ"),
    (checks.check_swiglu, swiglu_sigmoid, "elements differ"),
    (checks.check_count_parameters, count_parameters_no_positions, "parameters"),
    (checks.check_count_parameters, count_parameters_head_always, "parameters"),
    (checks.check_count_parameters, count_parameters_gpt2_only, "parameters"),
    (checks.check_causal_leak_test, leak_last_token_only, "entry"),
    (checks.check_causal_leak_test, leak_in_place, "entry"),
    (checks.check_causal_leak_test, leak_mutates_input, "modified its argument 2 in place"),
])
def test_wrong_answers_fail(check, fn, message):
    with pytest.raises(CheckFailed, match=message):
        check(fn)


def test_gpt2_known_answer_matches_the_model():
    from fundamentallm import Transformer, TransformerConfig

    with torch.device("meta"):
        model = Transformer(TransformerConfig.preset("gpt2"))
    assert model.num_parameters() == _GPT2_SMALL_PARAMETERS


# --- SwiGLU width at matched parameters -----------------------------------------------------------

def _matched_width(d_model, d_ff):
    return max(1, round((2 * d_model * d_ff + d_ff) / (3 * d_model + 2)))


def _matched_width_no_biases(d_model, d_ff):
    return max(1, round(2 * d_ff / 3))


def test_check_swiglu_matched_width(capsys):
    assert checks.check_swiglu_matched_width(_matched_width) is True
    assert "passed" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="count the biases"):
        checks.check_swiglu_matched_width(_matched_width_no_biases)
    with pytest.raises(CheckFailed, match="positive int"):
        checks.check_swiglu_matched_width(lambda d_model, d_ff: 2 * d_ff / 3)
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.check_swiglu_matched_width(stub)
