"""Checks for the exercises of chapter 16: inside the model you trained (hooks, induction heads,
ablation, the logit lens, activation patching)."""

from __future__ import annotations

import copy
from typing import Callable

import torch
import torch.nn.functional as F

from .core import CheckFailed, check_shape, exercise_check, rng

# The exercise asks for the norm written out: torch's and the package's are refused.
_LAYER_NORMS = ("torch.nn.functional.layer_norm", "torch.layer_norm", "torch.nn.functional.rms_norm",
                "fundamentallm.norms")


def _patterns(gen: torch.Generator, B: int, H: int, T: int) -> torch.Tensor:
    """Random causal attention patterns (B, H, T, T): rows sum to 1, zero above the diagonal."""
    scores = torch.randn(B, H, T, T, generator=gen) * 2.0
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-1)


def _close(got, expected: torch.Tensor, what: str, hint: str, atol: float = 1e-5) -> None:
    """Fail with ``hint`` (the mechanism to rethink) unless ``got`` is a finite tensor of the
    expected shape within ``atol`` (+ a small relative part) of ``expected``."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what} should be a torch.Tensor, got {type(got).__name__}")
    check_shape(got, tuple(expected.shape), what)
    got = got.detach().to(expected.dtype)
    if not bool(torch.isfinite(got).all()):
        raise CheckFailed(f"{what} holds NaN or infinity: every entry is a finite number")
    if not bool(((got - expected).abs() <= atol + 1e-4 * expected.abs()).all()):
        raise CheckFailed(f"{what} is wrong: {hint}")


@exercise_check
def check_previous_token_scores(previous_token_scores: Callable) -> str:
    """``previous_token_scores(pattern)``: ``(B, H, T, T)`` -> ``(H,)``, each head's attention from
    a query to the position just before it, averaged over the batch and the queries 1..T-1."""
    gen = rng(1600)
    for B, H, T in ((3, 4, 9), (1, 2, 2), (5, 3, 16)):
        pattern = _patterns(gen, B, H, T)
        expected = pattern.diagonal(-1, -2, -1).mean((0, 2))
        _close(previous_token_scores(pattern), expected, f"the scores of a ({B}, {H}, {T}, {T}) pattern",
               "for each query t, which key is the previous token, and which queries have one? Average "
               "over the batch and those queries, one number per head")
    return "three batches of random causal patterns"


@exercise_check
def check_induction_scores(induction_scores: Callable) -> str:
    """``induction_scores(pattern, seg_len)``: patterns ``(B, H, 2·seg_len, 2·seg_len)`` of
    sequences that are a segment written twice -> ``(H,)``, each head's attention from every
    query of the second copy to the token after that query's first occurrence, averaged."""
    gen = rng(1601)
    for B, H, S in ((4, 2, 5), (2, 3, 8), (1, 4, 2)):
        pattern = _patterns(gen, B, H, 2 * S)
        t = torch.arange(S, 2 * S)
        expected = pattern[:, :, t, t - S + 1].mean((0, 2))
        _close(induction_scores(pattern, S), expected, f"the scores for seg_len={S} (pattern of shape "
               f"{tuple(pattern.shape)})", "an induction head at a query in the second copy attends to the "
               "token that FOLLOWED the query's token the first time; which queries have such a token, "
               "and where is it?")
    return "three sizes of repeated segments"


@exercise_check(forbidden=_LAYER_NORMS)
def check_logit_lens(logit_lens: Callable) -> str:
    """``logit_lens(resid, norm_weight, norm_bias, unembed)``: ``(..., C)`` residual stream ->
    ``(..., V)`` logits: the final LayerNorm (eps 1e-5, written out) and the unembedding ``(V, C)``."""
    gen = rng(1602)
    for shape, C, V in (((2, 5), 8, 11), ((3, 4, 6), 16, 7), ((1,), 4, 3)):
        resid = torch.randn(*shape, C, generator=gen) * 3 + torch.randn(C, generator=gen)
        weight = 1 + 0.5 * torch.randn(C, generator=gen)
        bias = 0.5 * torch.randn(C, generator=gen)
        unembed = torch.randn(V, C, generator=gen)
        mean = resid.mean(-1, keepdim=True)
        var = ((resid - mean) ** 2).mean(-1, keepdim=True)
        expected = (((resid - mean) / torch.sqrt(var + 1e-5)) * weight + bias) @ unembed.T
        _close(logit_lens(resid, weight, bias, unembed), expected,
               f"the logits of a residual stream of shape {tuple(resid.shape)}",
               "the model reads its stream only through the final norm (centre, scale by the standard "
               "deviation with eps inside the root, then its weight and bias) and then the unembedding",
               atol=1e-4)
    return "three residual streams"


