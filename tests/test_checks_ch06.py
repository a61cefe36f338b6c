"""The chapter 6 exercise checks: they pass a correct answer and fail, with CheckFailed, a stub
and plausible wrong answers."""

from __future__ import annotations

import math

import pytest
import torch
from book_solutions import book_solution

from fundamentallm import checks
from fundamentallm.checks import CheckFailed

# --- correct answers -----------------------------------------------------------------------------


pre_ln_block = book_solution("ch06-ex1", "pre_ln_block")


post_ln_block = book_solution("ch06-ex2", "post_ln_block")


per_layer_grad_norms = book_solution("ch06-ex3", "per_layer_grad_norms")


warmup_lr = book_solution("ch06-ex4", "warmup_lr")


# --- wrong answers -------------------------------------------------------------------------------

def stub(*args, **kwargs):
    raise NotImplementedError


def pre_ln_parallel(x, attn, ff, norm1, norm2):
    return x + attn(norm1(x)) + ff(norm2(x))  # the FFN reads x, not h


def pre_ln_swapped_norms(x, attn, ff, norm1, norm2):
    h = x + attn(norm2(x))
    return h + ff(norm1(h))


def post_ln_as_pre(x, attn, ff, norm1, norm2):
    return pre_ln_block(x, attn, ff, norm1, norm2)


def post_ln_no_residual(x, attn, ff, norm1, norm2):
    h = norm1(attn(x))
    return norm2(ff(h))


def grad_norms_mean(model):
    return torch.tensor([torch.stack([p.grad.norm() for p in b.parameters() if p.grad is not None]).mean()
                         for b in model.blocks])


def grad_norms_sum_of_norms(model):
    return torch.tensor([sum(float(p.grad.norm()) for p in b.parameters() if p.grad is not None)
                         for b in model.blocks])


def grad_norms_crash_on_none(model):
    return torch.tensor([math.sqrt(sum(float(p.grad.pow(2).sum()) for p in b.parameters()))
                         for b in model.blocks])


def grad_norms_zeroing(model):
    out = per_layer_grad_norms(model)
    model.zero_grad()
    return out


def warmup_from_zero(step, base_lr, warmup_steps):
    if step < 0 or warmup_steps < 0:
        raise ValueError(f"step={step} and warmup_steps={warmup_steps} must be >= 0")
    return base_lr * min(1.0, step / warmup_steps) if warmup_steps else base_lr


def warmup_no_validation(step, base_lr, warmup_steps):
    return base_lr * min(1.0, (step + 1) / warmup_steps) if warmup_steps else base_lr


# --- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("check", "fn"), [
    (checks.check_pre_ln_block, pre_ln_block),
    (checks.check_post_ln_block, post_ln_block),
    (checks.check_per_layer_grad_norms, per_layer_grad_norms),
    (checks.check_warmup_lr, warmup_lr),
])
def test_check_passes_on_a_correct_answer(check, fn, capsys):
    assert check(fn) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("check", [checks.check_pre_ln_block, checks.check_post_ln_block,
                                   checks.check_per_layer_grad_norms, checks.check_warmup_lr])
def test_check_fails_on_a_stub(check):
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        check(stub)


@pytest.mark.parametrize(("check", "fn", "message"), [
    (checks.check_pre_ln_block, pre_ln_parallel, "h \\+ ff\\(norm2\\(h\\)\\)"),
    (checks.check_pre_ln_block, pre_ln_swapped_norms, "norm1"),
    (checks.check_post_ln_block, post_ln_as_pre, "norm1\\(x \\+ attn\\(x\\)\\)"),
    (checks.check_post_ln_block, post_ln_no_residual, "norm2\\(h \\+ ff\\(h\\)\\)"),
    (checks.check_per_layer_grad_norms, grad_norms_mean, "sqrt of the sum"),
    (checks.check_per_layer_grad_norms, grad_norms_sum_of_norms, "sqrt of the sum"),
    (checks.check_per_layer_grad_norms, grad_norms_crash_on_none, "raised"),
    (checks.check_per_layer_grad_norms, grad_norms_zeroing, "only read .grad"),
    (checks.check_warmup_lr, warmup_from_zero, "step 0 already"),
    (checks.check_warmup_lr, warmup_no_validation, "ValueError"),
])
def test_check_fails_on_a_wrong_answer(check, fn, message):
    with pytest.raises(CheckFailed, match=message):
        check(fn)


# --- the LayerNorm Jacobian (eq. ch06-ln-jacobian) ------------------------------------------------

def _ln_jacobian(z, weight, eps=1e-5):
    C = z.shape[-1]
    sigma = torch.sqrt(z.var(unbiased=False) + eps)
    z_hat = (z - z.mean()) / sigma
    inner = torch.eye(C, dtype=z.dtype) - 1 / C - torch.outer(z_hat, z_hat) / C
    return torch.diag(weight) @ inner / sigma


def _ln_jacobian_no_mean_term(z, weight, eps=1e-5):
    C = z.shape[-1]
    sigma = torch.sqrt(z.var(unbiased=False) + eps)
    z_hat = (z - z.mean()) / sigma
    return torch.diag(weight) @ (torch.eye(C, dtype=z.dtype) - torch.outer(z_hat, z_hat) / C) / sigma


def _ln_jacobian_no_projection(z, weight, eps=1e-5):
    C = z.shape[-1]
    sigma = torch.sqrt(z.var(unbiased=False) + eps)
    return torch.diag(weight) @ (torch.eye(C, dtype=z.dtype) - 1 / C) / sigma


def test_check_layer_norm_jacobian_passes_a_correct_answer(capsys):
    assert checks.check_layer_norm_jacobian(_ln_jacobian) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(("fn", "message"), [
    (_ln_jacobian_no_mean_term, "J @ 1 should be 0"),
    (_ln_jacobian_no_projection, "differ"),
    (stub, "NotImplementedError"),
])
def test_check_layer_norm_jacobian_fails_wrong_answers(fn, message):
    with pytest.raises(CheckFailed, match=message):
        checks.check_layer_norm_jacobian(fn)
