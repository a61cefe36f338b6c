"""Checks for the exercises of chapter 13: debugging transformers."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from .core import CheckFailed, check_shape, exercise_check
from .predict import int_list, require_prediction


def _ch13_rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1300 + seed)


@exercise_check
def check_find_nan_or_inf(find_nan_or_inf: Callable) -> str:
    """``find_nan_or_inf(named_tensors)`` -> the names, in order, of the tensors holding NaN or
    +-inf, for a list of ``(name, tensor)`` pairs; ``None`` tensors skipped, integer tensors
    finite. Includes a model's gradients."""
    g = _ch13_rng(0)
    ok = torch.randn(3, 4, generator=g)
    nan = ok.clone()
    nan[1, 2] = float("nan")
    pinf, ninf = ok.clone(), ok.clone()
    pinf[0, 0], ninf[2, 3] = float("inf"), float("-inf")
    huge = torch.full((2,), 3e38)  # large but finite
    cases = [
        ("all finite", [("a", ok), ("b", ok * 2)], []),
        ("names in the order given, not sorted", [("layer2", nan), ("layer10", pinf)], ["layer2", "layer10"]),
        ("a NaN in the second tensor", [("a", ok), ("b", nan), ("c", ok)], ["b"]),
        ("+inf, -inf and NaN in several tensors", [("w", pinf), ("x", ok), ("y", ninf), ("z", nan)],
         ["w", "y", "z"]),
        ("None entries (parameters without gradients) are skipped",
         [("p", None), ("q", nan), ("r", None)], ["q"]),
        ("integer tensors are finite", [("ids", torch.arange(5)), ("mask", torch.ones(3, dtype=torch.bool))], []),
        ("large finite values are not infinities", [("big", huge), ("f64", nan.double())], ["f64"]),
        ("an empty list", [], []),
    ]
    for what, pairs, expected in cases:
        got = find_nan_or_inf([(n, t) for n, t in pairs])
        if got is None:
            raise CheckFailed(f"{what}: got None -- return a list of names (an empty list if none)")
        if list(got) != expected:
            raise CheckFailed(f"{what}: expected {expected}, got {list(got)}")
    with torch.random.fork_rng():
        torch.manual_seed(13)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    model(torch.tensor([[1.0, float("inf"), 0.0]])).sum().backward()
    grads = [(n, p.grad) for n, p in model.named_parameters()]
    expected = [n for n, gr in grads if not bool(torch.isfinite(gr).all())]
    if not 0 < len(expected) < len(grads):  # guards the case itself
        raise RuntimeError(f"internal: expected some but not all gradients non-finite, got {expected}")
    got = find_nan_or_inf(list(grads))
    if list(got) != expected:
        raise CheckFailed(f"gradients of a model fed an infinite input: expected {expected}, got {list(got)}")
    return f"{len(cases) + 1} cases, gradients of a model included"


def _ch13_spikes_reference(losses: list, factor: float, window: int) -> list[int]:
    out = []
    for i, loss in enumerate(losses):
        if not np.isfinite(loss):
            out.append(i)
            continue
        before = [x for x in losses[max(0, i - window):i] if np.isfinite(x)]
        if before and loss > factor * (sum(before) / len(before)):
            out.append(i)
    return out


@exercise_check
def check_detect_loss_spike(detect_loss_spike: Callable) -> str:
    """``detect_loss_spike(losses, factor, window)`` -> sorted spike steps, compared with a
    reference on hand-made traces (NaN, inf, short windows, flat) and random noisy ones."""
    cases = [
        ("a smooth decreasing trace", [4.0, 3.5, 3.2, 3.0, 2.9, 2.8], 2.0, 3, []),
        ("one spike at step 4", [3.0, 2.9, 2.8, 2.7, 6.5, 2.6, 2.5], 2.0, 3, [4]),
        ("a spike right after the first step", [1.0, 2.5, 1.0], 2.0, 10, [1]),
        ("NaN and inf are always spikes", [2.0, float("nan"), 2.0, float("inf"), 1.9], 2.0, 2, [1, 3]),
        ("the window skips non-finite values", [1.0, float("nan"), 2.5, 1.0], 2.0, 2, [1, 2]),
        ("only the last `window` steps count", [10.0, 10.0, 1.0, 1.0, 2.5], 2.0, 2, [4]),
        ("a larger factor", [3.0, 2.9, 2.8, 2.7, 6.5, 2.6], 3.0, 3, []),
        ("a flat trace", [2.0] * 8, 1.5, 4, []),
        ("an empty list", [], 2.0, 5, []),
        ("a single value", [5.0], 2.0, 5, []),
    ]
    g = _ch13_rng(1)
    for seed in range(3):
        noisy = (3.0 * torch.exp(-torch.arange(60) / 30.0) + 0.3 * torch.rand(60, generator=g)).tolist()
        noisy[10 + 15 * seed] *= 2.5
        cases.append((f"a noisy decreasing trace #{seed + 1} with a spike", noisy, 1.8, 5, None))
    for what, losses, factor, window, expected in cases:
        reference = _ch13_spikes_reference(losses, factor, window)
        if expected is not None and reference != expected:  # guards the reference itself
            raise RuntimeError(f"internal: reference gives {reference} for {what}, not {expected}")
        before = list(losses)
        got = detect_loss_spike(losses, factor=factor, window=window)
        if [str(x) for x in losses] != [str(x) for x in before]:
            raise CheckFailed(f"{what}: your function modified the list of losses")
        if got is None:
            raise CheckFailed(f"{what}: got None -- return a list of steps (empty if no spike)")
        got = [int(i) for i in got]
        if got != reference:
            raise CheckFailed(f"{what} (factor={factor}, window={window}): expected spikes at "
                              f"{reference}, got {got}")
    return f"{len(cases)} traces (NaN, inf, window edges, noisy traces) match the reference"