def _model_case(seed: int):
    """A small random decoder (config dict, state dict, ids) whose heads all matter."""
    from ..config import TransformerConfig
    from ..model import Transformer

    gen = rng(seed)
    H = int(torch.randint(2, 5, (1,), generator=gen))
    config = dict(vocab_size=23, d_model=8 * H, num_heads=H, num_layers=2, max_seq_len=12, d_ff=16)
    with torch.random.fork_rng():  # the initialisation is overwritten; leave the global generator alone
        model = Transformer(TransformerConfig(**config)).eval()
    with torch.no_grad():  # larger weights than at initialisation: every head changes the loss
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.4)
    ids = torch.randint(0, 23, (3, 12), generator=gen)
    return config, {k: v.clone() for k, v in model.state_dict().items()}, ids, model


def _loss(model, ids) -> float:
    logits, _ = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).item()


@exercise_check
def check_head_ablation(head_ablation: Callable) -> str:
    """``head_ablation(config, weights, ids)``: ``(L, H)`` increase of the mean next-token loss of
    ``ids`` when one head's output (``hook_z``) is set to zero, for every head."""
    for seed in (1603, 1604):
        config, weights, ids, model = _model_case(seed)
        L, H, D = config["num_layers"], config["num_heads"], config["d_model"] // config["num_heads"]
        expected = torch.zeros(L, H)
        with torch.no_grad():
            base = _loss(model, ids)
            for layer in range(L):
                for head in range(H):
                    ablated = copy.deepcopy(model)  # zeroing the head's columns of out_proj: its output is 0
                    ablated.blocks[layer].attn.out_proj.weight[:, head * D:(head + 1) * D] = 0.0
                    expected[layer, head] = _loss(ablated, ids) - base
        _close(head_ablation(config, weights, ids), expected, f"the loss changes of a {L}-layer, {H}-head model",
               "ablate one head of one layer at a time (its slice of hook_z, before out_proj mixes the "
               "heads), and report the ablated loss minus the clean loss, the loss over every next token",
               atol=1e-4)
    return "two random models"


@exercise_check
def check_patch_activation(patch_activation: Callable) -> str:
    """``patch_activation(config, weights, clean_ids, corrupt_ids, name, pos)``: the logits of the
    corrupted run with the activation ``name`` at position ``pos`` taken from the clean run."""
    cases = 0
    for seed in (1605, 1606):
        config, weights, clean, model = _model_case(seed)
        gen = rng(seed + 10)
        corrupt = clean.clone()
        corrupt[:, 3] = torch.randint(0, 23, (3,), generator=gen)
        corrupt[:, 7] = torch.randint(0, 23, (3,), generator=gen)
        H = config["num_heads"]
        for name, pos in (("blocks.0.hook_resid_pre", 3), ("blocks.1.hook_resid_pre", 7),
                          ("blocks.0.attn.hook_z", 1),
                          ("blocks.1.hook_attn_out", 0)):
            with torch.no_grad():
                _, cache = model.run_with_cache(clean, names=name)

                def patch(act, _name, pos=pos, name=name, cache=cache):
                    act = act.clone()
                    act[:, pos] = cache[name][:, pos]
                    return act

                with model.hooks({name: patch}):
                    expected, _ = model(corrupt)
            got = patch_activation(config, weights, clean, corrupt, name, pos)
            _close(got, expected, f"the patched logits for {name!r} at position {pos} ({H} heads)",
                   "run the corrupted input, and at that one hook point replace only the given position "
                   "(axis 1, for every hook name here, before the heads or channels) with the clean run's "
                   "activation; return the patched run's logits", atol=1e-4)
            cases += 1
    return f"{cases} patches in two random models"


