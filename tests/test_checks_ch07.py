"""Chapter 7 checks beyond their wrong-answer tables (those live next to the checks, in
fundamentallm/checks/ch07.py, and run in tests/test_catches.py; every book solution passes and
every answer stub counts as not attempted: tests/test_course.py)."""

import torch
from book_solutions import book_solution

from fundamentallm import Transformer, TransformerConfig, checks
from fundamentallm.checks.ch07 import _GPT2_SMALL_PARAMETERS, _ch07_ffn_grads
from fundamentallm.checks.core import SELF_CHECK

feed_forward_backward = book_solution("ch07-ex1", "feed_forward_backward")


def test_gpt2_known_answer_matches_the_model():
    with torch.device("meta"):
        model = Transformer(TransformerConfig.preset("gpt2"))
    assert model.num_parameters() == _GPT2_SMALL_PARAMETERS


def test_ffn_backward_equals_the_package_modules_gradients():
    """The book's hand-written backward equals autograd through fundamentallm.FeedForward itself."""
    from fundamentallm import FeedForward

    torch.manual_seed(0)
    ffn = FeedForward(6, 20, activation="gelu").double()
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 6, dtype=torch.float64)
    ffn(x).backward(g)
    got = feed_forward_backward(x.detach(), ffn.up.weight.detach(), ffn.up.bias.detach(),
                                ffn.down.weight.detach(), ffn.down.bias.detach(), g)
    torch.testing.assert_close(got["x"], x.grad)
    torch.testing.assert_close(got["w_up"], ffn.up.weight.grad)
    torch.testing.assert_close(got["b_down"], ffn.down.bias.grad)
    ref = _ch07_ffn_grads(x.detach(), ffn.up.weight.detach(), ffn.up.bias.detach(), ffn.down.weight.detach(),
                          ffn.down.bias.detach(), g)
    torch.testing.assert_close(ref["w_down"], ffn.down.weight.grad)


def test_the_three_option_ablation_is_a_self_check_and_the_leak_is_graded():
    assert "check_swiglu_ablation_prediction" in SELF_CHECK
    assert "check_leak_reach_prediction" not in SELF_CHECK
    assert checks.check_leak_reach_prediction({(1, 1): 1, (1, 3): 3, (2, 1): 2, (2, 3): 6}) is True
