"""Checks for the exercises of chapter 13: debugging transformers."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from .core import CheckFailed, check_shape, exercise_check, generator_as_told, rng
from .predict import int_list, require_prediction


def _ch13_rng(seed: int) -> torch.Generator:
    return rng(1300 + seed)


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
        ("a loss exactly at the threshold is not above it", [1.0, 1.0, 2.0, 1.0], 2.0, 2, []),
        ("the mean, not the median, of the window", [4.0, 1.0, 1.0, 2.5], 2.0, 3, []),
        ("an earlier spike stays in the later windows' mean", [1.0, 1.0, 5.0, 1.0, 3.0], 2.0, 3, [2]),
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


def _ch13_source(h: int, t: int, d: int, T: int, C: int, H: int) -> int:
    return ((h * T + t) * (C // H) + d) // C


@exercise_check(forbidden=("torch.unravel_index", "numpy.unravel_index", "numpy.ravel_multi_index"))
def check_source_token(source_token: Callable, predicted_row: Any) -> str:
    """``predicted_row``: for T = 4, C = 8, H = 2, the token whose channels each row t = 0..3 of
    head 1 holds (a list of four ints, in row order: [2, 2, 3, 3]; 4^4 possible answers), predicted
    on paper. ``source_token(h, t, d, T, C, H)``
    -> the index of the token whose channel lands at head ``h``, row ``t``, channel ``d`` of the
    buggy ``x.reshape(B, H, T, D)`` of a ``(B, T, C)`` tensor, derived from the memory order:
    checked on every element of small shapes and on sampled elements of shapes whose tensor
    (2^40 elements) no machine holds, so that reshaping an ``arange`` cannot answer it. The check
    refuses ``torch.unravel_index`` and NumPy's ``unravel_index`` and ``ravel_multi_index`` (C
    functions, seen through the Python dispatcher NumPy runs before them)."""
    require_prediction(predicted_row, "predicted_row", "a list of four token indices, one per row")
    truth = [_ch13_source(1, t, 0, 4, 8, 2) for t in range(4)]
    guess = int_list(predicted_row, "predicted_row")
    if len(guess) != 4:
        raise CheckFailed(f"predicted_row should hold one token per row of head 1, four in all, got {len(guess)}")
    if guess != truth:
        raise CheckFailed("predicted_row: not what the rows of head 1 hold; the buffer is read in memory order: "
                          "where does head 1 start, and which flat positions does each token own?")
    for T, C, H in [(3, 4, 2), (4, 8, 2), (5, 6, 3), (16, 64, 4), (2, 2, 2), (6, 12, 1)]:
        D = C // H
        for h in range(H):
            for t in range(T):
                for d in range(D):
                    got = source_token(h, t, d, T, C, H)
                    want = _ch13_source(h, t, d, T, C, H)
                    if isinstance(got, bool) or not isinstance(got, (int, np.integer, torch.Tensor)) \
                            or int(got) != want:
                        raise CheckFailed(f"T={T}, C={C}, H={H}: the token behind [h, t, d] = "
                                          f"[{h}, {t}, {d}] is not {got!r}; find the flat position "
                                          f"of that element, then the token that owns it")
    g = _ch13_rng(5)
    big = [(2 ** 24, 2 ** 16, 2 ** 6), (3 * 2 ** 22, 3 * 2 ** 15, 3 * 2 ** 5)]
    for T, C, H in big:
        D = C // H
        for _ in range(20):
            h, t, d = (int(torch.randint(0, n, (1,), generator=g)) for n in (H, T, D))
            try:
                got = source_token(h, t, d, T, C, H)
            except (MemoryError, RuntimeError) as e:
                raise CheckFailed(f"T={T:,}, C={C:,}, H={H}: your function could not run "
                                  f"({type(e).__name__}): a tensor of T·C = {T * C:.1e} elements fits "
                                  f"in no memory; derive the index from the memory order instead of "
                                  f"building the tensor") from None
            want = _ch13_source(h, t, d, T, C, H)
            if isinstance(got, bool) or not isinstance(got, (int, np.integer, torch.Tensor)) or int(got) != want:
                raise CheckFailed(f"T={T:,}, C={C:,}, H={H}: the token behind [h, t, d] = [{h}, {t}, {d}] "
                                  f"is not {got!r}; find the flat position of that element, then the "
                                  f"token that owns it")
    ahead = [t for t in range(16) if any(int(source_token(h, t, d, 16, 64, 4)) > t
                                         for h in range(4) for d in range(16))]
    return (f"every element of 6 small shapes, and 40 elements of two shapes of 2^40 numbers; with "
            f"T = 16, C = 64, H = 4 your function finds rows {ahead[0]}..{ahead[-1]} "
            f"({len(ahead)} rows) holding a channel of a later token")


def _ch13_config(seed: int) -> dict:
    g = _ch13_rng(seed)
    heads = (2, 4, 8)[int(torch.randint(0, 3, (1,), generator=g))]
    return dict(vocab_size=int(torch.randint(12, 40, (1,), generator=g)), d_model=8 * heads,
                num_heads=heads, num_layers=int(torch.randint(1, 4, (1,), generator=g)),
                max_seq_len=int(torch.randint(6, 13, (1,), generator=g)))


def _ch13_future_leak(model: Callable, ids: torch.Tensor, vocab: int):
    """(t, s) of the first position s < t whose logits move when token t changes, or None."""
    with torch.no_grad():
        base = model(ids)
        for t in range(1, ids.shape[1]):
            changed = ids.clone()
            changed[:, t] = (changed[:, t] + 1) % vocab
            moved = (model(changed) - base)[:, :t].abs().amax(dim=(0, 2))
            if (moved > 1e-6).any():
                return t, int((moved > 1e-6).nonzero()[0])
    return None


@exercise_check(forbidden=("fundamentallm.model.Transformer.forward", "fundamentallm.model.TransformerBlock.forward",
                           "fundamentallm.attention.MultiHeadAttention.forward"))
def check_fixed_model(fixed_model: Callable) -> str:
    """``fixed_model(config)`` -> the colleague's model with its bug fixed, built from a
    ``TransformerConfig``. On fresh sizes and weights: the same parameters (names and shapes) as the
    colleague's model (which has ``fundamentallm.Transformer``'s), no position reads a later token
    (the symptom is gone), and its logits equal a correct decoder's (``fundamentallm.Transformer``)
    with the same weights on fresh inputs (nothing else changed)."""
    from torch import nn

    from ..config import TransformerConfig
    from ..model import Transformer

    for n in range(3):
        config = TransformerConfig(**_ch13_config(n))
        with torch.random.fork_rng():
            torch.manual_seed(int(torch.randint(0, 2 ** 31 - 1, (1,), generator=_ch13_rng(10 + n))))
            reference = Transformer(config).eval()
            fixed = fixed_model(config)
        # through the grader the model stays in the worker: a stand-in that answers calls with data
        remote = getattr(type(fixed), "_student_proxy", False)
        if not remote and not isinstance(fixed, nn.Module):
            raise CheckFailed(f"fixed_model(config) must return the model (an nn.Module), got "
                              f"{type(fixed).__name__}")
        if not remote and isinstance(fixed, Transformer):  # through the grader: a forbidden forward
            raise CheckFailed("fixed_model must return the colleague's model, fixed, not fundamentallm's Transformer")
        fixed.eval()
        # trained-looking weights: away from the small initialisation, where every output is small
        g = _ch13_rng(15 + n)
        state = {k: (v + 0.3 * torch.randn(v.shape, generator=g)).double() for k, v in reference.state_dict().items()}
        reference, fixed = reference.double(), fixed.double()
        reference.load_state_dict(state)
        shapes = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
        yours = fixed.state_dict()
        if not isinstance(yours, dict):
            raise CheckFailed(f"fixed_model(config) must return the model (an nn.Module): its "
                              f"state_dict() gave a {type(yours).__name__}")
        mine = {k: tuple(v.shape) for k, v in yours.items()}
        if mine != shapes:
            extra = sorted(set(mine) ^ set(shapes)) or [k for k in mine if mine[k] != shapes[k]]
            raise CheckFailed(f"your model's parameters differ from the colleague's ({extra[:3]}): a fix "
                              f"should not add, remove, rename or reshape weights")
        fixed.load_state_dict(state)
        what = (f"vocab {config.vocab_size}, d_model {config.d_model}, {config.num_heads} heads, "
                f"{config.num_layers} layer(s), T = {config.max_seq_len}")
        ids = torch.randint(0, config.vocab_size, (3, config.max_seq_len), generator=_ch13_rng(20 + n))
        leak = _ch13_future_leak(fixed, ids, config.vocab_size)
        if leak is not None:
            raise CheckFailed(f"{what}: the logits at position {leak[1]} move when token {leak[0]} "
                              f"changes: your model still reads the future")
        with torch.no_grad():
            got, (want, _) = fixed(ids), reference(ids)
        got = torch.as_tensor(got)
        if got.shape != want.shape or not torch.allclose(got, want, atol=1e-8, rtol=1e-7):
            diff = (got - want).abs().max().item() if got.shape == want.shape else float("nan")
            raise CheckFailed(f"{what}: your model is causal now, but its logits differ from a correct "
                              f"decoder's with the same weights (max |diff| {diff:.3g}): the fix changed "
                              f"something else, or mended the symptom but not its cause")
    return ("3 fresh configurations: same parameters, no leak, logits equal to a correct decoder's "
            "with the same weights")


def _ch13_reference_train(model, data, steps, lr, seed, batch, block):
    from ..data import get_batch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    # the student's loop seeds its own generator with the seed it is given (itself drawn from rng);
    # under the grader rng(seed) would differ from it
    g = generator_as_told(seed)
    losses, norms = [], []
    for _ in range(steps):
        x, y = get_batch(data, batch, block, generator=g)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        norms.append(torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]).norm().item())
        optimizer.step()
        losses.append(loss.item())
    return losses, norms


class _ch13_LogitsOnly(torch.nn.Module):
    """``fundamentallm.Transformer`` returning its logits alone, as the chapter's models do."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids)[0]