# --- Wrong answers each check rejects (python -m fundamentallm.course catches --chapter 16) ------

from .wrong import wrong_answer  # noqa: E402

wrong_answer("check_previous_token_scores", "mistake", "reads the diagonal (attention to itself)", """
def previous_token_scores(pattern):
    return pattern.diagonal(0, -2, -1).mean((0, 2))
""", call="previous_token_scores", message=r"which key is the previous token")
wrong_answer("check_previous_token_scores", "edge", "averages over all T queries (query 0 has no previous token)", """
def previous_token_scores(pattern):
    T = pattern.shape[-1]
    return pattern.diagonal(-1, -2, -1).sum((0, 2)) / (pattern.shape[0] * T)
""", call="previous_token_scores", message=r"which queries have one")
wrong_answer("check_previous_token_scores", "mistake", "one score for all heads", """
def previous_token_scores(pattern):
    return pattern.diagonal(-1, -2, -1).mean()
""", call="previous_token_scores", message=r"expected shape \(4,\)")
wrong_answer("check_previous_token_scores", "value", "NaN", """
def previous_token_scores(pattern):
    return torch.full((pattern.shape[1],), float("nan"))
""", call="previous_token_scores", message=r"NaN or infinity")

wrong_answer("check_induction_scores", "mistake", "the earlier copy of the same token (a duplicate-token head)", """
def induction_scores(pattern, seg_len):
    t = torch.arange(seg_len, 2 * seg_len)
    return pattern[:, :, t, t - seg_len].mean((0, 2))
""", call="induction_scores", message=r"FOLLOWED the query's token")
wrong_answer("check_induction_scores", "mistake", "averages over every query, the first copy's too", """
def induction_scores(pattern, seg_len):
    t = torch.arange(seg_len - 1, 2 * seg_len)
    return pattern[:, :, t, (t - seg_len + 1).clamp(min=0)].mean((0, 2))
""", call="induction_scores", message=r"which queries have such a token")
wrong_answer("check_induction_scores", "edge", "skips the first query of the second copy", """
def induction_scores(pattern, seg_len):
    t = torch.arange(seg_len + 1, 2 * seg_len)
    return pattern[:, :, t, t - seg_len + 1].mean((0, 2))
""", call="induction_scores", message=r"which queries")

wrong_answer("check_logit_lens", "mistake", "skips the final norm", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    return resid @ unembed.T
""", call="logit_lens", message=r"through the final norm")
wrong_answer("check_logit_lens", "mistake", "an RMS norm (no centring)", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    x = resid / torch.sqrt((resid ** 2).mean(-1, keepdim=True) + 1e-5)
    return (x * norm_weight + norm_bias) @ unembed.T
""", call="logit_lens", message=r"centre")
wrong_answer("check_logit_lens", "edge", "the norm without its weight and bias", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    x = resid - resid.mean(-1, keepdim=True)
    x = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-5)
    return x @ unembed.T
""", call="logit_lens", message=r"weight and bias")
wrong_answer("check_logit_lens", "method", "torch's layer_norm under another name", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    ln = torch.nn.LayerNorm(resid.shape[-1])
    with torch.no_grad():
        ln.weight.copy_(norm_weight)
        ln.bias.copy_(norm_bias)
    return ln(resid) @ unembed.T
""", call="logit_lens", message=r"not to use torch(\.nn\.functional)?\.layer_norm")

