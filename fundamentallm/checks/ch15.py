"""Checks for the exercises of chapter 15: from language model to assistant."""

from __future__ import annotations

from typing import Callable

import torch

from .core import CheckFailed, check_shape, exercise_check, rng

# Gradients worked out on paper: autograd in any form is forbidden -- reverse mode
# (torch.autograd.grad, Tensor.backward, torch.autograd.functional), forward mode
# (torch.autograd.forward_ad) and the function transforms of torch.func (torch._functorch). Not
# the whole of torch.autograd: torch.no_grad lives there, and an honest answer may use it.
_AUTOGRAD = ("torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward",
             "torch.autograd.functional", "torch.autograd.forward_ad", "torch._functorch")
# A finite difference needs the function it differentiates; the derivations need only part of it.
# ex3's answer uses a sigmoid, and only the loss needs a log: every log (and the package's loss) is
# refused. ex5's answer uses comparisons, and only the objective needs a min or a clamp.
_DPO_LOSS_PARTS = ("torch.log", "torch.log1p", "torch.log2", "torch.log10", "torch.logaddexp",
                   "torch.logsumexp", "torch.log_softmax", "torch.nn.functional.logsigmoid",
                   "torch.nn.functional.softplus", "torch.nn.functional.binary_cross_entropy_with_logits",
                   "torch.nn.functional.binary_cross_entropy", "torch.nn.functional.cross_entropy",
                   "math.log", "math.log1p", "math.log2", "math.log10",
                   # a log under another name: x log y, the entropy term -x log x, the logit
                   "torch.xlogy", "torch.special.xlog1py", "torch.special.entr", "torch.logit",
                   "fundamentallm.posttrain.dpo_loss")
# NumPy's ufuncs (np.log, np.minimum, np.nextafter) are invisible to the profiler that enforces
# these lists: a finite difference through them is caught by the checks' inputs instead (margins
# and ratios so large that a fixed step is lost in rounding, advantages so small that the
# difference underflows), as is one written with functions no list names.
_CLIP_OBJECTIVE_PARTS = ("torch.min", "torch.minimum", "torch.max", "torch.maximum", "torch.fmin",
                         "torch.fmax", "torch.amin", "torch.amax", "torch.clamp", "torch.clip",
                         "torch.clamp_min", "torch.clamp_max", "builtins.min", "builtins.max",
                         "fundamentallm.posttrain.grpo_loss",
                         # a difference quotient whose step is one unit in the last place
                         "torch.nextafter", "numpy.nextafter", "numpy.spacing", "math.nextafter", "math.ulp")

def _ch15_rng(seed: int) -> torch.Generator:
    return rng(1500 + seed)


def _ch15_chat_rows(gen: torch.Generator, A: int, E: int, U: int) -> list[list[int]]:
    """Random chat sequences (ids 20..29 are text): one to three turns, some right-padded with 0."""
    rows = []
    for _ in range(5):
        row = []
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            q = torch.randint(20, 30, (int(torch.randint(1, 4, (1,), generator=gen)),), generator=gen).tolist()
            a = torch.randint(20, 30, (int(torch.randint(0, 3, (1,), generator=gen)),), generator=gen).tolist()
            row += [U, *q, A, *a, E]
        rows.append(row)
    return rows


def _ch15_reference_mask(ids: torch.Tensor, A: int, E: int) -> torch.Tensor:
    mask = torch.zeros(ids.shape[0], ids.shape[1] - 1)
    for b in range(ids.shape[0]):
        inside = False
        for t in range(ids.shape[1] - 1):
            tok = int(ids[b, t + 1])
            if int(ids[b, t]) == A:
                inside = True
            mask[b, t] = float(inside)
            if tok == E:
                inside = False
    return mask


