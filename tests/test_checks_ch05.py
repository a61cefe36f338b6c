"""Chapter 5 checks: each wrong answer gets the message that says what is wrong (correct answers
and stubs: tests/test_course.py)."""

import torch
from book_solutions import book_solution
from check_tables import wrong_answer_tests

batch_norm_backward = book_solution("ch05-ex2", "batch_norm_backward")
group_norm = book_solution("ch05-ex3", "group_norm")


def layer_norm_unbiased(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(dim=-1, keepdim=True) + eps) * weight + bias


def layer_norm_eps_outside(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    std = (x - mean).pow(2).mean(dim=-1, keepdim=True).sqrt()
    return (x - mean) / (std + eps) * weight + bias


def layer_norm_detached(x, weight, bias, eps=1e-5):
    return torch.nn.functional.layer_norm(x.detach(), x.shape[-1:], weight.detach(), bias.detach(), eps)


def _dropout_cov(W, x, p):
    return p / (1 - p) * W @ torch.diag(x ** 2) @ W.T


def _dropout_cov_diagonal_only(W, x, p):
    return torch.diag(torch.diagonal(_dropout_cov(W, x, p)))


def _dropout_cov_unscaled(W, x, p):
    return p * (1 - p) * W @ torch.diag(x ** 2) @ W.T


def bn_backward_constant_statistics(x, gamma, dy, eps=1e-5):
    _, dgamma, dbeta = batch_norm_backward(x, gamma, dy, eps)
    return dy * gamma / torch.sqrt(x.var(dim=0, unbiased=False) + eps), dgamma, dbeta


def bn_backward_no_inv_std(x, gamma, dy, eps=1e-5):
    dx, dgamma, dbeta = batch_norm_backward(x, gamma, dy, eps)
    return dx * torch.sqrt(x.var(dim=0, unbiased=False) + eps), dgamma, dbeta  # forgot the 1/sigma


def bn_backward_autograd(x, gamma, dy, eps=1e-5):
    x = x.clone().requires_grad_(True)
    y = torch.nn.functional.batch_norm(x, None, None, gamma, None, training=True, eps=eps)
    (y * dy).sum().backward()
    return x.grad, *batch_norm_backward(x.detach(), gamma, dy, eps)[1:]


WRONG = [
    ("check_layer_norm", layer_norm_unbiased, "biased variance"),
    ("check_layer_norm", layer_norm_eps_outside, "large eps"),
    ("check_layer_norm", layer_norm_detached, "not differentiable"),
    ("check_batch_norm_backward", bn_backward_constant_statistics, "treats the batch mean and variance as constants"),
    ("check_batch_norm_backward", lambda x, g, dy, eps=1e-5: batch_norm_backward(x, g, dy, eps)[:2],
     r"return the tuple \(dx, dgamma, dbeta\)"),
    ("check_batch_norm_backward",  # dgamma from the un-normalized x
     lambda x, g, dy, eps=1e-5: (batch_norm_backward(x, g, dy, eps)[0], (dy * x).sum(0), dy.sum(0)), "dgamma"),
    ("check_batch_norm_backward", bn_backward_no_inv_std, "dx: .* elements differ"),
    ("check_batch_norm_backward", bn_backward_autograd, "not to use torch.Tensor.backward"),
    ("check_group_norm", lambda x, G, w, b, eps=1e-5: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps),
     "that is LayerNorm over all C channels"),
    ("check_group_norm", lambda x, G, w, b, eps=1e-5: (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + eps) * w + b,
     "normalizes over the batch"),
    ("check_group_norm", lambda x, G, w, b, eps=1e-5: torch.nn.functional.group_norm(x, G, w, b, eps),
     "not to use torch(.nn.functional)?.group_norm"),
    ("check_group_norm", lambda x, G, w, b, eps=1e-5: group_norm(x, G, w, b, eps) if x.shape[1] % G == 0
     else torch.zeros_like(x), "should raise ValueError"),
    ("check_group_norm", lambda x, G, w, b, eps=1e-5: group_norm(x, G, torch.ones_like(w), b, eps), "elements differ"),
    ("check_branch_scale", lambda L: 1.0, "grows with depth"),
    ("check_branch_scale", lambda L: 1.0 / L, "a fading branch scale"),
    ("check_branch_scale", lambda L: 0.0, "the blocks add almost nothing"),
    ("check_branch_scale", lambda L: "1/sqrt(L)", "should return a number"),
    ("check_dropout_covariance", _dropout_cov_diagonal_only, "measured covariance"),
    ("check_dropout_covariance", _dropout_cov_unscaled, "measured covariance"),
    ("check_norm_ablation_prediction", {"with_norm": "constant", "without_norm": "exponential"}, "sqrt\\(L\\)"),
    ("check_norm_ablation_prediction", {"with_norm": "sqrt", "without_norm": "linear"}, "compounds"),
    ("check_norm_ablation_prediction", {"with_norm": "sqrt"}, "needs exactly the keys"),
    ("check_norm_ablation_prediction", {"with_norm": "sqrt", "without_norm": "fast"}, "choose one of"),
]

test_wrong_answer_gets_its_message = wrong_answer_tests(WRONG)