@exercise_check
def check_bad_attention_rows(bad_attention_rows: Callable) -> str:
    """``bad_attention_rows(weights, atol)`` -> bool ``(..., T_q)``: rows with a non-finite or
    negative entry, or a sum off 1 by more than ``atol``."""
    g = _ch13_rng(2)
    scores = torch.randn(2, 3, 5, 5, generator=g) * 3
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    masked = scores.masked_fill(~causal, float("-inf"))
    good = torch.softmax(masked, dim=-1)
    wrong_axis = torch.softmax(scores, dim=-2)  # columns sum to one, rows do not
    with_nan = good.clone()
    with_nan[0, 1, 2, 0] = float("nan")
    dead = good.clone()
    dead[1, 0, 3] = 0.0  # a fully masked query's row of zeros
    negative = good.clone()
    negative[0, 2, 4, :2] = torch.tensor([1.2, -0.2])
    negative[0, 2, 4, 2:] = 0.0
    slightly = good.clone()
    slightly[1, 2, 1] *= 1 + 1e-7  # within atol
    cases = [("softmax over the last axis (all rows fine)", good, 1e-5),
             ("softmax over the wrong axis (dim=-2)", wrong_axis, 1e-5),
             ("a NaN in one row", with_nan, 1e-5),
             ("a fully masked row of zeros", dead, 1e-5),
             ("a row with a negative weight that still sums to 1", negative, 1e-5),
             ("a row off by 1e-7 (within atol)", slightly, 1e-5),
             ("2-D weights (T_q, T_k)", torch.softmax(torch.randn(4, 6, generator=g), dim=0), 1e-5),
             ("float64 weights with a tight atol", good.double() * (1 + 1e-9), 1e-12)]
    for what, w, atol in cases:
        before = w.clone()
        got = bad_attention_rows(w, atol=atol)
        if not torch.equal(before.nan_to_num(), w.nan_to_num()):
            raise CheckFailed(f"{what}: your function modified the weights")
        check_shape(got, tuple(w.shape[:-1]), what=f"result for {what}")
        got = torch.as_tensor(got)
        if got.dtype != torch.bool:
            raise CheckFailed(f"{what}: expected a boolean tensor, got dtype {got.dtype}")
        finite = torch.isfinite(w).all(-1)
        clean = w.nan_to_num(0.0, 0.0, 0.0)
        expected = ~(finite & ((clean.sum(-1) - 1).abs() <= atol) & (clean.amin(-1) >= 0))
        if not torch.equal(got, expected):
            idx = tuple(int(i) for i in (got != expected).nonzero()[0])
            raise CheckFailed(f"{what}: row {idx} (sum {w[idx].sum().item():.6g}, smallest entry "
                              f"{w[idx].min().item():.4g}) should be flagged {bool(expected[idx])}, "
                              f"got {bool(got[idx])}")
    return f"{len(cases)} cases (wrong softmax axis, NaN, zero rows, negative weights, tolerance)"


