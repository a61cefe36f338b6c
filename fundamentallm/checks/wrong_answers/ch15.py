"""Chapter 15's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch15`
must reject, run live by ``python -m fundamentallm.course catches --chapter 15`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

_MASK = """
def _reference(ids, assistant_id, end_id):
    opened = (ids == assistant_id).long().cumsum(1)[:, :-1]
    closed = (ids == end_id).long().cumsum(1)[:, :-1]
    return (opened > closed).float()
"""

wrong_answer("check_assistant_mask", "mistake", "trains only on the first assistant turn", _MASK + """
def assistant_mask(ids, assistant_id, end_id):
    m = _reference(ids, assistant_id, end_id)
    for b in range(ids.shape[0]):
        ends = (ids[b, 1:] == end_id).nonzero()
        if len(ends):
            m[b, int(ends[0]) + 1:] = 0
    return m
""", call="assistant_mask", message=r"marks the targets from the token after each assistant marker")

wrong_answer("check_assistant_mask", "mistake", "leaves the end token out (the model never learns to stop)", _MASK + """
def assistant_mask(ids, assistant_id, end_id):
    return _reference(ids, assistant_id, end_id) * (ids[:, 1:] != end_id).float()
""", call="assistant_mask", message=r"through its end token")

wrong_answer("check_assistant_mask", "mistake", "masks positions, not targets (off by one)", _MASK + """
def assistant_mask(ids, assistant_id, end_id):
    full = torch.cat([_reference(ids, assistant_id, end_id), torch.zeros(ids.shape[0], 1)], 1)
    return full[:, 1:]
""", call="assistant_mask", message=r"should be")

wrong_answer("check_assistant_mask", "edge", "overwrites the padding in ids to compute the mask", _MASK + """
def assistant_mask(ids, assistant_id, end_id):
    out = _reference(ids, assistant_id, end_id)
    ids[:, -1] = end_id
    return out
""", call="assistant_mask", message=r"changed ids|in place")

wrong_answer("check_lora_trainable", "mistake", "counts rank * rank per matrix", """
def lora_trainable(shapes, rank):
    return sum(rank * rank for _ in shapes)
""", call="lora_trainable", message=r"A is \(rank, in_features\)")

wrong_answer("check_lora_trainable", "mistake", "counts the frozen matrices instead", """
def lora_trainable(shapes, rank):
    return sum(o * i for o, i in shapes)
""", call="lora_trainable", message=r"expected")

wrong_answer("check_lora_trainable", "edge", "only the first layer's adapters", """
def lora_trainable(shapes, rank):
    o, i = shapes[0]
    return rank * (o + i)
""", call="lora_trainable", message=r"expected")

wrong_answer("check_dpo_gradients", "mistake", "signs swapped (raises the rejected answer)", """
def dpo_gradients(beta, margin):
    s = torch.sigmoid(-margin)
    return beta * s, -beta * s
""", call="dpo_gradients", message=r"rethink how the margin depends")

wrong_answer("check_dpo_gradients", "mistake", "forgets beta (the chain rule through the implicit reward)", """
def dpo_gradients(beta, margin):
    s = torch.sigmoid(-margin)
    return -s, s
""", call="dpo_gradients", message=r"and on beta")

wrong_answer("check_dpo_gradients", "edge", "the first step's value for every margin (-beta/2, beta/2)", """
def dpo_gradients(beta, margin):
    half = torch.full_like(margin, beta / 2)
    return -half, half
""", call="dpo_gradients", message=r"as the margin grows")

wrong_answer("check_dpo_gradients", "edge", "sigmoid(margin) instead of sigmoid(-margin)", """
def dpo_gradients(beta, margin):
    s = torch.sigmoid(margin)
    return -beta * s, beta * s
""", call="dpo_gradients", message=r"derivative of -log sigmoid")

wrong_answer("check_dpo_gradients", "method", "autograd through the DPO loss", """
def dpo_gradients(beta, margin):
    chosen = (margin / beta).clone().requires_grad_(True)
    rejected = torch.zeros_like(margin, requires_grad=True)
    loss = -torch.nn.functional.logsigmoid(beta * (chosen - rejected)).sum()
    loss.backward()
    return chosen.grad, rejected.grad
