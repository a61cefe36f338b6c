"""Checks for the exercises of chapter 6: pre-LN vs post-LN."""

from __future__ import annotations

from typing import Callable

import torch

from .core import (
    CheckFailed,
    _as_tensor,
    assert_same,
    check_shape,
    exercise_check,
    finite_number,
    is_close_number,
    rng,
)


def _ch06_block(norm_position: str, norm: str, seed: int, d_model: int = 16, num_heads: int = 2):
    """A package ``TransformerBlock`` with random weights, norm gains and biases included (so that
    swapping norm1 and norm2 shows), in eval mode, and its config as a dict."""
    from ..config import TransformerConfig
    from ..model import TransformerBlock

    torch.manual_seed(600 + seed)
    config = {"d_model": d_model, "num_heads": num_heads, "norm": norm}
    block = TransformerBlock(TransformerConfig(**config, norm_position=norm_position)).eval()
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name.startswith("norm"):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape) if name.endswith("weight") else 0.5 * torch.randn(p.shape))
    return block, config


def _ch06_weights(**modules) -> dict:
    """{name: the module's state dict as a plain dict of tensors}: what the block exercises
    receive (data a grader can send; ``fundamentallm.block_sublayers`` builds the modules back)."""
    return {name: {k: v.detach().clone() for k, v in m.state_dict().items()} for name, m in modules.items()}


def _ch06_check_block(student_fn: Callable, norm_position: str) -> str:
    cases = [("layernorm", (2, 5, 16), 2), ("rmsnorm", (1, 7, 16), 4), ("layernorm", (3, 1, 8), 1)]
    for seed, (norm, shape, heads) in enumerate(cases):
        block, config = _ch06_block(norm_position, norm, seed, d_model=shape[-1], num_heads=heads)
        weights = _ch06_weights(attn=block.attn, ff=block.ff, norm1=block.norm1, norm2=block.norm2)
        x = torch.randn(shape, generator=rng(610 + seed))
        with torch.no_grad():
            expected = block(x)
            got = student_fn(x.clone(), dict(config), weights)
        what = f"{student_fn.__name__}(x of shape {shape}, {norm}, {heads} heads)"
        check_shape(got, shape, what=what)
        assert_same(got, expected, what=f"{what} (which input does each norm read, and does each "
                                        "sublayer's output reach the stream?)", atol=1e-5, rtol=1e-4)
    return f"{len(cases)} blocks equal to fundamentallm.TransformerBlock(norm_position={norm_position!r})"


@exercise_check(forbidden=("fundamentallm.model.TransformerBlock.forward",))
def check_pre_ln_block(pre_ln_block: Callable) -> str:
    """``pre_ln_block(x, config, weights)``: the pre-LN block built from the sublayers
    ``attn, ff, norm1, norm2`` of ``fundamentallm.block_sublayers(config, weights)``; compared with
    the package's pre-LN ``TransformerBlock``."""
    return _ch06_check_block(pre_ln_block, "pre")


@exercise_check(by_hand=True)  # autograd in every form, torch.func's transforms included, is refused
def check_rms_norm_jacobian(rms_norm_jacobian: Callable) -> str:
    """``rms_norm_jacobian(z, weight, eps=1e-5)`` -> the ``(C, C)`` Jacobian of RMSNorm,
    ``z / sqrt(mean(z^2) + eps) * weight``, at ``z`` (``(C,)``), derived by hand (no autograd);
    compared with autograd through a written-out RMSNorm, to float64 precision (an ordinary
    finite difference is refused, and so is complex arithmetic: ``by_hand``)."""
    cases = [(8, 0, 1.0, 1e-5), (5, 1, 10.0, 1e-5), (16, 2, 0.01, 1e-5), (3, 3, 1.0, 1e-5), (6, 4, 0.3, 0.5)]
    for C, seed, scale, eps in cases:  # (C, seed, scale of z, eps): a small scale and a large eps
        g = rng(660 + seed)
        z = (torch.randn(C, generator=g, dtype=torch.float64) + 0.5) * scale  # (C,), non-zero mean
        weight = 1 + 0.5 * torch.randn(C, generator=g, dtype=torch.float64)  # (C,)
        zr = z.clone().requires_grad_(True)
        y = zr / torch.sqrt(zr.pow(2).mean() + eps) * weight  # a written-out RMSNorm; rows by autograd
        expected = torch.stack([torch.autograd.grad(y[i], zr, retain_graph=True)[0] for i in range(C)])
        got = rms_norm_jacobian(z.clone(), weight.clone(), eps=eps)
        what = f"the RMSNorm Jacobian for C={C}, |z|~{scale}, eps={eps}"
        check_shape(got, (C, C), what=what)
        got = _as_tensor(got).double()
        if not torch.isfinite(got).all():
            raise CheckFailed(f"{what}: not finite")
        rel = float((got - expected).abs().max() / expected.abs().max())
        if 1e-12 < rel < 1e-3:
            raise CheckFailed(f"{what}: close (relative error {rel:.1e}) but not exact: an approximation "
                              "(a finite difference, or a small term such as eps dropped) is not the "
                              "derivative; derive every term")
        if torch.allclose(got, expected.T, rtol=1e-9, atol=1e-12) and not torch.allclose(got, expected, rtol=1e-9, atol=1e-12):
            raise CheckFailed(f"{what}: you returned the transpose; row i is the gradient of output i, "
                              "and the gain multiplies the outputs")
        ones = torch.ones(C, dtype=torch.float64)
        if C > 1 and (got @ ones).abs().max() < 1e-9 * got.abs().max():
            raise CheckFailed(f"{what}: your J sends the all-ones vector to 0; does RMSNorm subtract "
                              "the mean?")
        assert_same(got, expected, what=what + " (vs autograd)", rtol=1e-11, atol=1e-13)
    return f"matches autograd to float64 precision on {len(cases)} vectors, a large eps included"