@exercise_check(may_return_none=True)
def check_first_divergence(first_divergence: Callable) -> str:
    """``first_divergence(config, state_a, state_b, input_ids, atol)`` -> the name of the first
    submodule (in the order submodules finish) whose output differs between
    ``fundamentallm.Transformer(TransformerConfig(**config))`` loaded with ``state_a`` and with
    ``state_b``, or None. Only data crosses: a dict of config values, two state dicts of tensors."""
    from ..config import TransformerConfig
    from ..model import Transformer

    config = dict(vocab_size=20, d_model=16, num_heads=2, num_layers=2, max_seq_len=8)
    with torch.random.fork_rng():  # the model's initialisation leaves the global RNG alone
        torch.manual_seed(13)
        base = {k: v.clone() for k, v in Transformer(TransformerConfig(**config)).state_dict().items()}
    ids = torch.randint(0, 20, (2, 8), generator=_ch13_rng(3))

    def changed(param: str, delta: float = 0.05, constant: bool = False) -> dict:
        state = {k: v.clone() for k, v in base.items()}
        state[param] += delta if constant else delta * torch.randn(state[param].shape, generator=_ch13_rng(4))
        return state

    cases = [("identical weights", base, None),
             ("block 1's feed-forward up-projection changed", changed("blocks.1.ff.up.weight"),
              "blocks.1.ff.up"),
             ("block 0's attention output projection changed",
              changed("blocks.0.attn.out_proj.bias"), "blocks.0.attn.out_proj"),
             ("the learned positions changed", changed("pos_encoding.weight"), "pos_encoding"),
             ("the final norm's gain changed", changed("norm_f.weight"), "norm_f"),
             ("block 0's first norm shifted by about 3e-5 (above atol=1e-5)",
              changed("blocks.0.norm1.bias", 3e-5), "blocks.0.norm1"),
             ("block 1's second norm changed by 1e-7 (below atol)",
              changed("blocks.1.norm2.bias", 1e-7), None),
             ("a weight changed in a way no output can see (a constant added to a matrix that "
              "reads a zero-mean LayerNorm output): compare outputs, not parameters",
              changed("blocks.1.ff.up.weight", 0.05, constant=True), None)]
    for what, other, expected in cases:
        with torch.random.fork_rng():  # building the models draws from the global RNG
            got = first_divergence(dict(config), {k: v.clone() for k, v in base.items()},
                                   {k: v.clone() for k, v in other.items()}, ids.clone(), atol=1e-5)
        if got != expected:
            raise CheckFailed(f"{what}: expected {expected!r}, got {got!r}")
    return f"{len(cases)} pairs of weights: the first differing submodule found each time"


@exercise_check
def check_scrambled_tokens(scrambled_tokens: Callable, predicted_row: Any) -> str:
    """``scrambled_tokens(T, C, H)`` -> ``(H, T, C // H)`` int tensor: entry ``[h, t, d]`` is the token
    whose channel lands at head ``h``, row ``t``, channel ``d`` of the buggy ``x.reshape(B, H, T, D)``
    of a ``(B, T, C)`` tensor ``x``. ``predicted_row``: the tokens whose channels row t = 1 of head 1
    holds for T = 4, C = 8, H = 2 (a sorted list of distinct ints), predicted before measuring."""
    require_prediction(predicted_row, "predicted_row", "a sorted list of token indices")
    truth = sorted(set((torch.arange(32).view(4, 8).reshape(2, 4, 4)[1, 1] // 8).tolist()))
    if sorted(set(int_list(predicted_row, "predicted_row"))) != truth:
        raise CheckFailed(f"predicted_row: {sorted(set(predicted_row))} is not what row t = 1 of head 1 "
                          f"holds; the buffer is read in memory order: head 1 starts at flat position "
                          f"T·D = 16, and token i owns positions 8i..8i+7")
    cases = [(3, 4, 2), (4, 8, 2), (5, 6, 3), (16, 64, 4), (2, 2, 2), (6, 12, 1)]
    for T, C, H in cases:
        D = C // H
        expected = torch.arange(T * C).view(1, T, C).reshape(1, H, T, D)[0] // C
        got = scrambled_tokens(T, C, H)
        if got is None:
            raise CheckFailed(f"T={T}, C={C}, H={H}: got None -- return an (H, T, D) tensor of token indices")
        got = torch.as_tensor(got)
        check_shape(got, (H, T, D), f"scrambled_tokens({T}, {C}, {H})")
        if not torch.equal(got.long(), expected):
            bad = (got.long() != expected).nonzero()[0].tolist()
            raise CheckFailed(f"T={T}, C={C}, H={H}: at [h, t, d] = {bad} expected token "
                              f"{int(expected[tuple(bad)])}, got {int(got[tuple(bad)])}")
    return f"{len(cases)} shapes: the token behind every element of the wrong split"