@exercise_check
def check_assistant_mask(assistant_mask: Callable) -> str:
    """``assistant_mask(ids, assistant_id, end_id)``: ``(B, T)`` ids -> ``(B, T-1)`` float mask,
    1 where the target ``ids[:, t+1]`` is an assistant token (after an assistant marker, up to and
    including the end token), in every turn; padding and user turns 0."""
    gen = _ch15_rng(0)
    cases = []
    for A, E, U in ((1, 2, 0), (7, 9, 8)):  # the markers need not be small ids
        rows = _ch15_chat_rows(gen, A, E, U)
        T = max(len(r) for r in rows) + 2
        pad = 0 if U != 0 else 15
        ids = torch.tensor([r + [pad] * (T - len(r)) for r in rows])
        cases.append((f"{len(rows)} chats with assistant_id={A}, end_id={E}", ids, A, E))
    ids = torch.tensor([[8, 3, 7, 4, 5, 9, 8, 6, 7, 9]])
    cases.append(("one chat whose second answer is empty (only the end token)", ids, 7, 9))
    for what, ids, A, E in cases:
        before = ids.clone()
        got = assistant_mask(ids, A, E)
        if not torch.equal(ids, before):
            raise CheckFailed(f"{what}: assistant_mask changed ids; return a new tensor")
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what}: expected a tensor, got {type(got).__name__}")
        check_shape(got, (ids.shape[0], ids.shape[1] - 1), what=f"mask for {what}")
        if not got.is_floating_point():
            raise CheckFailed(f"{what}: expected a float mask (0.0 and 1.0, multiplied into the loss), "
                              f"got dtype {got.dtype}")
        expected = _ch15_reference_mask(ids, A, E)
        if not torch.equal(got.float(), expected):
            b, t = (int(v) for v in (got.float() != expected).nonzero()[0])
            raise CheckFailed(f"{what}: row {b}, position {t} (target token {int(ids[b, t + 1])}, after "
                              f"{int(ids[b, t])}) should be {int(expected[b, t])}; the mask marks the "
                              f"targets from the token after each assistant marker through its end token")
    return f"{len(cases)} batches, multi-turn chats and padding included"


@exercise_check
def check_lora_trainable(lora_trainable: Callable) -> str:
    """``lora_trainable(shapes, rank)``: the trainable numbers of rank-``rank`` adapters on linear
    layers of weight shapes ``(out_features, in_features)``."""
    gen = _ch15_rng(1)
    cases = [([(384, 128), (128, 128)], 4), ([(64, 32)], 1), ([(3072, 768)] * 12, 8)]
    cases.append(([tuple(torch.randint(1, 500, (2,), generator=gen).tolist()) for _ in range(5)], 3))
    for shapes, rank in cases:
        got = lora_trainable(shapes, rank)
        expected = sum(rank * (o + i) for o, i in shapes)
        if not isinstance(got, (int, float)) or isinstance(got, bool) or got != expected:
            raise CheckFailed(f"shapes={shapes[:3]}{'...' if len(shapes) > 3 else ''}, rank={rank}: expected "
                              f"{expected}, got {got!r}; A is (rank, in_features) and B (out_features, rank)")
    return f"{len(cases)} sets of layers"