""", call="dpo_gradients", message=r"asks you not to use")

wrong_answer("check_group_advantages", "mistake", "the population std (no Bessel correction)", """
def group_advantages(rewards, group):
    out = torch.empty_like(rewards)
    for g in group.unique():
        r = rewards[group == g]
        out[group == g] = (r - r.mean()) / (r.std(unbiased=False) + 1e-4)
    return out
""", call="group_advantages", message=r"which standard deviation")

wrong_answer("check_group_advantages", "mistake", "one baseline for the whole batch, not per prompt", """
def group_advantages(rewards, group):
    return (rewards - rewards.mean()) / (rewards.std() + 1e-4)
""", call="group_advantages", message=r"which answers you average over")

wrong_answer("check_group_advantages", "edge", "no epsilon: 0/0 for a group that all agrees", """
def group_advantages(rewards, group):
    out = torch.empty_like(rewards)
    for g in group.unique():
        r = rewards[group == g]
        out[group == g] = (r - r.mean()) / r.std()
    return out
""", call="group_advantages", message=r"not finite")

wrong_answer("check_group_advantages", "edge", "assumes groups are contiguous and of equal size", """
def group_advantages(rewards, group):
    n = len(group.unique())
    r = rewards.reshape(n, -1)
    return ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()
""", call="group_advantages", message=r".")

wrong_answer("check_group_advantages", "method", "the package's group_advantages, one group at a time", """
from fundamentallm.posttrain import group_advantages as normalise
def group_advantages(rewards, group):
    out = torch.empty_like(rewards)
    for g in group.unique():
        out[group == g] = normalise(rewards[group == g][None])[0]
    return out
""", call="group_advantages", message=r"asks you not to use")

wrong_answer("check_clip_stops_gradient", "mistake", "clips on both sides whatever the advantage's sign", """
def clip_stops_gradient(ratio, advantage, clip_eps):
    return (ratio > 1 + clip_eps) | (ratio < 1 - clip_eps)
""", call="clip_stops_gradient", message=r"which branch does the min pick")

wrong_answer("check_clip_stops_gradient", "edge", "forgets that A = 0 has no gradient anywhere", """
def clip_stops_gradient(ratio, advantage, clip_eps):
    return ((advantage > 0) & (ratio > 1 + clip_eps)) | ((advantage < 0) & (ratio < 1 - clip_eps))
""", call="clip_stops_gradient", message=r"wrong there")

wrong_answer("check_clip_stops_gradient", "mistake", "the sides swapped", """
def clip_stops_gradient(ratio, advantage, clip_eps):
    return (((advantage > 0) & (ratio < 1 - clip_eps)) | ((advantage < 0) & (ratio > 1 + clip_eps))
            | (advantage == 0))
""", call="clip_stops_gradient", message=r"wrong there")

wrong_answer("check_clip_stops_gradient", "method", "asks autograd where the gradient is zero", """
def clip_stops_gradient(ratio, advantage, clip_eps):
    x = ratio.clone().requires_grad_(True)
    torch.min(x * advantage, x.clamp(1 - clip_eps, 1 + clip_eps) * advantage).sum().backward()
    return x.grad == 0
""", call="clip_stops_gradient", message=r"asks you not to use")

wrong_answer("check_clip_stops_gradient", "method", "a central finite difference of the objective", """
def clip_stops_gradient(ratio, advantage, clip_eps, h=1e-3):
    f = lambda x: torch.min(x * advantage, x.clamp(1 - clip_eps, 1 + clip_eps) * advantage)
    return (f(ratio + h) - f(ratio - h)) / (2 * h) == 0
""", call="clip_stops_gradient", message=r"asks you not to use")

wrong_answer("check_assistant_mask", "value", "a boolean mask where the statement asks for a float one", _MASK + """
def assistant_mask(ids, assistant_id, end_id):
    return _reference(ids, assistant_id, end_id).bool()
