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


def _ch06_check_block(student_fn: Callable, norm_position: str, formula: str) -> str:
    cases = [("layernorm", (2, 5, 16), 2), ("rmsnorm", (1, 7, 16), 4), ("layernorm", (3, 1, 8), 1)]
    for seed, (norm, shape, heads) in enumerate(cases):
        block, config = _ch06_block(norm_position, norm, seed, d_model=shape[-1], num_heads=heads)
        weights = _ch06_weights(attn=block.attn, ff=block.ff, norm1=block.norm1, norm2=block.norm2)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(610 + seed))
        with torch.no_grad():
            expected = block(x)
            got = student_fn(x.clone(), dict(config), weights)
        what = f"{student_fn.__name__}(x of shape {shape}, {norm}, {heads} heads)"
        check_shape(got, shape, what=what)
        assert_same(got, expected, what=f"{what} (expected {formula})", atol=1e-5, rtol=1e-4)
    return f"{len(cases)} blocks equal to fundamentallm.TransformerBlock(norm_position={norm_position!r})"


@exercise_check(forbidden=("fundamentallm.model.TransformerBlock.forward",))
def check_pre_ln_block(pre_ln_block: Callable) -> str:
    """``pre_ln_block(x, config, weights)``: with the sublayers ``attn, ff, norm1, norm2`` built by
    ``fundamentallm.block_sublayers(config, weights)``, ``h = x + attn(norm1(x))``,
    ``h + ff(norm2(h))``; compared with the package's pre-LN ``TransformerBlock``."""
    return _ch06_check_block(pre_ln_block, "pre", "h = x + attn(norm1(x)); h + ff(norm2(h))")


@exercise_check
def check_layer_norm_jacobian(layer_norm_jacobian: Callable) -> str:
    """``layer_norm_jacobian(z, weight, eps=1e-5)`` -> the ``(C, C)`` Jacobian of LayerNorm at
    ``z`` (``(C,)``), eq. ch06-ln-jacobian; compared with autograd through ``F.layer_norm``."""
    import torch.nn.functional as F

    cases = [(8, 0, 1.0), (5, 1, 10.0), (16, 2, 0.1), (3, 3, 1.0)]  # (C, seed, scale of z)
    for C, seed, scale in cases:
        g = torch.Generator().manual_seed(660 + seed)
        z = torch.randn(C, generator=g, dtype=torch.float64) * scale + 2.0  # (C,), non-zero mean
        weight = 1 + 0.5 * torch.randn(C, generator=g, dtype=torch.float64)  # (C,)
        bias = torch.randn(C, generator=g, dtype=torch.float64)
        expected = torch.autograd.functional.jacobian(
            lambda v, weight=weight, bias=bias: F.layer_norm(v, (v.shape[-1],), weight, bias, 1e-5), z)
        got = _as_tensor(layer_norm_jacobian(z.clone(), weight.clone(), eps=1e-5)).double()
        what = f"the LayerNorm Jacobian for C={C}, std(z)~{scale}"
        check_shape(got, (C, C), what=what)
        ones = torch.ones(C, dtype=torch.float64)
        if (got @ ones).abs().max() > 1e-6 * got.abs().max():
            raise CheckFailed(f"{what}: J @ 1 should be 0 (adding a constant to z changes nothing); "
                              "did you drop the -11ᵀ/C term?")
        assert_same(got, expected, what=what + " (vs autograd)", rtol=1e-6, atol=1e-9)
    return f"matches autograd on {len(cases)} vectors"


@exercise_check
def check_sandwich_block(sandwich_block: Callable) -> str:
    """``sandwich_block(x, config, weights)``: with the sublayers ``attn, ff, norm1 ... norm4``
    built by ``fundamentallm.block_sublayers(config, weights)``, ``h = x + norm3(attn(norm1(x)))``,
    ``h + norm4(ff(norm2(h)))``; the sublayers of a random package block plus two extra norms."""
    from ..norms import make_norm

    cases = [("layernorm", (2, 5, 16), 2), ("rmsnorm", (1, 7, 16), 4), ("layernorm", (3, 1, 8), 1)]
    for seed, (norm, shape, heads) in enumerate(cases):
        block, config = _ch06_block("pre", norm, 10 + seed, d_model=shape[-1], num_heads=heads)
        extra = [make_norm(norm, shape[-1]) for _ in range(2)]
        g = torch.Generator().manual_seed(660 + seed)
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
        assert_same(got, expected, what=f"{what} (expected h = x + norm3(attn(norm1(x))); "
                                        "h + norm4(ff(norm2(h))))", atol=1e-5, rtol=1e-4)
    return f"{len(cases)} sandwich blocks: each sublayer's output normalized before it joins the stream"