@exercise_check(forbidden=_AUTOGRAD + _DPO_LOSS_PARTS, by_hand=True)
def check_dpo_gradients(dpo_gradients: Callable) -> str:
    """``dpo_gradients(beta, margin)``: for pairs with margins ``margin`` (``(B,)``, the implicit
    reward difference r_w - r_l), the derivatives of each pair's DPO loss with respect to
    ``log pi_theta(y_w|x)`` and ``log pi_theta(y_l|x)``. Worked out on paper: autograd, and the
    logs that only the loss itself needs (a finite difference), are refused."""
    gen = _ch15_rng(2)
    cases = [("the first step (every margin 0), beta=0.5", 0.5, torch.zeros(4)),
             ("margins from -3 to 3, beta=0.1", 0.1, torch.linspace(-3, 3, 7)),
             ("random margins, a random beta", float(torch.rand(1, generator=gen)) * 2 + 0.05,
              torch.randn(6, generator=gen) * 4),
             ("pairs ranked right or wrong by a wide margin, beta=1", 1.0, torch.tensor([-40.0, 40.0, 200.0])),
             # a finite difference with a fixed step loses the step in the margin's rounding here
             ("margins of -1e12 and 1e12, beta=0.2", 0.2, torch.tensor([-1e12, 1e12, -1e9, 1e9, 0.0])),
             # float64: a formula derived on paper is exact to a few units in the last place (about
             # 1e-16 of beta); a difference quotient of the loss, even extrapolated, is off by 1e-13
             # or more
             ("float64 margins from -30 to 30, beta=0.3", 0.3,
              torch.tensor([-30.0, -7.5, -2.0, -0.6, -0.1, 0.0, 0.25, 1.0, 3.3, 9.0, 30.0], dtype=torch.float64))]
    for what, beta, margin in cases:
        got = dpo_gradients(beta, margin.clone())
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            raise CheckFailed(f"{what}: return two tensors, (d_chosen, d_rejected)")
        weight = torch.sigmoid(-margin)
        for name, g, expected in (("d_chosen", got[0], -beta * weight), ("d_rejected", got[1], beta * weight)):
            g = torch.as_tensor(g, dtype=margin.dtype)
            check_shape(g, tuple(margin.shape), what=f"{name} for {what}")
            if not bool(torch.isfinite(g).all()):
                raise CheckFailed(f"{what}: {name} is not finite; for wide margins compute the sigmoid stably")
            if not bool(((g - expected).abs() <= 1e-5 + 1e-4 * expected.abs()).all()):
                raise CheckFailed(f"{what}: {name} is not the derivative of -log sigmoid(margin) with respect to "
                                  f"that log-probability; rethink how the margin depends on it (and on beta), "
                                  f"and how the derivative changes as the margin grows")
            error = float((g - expected).abs().max())
            if margin.dtype == torch.float64 and error > 4e-15 * beta:
                raise CheckFailed(f"{what}: {name} is off by up to {error:.1e}: close, but on float64 margins the "
                                  f"derivative's formula is exact to a few units in the last place (about "
                                  f"{2.2e-16 * beta:.0e} here), and a numerical derivative of the loss is not; "
                                  f"derive the formula and keep the margin's dtype (a float32 number such as "
                                  f"torch.tensor(beta) rounds it)")
    return "every margin and beta, from the first step (policy = reference) to pairs already ranked"


def _ch15_reference_advantages(rewards: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(rewards)
    for g in group.unique():
        sel = group == g
        r = rewards[sel]
        out[sel] = (r - r.mean()) / (r.std() + 1e-4)
    return out


@exercise_check(forbidden=("fundamentallm.posttrain.group_advantages",))
def check_group_advantages(group_advantages: Callable) -> str:
    """``group_advantages(rewards, group)``: ``(M,)`` rewards of answers whose prompt is
    ``group`` (``(M,)`` ids, groups of different sizes, at least 2, in any order) -> ``(M,)``
    advantages, each reward minus its group's mean over its group's sample std plus 1e-4."""
    gen = _ch15_rng(3)
    sizes = [int(v) for v in torch.randint(2, 9, (5,), generator=gen)]
    group = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    group = group[torch.randperm(len(group), generator=gen)]
    cases = [("binary rewards, 5 groups of sizes " + str(sizes) + " shuffled",
              torch.randint(0, 2, (len(group),), generator=gen).float(), group),
             ("real-valued rewards in the same groups", torch.randn(len(group), generator=gen), group),
             ("a group whose answers are all right and one where none is",
              torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0]), torch.tensor([0, 1, 0, 1, 0])),
             ("two groups of 2, ids 3 and 7 (ids need not start at 0)",
              torch.tensor([0.0, 2.0, 1.0, -1.0]), torch.tensor([7, 3, 7, 3]))]
    for what, rewards, grp in cases:
        got = group_advantages(rewards.clone(), grp.clone())
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{what}: expected a tensor, got {type(got).__name__}")
        check_shape(got, tuple(rewards.shape), what=f"advantages for {what}")
        expected = _ch15_reference_advantages(rewards, grp)
        if not bool(torch.isfinite(got).all()):
            raise CheckFailed(f"{what}: some advantages are not finite; what is the std of a group that "
                              f"all agrees, and what does the 1e-4 do?")
        if not torch.allclose(got.float(), expected, atol=1e-5, rtol=1e-5):
            raise CheckFailed(f"{what}: not each reward relative to its own group; check which answers "
                              f"you average over, which standard deviation (sample or population), and where the "
                              f"1e-4 goes")
    return f"{len(cases)} reward tables, shuffled groups of different sizes, groups that all agree included"


