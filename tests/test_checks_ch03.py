"""Chapter 3 checks: each wrong answer gets the message that says what is wrong (correct answers
and stubs: tests/test_course.py)."""

import math

import torch
import torch.nn.functional as F
from book_solutions import book_solution
from check_tables import wrong_answer_tests

attention_entropy = book_solution("ch03-ex3", "attention_entropy")
mha = book_solution("ch03-ex4", "multi_head_attention_loop")


def split_heads_no_transpose(x, num_heads):
    B, T, C = x.shape
    if C % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide C={C}")
    return x.reshape(B, num_heads, T, C // num_heads)  # right shape, tokens mixed


def gqa(q, k, v, causal=False, cycled=False):
    groups = q.shape[1] // k.shape[1]
    k, v = ((t.repeat(1, groups, 1, 1) if cycled else t.repeat_interleave(groups, dim=1)) for t in (k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


WRONG = [
    ("check_split_heads", split_heads_no_transpose, "transpose"),
    ("check_split_heads", lambda x, H: x.reshape(x.shape[0], x.shape[1], H, -1).transpose(1, 2), "ValueError"),
    ("check_buggy_split_prediction", [0, 1, 2, 3, 4, 5], "with the transpose"),
    ("check_buggy_split_prediction", [1, 3, 5], "head 0 the first 24 numbers"),
    ("check_buggy_split_prediction", "345", "list of integers"),
    ("check_buggy_split_prediction", ["a"], "list of integers"),
    ("check_attention_entropy", lambda w: -(w * w.log()).sum(-1), r"0·log\(0\)"),
    ("check_attention_entropy", lambda w: attention_entropy(w) / math.log(2), "differ"),  # bits, not nats
    ("check_multi_head_attention",  # scaled by sqrt(C), not sqrt(D)
     lambda x, wq, wk, wv, wo, H, causal=False: mha(x, wq, wk, wv, wo, 1, causal), "first mismatch"),
    ("check_multi_head_attention", lambda x, wq, wk, wv, wo, H, causal=False: mha(x, wq, wk, wv, wo, H), "differ"),
    ("check_multi_head_attention",  # no output projection
     lambda x, wq, wk, wv, wo, H, causal=False: mha(x, wq, wk, wv, torch.eye(x.shape[-1]), H, causal), "differ"),
    ("check_grouped_query_attention", lambda q, k, v, causal=False: gqa(q, k, v, causal, cycled=True),
     r"h // \(H // G\)"),
    ("check_grouped_query_attention", lambda q, k, v, causal=False: gqa(q, k, v), "causal=True"),
]

test_wrong_answer_gets_its_message = wrong_answer_tests(WRONG)
