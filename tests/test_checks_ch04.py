"""Chapter 4 checks: each wrong answer gets the message that says what is wrong (correct answers
and stubs: tests/test_course.py), and the checks' references equal the package."""

import torch
from book_solutions import book_solution
from check_tables import wrong_answer_tests

rotate_half = book_solution("ch04-ex3", "rotate_half")
count_slow_pairs = book_solution("ch04-ex4", "count_slow_pairs")
rope_score_matrix = book_solution("ch04-ex2", "rope_score_matrix")


def rotate_interleaved(x):
    if x.shape[-1] % 2:
        raise ValueError(f"the last dimension {x.shape[-1]} must be even")
    return torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)  # GPT-J pairing


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
    ("check_count_slow_pairs", lambda D, base, ctx: D // 2 - count_slow_pairs(D, base, ctx), "DO complete a turn"),
    ("check_count_slow_pairs", lambda D, base, ctx: count_slow_pairs(D, base, ctx) + 1, "radians between"),
    ("check_count_slow_pairs", lambda D, base, ctx: float(count_slow_pairs(D, base, ctx)) + 0.5, "return an int"),
    ("check_alibi_bias", lambda H, T: alibi(H, T).nan_to_num(neginf=0.0), "-inf"),
    ("check_alibi_bias", lambda H, T: alibi(1, T).expand(H, T, T), "same slope"),
]

test_wrong_answer_gets_its_message = wrong_answer_tests(WRONG)


def test_the_rope_reference_agrees_with_the_package():
    """The check's rotation matrix R_m equals fundamentallm's rotary embedding at position m."""
    from fundamentallm.checks.ch04 import _rope_rotation
    from fundamentallm.positions import RotaryEmbedding

    x = torch.randn(1, 1, 12, 8, dtype=torch.float64)
    rotated = RotaryEmbedding(8, 16)(x.float()).double()  # positions 0..11
    for m in (0, 5, 11):
        torch.testing.assert_close(rotated[0, 0, m], _rope_rotation(m, 8, 10000.0) @ x[0, 0, m],
                                   atol=1e-5, rtol=1e-5)