@exercise_check(forbidden=_AUTOGRAD + _CLIP_OBJECTIVE_PARTS, by_hand=True)
def check_clip_stops_gradient(clip_stops_gradient: Callable) -> str:
    """``clip_stops_gradient(ratio, advantage, clip_eps)``: boolean, True where the gradient of
    ``min(ratio A, clip(ratio, 1-eps, 1+eps) A)`` with respect to ``ratio`` is zero; worked out on
    paper (autograd, and the min, max and clamp that only the objective needs, are refused),
    compared with autograd, ratios close to the clip's edges included."""
    gen = _ch15_rng(4)
    ratio = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5, 0.5, 0.9, 1.0, 1.1, 1.5, 0.5, 1.5])
    adv = torch.tensor([1.0] * 5 + [-1.0] * 5 + [0.0] * 2)
    r2 = torch.rand(4, 6, generator=gen) * 2
    r2 = torch.where(((r2 - 0.9).abs() < 1e-3) | ((r2 - 1.1).abs() < 1e-3), torch.ones_like(r2), r2)
    near = torch.tensor([1.2 + 2e-6, 1.2 - 2e-6, 0.8 + 2e-6, 0.8 - 2e-6] * 2)  # just inside/outside the clip
    # float64 ratios one unit in the last place from each edge (about 2e-16): the derived rule
    # compares them with the edges exactly, while a difference quotient of the objective straddles
    # the edge for any step it can take (a step below one ulp leaves the ratio unchanged)
    edges = torch.tensor([1.25, 1.25, 0.75, 0.75] * 2, dtype=torch.float64)
    ulp = torch.nextafter(edges, torch.tensor([2.0, 0.0, 2.0, 0.0] * 2, dtype=torch.float64))
    cases = [("ratios 0.5..1.5 with advantages +1, -1 and 0, eps=0.2", ratio, adv, 0.2),
             ("random ratios and advantages, eps=0.1", r2, torch.randn(4, 6, generator=gen), 0.1),
             ("ratios a few millionths from the clip's edges, eps=0.2", near, torch.tensor([1.0] * 4 + [-1.0] * 4), 0.2),
             ("float64 ratios one ulp from the clip's edges, eps=0.25", ulp,
              torch.tensor([2.0] * 4 + [-0.5] * 4, dtype=torch.float64), 0.25),
             # a difference quotient of the objective: a fixed step is lost in the rounding of a huge
             # ratio, and the difference of two tiny products underflows to zero
             ("float64 ratios of 1e20 and 1e-20 (a probability that rose or fell 1e20-fold), eps=0.2",
              torch.tensor([1e20, 1e20, 1e-20, 1e-20], dtype=torch.float64),
              torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64), 0.2),
             ("float64 advantages of +-1e-320 (only the sign of A matters), eps=0.2",
              torch.tensor([0.5, 0.9, 1.1, 1.5] * 2, dtype=torch.float64),
              torch.tensor([1e-320] * 4 + [-1e-320] * 4, dtype=torch.float64), 0.2)]
    for what, r, a, eps in cases:
        got = clip_stops_gradient(r.clone(), a.clone(), eps)
        x = r.clone().requires_grad_(True)
        torch.min(x * a, x.clamp(1 - eps, 1 + eps) * a).sum().backward()
        expected = x.grad == 0
        if not isinstance(got, torch.Tensor) or got.dtype != torch.bool:
            raise CheckFailed(f"{what}: expected a boolean tensor, got "
                              f"{got.dtype if isinstance(got, torch.Tensor) else type(got).__name__}")
        check_shape(got, tuple(r.shape), what=f"mask for {what}")
        if not torch.equal(got, expected):
            i = int((got != expected).flatten().nonzero()[0])
            raise CheckFailed(f"{what}: ratio {float(r.flatten()[i])!r}, advantage {float(a.flatten()[i]):+.3g}: "
                              f"wrong there; for each sign of A, which branch does the min pick on each side of "
                              f"1 - eps and 1 + eps, and does that branch depend on the ratio?")
    return "positive, negative and zero advantages, inside and outside the clip range"