@exercise_check(may_return_none=False)
def check_fixed_train(fixed_train: Callable) -> str:
    """``fixed_train(config, weights, data, steps, lr, seed, batch, block)`` -> ``(losses,
    grad_norms, trained_weights)``: the colleague's training loop with its bug fixed, run on the
    model built from data (``Transformer(TransformerConfig(**config))`` with ``weights`` loaded;
    a model travels to the student's function as its configuration and state dict, in a notebook
    and through the grader alike). Run on fresh models and data next to a correct loop with the
    same arguments: the same loss and gradient norm at every step (the symptom is gone) and the
    same weights at the end (nothing else changed)."""
    from ..config import TransformerConfig
    from ..model import Transformer

    for n in range(2):
        config = {**_ch13_config(30 + n), "max_seq_len": 8}
        gd = _ch13_rng(40 + n)
        # data with structure to learn: a noisy repeating pattern
        pattern = torch.randint(0, config["vocab_size"], (7,), generator=gd)
        data = pattern.repeat(60)
        noise = torch.rand(len(data), generator=gd) < 0.2
        data[noise] = torch.randint(0, config["vocab_size"], (int(noise.sum()),), generator=gd)
        with torch.random.fork_rng():
            torch.manual_seed(int(torch.randint(0, 2 ** 31 - 1, (1,), generator=gd)))
            correct = _ch13_LogitsOnly(Transformer(TransformerConfig(**config)))
        weights = {k: v.clone() for k, v in correct.model.state_dict().items()}
        steps, lr, seed = 10, 1e-2, int(torch.randint(0, 1000, (1,), generator=gd))
        with torch.random.fork_rng():
            out = fixed_train(dict(config), {k: v.clone() for k, v in weights.items()}, data.clone(), steps,
                              lr=lr, seed=seed, batch=8, block=8)
        ref_losses, ref_norms = _ch13_reference_train(correct.train(), data, steps, lr, seed, 8, 8)
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise CheckFailed(f"expected (losses, grad_norms, trained_weights), got "
                              f"{type(out).__name__}{f' of {len(out)} items' if isinstance(out, (tuple, list)) else ''}")
        losses, norms = (list(map(float, v)) for v in out[:2])
        if len(losses) != steps or len(norms) != steps:
            raise CheckFailed(f"{steps} steps gave {len(losses)} losses and {len(norms)} gradient norms; "
                              f"record one of each per step")
        for k in range(steps):
            if not (abs(losses[k] - ref_losses[k]) <= 1e-4 * abs(ref_losses[k])):
                raise CheckFailed(f"step {k}: your loop's loss {losses[k]:.4f} differs from a correct "
                                  f"loop's on the same batch ({ref_losses[k]:.4f}): from this step on "
                                  f"the weights (or the batch) are not what they should be"
                                  f"{' (is the model built from config with weights loaded?)' if k == 0 else ''}")
            if not (abs(norms[k] - ref_norms[k]) <= 1e-4 * ref_norms[k] + 1e-8):
                raise CheckFailed(f"step {k}: the gradient norm you record ({norms[k]:.4g}) is not that "
                                  f"of this step's batch at the current weights ({ref_norms[k]:.4g} in a "
                                  f"correct loop)")
        trained, expected = out[2], correct.model.state_dict()
        if not isinstance(trained, dict) or set(trained) != set(expected):
            raise CheckFailed("the third item must be the trained model's state_dict() (the same names as "
                              "the weights you were given)")
        for name, b in expected.items():
            a = torch.as_tensor(trained[name])
            if a.shape != b.shape or not torch.allclose(a.to(b.dtype), b, atol=1e-5, rtol=1e-4):
                raise CheckFailed(f"the losses and gradient norms agree, but after the last step the "
                                  f"weights differ ({name}): the update itself changed (the optimizer, "
                                  f"its settings, or what happens after the last backward), or these are "
                                  f"not the trained weights")
    return "2 fresh models and data sets: every loss, every gradient norm and the final weights agree"