@exercise_check
def check_sandwich_block(sandwich_block: Callable) -> str:
    """``sandwich_block(x, config, weights)``: the sandwich-norm block built from the sublayers
    ``attn, ff, norm1 ... norm4`` of ``fundamentallm.block_sublayers(config, weights)``; tested on
    the sublayers of a random package block plus two extra norms."""
    # reference: h = x + norm3(attn(norm1(x))); out = h + norm4(ff(norm2(h)))
    from ..norms import make_norm

    cases = [("layernorm", (2, 5, 16), 2), ("rmsnorm", (1, 7, 16), 4), ("layernorm", (3, 1, 8), 1)]
    for seed, (norm, shape, heads) in enumerate(cases):
        block, config = _ch06_block("pre", norm, 10 + seed, d_model=shape[-1], num_heads=heads)
        extra = [make_norm(norm, shape[-1]) for _ in range(2)]
        g = rng(660 + seed)
        with torch.no_grad():
            for n in extra:
                for name, p in n.named_parameters():
                    p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g) if name == "weight"
                            else 0.5 * torch.randn(p.shape, generator=g))
        norm3, norm4 = extra
        weights = _ch06_weights(attn=block.attn, ff=block.ff, norm1=block.norm1, norm2=block.norm2,
                                norm3=norm3, norm4=norm4)
        x = 3 * torch.randn(shape, generator=g)
        with torch.no_grad():
            h = x + norm3(block.attn(block.norm1(x)))
            expected = h + norm4(block.ff(block.norm2(h)))
            got = sandwich_block(x.clone(), dict(config), weights)
            what = f"sandwich_block(x of shape {shape}, {norm}, {heads} heads)"
            check_shape(got, shape, what=what)
            got = _as_tensor(got)
            for wrong, why in (
                (block(x), "that is the pre-LN block: norm3 and norm4 must normalize each sublayer's "
                           "output before it is added to the stream"),
                (norm4(h + block.ff(block.norm2(h))), "norm4 normalizes the feed-forward output only, "
                                                        "not the sum: the stream itself is never normalized"),
            ):
                if torch.allclose(got, wrong, atol=1e-5, rtol=1e-4):
                    raise CheckFailed(f"{what}: {why}")
        assert_same(got, expected, what=f"{what} (which norm bounds which sublayer's output, and "
                                        "is the stream itself ever normalized?)", atol=1e-5, rtol=1e-4)
    return f"{len(cases)} sandwich blocks: each sublayer's output normalized before it joins the stream"


