"""Checks for the exercises of chapter 7: the full model."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check


def _ch07_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(700 + seed)


@exercise_check(forbidden=("torch.nn.functional.gelu", "fundamentallm.feedforward.FeedForward.forward"))
def check_feed_forward(feed_forward: Callable) -> str:
    """``feed_forward(x, w_up, b_up, w_down, b_down)`` = ``down(gelu_tanh(up(x)))`` with
    ``nn.Linear`` layouts, compared with ``F.linear`` + ``F.gelu(approximate="tanh")``."""
    act = torch.nn.functional.gelu
    cases = [((2, 3, 8), 32), ((5, 4), 16), ((1, 1, 6), 6), ((2, 7, 4), 12)]
    for seed, (shape, d_ff) in enumerate(cases):
        g = _ch07_rng(seed)
        d_model = shape[-1]
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 2.0  # wide range: tails matter
        w_up = torch.randn(d_ff, d_model, generator=g, dtype=torch.float64)
        b_up = torch.randn(d_ff, generator=g, dtype=torch.float64)
        w_down = torch.randn(d_model, d_ff, generator=g, dtype=torch.float64) / d_ff ** 0.5
        b_down = torch.randn(d_model, generator=g, dtype=torch.float64)
        expected = torch.nn.functional.linear(
            act(torch.nn.functional.linear(x, w_up, b_up), approximate="tanh"), w_down, b_down)
        got = feed_forward(x.clone(), w_up.clone(), b_up.clone(), w_down.clone(), b_down.clone())
        check_shape(got, tuple(expected.shape), what=f"output for x of shape {shape}, d_ff={d_ff}")
        assert_same(got, expected, what=f"output for x of shape {shape}, d_ff={d_ff}")
    return f"{len(cases)} cases equal F.linear + F.gelu(approximate='tanh')"


@exercise_check(forbidden=("fundamentallm.feedforward.FeedForward.forward",))
def check_swiglu(swiglu: Callable) -> str:
    """``swiglu(x, w_gate, w_up, w_down)`` = ``down(silu(gate(x)) * up(x))`` (no biases),
    compared with a reference written with ``F.silu``."""
    F_ = torch.nn.functional
    cases = [((2, 3, 8), 24), ((4, 6), 16), ((1, 1, 4), 8)]
    for seed, (shape, d_ff) in enumerate(cases):
        g = _ch07_rng(10 + seed)
        d_model = shape[-1]
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 2.0
        w_gate, w_up = (torch.randn(d_ff, d_model, generator=g, dtype=torch.float64) for _ in range(2))
        w_down = torch.randn(d_model, d_ff, generator=g, dtype=torch.float64) / d_ff ** 0.5
        expected = F_.linear(F_.silu(F_.linear(x, w_gate)) * F_.linear(x, w_up), w_down)
        got = swiglu(x.clone(), w_gate.clone(), w_up.clone(), w_down.clone())
        check_shape(got, tuple(expected.shape), what=f"output for x of shape {shape}, d_ff={d_ff}")
        assert_same(got, expected, what=f"output for x of shape {shape}, d_ff={d_ff}")
    return f"{len(cases)} cases equal down(silu(gate(x)) * up(x))"


# GPT-2 small with tied embeddings, as reported for the published checkpoint.
_GPT2_SMALL_PARAMETERS = 124_439_808


@exercise_check(forbidden=("fundamentallm.model.Transformer.__init__",))
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


def _ch07_leak_reference(model_fn: Callable, input_ids: torch.Tensor, vocab_size: int,
                         atol: float) -> torch.Tensor:
    base = model_fn(input_ids)
    T = input_ids.shape[1]
    changed = torch.zeros(T, T, dtype=torch.bool)
    for t in range(T):
        ids = input_ids.clone()
        ids[0, t] = (ids[0, t] + 1) % vocab_size
        diff = (model_fn(ids) - base).abs().amax(dim=-1)[0]  # (T,)
        changed[t] = diff > atol
    return changed


@exercise_check
def check_causal_leak_test(causal_leak_test: Callable) -> str:
    """``causal_leak_test(model_fn, input_ids, vocab_size, atol=1e-6)`` -> bool ``(T, T)`` with
    ``[t, s]`` True when changing token t changes the logits at position s. Run on a causal model,
    a bidirectional one, and a model that leaks one future token into one position."""
    from ..config import TransformerConfig
    from ..model import Transformer

    torch.manual_seed(7)
    cfg = dict(vocab_size=16, d_model=32, num_heads=4, num_layers=2, max_seq_len=16)
    causal = Transformer(TransformerConfig(**cfg)).eval()
    bidirectional = Transformer(TransformerConfig(**cfg, causal=False)).eval()

    def run(model):
        return lambda ids: model(ids)[0].detach()

    def one_leak(ids):  # position 2 sees token 5: a bug hiding in the middle of the sequence
        logits = run(causal)(ids).clone()
        logits[:, 2] += 0.1 * ids[:, 5:6].to(logits.dtype)
        return logits

    models = {"a causal model": run(causal), "a bidirectional model": run(bidirectional),
              "a model where position 2 sees token 5": one_leak}
    for seed, T in ((0, 8), (1, 1), (2, 12)):
        ids = torch.randint(0, 16, (1, T), generator=_ch07_rng(20 + seed))
        for name, fn in models.items():
            if T < 6 and name.startswith("a model where"):
                continue
            expected = _ch07_leak_reference(fn, ids, 16, 1e-6)
            before = ids.clone()
            got = causal_leak_test(fn, ids, 16, atol=1e-6)
            if not torch.equal(ids, before):
                raise CheckFailed("your function changed the caller's input_ids: clone before editing")
            check_shape(got, (T, T), what=f"result for {name}, T={T}")
            got = torch.as_tensor(np.asarray(got) if not isinstance(got, torch.Tensor) else got)
            if got.dtype != torch.bool:
                raise CheckFailed(f"result for {name}: expected a boolean tensor, got dtype {got.dtype}")
            if not torch.equal(got, expected):
                t, s = (int(i) for i in (got != expected).nonzero()[0])
                raise CheckFailed(f"{name}, T={T}: entry [t={t}, s={s}] (does changing token {t} "
                                  f"change the logits at position {s}?) should be "
                                  f"{bool(expected[t, s])}, got {bool(got[t, s])}")
    return "causal, bidirectional and single-leak models classified correctly"


def _ffn_count(d_model: int, d_ff: int, activation: str) -> int:
    """Parameters of a FeedForward with biases: GELU 2·d·f + f + d, SwiGLU 3·d·f + 2·f + d."""
    if activation == "swiglu":
        return 3 * d_model * d_ff + 2 * d_ff + d_model
    return 2 * d_model * d_ff + d_ff + d_model


@exercise_check
def check_swiglu_matched_width(swiglu_matched_width: Callable) -> str:
    """``swiglu_matched_width(d_model, d_ff)`` -> the integer hidden width of a SwiGLU FFN (with
    biases) whose parameter count is closest to that of a GELU FFN of width ``d_ff`` (with
    biases); the counts are taken from ``fundamentallm.FeedForward`` itself."""
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
    ids = torch.randint(0, cfg["vocab_size"], (batch_size, seq_len), generator=torch.Generator().manual_seed(71))
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


@exercise_check(forbidden=("torch.utils.flop_counter", "fundamentallm.model", "fundamentallm.feedforward",
                           "fundamentallm.attention"))
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
            hints = [(flops - attention, "you left out attention's two products, Q K^T and weights @ V "
                                         "(2 B T^2 C FLOPs each per layer)"),
                     (flops - head, "the output layer still multiplies (2 B T C V FLOPs) even though "
                                    "its weight is tied to the embedding"),
                     (flops // 2, "a multiply-add counts as 2 FLOPs"),
                     (2 * P * B * T, "2 x parameters x tokens is the usual estimate, not the count: the "
                                     "embedding tables are looked up, not multiplied, norms and biases "
                                     "are not matrix products, and attention's T^2 products have no "
                                     "parameters")]
            why = next((h for v, h in hints if f == v), "count the matrix products layer by layer")
            raise CheckFailed(f"{what}: forward_flops = {f:,}, measured {flops:,}: {why}")
        b = int(got["training_bytes"])
        if b != nbytes:
            why = {4 * P: "parameters alone; training also keeps a gradient and AdamW's two moments per parameter",
                   8 * P: "AdamW keeps two moment buffers (exp_avg, exp_avg_sq), not one",
                   12 * P: "add the gradients: one float per parameter"}.get(b, "4 bytes per float32 number")
            raise CheckFailed(f"{what}: training_bytes = {b:,}, measured {nbytes:,}: {why}")
    return f"FLOPs and training memory of {len(cases)} models equal the measured ones"


@exercise_check(may_return_none=True)
def check_swiglu_ablation_prediction(lower_error) -> str:
    """``lower_error``: which FFN, at (almost) equal parameters, reaches the lower training error on
    the chapter's memorisation task: ``"gelu"``, ``"swiglu"`` or ``"same"`` (within the noise)."""
    from .ch01 import answer_given

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