@exercise_check(may_return_none=True)
def check_ln_jacobian_prediction(ln_jacobian_prediction) -> str:
    """``ln_jacobian_prediction``: ``{"J_ones": ..., "J_zhat": ..., "norm_ratio": ...}``: what the
    LayerNorm Jacobian does to the all-ones vector and to the normalized input (``"zero"``,
    ``"same direction"`` or ``"other"``), and ``||J(10 z)||_2 / ||J(z)||_2`` (a number)."""
    from .predict import answer_given

    directions = ("zero", "same direction", "other")
    answer = answer_given(ln_jacobian_prediction, "ln_jacobian_prediction",
                          "a dict with the keys ['J_ones', 'J_zhat', 'norm_ratio']")
    if not isinstance(answer, dict) or set(answer) != {"J_ones", "J_zhat", "norm_ratio"}:
        raise CheckFailed("ln_jacobian_prediction needs exactly the keys ['J_ones', 'J_zhat', 'norm_ratio']")
    for key in ("J_ones", "J_zhat"):
        if answer[key] not in directions:
            raise CheckFailed(f"ln_jacobian_prediction[{key!r}] = {answer[key]!r}; choose one of {list(directions)}")
    if answer["J_ones"] != "zero":
        raise CheckFailed("J_ones: adding the same number to every channel shifts the mean by it and "
                          "changes nothing after the subtraction: LN(z + c1) = LN(z), so J 1 = 0")
    if answer["J_zhat"] != "zero":
        raise CheckFailed("J_zhat: moving z along z_hat only rescales the centred vector (up to eps), "
                          "and the division by sigma undoes a rescaling: J z_hat = 0 (up to eps)")
    ratio = finite_number(answer["norm_ratio"], "norm_ratio")
    z = torch.randn(16, generator=torch.Generator().manual_seed(66), dtype=torch.float64)
    ln = lambda v: torch.nn.functional.layer_norm(v, (16,), eps=1e-5)  # noqa: E731
    true = float(torch.linalg.matrix_norm(torch.autograd.functional.jacobian(ln, 10 * z), ord=2)
                 / torch.linalg.matrix_norm(torch.autograd.functional.jacobian(ln, z), ord=2))
    if not is_close_number(ratio, true, rtol=0.02):
        hint = " (the output does not change, but how fast it changes does)" if abs(ratio - 1) < 1e-9 else ""
        raise CheckFailed(f"norm_ratio = {ratio:.3g}: the Jacobian carries a factor 1/sigma(z); what "
                          f"does multiplying z by 10 do to sigma?{hint}")
    return "J removes the directions 1 and z_hat and divides by sigma: 10 times the input, a tenth of the gradient"


@exercise_check(may_return_none=True)
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
    """``deepnorm_block(x, config, weights, alpha)``: with the sublayers ``attn, ff, norm1, norm2``
    built by ``fundamentallm.block_sublayers(config, weights)``, post-LN with the residual
    up-weighted, ``h = norm1(alpha * x + attn(x))``, ``norm2(alpha * h + ff(h))``."""
    cases = [("layernorm", (2, 5, 16), 2, 2.0), ("layernorm", (1, 7, 8), 1, 24 ** 0.25), ("rmsnorm", (3, 4, 16), 4, 1.0)]
    for seed, (norm, shape, heads, alpha) in enumerate(cases):
        block, config = _ch06_block("post", norm, 20 + seed, d_model=shape[-1], num_heads=heads)
        weights = _ch06_weights(attn=block.attn, ff=block.ff, norm1=block.norm1, norm2=block.norm2)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(680 + seed))
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
        assert_same(got, expected, what=f"{what} (expected h = norm1(alpha x + attn(x)); "
                                        "norm2(alpha h + ff(h)))", atol=1e-5, rtol=1e-4)
    return f"{len(cases)} DeepNorm blocks; alpha = 1 is plain post-LN"
