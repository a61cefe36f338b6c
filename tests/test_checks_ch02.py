"""Chapter 2 checks: each wrong answer gets the message that says what is wrong (correct answers
and stubs: tests/test_course.py)."""

import math

import torch
from book_solutions import book_solution
from check_tables import wrong_answer_tests

attention = book_solution("ch02-ex4", "attention")
prefix_lm_mask = book_solution("ch02-ex1", "prefix_lm_mask")


def attention_nan_rows(q, k, v, mask=None):
    """Forgets fully masked rows: the softmax of a row of -inf is NaN."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    w = torch.softmax(scores, dim=-1)
    return w @ v, w


WRONG = [
    ("check_prefix_lm_mask", lambda T, p: prefix_lm_mask(T, min(p + 1, T)), "a key after the prefix"),
    ("check_prefix_lm_mask", lambda T, p: prefix_lm_mask(T, 0), "every query reads the whole prefix"),
    ("check_prefix_lm_mask", lambda T, p: prefix_lm_mask(T, p).int(), "torch.bool"),
    ("check_prefix_lm_mask", lambda T, p: prefix_lm_mask(T, p)[:, :-1], "expected shape"),
    ("check_softmax_rows", lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True), "subtract each row's max"),
    ("check_softmax_rows", lambda x: torch.softmax(x, dim=0), "asks you not to use torch.softmax"),
    ("check_softmax_rows",  # modifies its input in place
     lambda x: x.sub_(x.amax(-1, keepdim=True)).exp() / x.exp().sum(-1, keepdim=True), "in place"),
    ("check_make_causal_mask", lambda T: torch.ones(T, T, dtype=torch.bool).triu(), "differ"),
    ("check_make_causal_mask", lambda T: torch.ones(T, T).tril(), "torch.bool"),
    ("check_make_causal_mask", lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1), "differ"),
    ("check_attention", lambda q, k, v, mask=None: attention(q, k, v), "differ"),  # ignores the mask
    ("check_attention", lambda q, k, v, mask=None: attention(q, k, v, mask)[0], "pair"),
    ("check_attention", lambda q, k, v, mask=None: attention(q, k, v, None if mask is None else mask.bool()),
     "differ"),  # treats a float mask as boolean
    ("check_attention", attention_nan_rows, "all-zero weights"),
    ("check_score_scale", lambda d_k, sq, sk: 1 / d_k ** 0.5, "unit-variance"),
    ("check_score_scale", lambda d_k, sq, sk: 1 / (sq * sk * d_k), "variance"),
    ("check_permutation_prediction", {"keys_and_values": "permuted", "queries": "permuted"},
     "reorders the terms of that sum"),
    ("check_permutation_prediction", {"keys_and_values": "unchanged", "queries": "unchanged"},
     "moves its output row with it"),
    ("check_permutation_prediction", {"keys_and_values": "same", "queries": "permuted"}, "choose one of"),
    ("check_permutation_prediction", {"keys": "unchanged"}, "needs exactly the keys"),
]

test_wrong_answer_gets_its_message = wrong_answer_tests(WRONG)
