"""Checks for the exercises of chapter 16: inside the model you trained (hooks, induction heads,
ablation, the logit lens, activation patching)."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from .core import CheckFailed, check_shape, exercise_check, rng
from .predict import choice_answers, int_list, require_prediction

# The exercise asks for the norm written out: torch's and the package's are refused.
# group_norm with one group, batch_norm on the transpose, instance_norm and rms_norm of the centred
# stream are a LayerNorm under another name: refused as well, with torch's other names for each
# (torch.ops.aten.layer_norm ...) and the kernels no public name leads to.
_LAYER_NORMS = tuple(f"torch.ops.aten.{n}" for n in ("_native_batch_norm_legit", "_batch_norm_impl_index", "_fused_rms_norm")
                     if hasattr(torch.ops.aten, n)) + (
    "torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm",
    "torch.nn.functional.rms_norm", "torch.nn.functional.group_norm", "torch.group_norm",
    "torch.native_group_norm", "torch.nn.functional.batch_norm", "torch.batch_norm",
    "torch.native_batch_norm", "torch.nn.functional.instance_norm", "torch.instance_norm",
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


_HEAD_KINDS = ("previous", "induction", "duplicate", "first")


def _planted_head(gen: torch.Generator, kind: str, B: int, S: int) -> torch.Tensor:
    """(B, T, T) pattern of one head on a segment of length S written twice: weight w (0.6..0.95)
    on the head's key, the rest spread by a random causal softmax. An induction head rests on
    position 0 in the first copy, where nothing has repeated yet; a duplicate-token head attends
    to itself there. "other" is the random softmax alone."""
    T = 2 * S
    t = torch.arange(T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    noise = (torch.randn(B, T, T, generator=gen) * 2.0).masked_fill(~causal, float("-inf")).softmax(-1)
    if kind == "other":
        return noise
    if kind == "weak first":  # an "other" head: 0.46..0.49 on position 0 at every query but query 0
        w = 0.46 + 0.03 * torch.rand(B, T, 1, generator=gen)
        rest = (torch.randn(B, T, T, generator=gen) * 2.0).masked_fill(~causal, float("-inf"))
        rest[:, 1:, 0] = float("-inf")  # the rest of the weight goes elsewhere
        first = F.one_hot(torch.zeros_like(t), T).float()
        return torch.cat([first[None, :1].expand(B, 1, T), (w * first + (1 - w) * rest.softmax(-1))[:, 1:]], 1)
    key = {"previous": (t - 1).clamp(min=0), "first": torch.zeros_like(t),
           "induction": torch.where(t >= S, t - S + 1, 0), "duplicate": torch.where(t >= S, t - S, t)}[kind]
    w = 0.6 + 0.35 * torch.rand(B, T, 1, generator=gen)
    return w * F.one_hot(key, T).float() + (1 - w) * noise


@exercise_check
def check_classify_heads(classify_heads: Callable) -> str:
    """``classify_heads(patterns, seg_len)``: one ``(B, H, T, T)`` pattern per layer, recorded on a
    segment written twice -> ``{(layer, head): kind}``, kind the one of previous / induction /
    duplicate / first whose score (mean attention to its key over the batch and the queries where
    it can show) is largest if above 0.5, else "other". The heads are planted with known kinds;
    induction and duplicate-token heads behave otherwise in the first copy, so a score averaged over
    every query names them wrongly; a head with just under half its attention on position 0 is
    "other" (query 0, which has no choice, does not count)."""
    gen = rng(1601)
    # "weak first" rests just under half its attention on position 0: its first-position score is
    # under 0.5 over the queries that can choose (1..T-1) and over 0.5 with query 0 counted, and its
    # largest weight is on position 0 at almost every query (a vote of the argmax names it "first")
    layouts = [(4, [["previous", "other", "first"], ["induction", "duplicate", "weak first"]]),
               (5, [["first", "previous"], ["duplicate", "other"], ["other", "induction"]]),
               (4, [["other", "previous", "duplicate", "induction"]])]
    for S, layout in layouts:
        patterns = [torch.stack([_planted_head(gen, kind, 6, S) for kind in kinds], 1) for kinds in layout]
        expected = {(layer, head): kind if kind in _HEAD_KINDS else "other"
                    for layer, kinds in enumerate(layout) for head, kind in enumerate(kinds)}
        got = classify_heads([p.clone() for p in patterns], S)
        if not isinstance(got, dict):
            raise CheckFailed(f"classify_heads should return a dict {{(layer, head): kind}}, got {type(got).__name__}")
        if set(got) != set(expected):
            raise CheckFailed(f"seg_len={S}, {len(layout)} layer(s) of {len(layout[0])} heads: the keys should be "
                              f"every (layer, head) pair, e.g. (0, 0); got {sorted(got, key=str)[:4]}")
        for where in sorted(expected):
            if got[where] not in (*_HEAD_KINDS, "other"):
                raise CheckFailed(f"head {where}: {got[where]!r} is not one of {[*_HEAD_KINDS, 'other']}")
            if got[where] != expected[where]:
                raise CheckFailed(f"seg_len={S}: head {where} is not {got[where]!r}. For each kind, which queries "
                                  f"can show it, and which key does it attend to there? A head may do something "
                                  f"else in the first copy, where nothing has repeated yet; and a head that fits "
                                  f"no kind well (no score above 0.5) is 'other'")
    return "three models of planted heads (previous, induction, duplicate-token, first-position, other)"


# The edits of a stream the logit lens exercise asks about: the final norm undoes (a) and (b).
LENS_EDITS = {"a": "multiply the whole stream by 10", "b": "add the same number to every channel",
              "c": "add a fixed vector whose channels differ", "d": "multiply one channel by 10"}


def _lens_prediction(lens_unchanged: Any) -> None:
    require_prediction(lens_unchanged, "lens_unchanged", f"a list of letters among {sorted(LENS_EDITS)}")
    if isinstance(lens_unchanged, str) or not isinstance(lens_unchanged, (list, tuple, set, frozenset)):
        raise CheckFailed(f"lens_unchanged should be a list of letters among {sorted(LENS_EDITS)} (e.g. ['c']), "
                          f"got {type(lens_unchanged).__name__} {str(lens_unchanged)[:40]}")
    unknown = [x for x in lens_unchanged if x not in LENS_EDITS]
    if unknown:
        raise CheckFailed(f"lens_unchanged: {unknown} not among the edits {sorted(LENS_EDITS)}")
    if set(lens_unchanged) != {"a", "b"}:
        raise CheckFailed("lens_unchanged: not right. Which of the four edits does the final norm undo before "
                          "the unembedding reads the stream, and which pass through it (eps aside)? Try each "
                          "on a stream with your logit_lens")


@exercise_check(forbidden=_LAYER_NORMS)
def check_logit_lens(logit_lens: Callable, lens_unchanged: Any) -> str:
    """``lens_unchanged``: the edits of :data:`LENS_EDITS` that leave the lens's logits unchanged
    (eps aside): ["a", "b"], the stream's scale and a shift equal in every channel, which the norm
    removes. ``logit_lens(resid, norm_weight, norm_bias, unembed)``: ``(..., C)`` residual stream ->
    ``(..., V)`` logits: the final LayerNorm (eps 1e-5, written out) and the unembedding ``(V, C)``."""
    _lens_prediction(lens_unchanged)
    gen = rng(1602)
    # the last stream varies by about 3e-3 around its mean: its variance (~1e-5) is the size of eps,
    # so eps outside the root, or no eps, gives other logits
    for shape, C, V, scale in (((2, 5), 8, 11, 3.0), ((3, 4, 6), 16, 7, 3.0), ((1,), 4, 3, 3.0),
                               ((4, 3), 12, 5, 3e-3)):
        resid = torch.randn(*shape, C, generator=gen) * scale + scale * torch.randn(C, generator=gen)
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
    return "four residual streams, one whose variance is the size of eps"


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


def _constant_head(model, weights: dict, layer: int, head: int) -> None:
    """Plant a head that writes the same vector whatever the input: its value rows of the fused
    qkv projection set to zero, so every value is the bias and, rows of the pattern summing to 1,
    its ``hook_z`` is that bias at every position of every sequence."""
    attn = model.blocks[layer].attn
    C, D = attn.d_model, attn.head_dim
    rows = slice(2 * C + head * D, 2 * C + (head + 1) * D)
    with torch.no_grad():
        attn.qkv.weight[rows] = 0.0
    weights[f"blocks.{layer}.attn.qkv.weight"] = attn.qkv.weight.detach().clone()


_ABLATION_EFFECTS = ("changes the loss", "leaves the loss unchanged")


@exercise_check
def check_head_ablation(head_ablation: Callable, constant_head: Any) -> str:
    """``constant_head``: the prediction, for a head that writes the same vector whatever the input,
    ``{"zero": ..., "mean": ...}``, each "changes the loss" or "leaves the loss unchanged": zero
    ablation changes it, mean ablation leaves it unchanged (the mean is the vector itself).
    ``head_ablation(config, weights, ids, mode)``: ``(L, H)`` increase of the mean next-token loss
    of ``ids`` when one head's output (``hook_z``) is replaced by zeros (``mode="zero"``) or by its
    mean over the batch and positions of the same run (``mode="mean"``), for every head. Each model
    has one planted head that writes the same vector at every position, which mean ablation must
    leave untouched (a change of 0) and zero ablation does not."""
    guess = choice_answers(constant_head, "constant_head", {"zero": _ABLATION_EFFECTS, "mean": _ABLATION_EFFECTS})
    if guess != {"zero": "changes the loss", "mean": "leaves the loss unchanged"}:
        raise CheckFailed("constant_head: not right. For each kind of ablation, what is put in place of the head's "
                          "output, and how does it differ from what the head wrote before, at every position?")
    for seed in (1603, 1604):
        config, weights, ids, model = _model_case(seed)
        L, H = config["num_layers"], config["num_heads"]
        gen = rng(seed + 20)
        planted = (int(torch.randint(0, L, (1,), generator=gen)), int(torch.randint(0, H, (1,), generator=gen)))
        _constant_head(model, weights, *planted)
        inputs = ids[:, :-1]
        with torch.no_grad():
            base = _loss(model, ids)
            _, cache = model.run_with_cache(inputs, names=lambda n: n.endswith("attn.hook_z"))
        for mode in ("zero", "mean"):
            expected = torch.zeros(L, H)
            for layer in range(L):
                for head in range(H):
                    name = f"blocks.{layer}.attn.hook_z"
                    value = 0.0 if mode == "zero" else cache[name][:, :, head].mean((0, 1))

                    def ablate(z, _name, head=head, value=value):
                        z = z.clone()
                        z[:, :, head] = value
                        return z
                    with model.hooks({name: ablate}), torch.no_grad():
                        expected[layer, head] = _loss(model, ids) - base
            constant = float(expected[planted])
            if (mode == "mean") != (abs(constant) < 1e-5):  # guards the planted head itself
                raise RuntimeError(f"internal: {mode} ablation of the planted head changes the loss by {constant}")
            got = head_ablation(config, {k: v.clone() for k, v in weights.items()}, ids.clone(), mode)
            hint = ("ablate one head of one layer at a time (its slice of hook_z, before out_proj mixes the "
                    "heads), and report the ablated loss minus the clean loss, the loss over every next token")
            if mode == "mean":
                hint = ("replace the head's slice of hook_z by its mean over the batch and the positions of the "
                        "same run, one D-vector per head, and report the loss change; a head whose output is the "
                        "same vector at every position of every sequence must then change the loss by 0")
            _close(got, expected, f"the loss changes of a {L}-layer, {H}-head model, mode={mode!r}", hint,
                   atol=1e-4)
    return "two random models, zero and mean ablation, each with a planted head of constant output"


@exercise_check
def check_patch_activation(patch_activation: Callable, predicted_positions: Any) -> str:
    """``predicted_positions``: where patching ``blocks.0.hook_resid_pre``, ``blocks.1.hook_resid_pre``
    and ``blocks.1.hook_resid_post`` restores the answer best when the token ``B`` an induction head
    must copy (position 6; ``A`` at 5 and 11, the query at 11) is corrupted: [6, 6, 11] (the value
    sits at B's position from the start; changing ``A`` instead gives [5, 6, 11]).
    ``patch_activation(config, weights, clean_ids, corrupt_ids, name, pos)``: the logits of the
    corrupted run with the activation ``name`` at position ``pos`` taken from the clean run."""
    require_prediction(predicted_positions, "predicted_positions", "a list of three positions")
    guess = int_list(predicted_positions, "predicted_positions")
    if len(guess) != 3:
        raise CheckFailed(f"predicted_positions should hold three positions (entering layer 0, entering "
                          f"layer 1, after layer 1), got {len(guess)}")
    if guess != [6, 6, 11]:
        raise CheckFailed("predicted_positions: not right. What is the corrupted token to the induction head: "
                          "the token it matches on, or the token it copies? Where does that information sit "
                          "before layer 0, before layer 1 (what did layer 0 move, and what did it leave in "
                          "place?), and after layer 1?")
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


@exercise_check
def check_logit_attribution(logit_attribution: Callable) -> str:
    """``logit_attribution(components, norm_weight, norm_bias, unembed, targets)``: ``(N, B, C)``
    terms summing to the final stream -> ``(N, B)``, each term's share of the target's logit with
    the final LayerNorm's scale frozen at the whole stream's: ``U_y · (w ⊙ (c_i - mean(c_i))) / σ(x)``.
    The shares add up to the logit minus ``U_y · b``, the norm's bias, which belongs to no term."""
    gen = rng(1607)
    # the last case's stream varies by about 3e-3 around its mean: its variance is the size of eps,
    # so a scale without eps, or with eps outside the root, splits the logit otherwise
    for N, B, C, V, scale in ((5, 7, 16, 11, 1.0), (3, 4, 8, 5, 1.0), (6, 2, 12, 9, 1.0), (4, 3, 10, 6, 1e-3)):
        components = torch.randn(N, B, C, generator=gen, dtype=torch.float64) * (1 + torch.arange(N)[:, None, None])
        components += torch.randn(N, 1, C, generator=gen, dtype=torch.float64)  # each term its own mean
        components *= scale
        components[-1] = 2.5  # a bias-like term, the same in every channel: the norm removes it
        weight = 1 + 0.5 * torch.randn(C, generator=gen, dtype=torch.float64)
        bias = torch.randn(C, generator=gen, dtype=torch.float64)
        unembed = torch.randn(V, C, generator=gen, dtype=torch.float64)
        targets = torch.randint(0, V, (B,), generator=gen)
        x = components.sum(0)
        sigma = (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()  # (B, 1): the whole stream's
        direction = unembed[targets] * weight  # (B, C)
        expected = (((components - components.mean(-1, keepdim=True)) / sigma) * direction).sum(-1)
        logits = F.layer_norm(x, (C,), weight, bias, 1e-5) @ unembed.T
        target_logit = logits.gather(-1, targets[:, None])[:, 0]
        left = (unembed[targets] * bias).sum(-1)
        if not torch.allclose(expected.sum(0) + left, target_logit, atol=1e-9):  # guards the reference
            raise RuntimeError("internal: the shares do not add up to the logit")
        got = logit_attribution(components.clone(), weight.clone(), bias.clone(), unembed.clone(), targets.clone())
        what = f"the shares of {N} terms at {B} positions"
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what} should be a torch.Tensor, got {type(got).__name__}")
        check_shape(got, (N, B), what)
        got = got.detach().double()
        if not bool(torch.isfinite(got).all()):
            raise CheckFailed(f"{what} hold NaN or infinity: every entry is a finite number")
        total = got.sum(0) + left
        if torch.allclose(got.sum(0), target_logit, atol=1e-6, rtol=1e-6) and left.abs().max() > 1e-3:
            raise CheckFailed(f"{what} add up to the whole logit: one part of it belongs to no term (which "
                              f"part of the norm acts whatever the stream holds?), and the shares should add "
                              f"up to the logit without it")
        if not torch.allclose(total, target_logit, atol=1e-6, rtol=1e-6):
            raise CheckFailed(f"{what} do not add up: with the norm's bias term added they should give the "
                              f"target's logit, and they miss it by up to {(total - target_logit).abs().max():.3g}. "
                              f"The mean is linear, so each term can be centred on its own; the scale is one "
                              f"number per position, the whole stream's standard deviation with eps inside the root, or "
                              f"the shares cannot add up to the logit the norm gives")
        if not torch.allclose(got, expected, atol=1e-6, rtol=1e-6):
            raise CheckFailed(f"{what} add up to the logit but are split wrongly among the terms: a term the "
                              f"same in every channel is removed by the centring (its share is 0), and the "
                              f"norm's bias belongs to no term")
    return "four sets of terms, one whose stream's variance is the size of eps: each share right, and the shares add up to the logit"