""", call="assistant_mask", message=r"expected a float mask")

wrong_answer("check_dpo_gradients", "method", "forward-mode autograd (torch.autograd.forward_ad)", """
import torch.autograd.forward_ad as fwAD
def dpo_gradients(beta, margin):
    out = []
    for sign in (1.0, -1.0):
        with fwAD.dual_level():
            x = fwAD.make_dual(torch.zeros_like(margin), torch.ones_like(margin))
            loss = -torch.nn.functional.logsigmoid(margin + sign * beta * x)
            out.append(fwAD.unpack_dual(loss).tangent)
    return tuple(out)
""", call="dpo_gradients", message=r"asks you not to use")

wrong_answer("check_dpo_gradients", "method", "torch.func.grad of the loss, one margin at a time", """
def dpo_gradients(beta, margin):
    f = lambda lw, ll, m: -torch.nn.functional.logsigmoid(m + beta * (lw - ll))
    z = torch.tensor(0.0)
    dw = torch.stack([torch.func.grad(f, argnums=0)(z, z, m) for m in margin])
    dl = torch.stack([torch.func.grad(f, argnums=1)(z, z, m) for m in margin])
    return dw, dl
""", call="dpo_gradients", message=r"asks you not to use")

wrong_answer("check_dpo_gradients", "method", "a float64 central finite difference of -logsigmoid", """
def dpo_gradients(beta, margin, h=1e-5):
    m = margin.double()
    loss = lambda x: -torch.nn.functional.logsigmoid(x)
    d = (loss(m + beta * h) - loss(m - beta * h)) / (2 * h)
    return d.float(), -d.float()
""", call="dpo_gradients", message=r"asks you not to use")

wrong_answer("check_dpo_gradients", "method", "a finite difference through the package's dpo_loss", """
from fundamentallm import posttrain
def dpo_gradients(beta, margin, h=1e-5):
    m, z = margin.double(), torch.zeros_like(margin, dtype=torch.float64)
    out = []
    for i in range(len(m)):
        loss = lambda lw, ll: posttrain.dpo_loss(lw, ll, z[i:i + 1], z[i:i + 1] + m[i:i + 1] / beta, beta)[0]
        zero = z[i:i + 1]
        out.append(((loss(zero + h, zero) - loss(zero - h, zero)) / (2 * h),
                    (loss(zero, zero + h) - loss(zero, zero - h)) / (2 * h)))
    return torch.stack([a for a, _ in out]).float(), torch.stack([b for _, b in out]).float()
""", call="dpo_gradients", message=r"asks you not to use")

wrong_answer("check_dpo_gradients", "method", "a float64 finite difference with math.log, element by element", """
def dpo_gradients(beta, margin, h=1e-6):
    loss = lambda x: math.log(1 + math.exp(-x)) if x > -30 else -x
    d = torch.tensor([(loss(float(m) + beta * h) - loss(float(m) - beta * h)) / (2 * h) for m in margin])
    return d, -d
""", call="dpo_gradients", message=r"asks you not to use")

wrong_answer("check_clip_stops_gradient", "method", "forward-mode autograd (torch.func.jacfwd)", """
def clip_stops_gradient(ratio, advantage, clip_eps):
    f = lambda x: torch.min(x * advantage, x.clamp(1 - clip_eps, 1 + clip_eps) * advantage).sum()
    return torch.func.jacfwd(f)(ratio) == 0
""", call="clip_stops_gradient", message=r"asks you not to use")

wrong_answer("check_clip_stops_gradient", "method", "a float64 central finite difference, h = 1e-9", """
def clip_stops_gradient(ratio, advantage, clip_eps, h=1e-9):
    r, a = ratio.double(), advantage.double()
    f = lambda x: torch.minimum(x * a, torch.clip(x, 1 - clip_eps, 1 + clip_eps) * a)
    return ((f(r + h) - f(r - h)) / (2 * h)).abs() < 1e-3
