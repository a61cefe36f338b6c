"""The chapter 16 exercise checks: they pass correct answers written in other ways than the book's
and fail, with CheckFailed, a stub; the wrong answers each check rejects are the package's table
(fundamentallm/checks/ch16.py, run by tests/test_catches.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from check_tables import table_tests

from fundamentallm import Transformer, TransformerConfig, checks
from fundamentallm.checks import CheckFailed

# --- correct answers, written without the package's hooks where they can be ----------------------


def previous_token_scores(pattern):
    B, H, T, _ = pattern.shape
    total = torch.zeros(H)
    for t in range(1, T):
        total += pattern[:, :, t, t - 1].sum(0)
    return total / (B * (T - 1))


def classify_heads(patterns, seg_len):
    """Scores by masks over the (T, T) grid instead of index tensors."""
    S, T = seg_len, 2 * seg_len
    rows, cols = torch.arange(T)[:, None], torch.arange(T)[None]
    masks = {"previous": (rows >= 1) & (cols == rows - 1),
             "induction": (rows >= S) & (cols == rows - S + 1),
             "duplicate": (rows >= S) & (cols == rows - S),
             "first": (rows >= 1) & (cols == 0)}
    names = {}
    for layer, pattern in enumerate(patterns):
        for head in range(pattern.shape[1]):
            scores = {kind: float((pattern[:, head] * m).sum((-1, -2)).mean() / m.sum()) for kind, m in masks.items()}
            kind = max(scores, key=scores.get)
            names[(layer, head)] = kind if scores[kind] > 0.5 else "other"
    return names


def logit_lens(resid, norm_weight, norm_bias, unembed):
    centred = resid - resid.mean(-1, keepdim=True)
    normed = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-5)
    return torch.einsum("...c,vc->...v", normed * norm_weight + norm_bias, unembed)


def logit_attribution(components, norm_weight, norm_bias, unembed, targets):
    """The shares by removing one term at a time from a frozen-scale, bias-free norm (a sum over
    terms is linear there, so the share is the drop of the logit)."""
    stream = components.sum(0)
    centred = stream - stream.mean(-1, keepdim=True)
    sigma = centred.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()

    def logit(x):
        x = x - x.mean(-1, keepdim=True)
        return torch.einsum("bc,bc->b", x / sigma * norm_weight, unembed[targets])

    return torch.stack([logit(stream) - logit(stream - c) for c in components])


def _model(config, weights):
    model = Transformer(TransformerConfig(**config))
    model.load_state_dict(weights)
    return model.eval()


def head_ablation_by_weights(config, weights, ids, mode):
    """Set the value projection of the head to a constant, no hooks: with its value weights zero,
    every value is the bias, and (pattern rows summing to 1) so is z. Zero ablation: bias 0; mean
    ablation: bias = the head's z averaged over the batch and positions, read from out_proj's input
    by a forward pre-hook written by hand."""
    model = _model(config, weights)
    L, H, C = config["num_layers"], config["num_heads"], config["d_model"]
    D = C // H

    def loss(m):
        with torch.no_grad():
            logits, _ = m(ids[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).item()

    means = {}
    handles = [block.attn.out_proj.register_forward_pre_hook(
        lambda module, args, layer=layer: means.__setitem__(layer, args[0].view(*args[0].shape[:2], H, D).mean((0, 1))))
        for layer, block in enumerate(model.blocks)]
    base = loss(model)
    for handle in handles:
        handle.remove()
    out = torch.zeros(L, H)
    for layer in range(L):
        for head in range(H):
            ablated = copy.deepcopy(model)
            rows = slice(2 * C + head * D, 2 * C + (head + 1) * D)  # v's rows of the fused qkv
            with torch.no_grad():
                ablated.blocks[layer].attn.qkv.weight[rows] = 0.0
                ablated.blocks[layer].attn.qkv.bias[rows] = 0.0 if mode == "zero" else means[layer][head]
            out[layer, head] = loss(ablated) - base
    return out


def patch_activation_by_forward_hooks(config, weights, clean_ids, corrupt_ids, name, pos):
    """The same patch with the package's hook names but torch's hooks written by hand."""
    model = _model(config, weights)
    _, index, point = name.split(".", 2)
    block = model.blocks[int(index)]
    H = config["num_heads"]
    saved = {}

    def grab(x):
        return x.view(*x.shape[:2], H, -1) if point == "attn.hook_z" else x

    def record(module, args, output=None):
        saved["x"] = grab(args[0] if output is None else output).clone()

    def replace(module, args, output=None):
        x = args[0] if output is None else output
        y = grab(x).clone()
        y[:, pos] = saved["x"][:, pos]
        y = y.reshape(x.shape)
        return (y, *args[1:]) if output is None else y

    if point == "hook_resid_pre":
        module, pre = block, True
    elif point == "attn.hook_z":
        module, pre = block.attn.out_proj, True
    else:
        module, pre = block.attn, False
    with torch.no_grad():
        for fn, ids in ((record, clean_ids), (replace, corrupt_ids)):
            handle = module.register_forward_pre_hook(fn) if pre else module.register_forward_hook(fn)
            try:
                logits, _ = model(ids)
            finally:
                handle.remove()
    return logits


CORRECT = {
    "check_previous_token_scores": [previous_token_scores],
    "check_classify_heads": [classify_heads],
    "check_logit_attribution": [logit_attribution],
}

test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \
    table_tests(CORRECT, {})


def test_the_logit_lens_passes_with_its_prediction_and_not_without():
    assert checks.check_logit_lens(logit_lens, ("b", "a")) is True
    with pytest.raises(CheckFailed, match="not attempted"):
        checks.check_logit_lens(logit_lens, None)
    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.check_logit_lens(lambda *a: (_ for _ in ()).throw(NotImplementedError), ["a", "b"])
    for wrong in (["a"], ["b"], ["a", "b", "c"], ["a", "b", "d"], []):  # the answer never shown
        with pytest.raises(CheckFailed, match="not right") as info:
            checks.check_logit_lens(logit_lens, wrong)
        assert "['a', 'b']" not in str(info.value)


def test_the_logit_lens_refuses_torchs_layer_norm():
    def with_f_layer_norm(resid, norm_weight, norm_bias, unembed):
        return F.layer_norm(resid, resid.shape[-1:], norm_weight, norm_bias, 1e-5) @ unembed.T

    with pytest.raises(CheckFailed, match="not to use"):
        checks.check_logit_lens(with_f_layer_norm, ["a", "b"])


def test_nan_answers_fail():
    with pytest.raises(CheckFailed, match="NaN"):
        checks.check_logit_lens(lambda r, w, b, u: torch.full((*r.shape[:-1], u.shape[0]), float("inf")), ["a", "b"])


def test_patching_written_with_torchs_own_hooks_passes():
    assert checks.check_patch_activation(patch_activation_by_forward_hooks, [6, 6, 11]) is True


def test_patching_stub_and_missing_prediction_are_not_attempted():
    def stub(*args):
        raise NotImplementedError

    with pytest.raises(CheckFailed, match="NotImplementedError"):
        checks.check_patch_activation(stub, [6, 6, 11])
    with pytest.raises(CheckFailed, match="not attempted"):
        checks.check_patch_activation(patch_activation_by_forward_hooks, None)


CONSTANT_HEAD = {"zero": "changes the loss", "mean": "leaves the loss unchanged"}


def test_head_ablation_passes_with_its_prediction_and_not_without():
    assert checks.check_head_ablation(head_ablation_by_weights, dict(CONSTANT_HEAD)) is True
    with pytest.raises(CheckFailed, match="not attempted|still None"):
        checks.check_head_ablation(head_ablation_by_weights, None)
    for zero in ("changes the loss", "leaves the loss unchanged"):
        for mean in ("changes the loss", "leaves the loss unchanged"):
            guess = {"zero": zero, "mean": mean}
            if guess != CONSTANT_HEAD:
                with pytest.raises(CheckFailed, match="not right") as info:
                    checks.check_head_ablation(head_ablation_by_weights, guess)
                assert "leaves the loss unchanged" not in str(info.value)  # the answer is never shown
