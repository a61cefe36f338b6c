"""Chapter 9's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch09`
must reject, run live by ``python -m fundamentallm.course catches --chapter 09`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_cross_entropy_grad", "mistake", "the mean over all N rows, ignored ones included", """
def cross_entropy_grad(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    e = torch.exp(logits - logits.amax(-1, keepdim=True))
    g = e / e.sum(-1, keepdim=True)
    g[torch.arange(len(targets))[keep], targets[keep]] -= 1
    g[~keep] = 0
    return g / len(targets)
""", call="cross_entropy_grad", message=r"what is the mean taken over")

wrong_answer("check_cross_entropy_grad", "mistake", "softmax only: forgets what -z_y contributes", """
def cross_entropy_grad(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    e = torch.exp(logits - logits.amax(-1, keepdim=True))
    g = e / e.sum(-1, keepdim=True)
    g[~keep] = 0
    return g / keep.sum()
""", call="cross_entropy_grad", message=r"rows do not sum to zero")

wrong_answer("check_cross_entropy_grad", "mistake", "the negative gradient (the step's direction)", """
def cross_entropy_grad(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    e = torch.exp(logits - logits.amax(-1, keepdim=True))
    g = e / e.sum(-1, keepdim=True)
    g[torch.arange(len(targets))[keep], targets[keep]] -= 1
    g[~keep] = 0
    return -g / keep.sum()
""", call="cross_entropy_grad", message=r"sign is reversed")

wrong_answer("check_cross_entropy_grad", "edge", "exp without subtracting the row max (NaN at logits of 1e4)", """
def cross_entropy_grad(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    e = torch.exp(logits)
    g = e / e.sum(-1, keepdim=True)
    g[torch.arange(len(targets))[keep], targets[keep]] -= 1
    g[~keep] = 0
    return g / keep.sum()
""", call="cross_entropy_grad", message=r"not finite")

wrong_answer("check_cross_entropy_grad", "edge", "ignored rows keep their softmax", """
def cross_entropy_grad(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    e = torch.exp(logits - logits.amax(-1, keepdim=True))
    g = e / e.sum(-1, keepdim=True)
    g[torch.arange(len(targets))[keep], targets[keep]] -= 1
    return g / keep.sum()
""", call="cross_entropy_grad", message=r"ignored targets are not zero")

wrong_answer("check_cross_entropy_grad", "method", "autograd through the loss instead of the formula", """
def cross_entropy_grad(logits, targets, ignore_index=-100):
    z = logits.clone().requires_grad_(True)
    keep = targets != ignore_index
    zk = z[keep]
    m = zk.amax(-1, keepdim=True)
    lse = m[:, 0] + torch.log(torch.exp(zk - m).sum(-1))
    (lse - zk[torch.arange(len(zk)), targets[keep]]).mean().backward()
    return z.grad
""", call="cross_entropy_grad", message=r"not to use torch\.Tensor\.backward")

wrong_answer("check_cross_entropy_grad", "method", "torch's softmax under another name", """
from torch.nn.functional import softmax as probabilities
def cross_entropy_grad(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    g = probabilities(logits, dim=-1)
    g[torch.arange(len(targets))[keep], targets[keep]] -= 1
    g[~keep] = 0
    return g / keep.sum()
""", call="cross_entropy_grad", message=r"not to use torch\.nn\.functional\.softmax \(torch\.softmax under another name\)")

wrong_answer("check_smoothed_loss_floor", "mistake", "zero, the floor of the unsmoothed loss", """
def smoothed_loss_floor(V, eps):
    return 0.0
""", call="smoothed_loss_floor", message=r"not one-hot")

wrong_answer("check_smoothed_loss_floor", "mistake", "spreads eps over the V - 1 wrong classes only", """
def smoothed_loss_floor(V, eps):
    q = [1 - eps] + [eps / (V - 1)] * (V - 1)
    return -sum(x * math.log(x) for x in q if x > 0)
""", call="smoothed_loss_floor", message=r"Every one of the V classes")

wrong_answer("check_smoothed_loss_floor", "mistake", "only the true class's term of the entropy", """
def smoothed_loss_floor(V, eps):
    p = 1 - eps + eps / V
    return -p * math.log(p)
""", call="smoothed_loss_floor", message=r"all V classes contribute")

wrong_answer("check_smoothed_loss_floor", "edge", "0 * log 0 evaluated literally (NaN at eps = 0)", """
def smoothed_loss_floor(V, eps):
    p, r = 1 - eps + eps / V, eps / V
    return float(-p * np.log(p) - (V - 1) * r * np.log(r)) if r > 0 else float("nan")
""", call="smoothed_loss_floor", message=r"limit of x log x")

wrong_answer("check_compute_optimal_size", "mistake", "the best measured run at each budget instead of the parabola's vertex", """
def compute_optimal_size(runs, budget):
    best = {}
    for r in runs:
        C = r["budget"]
        if C not in best or r["val_loss"] < best[C]["val_loss"]:
            best[C] = r
    x = [math.log(C) for C in best]
    y = [math.log(best[C]["n_non_embedding"]) for C in best]
    xm, ym = sum(x) / len(x), sum(y) / len(y)
    a = sum((u - xm) * (v - ym) for u, v in zip(x, y)) / sum((u - xm) ** 2 for u in x)
    return math.exp(ym + a * (math.log(budget) - xm))
""", call="compute_optimal_size", message=r"times the approach-2 value")

wrong_answer("check_compute_optimal_size", "mistake", "a parabola in N, not in ln N", """
def compute_optimal_size(runs, budget):
    groups = {}
    for r in runs:
        groups.setdefault(r["budget"], []).append(r)
    x, y = [], []
    for C, rs in groups.items():
        n = np.array([r["n_non_embedding"] for r in rs], dtype=float)
        loss = np.array([r["val_loss"] for r in rs], dtype=float)
        M = np.stack([n ** 2, n, np.ones_like(n)], 1)
        p, q, _ = np.linalg.solve(M.T @ M, M.T @ loss)
        x.append(math.log(C))
        y.append(math.log(-q / (2 * p)))
    xm, ym = sum(x) / len(x), sum(y) / len(y)
    a = sum((u - xm) * (v - ym) for u, v in zip(x, y)) / sum((u - xm) ** 2 for u in x)
    return math.exp(ym + a * (math.log(budget) - xm))
""", call="compute_optimal_size", message=r"times the approach-2 value|not a positive number")

wrong_answer("check_compute_optimal_size", "mistake", "the line through D_opt = C / (6 N_opt), returned as N", """
def compute_optimal_size(runs, budget):
    groups = {}
    for r in runs:
        groups.setdefault(r["budget"], []).append(r)
    x, y = [], []
    for C, rs in groups.items():
        ln_n = np.log([r["n_non_embedding"] for r in rs])
        loss = np.array([r["val_loss"] for r in rs], dtype=float)
        M = np.stack([ln_n ** 2, ln_n, np.ones_like(ln_n)], 1)
        p, q, _ = np.linalg.solve(M.T @ M, M.T @ loss)
        x.append(math.log(C))
        y.append(math.log(C / (6 * math.exp(-q / (2 * p)))))
    xm, ym = sum(x) / len(x), sum(y) / len(y)
    a = sum((u - xm) * (v - ym) for u, v in zip(x, y)) / sum((u - xm) ** 2 for u in x)
    return math.exp(ym + a * (math.log(budget) - xm))
""", call="compute_optimal_size", message=r"times the approach-2 value")

wrong_answer("check_compute_optimal_size", "mistake", "returns ln N_opt", """
def compute_optimal_size(runs, budget):
    groups = {}
    for r in runs:
        groups.setdefault(r["budget"], []).append(r)
    x, y = [], []
    for C, rs in groups.items():
        ln_n = np.log([r["n_non_embedding"] for r in rs])
        loss = np.array([r["val_loss"] for r in rs], dtype=float)
        M = np.stack([ln_n ** 2, ln_n, np.ones_like(ln_n)], 1)
        p, q, _ = np.linalg.solve(M.T @ M, M.T @ loss)
        x.append(math.log(C))
        y.append(-q / (2 * p))
    xm, ym = sum(x) / len(x), sum(y) / len(y)
    a = sum((u - xm) * (v - ym) for u, v in zip(x, y)) / sum((u - xm) ** 2 for u in x)
    return ym + a * (math.log(budget) - xm)
""", call="compute_optimal_size", message=r"is ln N_opt")

wrong_answer("check_compute_optimal_size", "method", "np.polyfit for the parabolas", """
def compute_optimal_size(runs, budget):
    groups = {}
    for r in runs:
        groups.setdefault(r["budget"], []).append(r)
    x, y = [], []
    for C, rs in groups.items():
        p, q, _ = np.polyfit(np.log([r["n_non_embedding"] for r in rs]), [r["val_loss"] for r in rs], 2)
        x.append(math.log(C))
        y.append(-q / (2 * p))
    a, b = np.polyfit(x, y, 1)
    return math.exp(b + a * math.log(budget))
""", call="compute_optimal_size", message=r"not to use numpy.polyfit")

wrong_answer("check_compute_optimal_size", "method", "the package's fit (fundamentallm.scaling)", """
from fundamentallm import scaling
def compute_optimal_size(runs, budget):
    k, a = scaling.approach2(runs, n_boot=0)["n_opt"]["coef"]
    return k * budget ** a
""", call="compute_optimal_size", message=r"not to use fundamentallm.scaling")

wrong_answer("check_smoothed_loss_floor", "method", "minimises the loss numerically with autograd and Adam", """
def smoothed_loss_floor(V, eps):
    z = torch.zeros(V, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([z], lr=0.1)
    q = torch.full((V,), eps / V, dtype=torch.float64)
    q[0] += 1 - eps
    for _ in range(300):
        loss = -(q * torch.log_softmax(z, -1)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()
""", call="smoothed_loss_floor", message=r"not to use torch")

wrong_answer("check_wsd_lr", "mistake", "warmup off by one (uses step, not step + 1)", """
def wsd_lr(step, max_lr, min_lr, warmup_steps, max_steps, cooldown_steps):
    s = step
    if s <= warmup_steps:
        return max_lr * s / max(warmup_steps, 1)
    start = max(warmup_steps, max_steps - cooldown_steps)
    if cooldown_steps == 0 or s <= start:
        return max_lr
    return max_lr + min(1.0, (s - start) / (max_steps - start)) * (min_lr - max_lr)
""", call="wsd_lr", message=r"at step 0 \(warmup\) expected")

wrong_answer("check_wsd_lr", "mistake", "cools down to 0, not to min_lr", """
def wsd_lr(step, max_lr, min_lr, warmup_steps, max_steps, cooldown_steps):
    s = step + 1
    if s <= warmup_steps:
        return max_lr * s / warmup_steps
    start = max(warmup_steps, max_steps - cooldown_steps)
    if cooldown_steps == 0 or s <= start:
        return max_lr
    return max_lr * (1 - min(1.0, (s - start) / (max_steps - start)))
""", call="wsd_lr", message=r"\(the cooldown\) expected")

wrong_answer("check_wsd_lr", "edge", "returns to max_lr after max_steps", """
def wsd_lr(step, max_lr, min_lr, warmup_steps, max_steps, cooldown_steps):
    s = step + 1
    if s <= warmup_steps:
        return max_lr * s / warmup_steps
    start = max(warmup_steps, max_steps - cooldown_steps)
    if cooldown_steps == 0 or s <= start or s > max_steps:
        return max_lr
    return max_lr + (s - start) / (max_steps - start) * (min_lr - max_lr)
""", call="wsd_lr", message=r"\(after max_steps\) expected")

wrong_answer("check_wsd_lr", "edge", "cooldown_steps = 0 treated as a one-step cooldown", """
def wsd_lr(step, max_lr, min_lr, warmup_steps, max_steps, cooldown_steps):
    s, cooldown_steps = step + 1, max(cooldown_steps, 1)
    if s <= warmup_steps:
        return max_lr * s / warmup_steps
    start = max(warmup_steps, max_steps - cooldown_steps)
    if s <= start:
        return max_lr
    return max_lr + min(1.0, (s - start) / (max_steps - start)) * (min_lr - max_lr)
""", call="wsd_lr", message=r"cooldown_steps=0: at step \d+ \(the stable phase\)")

wrong_answer("check_wsd_lr", "method", "the package's schedule (lr_at), which the exercise forbids", """
from fundamentallm.training import TrainConfig, lr_at as schedule
def wsd_lr(step, max_lr, min_lr, warmup_steps, max_steps, cooldown_steps):
    return schedule(step, TrainConfig(lr=max_lr, min_lr=min_lr, warmup_steps=warmup_steps, max_steps=max_steps,
                                      schedule="wsd", cooldown_fraction=cooldown_steps / max_steps))
""", call="wsd_lr", message=r"not to use fundamentallm.training.lr_at")

wrong_answer("check_adam_first_step", "mistake", "SGD's step: -lr * g", """
predicted_changes = [-1e-3 * g for g in (1e3, 1e-6, 1e-9)]
""", call="predicted_changes", message=r"does not scale with the gradient")

wrong_answer("check_adam_first_step", "mistake", "-lr * sign(g): forgets eps", """
predicted_changes = [-1e-3, -1e-3, -1e-3]
""", call="predicted_changes", message=r"gradient 1e-0[69]: .*eps")

wrong_answer("check_adam_first_step", "mistake", "without bias correction: sqrt(1 - b2) / (1 - b1) too small", """
predicted_changes = [-1e-3 * 0.1 * g / (0.1 * abs(g) * 10 + 1e-8) for g in (1e3, 1e-6, 1e-9)]
""", call="predicted_changes", message=r"bias correction")

wrong_answer("check_adam_first_step", "mistake", "the weights move along the gradient", """
predicted_changes = [1e-3, 1e-3, 1e-4]
""", call="predicted_changes", message=r"sign is wrong")

wrong_answer("check_adam_first_step", "value", "two numbers for three weights", """
predicted_changes = [-1e-3, -1e-3]
""", call="predicted_changes", message=r"a list of 3 numbers")

wrong_answer("check_fit_power_law", "mistake", "returns the slope itself as alpha (the law has N ** -alpha)", """
def fit_power_law(sizes, losses):
    x = [math.log(float(n)) for n in sizes]
    y = [math.log(float(v)) for v in losses]
    xm, ym = sum(x) / len(x), sum(y) / len(y)
    slope = sum((a - xm) * (b - ym) for a, b in zip(x, y)) / sum((a - xm) ** 2 for a in x)
    return math.exp(ym - slope * xm), slope
""", call="fit_power_law", message=r"wrong sign")

wrong_answer("check_fit_power_law", "mistake", "fits the losses themselves, not their logarithm", """
def fit_power_law(sizes, losses):
    x = [math.log(float(n)) for n in sizes]
    y = [float(v) for v in losses]
    xm, ym = sum(x) / len(x), sum(y) / len(y)
    slope = sum((a - xm) * (b - ym) for a, b in zip(x, y)) / sum((a - xm) ** 2 for a in x)
    return math.exp(ym - slope * xm), -slope
""", call="fit_power_law", message=r"not the least-squares exponent")

wrong_answer("check_fit_power_law", "mistake", "a = 10 ** intercept of a natural-log fit", """
def fit_power_law(sizes, losses):
    x = [math.log(float(n)) for n in sizes]
    y = [math.log(float(v)) for v in losses]
    xm, ym = sum(x) / len(x), sum(y) / len(y)
    slope = sum((a - xm) * (b - ym) for a, b in zip(x, y)) / sum((a - xm) ** 2 for a in x)
    return 10 ** (ym - slope * xm), -slope
""", call="fit_power_law", message=r"intercept of the line is")

wrong_answer("check_fit_power_law", "edge", "a line through the first and last points only (exact, not least squares)", """
def fit_power_law(sizes, losses):
    x = [math.log(float(n)) for n in sizes]
    y = [math.log(float(v)) for v in losses]
    slope = (y[-1] - y[0]) / (x[-1] - x[0])
    return math.exp(y[0] - slope * x[0]), -slope
""", call="fit_power_law", message=r"not the least-squares exponent")

wrong_answer("check_fit_power_law", "method", "np.polyfit under another name", """
from numpy import polyfit as fit_line
def fit_power_law(sizes, losses):
    slope, intercept = fit_line(np.log(np.asarray(sizes, dtype=float)), np.log(np.asarray(losses, dtype=float)), 1)
    return float(np.exp(intercept)), float(-slope)
""", call="fit_power_law", message=r"not to use numpy.polyfit")

wrong_answer("check_fit_power_law", "method", "torch.linalg.lstsq on the design matrix", """
def fit_power_law(sizes, losses):
    x = torch.log(torch.as_tensor(sizes, dtype=torch.float64))
    y = torch.log(torch.as_tensor(losses, dtype=torch.float64))
    coef = torch.linalg.lstsq(torch.stack([torch.ones_like(x), x], 1), y[:, None]).solution[:, 0]
    return coef[0].exp().item(), -coef[1].item()
""", call="fit_power_law", message=r"not to use torch.linalg.lstsq")

wrong_answer("check_smoothed_loss_floor", "method", "torch's label-smoothed cross-entropy evaluated at p = q", """
def smoothed_loss_floor(V, eps):
    q = torch.full((V,), eps / V, dtype=torch.float64)
    q[0] += 1 - eps
    return F.cross_entropy(q.clamp_min(1e-300).log()[None], torch.tensor([0]), label_smoothing=eps).item()
""", call="smoothed_loss_floor", message=r"not to use torch.nn.functional.cross_entropy")

wrong_answer("check_cross_entropy_grad", "method", "a central finite difference of the stable loss (a test, not a derivation)", """
def cross_entropy_grad(logits, targets, ignore_index=-100):
    z, keep = logits.double(), targets != ignore_index
    def loss(z):
        zk = z[keep]
        m = zk.amax(-1, keepdim=True)
        lse = m[:, 0] + torch.log(torch.exp(zk - m).sum(-1))
        return (lse - zk[torch.arange(len(zk)), targets[keep]]).mean().item()
    g, h = torch.zeros_like(z), 1e-5
    for i in range(z.shape[0]):
        for j in range(z.shape[1]):
            up, down = z.clone(), z.clone()
            up[i, j] += h
            down[i, j] -= h
            g[i, j] = (loss(up) - loss(down)) / (2 * h)
    return g.to(logits.dtype)
""", call="cross_entropy_grad", message=r"not equal to float64 rounding")

wrong_answer("check_smoothed_loss_floor", "method", "a golden-section search over the true logit's margin", """
def smoothed_loss_floor(V, eps):
    def loss(a):  # true logit a, the V - 1 others 0
        lse = max(a, 0.0) + math.log(math.exp(a - max(a, 0.0)) + (V - 1) * math.exp(-max(a, 0.0)))
        return -(1 - eps + eps / V) * (a - lse) - (V - 1) * (eps / V) * (0.0 - lse)
    lo, hi, r = -5.0, 40.0, (math.sqrt(5) - 1) / 2
    for _ in range(80):
        m1, m2 = hi - r * (hi - lo), lo + r * (hi - lo)
        if loss(m1) < loss(m2):
            hi = m2
        else:
            lo = m1
    return loss((lo + hi) / 2)
""", call="smoothed_loss_floor", message=r"lines of Python")

wrong_answer("check_adam_first_step", "mistake", "eps neglected for the gradient 1e-6 (1% off)", """
predicted_changes = [-1e-3, -1e-3, -1e-3 * 1e-9 / (1e-9 + 1e-8)]
""", call="predicted_changes", message=r"gradient 1e-06: .*eps")

wrong_answer("check_fit_power_law", "method", "the standard library's statistics.linear_regression", """
import statistics
def fit_power_law(sizes, losses):
    slope, intercept = statistics.linear_regression([math.log(float(n)) for n in sizes],
                                                    [math.log(float(v)) for v in losses])
    return math.exp(intercept), -slope
""", call="fit_power_law", message=r"not to use statistics.linear_regression")

wrong_answer("check_compute_optimal_size", "method", "statistics.linear_regression for the line through the vertices", """
import statistics
def compute_optimal_size(runs, budget):
    groups = {}
    for r in runs:
        groups.setdefault(r["budget"], []).append(r)
    x, y = [], []
    for C, rs in groups.items():
        ln_n = np.log([r["n_non_embedding"] for r in rs])
        loss = np.array([r["val_loss"] for r in rs], dtype=float)
        M = np.stack([ln_n ** 2, ln_n, np.ones_like(ln_n)], 1)
        p, q, _ = np.linalg.solve(M.T @ M, M.T @ loss)
        x.append(math.log(C))
        y.append(-q / (2 * p))
    a, ln_k = statistics.linear_regression(x, y)
    return math.exp(ln_k + a * math.log(budget))
""", call="compute_optimal_size", message=r"not to use statistics.linear_regression")

wrong_answer("check_smoothed_loss_floor", "method", "a vectorised grid over the true logit's margin (close, not exact)", """
def smoothed_loss_floor(V, eps):
    a = np.linspace(-5.0, 60.0, 2_000_001)  # the true logit's margin, the others 0
    lse = np.logaddexp(a, np.log(V - 1))
    return float((-(1 - eps + eps / V) * (a - lse) + (V - 1) * (eps / V) * lse).min())
""", call="smoothed_loss_floor", message=r"only approaches the minimum")
