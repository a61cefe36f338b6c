"""The chapter 5 exercise checks: they pass a correct answer and fail, with CheckFailed, a stub
and plausible wrong answers."""

from __future__ import annotations

import pytest
import torch
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

# --- correct answers -----------------------------------------------------------------------------


layer_norm = book_solution("ch05-ex1", "layer_norm")


rms_norm = book_solution("ch05-ex2", "rms_norm")


inverted_dropout = book_solution("ch05-ex3", "inverted_dropout")


residual_gradient_norms = book_solution("ch05-ex4", "residual_gradient_norms")


def residual_gradient_norms_backward(blocks, x, residual=True):
    """Also correct: .backward() after zeroing the gradients."""
    for b in blocks:
        b.zero_grad()
    h = x
    for block in blocks:
        h = h + block(h) if residual else block(h)
    h.mean().backward()
    return torch.stack([torch.sqrt(sum(p.grad.pow(2).sum() for p in b.parameters())) for b in blocks])


# --- wrong answers -------------------------------------------------------------------------------

def stub(*args, **kwargs):
    raise NotImplementedError


def layer_norm_unbiased(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(dim=-1, keepdim=True) + eps) * weight + bias


def layer_norm_eps_outside(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    std = (x - mean).pow(2).mean(dim=-1, keepdim=True).sqrt()
    return (x - mean) / (std + eps) * weight + bias


def layer_norm_detached(x, weight, bias, eps=1e-5):
    return torch.nn.functional.layer_norm(x.detach(), x.shape[-1:], weight.detach(), bias.detach(), eps)


def rms_norm_centred(x, weight, eps=1e-6):
    x = x - x.mean(dim=-1, keepdim=True)  # that is LayerNorm without bias, not RMSNorm
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rms_norm_eps_outside(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * weight


def dropout_unscaled(x, p, generator=None):
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p={p} must be in [0, 1)")
    return x * (torch.rand(x.shape, generator=generator) >= p)


def dropout_keep_p(x, p, generator=None):
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p={p} must be in [0, 1)")
    if p == 0.0:
        return x.clone()
    return x * (torch.rand(x.shape, generator=generator) < p) / p  # keeps with probability p


def dropout_global_rng(x, p, generator=None):
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p={p} must be in [0, 1)")
    return x * (torch.rand(x.shape) >= p) / (1 - p)


def dropout_per_column(x, p, generator=None):
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p={p} must be in [0, 1)")
    return x * (torch.rand(x.shape[-1], generator=generator) >= p) / (1 - p)


def dropout_no_validation(x, p, generator=None):
    if p == 0.0:
        return x.clone()
    return x * (torch.rand(x.shape, generator=generator) >= p) / (1 - p)


def dropout_in_place(x, p, generator=None):
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p={p} must be in [0, 1)")
    return x.mul_((torch.rand(x.shape, generator=generator) >= p) / (1 - p))


def grad_norms_no_residual(blocks, x, residual=True):
    return residual_gradient_norms(blocks, x, residual=False)


def grad_norms_reversed(blocks, x, residual=True):
    return residual_gradient_norms(blocks, x, residual).flip(0)


def grad_norms_sum_of_norms(blocks, x, residual=True):
    h = x
    for block in blocks:
        h = h + block(h) if residual else block(h)
    h.mean().backward()
    out = torch.stack([sum(p.grad.norm() for p in b.parameters()) for b in blocks])
    for b in blocks:
        b.zero_grad()
    return out


def grad_norms_accumulating(blocks, x, residual=True):
    h = x
    for block in blocks:
        h = h + block(h) if residual else block(h)
    h.mean().backward()  # never zeroes .grad: the second call sees twice the gradient
    return torch.stack([torch.sqrt(sum(p.grad.pow(2).sum() for p in b.parameters())) for b in blocks])


# --- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("check", "fn"), [
    (checks.check_layer_norm, layer_norm),
    (checks.check_rms_norm, rms_norm),
    (checks.check_inverted_dropout, inverted_dropout),
    (checks.check_residual_gradient_norms, residual_gradient_norms),
    (checks.check_residual_gradient_norms, residual_gradient_norms_backward),
])
def test_check_passes_on_a_correct_answer(check, fn, capsys):
    assert check(fn) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("check", [checks.check_layer_norm, checks.check_rms_norm,
                                   checks.check_inverted_dropout,
                                   checks.check_residual_gradient_norms])
def test_check_fails_on_a_stub(check):
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        check(stub)


@pytest.mark.parametrize(("check", "fn", "message"), [
    (checks.check_layer_norm, layer_norm_unbiased, "biased variance"),
    (checks.check_layer_norm, layer_norm_eps_outside, "large eps"),
    (checks.check_layer_norm, layer_norm_detached, "not differentiable"),
    (checks.check_rms_norm, rms_norm_centred, "no mean subtraction"),
    (checks.check_rms_norm, rms_norm_eps_outside, "large eps"),
    (checks.check_inverted_dropout, dropout_unscaled, "1/\\(1-p\\)"),
    (checks.check_inverted_dropout, dropout_keep_p, "expected about p"),
    (checks.check_inverted_dropout, dropout_global_rng, "generator"),
    (checks.check_inverted_dropout, dropout_per_column, "independent decision per element"),
    (checks.check_inverted_dropout, dropout_no_validation, "ValueError"),
    (checks.check_inverted_dropout, dropout_in_place, "in place"),
    (checks.check_residual_gradient_norms, grad_norms_no_residual, "residual=True"),
    (checks.check_residual_gradient_norms, grad_norms_reversed, "block"),
    (checks.check_residual_gradient_norms, grad_norms_sum_of_norms, "sqrt of the summed"),
    (checks.check_residual_gradient_norms, grad_norms_accumulating, "second time"),
])
def test_check_fails_on_a_wrong_answer(check, fn, message):
    with pytest.raises(CheckFailed, match=message):
        check(fn)


def test_checks_are_registered():
    for name in ("check_layer_norm", "check_rms_norm", "check_inverted_dropout",
                 "check_residual_gradient_norms"):
        assert name in checks.CHECKS



# --- the covariance of dropout's outputs ----------------------------------------------------------

def _dropout_cov(W, x, p):
    return p / (1 - p) * W @ torch.diag(x ** 2) @ W.T


def _dropout_cov_diagonal_only(W, x, p):
    return torch.diag(torch.diagonal(_dropout_cov(W, x, p)))


def _dropout_cov_unscaled(W, x, p):
    return p * (1 - p) * W @ torch.diag(x ** 2) @ W.T


def test_check_dropout_covariance(capsys):
    assert checks.check_dropout_covariance(_dropout_cov) is True
    assert "passed" in capsys.readouterr().out
    for wrong in (_dropout_cov_diagonal_only, _dropout_cov_unscaled):
        with pytest.raises(CheckFailed, match="measured covariance"):
            checks.check_dropout_covariance(wrong)
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.check_dropout_covariance(lambda *a, **k: (_ for _ in ()).throw(NotImplementedError))
