"""Chapter 7 checks: each wrong answer gets the message that says what is wrong (correct answers
and stubs: tests/test_course.py)."""

import torch
import torch.nn.functional as F
from book_solutions import book_solution
from check_tables import wired, wrong_answer_tests

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.checks.ch07 import _GPT2_SMALL_PARAMETERS

count_parameters = book_solution("ch07-ex3", "count_parameters")
resource_accounting = book_solution("ch07-ex6", "resource_accounting")


def feed_forward_exact_gelu(x, w_up, b_up, w_down, b_down):
    return F.gelu(x @ w_up.T + b_up) @ w_down.T + b_down  # erf GELU, not GPT-2's tanh one


def feed_forward_relu(x, w_up, b_up, w_down, b_down):
    return F.relu(x @ w_up.T + b_up) @ w_down.T + b_down


def count_parameters_no_positions(config):
    return count_parameters({**config, "pos_encoding": "none"})  # forgets the position table


def count_parameters_head_always(config):
    return count_parameters({**config, "tie_weights": False})  # counts the tied matrix twice


def count_parameters_gpt2_only(config):
    d, f = config["d_model"], 4 * config["d_model"]
    V, L = config["vocab_size"], config["num_layers"]
    return V * d + config["max_seq_len"] * d + L * (4 * d + 4 * d * d + 4 * d + 2 * d * f + f + d) + 2 * d


def test_gpt2_known_answer_matches_the_model():
    from fundamentallm import Transformer, TransformerConfig

    with torch.device("meta"):
        model = Transformer(TransformerConfig.preset("gpt2"))
    assert model.num_parameters() == _GPT2_SMALL_PARAMETERS


def accounting_with(**changes):
    """The book's accounting with some entries replaced by a function of (answer, config, P, B, T)."""
    def answer(config, num_parameters, batch_size, seq_len):
        right = resource_accounting(config, num_parameters, batch_size, seq_len)
        return {**right, **{k: f(right, config, num_parameters, batch_size, seq_len) for k, f in changes.items()}}
    return answer


def no_attention_products(r, c, P, B, T):
    return r["forward_flops"] - c["num_layers"] * 4 * B * T * T * c["d_model"]


def flop_counter_inside(config, num_parameters, batch_size, seq_len):
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False):
        pass
    return resource_accounting(config, num_parameters, batch_size, seq_len)


def accounting_by_building_the_model(config, num_parameters, batch_size, seq_len):
    Transformer(TransformerConfig(**config))
    return resource_accounting(config, num_parameters, batch_size, seq_len)


WRONG = [
    ("check_feed_forward", feed_forward_exact_gelu, "not to use torch.nn.functional.gelu"),
    ("check_feed_forward", feed_forward_relu, "elements differ"),
    ("check_parallel_block", wired(lambda x, attn, ff, n: (lambda h: h + ff(n(h)))(x + attn(n(x)))),
     "sequential pre-LN block"),
    ("check_parallel_block", wired(lambda x, attn, ff, n: x + attn(x) + ff(x)), "elements differ"),
    ("check_parallel_block", wired(lambda x, attn, ff, n: attn(n(x)) + ff(n(x))), "elements differ"),
    ("check_leak_reach_prediction", {"one_layer": 1, "three_layers": 1}, "the leaks add up"),
    ("check_leak_reach_prediction", {"one_layer": 0, "three_layers": 3}, "one position back"),
    ("check_leak_reach_prediction", {"one_layer": 1.0, "three_layers": 3}, "should be an int"),
    ("check_leak_reach_prediction", {"one": 1}, "needs exactly the keys"),
    ("check_count_parameters", count_parameters_no_positions, "expected .* parameters, got"),
    ("check_count_parameters", count_parameters_head_always, "expected .* parameters, got"),
    ("check_count_parameters", count_parameters_gpt2_only, "expected .* parameters, got"),
    ("check_swiglu_matched_width", lambda d_model, d_ff: max(1, round(2 * d_ff / 3)), "count the biases"),
    ("check_swiglu_matched_width", lambda d_model, d_ff: 2 * d_ff / 3, "positive int"),
    ("check_resource_accounting", accounting_with(forward_flops=no_attention_products), "Q K\\^T and weights @ V"),
    ("check_resource_accounting", accounting_with(
        forward_flops=lambda r, c, P, B, T: r["forward_flops"] - 2 * B * T * c["d_model"] * c["vocab_size"]),
     "the output layer still multiplies"),
    ("check_resource_accounting", accounting_with(forward_flops=lambda r, c, P, B, T: r["forward_flops"] // 2),
     "a multiply-add counts as 2 FLOPs"),
    ("check_resource_accounting", accounting_with(forward_flops=lambda r, c, P, B, T: 2 * P * B * T),
     "2 x parameters x tokens is the usual estimate"),
    ("check_resource_accounting", accounting_with(training_bytes=lambda r, c, P, B, T: 4 * P), "parameters alone"),
    ("check_resource_accounting", accounting_with(training_bytes=lambda r, c, P, B, T: 12 * P), "add the gradients"),
    ("check_resource_accounting", lambda c, P, B, T: {"flops": 0}, "keys 'forward_flops' and 'training_bytes'"),
    ("check_resource_accounting", flop_counter_inside, "not to use torch.utils.flop_counter"),
    ("check_resource_accounting", accounting_by_building_the_model, "not to use fundamentallm.model.Transformer"),
]

test_wrong_answer_gets_its_message = wrong_answer_tests(WRONG)

test_wrong_answer_gets_its_message_ablation = wrong_answer_tests([
    ("check_swiglu_ablation_prediction", "gelu", "richer function per parameter"),
    ("check_swiglu_ablation_prediction", "same", "not something a GELU unit can form"),
    ("check_swiglu_ablation_prediction", "relu", "choose one of"),
])
