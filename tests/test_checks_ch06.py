"""Chapter 6 checks: each wrong answer gets the message that says what is wrong (correct answers
and stubs: tests/test_course.py)."""

import math

import torch
from book_solutions import book_solution
from check_tables import wrong_answer_tests

per_layer_grad_norms = book_solution("ch06-ex3", "per_layer_grad_norms")


def pre_ln_swapped_norms(x, attn, ff, norm1, norm2):
    h = x + attn(norm2(x))
    return h + ff(norm1(h))


def grad_norms_zeroing(model):
    out = per_layer_grad_norms(model)
    model.zero_grad()
    return out


def ln_jacobian_no_mean_term(z, weight, eps=1e-5):
    C = z.shape[-1]
    sigma = torch.sqrt(z.var(unbiased=False) + eps)
    z_hat = (z - z.mean()) / sigma
    return torch.diag(weight) @ (torch.eye(C, dtype=z.dtype) - torch.outer(z_hat, z_hat) / C) / sigma


def ln_jacobian_no_projection(z, weight, eps=1e-5):
    sigma = torch.sqrt(z.var(unbiased=False) + eps)
    return torch.diag(weight) @ (torch.eye(z.shape[-1], dtype=z.dtype) - 1 / z.shape[-1]) / sigma


PREDICTED = {"J_ones": "zero", "J_zhat": "zero", "norm_ratio": 0.1}

WRONG = [
    ("check_pre_ln_block", lambda x, attn, ff, n1, n2: x + attn(n1(x)) + ff(n2(x)), r"h \+ ff\(norm2\(h\)\)"),
    ("check_pre_ln_block", pre_ln_swapped_norms, "norm1"),
    ("check_sandwich_block", lambda x, attn, ff, n1, n2, n3, n4: (lambda h: h + ff(n2(h)))(x + attn(n1(x))),
     "that is the pre-LN block"),
    ("check_sandwich_block", lambda x, attn, ff, n1, n2, n3, n4: (lambda h: n4(h + ff(n2(h))))(x + n3(attn(n1(x)))),
     "the stream itself is never normalized"),
    ("check_sandwich_block",  # norm3 and norm4 swapped
     lambda x, attn, ff, n1, n2, n3, n4: (lambda h: h + n3(ff(n2(h))))(x + n4(attn(n1(x)))), "elements differ"),
    ("check_per_layer_grad_norms", lambda m: torch.tensor(
        [torch.stack([p.grad.norm() for p in b.parameters() if p.grad is not None]).mean() for b in m.blocks]),
     "sqrt of the sum"),
    ("check_per_layer_grad_norms", lambda m: torch.tensor(
        [sum(float(p.grad.norm()) for p in b.parameters() if p.grad is not None) for b in m.blocks]),
     "sqrt of the sum"),
    ("check_per_layer_grad_norms", lambda m: torch.tensor(
        [math.sqrt(sum(float(p.grad.pow(2).sum()) for p in b.parameters())) for b in m.blocks]), "raised"),
    ("check_per_layer_grad_norms", grad_norms_zeroing, "only read .grad"),
    ("check_ln_jacobian_prediction", {**PREDICTED, "J_ones": "same direction"}, "LN\\(z \\+ c1\\) = LN\\(z\\)"),
    ("check_ln_jacobian_prediction", {**PREDICTED, "J_zhat": "other"}, "undoes a rescaling"),
    ("check_ln_jacobian_prediction", {**PREDICTED, "norm_ratio": 1.0}, "how fast it changes"),
    ("check_ln_jacobian_prediction", {**PREDICTED, "norm_ratio": 10}, "1/sigma"),
    ("check_ln_jacobian_prediction", {**PREDICTED, "norm_ratio": "small"}, "should be a number"),
    ("check_ln_jacobian_prediction", {"J_ones": "zero"}, "needs exactly the keys"),
    ("check_layer_norm_jacobian", ln_jacobian_no_mean_term, "J @ 1 should be 0"),
    ("check_layer_norm_jacobian", ln_jacobian_no_projection, "differ"),
]

test_wrong_answer_gets_its_message = wrong_answer_tests(WRONG)

test_wrong_answer_gets_its_message_ablation = wrong_answer_tests([
    ("check_post_ln_lr_prediction", "plateau", "size of the first updates"),
    ("check_post_ln_lr_prediction", "better", "both wirings train alike"),
    ("check_post_ln_lr_prediction", "same", "choose one of"),
])
