"""Checks for the exercises of chapter 7: the full model."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .core import CheckFailed, _as_tensor, assert_same, check_shape, exercise_check, rng


def _ch07_rng(seed: int) -> torch.Generator:
    return rng(700 + seed)


_CH07_GRAD_NAMES = ("x", "w_up", "b_up", "w_down", "b_down")


def _ch07_ffn_grads(x, w_up, b_up, w_down, b_down, grad_out) -> dict:
    """The reference: autograd through F.linear + F.gelu(approximate="tanh")."""
    leaves = [t.clone().requires_grad_(True) for t in (x, w_up, b_up, w_down, b_down)]
    F = torch.nn.functional
    out = F.linear(F.gelu(F.linear(leaves[0], leaves[1], leaves[2]), approximate="tanh"), leaves[3], leaves[4])
    grads = torch.autograd.grad(out, leaves, grad_out)
    return dict(zip(_CH07_GRAD_NAMES, grads))


@exercise_check(forbidden=("torch.ops.aten.gelu_backward", "torch.nn.functional.gelu",  # and torch.ops.aten.gelu ...
                           "fundamentallm.feedforward.FeedForward.forward"), by_hand=True)  # by_hand: no autograd
def check_feed_forward_backward(feed_forward_backward: Callable) -> str:
    """``feed_forward_backward(x, w_up, b_up, w_down, b_down, grad_out)`` -> ``{"x", "w_up", "b_up",
    "w_down", "b_down"}``: the gradients of ``sum(grad_out * ffn(x))`` for GPT-2's FFN (tanh GELU,
    ``nn.Linear`` layouts, ``x`` of shape ``(N, d_model)``), by hand; compared with autograd."""
    cases = [(5, 8, 32), (1, 4, 16), (7, 6, 6), (3, 5, 12)]
    for seed, (n, d_model, d_ff) in enumerate(cases):
        g = _ch07_rng(seed)
        x = torch.randn(n, d_model, generator=g, dtype=torch.float64) * 2.0  # tails of the GELU matter
        w_up = torch.randn(d_ff, d_model, generator=g, dtype=torch.float64)
        b_up = torch.randn(d_ff, generator=g, dtype=torch.float64)
        w_down = torch.randn(d_model, d_ff, generator=g, dtype=torch.float64) / d_ff ** 0.5
        b_down = torch.randn(d_model, generator=g, dtype=torch.float64)
        grad_out = torch.randn(n, d_model, generator=g, dtype=torch.float64)
        expected = _ch07_ffn_grads(x, w_up, b_up, w_down, b_down, grad_out)
        got = feed_forward_backward(x.clone(), w_up.clone(), b_up.clone(), w_down.clone(), b_down.clone(),
                                    grad_out.clone())
        what = f"x of shape {(n, d_model)}, d_ff={d_ff}"
        if not isinstance(got, dict) or set(got) != set(_CH07_GRAD_NAMES):
            raise CheckFailed(f"{what}: return a dict with the keys {list(_CH07_GRAD_NAMES)}")
        for name in ("b_down", "w_down", "b_up", "w_up", "x"):  # in the order backprop reaches them
            t = torch.as_tensor(got[name])
            check_shape(t, tuple(expected[name].shape), what=f"gradient of {name} for {what}")
            t = t.to(torch.float64)
            if not torch.isfinite(t).all():
                raise CheckFailed(f"gradient of {name} for {what}: not finite")
            e = expected[name]
            # float64 and a derivative written out agree with autograd to ~1e-15; a finite
            # difference of the GELU does not (its error is at least ~1e-10)
            if torch.allclose(t, e, atol=1e-12, rtol=1e-10):
                continue
            if name in ("w_up", "w_down") and t.shape == e.shape and torch.allclose(t.T.reshape(e.shape), e):
                why = "transposed: nn.Linear stores (out, in)"
            elif name in ("b_up", "w_up", "x"):
                why = ("the gradient reaching the hidden layer goes through the GELU: multiply by its "
                       "derivative, and differentiate both factors of x * (1 + tanh(u(x))) / 2")
            elif name == "b_down":
                why = "a bias is added to every row: its gradient sums over the rows"
            else:
                why = "the gradient of a weight is an outer product summed over the rows"
            raise CheckFailed(f"gradient of {name} for {what} is wrong ({why})")
    return f"all five gradients equal autograd's on {len(cases)} shapes"


# GPT-2 small with tied embeddings, as reported for the published checkpoint.
_GPT2_SMALL_PARAMETERS = 124_439_808


@exercise_check(forbidden=("fundamentallm.model.Transformer.__init__",
                           "fundamentallm.model.TransformerBlock.__init__",
                           "fundamentallm.feedforward.FeedForward.__init__",
                           "fundamentallm.attention.MultiHeadAttention.__init__"))
def check_count_parameters(count_parameters: Callable) -> str:
    """``count_parameters(config_dict)`` -> int, compared with ``Transformer(...).num_parameters()``
    on configurations varying every field that changes the count, and with GPT-2 small's
    published 124,439,808."""
    from ..config import TransformerConfig
    from ..model import Transformer

    base = dict(vocab_size=50, d_model=32, num_heads=4, num_layers=2, max_seq_len=16)
    variants = [
        {}, {"tie_weights": False}, {"d_ff": 48}, {"activation": "relu"}, {"activation": "swiglu"},
        {"activation": "swiglu", "d_ff": 40}, {"bias": False}, {"norm": "rmsnorm"},
        {"pos_encoding": "rope"}, {"pos_encoding": "sinusoidal"}, {"pos_encoding": "none"},
        {"num_layers": 5, "d_model": 48, "num_heads": 6, "max_seq_len": 40, "vocab_size": 97},
        {"activation": "swiglu", "bias": False, "norm": "rmsnorm", "pos_encoding": "rope",
         "tie_weights": False, "d_model": 40, "num_heads": 5},
    ]
    for overrides in variants:
        cfg = {**base, **overrides}
        expected = Transformer(TransformerConfig(**cfg)).num_parameters()
        got = count_parameters(dict(cfg))
        if got is None:
            raise CheckFailed(f"config {overrides or 'base'}: got None -- did you forget to return?")
        if int(got) != expected:
            raise CheckFailed(f"config {cfg}: expected {expected:,} parameters, got {int(got):,} "
                              f"(difference {int(got) - expected:+,})")
    gpt2 = dict(vocab_size=50257, d_model=768, num_heads=12, num_layers=12, max_seq_len=1024)
    got = count_parameters(dict(gpt2))
    if got is None or int(got) != _GPT2_SMALL_PARAMETERS:
        raise CheckFailed(f"GPT-2 small {gpt2}: expected {_GPT2_SMALL_PARAMETERS:,}, got {got}")
    return f"{len(variants)} configurations and GPT-2 small ({_GPT2_SMALL_PARAMETERS:,})"


def _ffn_count(d_model: int, d_ff: int, activation: str) -> int:
    """Parameters of a FeedForward with biases: GELU 2·d·f + f + d, SwiGLU 3·d·f + 2·f + d."""
    if activation == "swiglu":
        return 3 * d_model * d_ff + 2 * d_ff + d_model
    return 2 * d_model * d_ff + d_ff + d_model


@exercise_check(forbidden=("fundamentallm.feedforward.FeedForward.__init__",))
def check_swiglu_matched_width(swiglu_matched_width: Callable) -> str:
    """``swiglu_matched_width(d_model, d_ff)`` -> the integer hidden width of a SwiGLU FFN (with
    biases) whose parameter count is closest to that of a GELU FFN of width ``d_ff`` (with
    biases); the counts are taken from ``fundamentallm.FeedForward`` itself. The student's
    function may not build a ``FeedForward``: a search over widths that counts the package's
    parameters answers without counting the biases (found by the cold read of 2026-11-28)."""
    from ..feedforward import FeedForward

    cases = [(4, 16), (8, 32), (64, 256), (768, 3072), (5, 7), (3, 1)]  # (d_model, d_ff)
    for d_model, d_ff in cases:
        with torch.device("meta"):
            target = sum(p.numel() for p in FeedForward(d_model, d_ff, activation="gelu").parameters())
        assert target == _ffn_count(d_model, d_ff, "gelu")
        got = swiglu_matched_width(d_model, d_ff)
        if isinstance(got, torch.Tensor):
            got = got.item()
        if not isinstance(got, (int, np.integer)) or isinstance(got, bool) or got < 1:
            raise CheckFailed(f"for d_model={d_model}, d_ff={d_ff}: return a positive int, got {got!r}")
        with torch.device("meta"):
            count = sum(p.numel() for p in FeedForward(d_model, int(got), activation="swiglu").parameters())
        best = min(abs(_ffn_count(d_model, w, "swiglu") - target) for w in range(1, 3 * d_ff + 2))
        if abs(count - target) != best:
            raise CheckFailed(
                f"for d_model={d_model}, d_ff={d_ff}: width {got} gives {count:,} parameters, but the "
                f"GELU FFN has {target:,} and another width comes within {best:,} of it -- count the "
                "biases too (up and gate have one each)")
    return f"the closest parameter match on {len(cases)} shapes"


def _ch07_measured_resources(cfg: dict, batch_size: int, seq_len: int) -> tuple[int, int, int]:
    """(parameters, forward FLOPs counted by torch's FlopCounterMode, bytes of float32 parameters,
    gradients and AdamW's two moment buffers after one step) of the package's model."""
    from torch.utils.flop_counter import FlopCounterMode

    from ..config import TransformerConfig
    from ..model import Transformer

    torch.manual_seed(70)
    model = Transformer(TransformerConfig(**cfg, attn_impl="explicit"))
    ids = torch.randint(0, cfg["vocab_size"], (batch_size, seq_len), generator=rng(71))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(ids)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _, loss = model(ids, ids)
    loss.backward()
    optimizer.step()
    params = list(model.parameters())
    tensors = params + [p.grad for p in params] + [
        t for p in params for key, t in optimizer.state[p].items() if key != "step"]
    return model.num_parameters(), int(counter.get_total_flops()), sum(t.numel() * t.element_size() for t in tensors)


@exercise_check(forbidden=("torch.utils.flop_counter", "fundamentallm.model.Transformer.__init__",
                           "fundamentallm.feedforward.FeedForward.__init__",
                           "fundamentallm.attention.MultiHeadAttention.__init__"))
def check_resource_accounting(resource_accounting: Callable) -> str:
    """``resource_accounting(config, num_parameters, batch_size, seq_len)`` -> ``{"forward_flops": int,
    "training_bytes": int}``: the FLOPs of one forward pass (matrix products only, 2 per multiply-add)
    and the float32 bytes of parameters, gradients and AdamW state, by hand; compared with
    ``FlopCounterMode`` and the tensors of a real AdamW step."""
    base = dict(vocab_size=50, d_model=32, num_heads=4, num_layers=2, max_seq_len=16)
    cases = [({}, 2, 16), ({"activation": "swiglu"}, 1, 8), ({"d_ff": 48, "num_layers": 3}, 3, 5),
             ({"vocab_size": 97, "d_model": 24, "num_heads": 2, "num_layers": 1, "max_seq_len": 12}, 2, 12)]
    for overrides, B, T in cases:
        cfg = {**base, **overrides}
        P, flops, nbytes = _ch07_measured_resources(cfg, B, T)
        got = resource_accounting(dict(cfg), P, B, T)
        what = f"config {cfg}, batch {B}, seq_len {T}"
        if not isinstance(got, dict) or set(got) != {"forward_flops", "training_bytes"}:
            raise CheckFailed(f"{what}: return a dict with the keys 'forward_flops' and 'training_bytes'")
        f = int(got["forward_flops"])
        if f != flops:
            C, L, V = cfg["d_model"], cfg["num_layers"], cfg["vocab_size"]
            attention = L * 4 * B * T * T * C
            head = 2 * B * T * C * V
            hints = [(flops - attention, "attention multiplies two matrices that hold no parameters: "
                                         "which, and of what shapes?"),
                     (flops - head, "a tied weight is stored once; is it multiplied once?"),
                     (flops // 2, "a multiply-add counts as 2 FLOPs"),
                     (2 * P * B * T, "2 x parameters x tokens is the usual estimate, not the count: which "
                                     "parameters take part in no matrix product, and which products "
                                     "have no parameters?")]
            why = next((h for v, h in hints if f == v), "count the matrix products layer by layer")
            raise CheckFailed(f"{what}: forward_flops = {f:,}, measured {flops:,}: {why}")
        b = int(got["training_bytes"])
        if b != nbytes:
            why = {4 * P: "what else does training keep per parameter, besides the parameter?",
                   8 * P: "how many moment buffers does AdamW keep per parameter?",
                   12 * P: "one float32 number per parameter is missing: list what backward writes and what AdamW keeps"}.get(
                b, "count the float32 tensors per parameter after one AdamW step, 4 bytes each")
            raise CheckFailed(f"{what}: training_bytes = {b:,}, measured {nbytes:,}: {why}")
    return f"FLOPs and training memory of {len(cases)} models equal the measured ones"


@exercise_check(may_return_none=True, self_check=True)
def check_swiglu_ablation_prediction(lower_error) -> str:
    """``lower_error``: which FFN, at (almost) equal parameters, reaches the lower training error on
    the chapter's memorisation task: ``"gelu"``, ``"swiglu"`` or ``"same"`` (within the noise)."""
    from .predict import answer_given

    answer = answer_given(lower_error, "lower_error", 'one of "gelu", "swiglu", "same"')
    if answer not in ("gelu", "swiglu", "same"):
        raise CheckFailed(f'lower_error = {answer!r}; choose one of "gelu", "swiglu", "same"')
    if answer == "gelu":
        raise CheckFailed("gelu: at equal parameters the GELU network has the wider hidden layer, but "
                          "each SwiGLU unit computes a product of two projections, a richer function "
                          "per parameter; which matters more here?")
    if answer == "same":
        raise CheckFailed("same: the parameter counts match, but the functions they compute do not; "
                          "the gate's product of two projections is not something a GELU unit can form")
    return "the gated unit stores more associations per parameter (measured after the check over 3 seeds)"


@exercise_check
def check_parallel_block(parallel_block: Callable) -> str:
    """``parallel_block(x, config, weights)``: with the sublayers ``attn, ff, norm`` built by
    ``fundamentallm.block_sublayers(config, weights)``, the GPT-J / PaLM block,
    ``x + attn(norm(x)) + ff(norm(x))`` with one shared norm; the sublayers of a random package block."""
    from .ch06 import _ch06_block, _ch06_weights

    cases = [("layernorm", (2, 5, 16), 2), ("rmsnorm", (1, 6, 16), 4), ("layernorm", (3, 1, 8), 1)]
    for seed, (norm, shape, heads) in enumerate(cases):
        block, config = _ch06_block("pre", norm, 40 + seed, d_model=shape[-1], num_heads=heads)
        weights = _ch06_weights(attn=block.attn, ff=block.ff, norm=block.norm1)
        x = torch.randn(shape, generator=rng(740 + seed))
        with torch.no_grad():
            n = block.norm1(x)
            expected = x + block.attn(n) + block.ff(n)
            got = parallel_block(x.clone(), dict(config), weights)
            what = f"parallel_block(x of shape {shape}, {norm}, {heads} heads)"
            check_shape(got, shape, what=what)
            got = _as_tensor(got)
            h = x + block.attn(n)
            if torch.allclose(got, h + block.ff(block.norm1(h)), atol=1e-5, rtol=1e-4):
                raise CheckFailed(f"{what}: that is the sequential pre-LN block; in the parallel block "
                                  "the feed-forward network reads norm(x), not the stream after attention")
        assert_same(got, expected, what=f"{what} (expected x + attn(norm(x)) + ff(norm(x)))", atol=1e-5, rtol=1e-4)
    return f"{len(cases)} parallel blocks: both sublayers read the same normalized input"


_CH07_LEAK_KEYS = ((1, 1), (1, 3), (2, 1), (2, 3))


@exercise_check(may_return_none=True)
def check_leak_reach_prediction(leak_reach) -> str:
    """``leak_reach``: a dict ``{(k, layers): distance}`` for the masks ``tril(k)``, k = 1, 2 (each query
    also sees the next k keys), after 1 and after 3 attention layers with residuals: the largest
    distance ``t - s`` at which changing token ``t`` changes the output at an earlier position ``s``."""
    from .predict import answer_given

    answer = answer_given(leak_reach, "leak_reach", "a dict {(k, layers): int} for k in (1, 2), layers in (1, 3)")
    if not isinstance(answer, dict) or set(answer) != set(_CH07_LEAK_KEYS):
        raise CheckFailed(f"leak_reach needs exactly the keys {list(_CH07_LEAK_KEYS)}: (k of tril(k), layers)")
    for key in _CH07_LEAK_KEYS:
        if isinstance(answer[key], bool) or not isinstance(answer[key], int):
            raise CheckFailed(f"leak_reach[{key}] should be an int, got {answer[key]!r}")
    one = [key for key in _CH07_LEAK_KEYS if key[1] == 1 and answer[key] != key[0]]
    if one:
        raise CheckFailed(f"one layer, {len(one)} of 2 wrong: with tril(k), which keys can query s read? A "
                          f"change at t reaches every query that reads key t")
    deep = [key for key in _CH07_LEAK_KEYS if key[1] == 3 and answer[key] != key[0] * 3]
    if deep:
        raise CheckFailed(f"three layers, {len(deep)} of 2 wrong: the output of a layer at position s carries "
                          f"what it read; what can the next layer's queries read of it?")
    return "k positions per layer: a leak compounds with depth"
