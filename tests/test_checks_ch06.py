"""Chapter 6 checks: each wrong answer gets the message that says what is wrong (correct answers
and stubs: tests/test_course.py)."""

import torch
from book_solutions import book_solution
from check_tables import wired, wrong_answer_tests

from fundamentallm import TransformerBlock, TransformerConfig

deepnorm_block = book_solution("ch06-ex3", "deepnorm_block")


@wired
def pre_ln_swapped_norms(x, attn, ff, norm1, norm2):
    h = x + attn(norm2(x))
    return h + ff(norm1(h))


def pre_ln_block_of_the_package(x, config, weights):
    block = TransformerBlock(TransformerConfig(**config)).eval()
    block.load_state_dict({f"{m}.{k}": v for m, sd in weights.items() for k, v in sd.items()})
    return block(x)


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
    ("check_pre_ln_block", wired(lambda x, attn, ff, n1, n2: x + attn(n1(x)) + ff(n2(x))), r"h \+ ff\(norm2\(h\)\)"),
    ("check_pre_ln_block", pre_ln_swapped_norms, "norm1"),
    ("check_pre_ln_block", pre_ln_block_of_the_package, "not to use fundamentallm.model.TransformerBlock.forward"),
    ("check_sandwich_block", wired(lambda x, attn, ff, n1, n2, n3, n4: (lambda h: h + ff(n2(h)))(x + attn(n1(x)))),
     "that is the pre-LN block"),
    ("check_sandwich_block", wired(lambda x, attn, ff, n1, n2, n3, n4: (lambda h: n4(h + ff(n2(h))))(x + n3(attn(n1(x))))),
     "the stream itself is never normalized"),
    ("check_sandwich_block",  # norm3 and norm4 swapped
     wired(lambda x, attn, ff, n1, n2, n3, n4: (lambda h: h + n3(ff(n2(h))))(x + n4(attn(n1(x))))), "elements differ"),
    ("check_deepnorm_block", lambda x, config, weights, a: deepnorm_block(x, config, weights, 1.0), "elements differ"),
    ("check_deepnorm_block", wired(lambda x, attn, ff, n1, n2, a: (lambda h: n2(h + a * ff(h)))(n1(x + a * attn(x)))),
     "alpha multiplies the residual"),
    ("check_deepnorm_block", wired(lambda x, attn, ff, n1, n2, a: a * x + attn(x)), "elements differ"),
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
    ("check_post_ln_lr_prediction", "better", "costs progress"),
    ("check_post_ln_lr_prediction", "close", "choose one of"),
])