""", call="clip_stops_gradient", message=r"asks you not to use")

wrong_answer("check_clip_stops_gradient", "method", "a one-sided finite difference with Python's min and max", """
def clip_stops_gradient(ratio, advantage, clip_eps, h=1e-9):
    def f(x, a):
        return min(x * a, max(1 - clip_eps, min(x, 1 + clip_eps)) * a)
    flat = [abs(f(float(r) + h, float(a)) - f(float(r), float(a))) < 1e-3 * h
            for r, a in zip(ratio.flatten(), advantage.flatten())]
    return torch.tensor(flat).reshape(ratio.shape)
""", call="clip_stops_gradient", message=r"asks you not to use")

wrong_answer("check_clip_stops_gradient", "method", "a float64 central finite difference of the objective "
             "written with torch.where (no min or clamp), h = 1e-9", """
def clip_stops_gradient(ratio, advantage, clip_eps, h=1e-9):
    r, a = ratio.double(), advantage.double()
    def f(x):
        c = torch.where(x > 1 + clip_eps, 1 + clip_eps, torch.where(x < 1 - clip_eps, 1 - clip_eps, x))
        u, v = x * a, c * a
        return torch.where(u < v, u, v)
    return ((f(r + h) - f(r - h)) / (2 * h)).abs() < 1e-3
""", call="clip_stops_gradient", message=r"one ulp from the clip's edges")

wrong_answer("check_clip_stops_gradient", "method", "the same finite difference in exact rational arithmetic "
             "(fractions.Fraction), step 1e-30", """
from fractions import Fraction
def clip_stops_gradient(ratio, advantage, clip_eps):
    lo, hi, h = 1 - Fraction(clip_eps), 1 + Fraction(clip_eps), Fraction(1, 10 ** 30)
    def f(x, a):
        c = hi if x > hi else (lo if x < lo else x)
        return x * a if x * a < c * a else c * a
    flat = [f(Fraction(float(r)) + h, Fraction(float(a))) == f(Fraction(float(r)) - h, Fraction(float(a)))
            for r, a in zip(ratio.flatten(), advantage.flatten())]
    return torch.tensor(flat).reshape(ratio.shape)
""", call="clip_stops_gradient", message=r"fractions|exact")

wrong_answer("check_clip_stops_gradient", "method", "a difference quotient that calls the gradient zero where the "
             "objective is flat on either side (torch.where, no min or clamp), h = 1e-9", """
def clip_stops_gradient(ratio, advantage, clip_eps, h=1e-9):
    r, a = ratio.double(), advantage.double()
    def f(x):
        c = torch.where(x > 1 + clip_eps, 1 + clip_eps, torch.where(x < 1 - clip_eps, 1 - clip_eps, x))
        return torch.where(x * a < c * a, x * a, c * a)
    return ((f(r + h) - f(r)) == 0) | ((f(r) - f(r - h)) == 0)
""", call="clip_stops_gradient", message=r"1e20-fold")

wrong_answer("check_clip_stops_gradient", "method", "the same one-sided differences through NumPy's minimum and clip", """
def clip_stops_gradient(ratio, advantage, clip_eps, h=1e-9):
    r, a = ratio.double().numpy(), advantage.double().numpy()
    f = lambda x: np.minimum(x * a, np.clip(x, 1 - clip_eps, 1 + clip_eps) * a)
    return torch.from_numpy(((f(r + h) - f(r)) == 0) | ((f(r) - f(r - h)) == 0))
""", call="clip_stops_gradient", message=r"1e20-fold")

wrong_answer("check_clip_stops_gradient", "method", "one-sided differences with the min written as v - relu(v - u) "
             "and the clip as hardtanh", """
def clip_stops_gradient(ratio, advantage, clip_eps, h=1e-9):
    r, a = ratio.double(), advantage.double()
    def f(x):
        u, v = x * a, F.hardtanh(x, 1 - clip_eps, 1 + clip_eps) * a
        return v - torch.relu(v - u)
    return ((f(r + h) - f(r)) == 0) | ((f(r) - f(r - h)) == 0)
""", call="clip_stops_gradient", message=r"1e20-fold")

wrong_answer("check_clip_stops_gradient", "method", "one-sided differences with a step relative to the ratio, "
             "h = 1e-9 max(1, |ratio|)", """