@exercise_check(may_return_none=True)
def check_ln_jacobian_prediction(ln_jacobian_prediction) -> str:
    """``ln_jacobian_prediction``: ``{"J_ones": ..., "J_zhat": ..., "J_norm": ...}``: what the
    LayerNorm Jacobian does to the all-ones vector and to the normalized input (``"zero"``,
    ``"same direction"`` or ``"other"``), and its spectral norm ``||J||_2`` at
    ``z = (1, 2, ..., 8)`` with ``gamma = 1`` and ``eps = 1e-5`` (a number, within 2%)."""
    from .predict import answer_given

    directions = ("zero", "same direction", "other")
    answer = answer_given(ln_jacobian_prediction, "ln_jacobian_prediction",
                          "a dict with the keys ['J_ones', 'J_zhat', 'J_norm']")
    if not isinstance(answer, dict) or set(answer) != {"J_ones", "J_zhat", "J_norm"}:
        raise CheckFailed("ln_jacobian_prediction needs exactly the keys ['J_ones', 'J_zhat', 'J_norm']")
    for key in ("J_ones", "J_zhat"):
        if answer[key] not in directions:
            raise CheckFailed(f"ln_jacobian_prediction[{key!r}] = {answer[key]!r}; choose one of {list(directions)}")
    if answer["J_ones"] != "zero":
        raise CheckFailed("J_ones: rethink what LayerNorm does to z + c 1 (the same number added to every "
                          "channel) compared with z; J 1 is the derivative in that direction")
    if answer["J_zhat"] != "zero":
        raise CheckFailed("J_zhat: rethink what moving z along z_hat does to the centred vector z - mu, "
                          "and what LayerNorm's division by sigma does to that change")
    norm = finite_number(answer["J_norm"], "J_norm")
    z = torch.arange(1, 9, dtype=torch.float64)
    ln = lambda v: torch.nn.functional.layer_norm(v, (8,), eps=1e-5)  # noqa: E731
    J = torch.autograd.functional.jacobian(ln, z)
    true = float(torch.linalg.matrix_norm(J, ord=2))
    if not is_close_number(norm, true, rtol=0.02):
        frobenius = float(torch.linalg.matrix_norm(J))
        if is_close_number(norm, frobenius, rtol=0.02):
            hint = ("that is the Frobenius norm, the root of the sum of all squared entries; the "
                    "spectral norm is the largest factor by which J stretches one vector")
        else:
            hint = ("which factor of eq. ch06-ln-jacobian scales every output, with which variance "
                    "(over the channels, biased, with eps), and by how much at most can the bracket "
                    "stretch a vector -- what kind of matrix is it?")
        raise CheckFailed(f"J_norm = {norm:.4g}: {hint}")
    return ("J removes the directions 1 and z_hat; the bracket is a projection, so ||J||_2 = 1/sigma(z): "
            "ten times the input, a tenth of the gradient")


@exercise_check(may_return_none=True, self_check=True)
def check_post_ln_lr_prediction(post_ln_at_lower_lr) -> str:
    """``post_ln_at_lower_lr``: how post-LN at depth 6 ends without warmup when the learning rate is
    3 times smaller (1e-3): ``"plateau"`` (near the context-free loss), ``"learns"`` (well below it,
    above pre-LN at 3e-3) or ``"better"`` (below pre-LN at 3e-3)."""
    from .predict import answer_given

    answer = answer_given(post_ln_at_lower_lr, "post_ln_at_lower_lr", '"plateau", "learns" or "better"')
    if answer not in ("plateau", "learns", "better"):
        raise CheckFailed(f'post_ln_at_lower_lr = {answer!r}; choose one of "plateau", "learns", "better"')
    if answer == "plateau":
        raise CheckFailed("plateau: what goes wrong without warmup is the size of the first updates on "
                          "post-LN's large near-output gradients; a smaller constant rate also makes them "
                          "smaller, which is what warmup does at the start")
    if answer == "better":
        raise CheckFailed("better: a smaller rate makes every step smaller, the late ones too; in the "
                          "same 200 steps that costs progress")
    return "post-LN's failure was the large early updates, not the wiring itself (measured after the check)"


@exercise_check
def check_deepnorm_block(deepnorm_block: Callable) -> str:
    """``deepnorm_block(x, config, weights, alpha)``: the DeepNorm block (post-LN wiring plus the
    constant ``alpha``) built from the sublayers ``attn, ff, norm1, norm2`` of
    ``fundamentallm.block_sublayers(config, weights)``."""
    # reference: h = norm1(alpha * x + attn(x)); out = norm2(alpha * h + ff(h))
    cases = [("layernorm", (2, 5, 16), 2, 2.0), ("layernorm", (1, 7, 8), 1, 24 ** 0.25), ("rmsnorm", (3, 4, 16), 4, 1.0)]
    for seed, (norm, shape, heads, alpha) in enumerate(cases):
        block, config = _ch06_block("post", norm, 20 + seed, d_model=shape[-1], num_heads=heads)
        weights = _ch06_weights(attn=block.attn, ff=block.ff, norm1=block.norm1, norm2=block.norm2)
        x = torch.randn(shape, generator=rng(680 + seed))
        with torch.no_grad():
            h = block.norm1(alpha * x + block.attn(x))
            expected = block.norm2(alpha * h + block.ff(h))
            got = deepnorm_block(x.clone(), dict(config), weights, alpha)
            what = f"deepnorm_block(x of shape {shape}, {norm}, alpha={alpha:.3g})"
            check_shape(got, shape, what=what)
            got = _as_tensor(got)
            h_wrong = block.norm1(x + alpha * block.attn(x))
            if alpha != 1 and torch.allclose(got, block.norm2(h_wrong + alpha * block.ff(h_wrong)), atol=1e-5):
                raise CheckFailed(f"{what}: alpha multiplies the residual x (the stream), not the "
                                  "sublayer's output")
        assert_same(got, expected, what=f"{what} (post-LN wiring: what does each sublayer read, "
                                        "where is each norm, and which term does alpha weigh?)", atol=1e-5, rtol=1e-4)
    return f"{len(cases)} DeepNorm blocks; alpha = 1 is plain post-LN"
