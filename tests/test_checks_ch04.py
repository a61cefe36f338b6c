"""Chapter 4 checks: each wrong answer gets the message that says what is wrong (correct answers
and stubs: tests/test_course.py), and the checks' references equal the package."""

import math

import torch
from book_solutions import book_solution
from check_tables import wrong_answer_tests

rotate_half = book_solution("ch04-ex3", "rotate_half")
apply_rope = book_solution("ch04-ex4", "apply_rope")
rope_score_matrix = book_solution("ch04-ex2", "rope_score_matrix")


def rotate_interleaved(x):
    if x.shape[-1] % 2:
        raise ValueError(f"the last dimension {x.shape[-1]} must be even")
    return torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)  # GPT-J pairing


def apply_rope_interleaved(x, positions, base=10000.0):
    D = x.shape[-1]
    freqs = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = (positions.double()[:, None] * freqs).repeat_interleave(2, -1)
    return x * angles.cos().to(x.dtype) + rotate_interleaved(x) * angles.sin().to(x.dtype)


def alibi(num_heads, T):
    slopes = 2.0 ** (-8.0 * torch.arange(1, num_heads + 1) / num_heads)
    offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]  # i - j
    return (-slopes[:, None, None] * offset).masked_fill(offset < 0, float("-inf"))


NOPE = {"causal": True, "bidirectional": False, "neighbours": "shrink"}

WRONG = [
    ("check_no_position_prediction", {**NOPE, "bidirectional": True}, "same set of keys"),
    ("check_no_position_prediction", {**NOPE, "causal": False}, "BOS's share"),
    ("check_no_position_prediction", {**NOPE, "neighbours": "stay"}, r"1/\(\(t \+ 1\)\(t \+ 2\)\)"),
    ("check_no_position_prediction", {**NOPE, "causal": 1}, "choose one of"),
    ("check_no_position_prediction", {"causal": True, "bidirectional": False}, "missing \\['neighbours'\\]"),
    ("check_no_position_prediction", ["causal"], "should be a dict"),
    ("check_rope_score_matrix", lambda o, D, base=10000.0: rope_score_matrix(-o, D, base), "transpose"),
    ("check_rope_score_matrix", lambda o, D, base=10000.0: torch.eye(D), "R_m\\^T R_n"),
    ("check_rope_score_matrix", lambda o, D, base=10000.0: rope_score_matrix(o, D), "rotated score"),  # base
    ("check_rope_score_matrix", lambda o, D, base=10000.0: rope_score_matrix(o, D, base)[:-1], "expected shape"),
    ("check_rotate_half", rotate_interleaved, "not interleaved"),
    ("check_rotate_half", lambda x: -rotate_half(x), "differ"),
    ("check_apply_rope", apply_rope_interleaved, "differ"),
    ("check_apply_rope", lambda x, pos, base=10000.0: apply_rope(x, torch.arange(x.shape[-2]), base), "differ"),
    ("check_apply_rope", lambda x, pos, base=10000.0: apply_rope(x, -pos, base), "differ"),
    ("check_alibi_bias", lambda H, T: alibi(H, T).nan_to_num(neginf=0.0), "-inf"),
    ("check_alibi_bias", lambda H, T: alibi(1, T).expand(H, T, T), "same slope"),
]

test_wrong_answer_gets_its_message = wrong_answer_tests(WRONG)


def test_references_agree_with_the_package():
    """The checks' independent RoPE references equal fundamentallm's rotary embedding."""
    from fundamentallm.checks.ch04 import _ref_rope, _rope_rotation
    from fundamentallm.positions import RotaryEmbedding

    x = torch.randn(2, 3, 12, 8)
    torch.testing.assert_close(_ref_rope(x, torch.arange(12), 10000.0).float(),
                               RotaryEmbedding(8, 16)(x), atol=1e-5, rtol=1e-5)
    assert math.isclose(float(_ref_rope(torch.ones(1, 2), torch.tensor([0]), 10.0).sum()), 2.0)
    v = torch.randn(8, dtype=torch.float64)
    torch.testing.assert_close(_rope_rotation(5, 8, 10000.0) @ v, _ref_rope(v[None], torch.tensor([5]), 10000.0)[0])