def clip_stops_gradient(ratio, advantage, clip_eps):
    r, a = ratio.double(), advantage.double()
    h = 1e-9 * torch.where(r.abs() > 1, r.abs(), torch.ones_like(r))
    def f(x):
        c = torch.where(x > 1 + clip_eps, 1 + clip_eps, torch.where(x < 1 - clip_eps, 1 - clip_eps, x))
        return torch.where(x * a < c * a, x * a, c * a)
    return ((f(r + h) - f(r)) == 0) | ((f(r) - f(r - h)) == 0)
""", call="clip_stops_gradient", message=r"1e-320")

wrong_answer("check_dpo_gradients", "method", "a central finite difference of the loss through NumPy's logaddexp, "
             "h = 1e-5", """
def dpo_gradients(beta, margin, h=1e-5):
    m = margin.double().numpy()
    loss = lambda x: np.logaddexp(0.0, -x)
    d = torch.from_numpy((loss(m + beta * h) - loss(m - beta * h)) / (2 * h)).to(margin.dtype)
    return d, -d
""", call="dpo_gradients", message=r"margins of -1e12")

wrong_answer("check_dpo_gradients", "method", "the same with a step relative to the margin, h = 1e-5 max(1, |m|)", """
def dpo_gradients(beta, margin):
    m = margin.double().numpy()
    h = 1e-5 * np.maximum(1.0, np.abs(m))
    loss = lambda x: np.logaddexp(0.0, -x)
    d = torch.from_numpy((loss(m + beta * h) - loss(m - beta * h)) / (2 * h)).to(margin.dtype)
    return d, -d
""", call="dpo_gradients", message=r"off by up to")

wrong_answer("check_dpo_gradients", "method", "a Richardson-extrapolated difference quotient (fourth order) of the loss", """
def dpo_gradients(beta, margin):
    m = margin.double().numpy()
    h = 1e-3 * np.maximum(1.0, np.abs(m))
    loss = lambda x: np.logaddexp(0.0, -x)
    D = lambda h: (loss(m + beta * h) - loss(m - beta * h)) / (2 * h)
    d = torch.from_numpy((4 * D(h / 2) - D(h)) / 3).to(margin.dtype)
    return d, -d
""", call="dpo_gradients", message=r"off by up to")

wrong_answer("check_dpo_gradients", "method", "a finite difference of the loss written with torch.special.xlogy", """
def dpo_gradients(beta, margin, h=1e-5):
    m = margin.double()
    loss = lambda x: -torch.special.xlogy(torch.ones_like(x), torch.sigmoid(x))
    d = ((loss(m + beta * h) - loss(m - beta * h)) / (2 * h)).to(margin.dtype)
    return d, -d
""", call="dpo_gradients", message=r"not to use torch\.special\.xlogy \(torch\.xlogy under another name\)")

wrong_answer("check_dpo_gradients", "method", "a finite difference of the loss written with torch.special.entr "
             "(-p log p, divided by p)", """
def dpo_gradients(beta, margin, h=1e-5):
    m = margin.double()
    loss = lambda x: torch.special.entr(torch.sigmoid(x)) / torch.sigmoid(x)
    d = ((loss(m + beta * h) - loss(m - beta * h)) / (2 * h)).to(margin.dtype)
    return d, -d
""", call="dpo_gradients", message=r"not to use torch.special.entr")

wrong_answer("check_group_advantages", "mistake", "the 1e-4 under the square root, sqrt(var + 1e-4), not added to the std", """
def group_advantages(rewards, group):
    out = torch.empty_like(rewards)
    for g in group.unique():
        r = rewards[group == g]
        out[group == g] = (r - r.mean()) / torch.sqrt(r.var() + 1e-4)
    return out
""", call="group_advantages", message=r"where the 1e-4 goes")

wrong_answer("check_dpo_gradients", "edge", "sigma(-m) written exp(-m) / (1 + exp(-m)): inf / inf for a pair ranked wrong by a wide margin", """
def dpo_gradients(beta, margin):
    e = torch.exp(-margin)
    return -beta * e / (1 + e), beta * e / (1 + e)
""", call="dpo_gradients", message=r"compute the sigmoid stably")