_BUILD = """
from fundamentallm import Transformer, TransformerConfig

def _model(config, weights):
    model = Transformer(TransformerConfig(**config))
    model.load_state_dict(weights)
    return model.eval()

def _loss(model, ids, fns):
    with model.hooks(fns), torch.no_grad():
        logits, _ = model(ids[:, :-1])
    return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).item()
"""
wrong_answer("check_head_ablation", "mistake", "ablates every head of the layer at once", _BUILD + """
def head_ablation(config, weights, ids):
    model = _model(config, weights)
    L, H = config["num_layers"], config["num_heads"]
    base = _loss(model, ids, {})
    out = torch.zeros(L, H)
    for layer in range(L):
        delta = _loss(model, ids, {f"blocks.{layer}.attn.hook_z": lambda z, n: torch.zeros_like(z)}) - base
        out[layer] = delta
    return out
""", call="head_ablation", message=r"one head of one layer at a time")
wrong_answer("check_head_ablation", "mistake", "returns the ablated loss, not its change", _BUILD + """
def head_ablation(config, weights, ids):
    model = _model(config, weights)
    L, H = config["num_layers"], config["num_heads"]
    out = torch.zeros(L, H)
    for layer in range(L):
        for head in range(H):
            def ablate(z, n, head=head):
                z = z.clone()
                z[:, :, head] = 0
                return z
            out[layer, head] = _loss(model, ids, {f"blocks.{layer}.attn.hook_z": ablate})
    return out
""", call="head_ablation", message=r"ablated loss minus the clean loss")
wrong_answer("check_head_ablation", "edge", "zeroes the head's channels after out_proj (hook_attn_out)", _BUILD + """
def head_ablation(config, weights, ids):
    model = _model(config, weights)
    L, H = config["num_layers"], config["num_heads"]
    D = config["d_model"] // H
    base = _loss(model, ids, {})
    out = torch.zeros(L, H)
    for layer in range(L):
        for head in range(H):
            def ablate(a, n, head=head):
                a = a.clone()
                a[..., head * D:(head + 1) * D] = 0
                return a
            out[layer, head] = _loss(model, ids, {f"blocks.{layer}.hook_attn_out": ablate}) - base
    return out
""", call="head_ablation", message=r"before out_proj mixes the heads")
wrong_answer("check_head_ablation", "value", "NaN", """
def head_ablation(config, weights, ids):
    return torch.full((config["num_layers"], config["num_heads"]), float("nan"))
""", call="head_ablation", message=r"NaN or infinity")

_PATCH = """
from fundamentallm import Transformer, TransformerConfig

def _model(config, weights):
    model = Transformer(TransformerConfig(**config))
    model.load_state_dict(weights)
    return model.eval()
"""
wrong_answer("check_patch_activation", "mistake", "patches every position", _PATCH + """
def patch_activation(config, weights, clean_ids, corrupt_ids, name, pos):
    model = _model(config, weights)
    with torch.no_grad():
        _, cache = model.run_with_cache(clean_ids, names=name)
        with model.hooks({name: lambda act, n: cache[name]}):
            return model(corrupt_ids)[0]
""", call="patch_activation", message=r"replace only the given position")
wrong_answer("check_patch_activation", "mistake", "patches the other way (corrupt into clean)", _PATCH + """
def patch_activation(config, weights, clean_ids, corrupt_ids, name, pos):
    model = _model(config, weights)
    with torch.no_grad():
        _, cache = model.run_with_cache(corrupt_ids, names=name)
        def patch(act, n):
            act = act.clone()
            act[:, pos] = cache[name][:, pos]
            return act
        with model.hooks({name: patch}):
            return model(clean_ids)[0]
""", call="patch_activation", message=r"run the corrupted input")
wrong_answer("check_patch_activation", "edge", "indexes the second-to-last axis (right for (B, T, C) only)", _PATCH + """
def patch_activation(config, weights, clean_ids, corrupt_ids, name, pos):
    model = _model(config, weights)
    with torch.no_grad():
        _, cache = model.run_with_cache(clean_ids, names=name)
        def patch(act, n):
            act = act.clone()
            act[..., pos, :] = cache[name][..., pos, :]
            return act
        with model.hooks({name: patch}):
            return model(corrupt_ids)[0]
""", call="patch_activation", message=r"axis 1")
wrong_answer("check_patch_activation", "mistake", "returns the clean run's logits", _PATCH + """
def patch_activation(config, weights, clean_ids, corrupt_ids, name, pos):
    with torch.no_grad():
        return _model(config, weights)(clean_ids)[0]
""", call="patch_activation", message=r"patched run's logits")
