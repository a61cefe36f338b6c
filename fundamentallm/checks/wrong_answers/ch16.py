"""Chapter 16's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch16`
must reject, run live by ``python -m fundamentallm.course catches --chapter 16`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

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

_CLASSIFY = """
KINDS = ("previous", "induction", "duplicate", "first")


def classify(patterns, S, queries_all=False, dup_offset=0, threshold=0.5):
    T = 2 * S
    rest, second = torch.arange(1, T), torch.arange(S, T)
    if queries_all:  # every query counts, the first copy's too
        second = rest
    out = {}
    for layer, p in enumerate(patterns):
        scores = torch.stack([p[:, :, rest, rest - 1].mean((0, 2)),
                              p[:, :, second, (second - S + 1).clamp(min=0)].mean((0, 2)),
                              p[:, :, second, (second - S + dup_offset).clamp(min=0)].mean((0, 2)),
                              p[:, :, rest, 0].mean((0, 2))])
        best, kind = scores.max(0)
        for h in range(p.shape[1]):
            out[(layer, h)] = KINDS[kind[h]] if best[h] > threshold else "other"
    return out
"""

wrong_answer("check_classify_heads", "mistake", "averages the induction and duplicate scores over every query, the first copy's too",
             _CLASSIFY, call="lambda p, S: classify(p, S, queries_all=True)", message=r"nothing has repeated yet")

wrong_answer("check_classify_heads", "mistake", "the duplicate-token key one position late (t - S + 1, the induction key)",
             _CLASSIFY, call="lambda p, S: classify(p, S, dup_offset=1)", message=r"which key does it attend to")

wrong_answer("check_classify_heads", "edge", "no threshold: every head gets the kind of its largest score", _CLASSIFY,
             call="lambda p, S: classify(p, S, threshold=-1.0)", message=r"'other'")

wrong_answer("check_classify_heads", "edge", "the first-position score counts query 0 (which has no other key to choose)",
             _CLASSIFY.replace("p[:, :, rest, 0]", "p[:, :, torch.arange(T), 0]"), call="classify",
             message=r"head \(1, 2\) is not 'first'")

wrong_answer("check_classify_heads", "method", "a vote of each query's largest weight instead of the mean attention the "
             "statement defines", """
def classify(patterns, S):
    t, out = torch.arange(2 * S), {}
    for layer, p in enumerate(patterns):
        for h in range(p.shape[1]):
            a = p[:, h].argmax(-1)  # (B, T)
            votes = {"previous": (a[:, 1:] == t[1:] - 1).float().mean(), "induction": (a[:, S:] == t[S:] - S + 1).float().mean(),
                     "duplicate": (a[:, S:] == t[S:] - S).float().mean(), "first": (a[:, 1:] == 0).float().mean()}
            kind = max(votes, key=votes.get)
            out[(layer, h)] = kind if votes[kind] > 0.5 else "other"
    return out
""", call="classify", message=r"no score above 0.5")

wrong_answer("check_classify_heads", "value", "a list of kinds instead of a dict", _CLASSIFY,
             call="lambda p, S: list(classify(p, S).values())", message=r"should return a dict")

wrong_answer("check_logit_lens", "mistake", "skips the final norm", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    return resid @ unembed.T
""", call="logit_lens, ['a', 'b']", message=r"through the final norm")

wrong_answer("check_logit_lens", "mistake", "an RMS norm (no centring)", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    x = resid / torch.sqrt((resid ** 2).mean(-1, keepdim=True) + 1e-5)
    return (x * norm_weight + norm_bias) @ unembed.T
""", call="logit_lens, ['a', 'b']", message=r"centre")

wrong_answer("check_logit_lens", "edge", "the norm without its weight and bias", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    x = resid - resid.mean(-1, keepdim=True)
    x = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-5)
    return x @ unembed.T
""", call="logit_lens, ['a', 'b']", message=r"weight and bias")

wrong_answer("check_logit_lens", "method", "torch's layer_norm under another name", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    ln = torch.nn.LayerNorm(resid.shape[-1])
    with torch.no_grad():
        ln.weight.copy_(norm_weight)
        ln.bias.copy_(norm_bias)
    return ln(resid) @ unembed.T
""", call="logit_lens, ['a', 'b']", message=r"not to use torch(\.nn\.functional)?\.layer_norm")

wrong_answer("check_logit_lens", "method", "group_norm with one group: a LayerNorm under another name", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    C = resid.shape[-1]
    x = F.group_norm(resid.reshape(-1, C), 1, norm_weight, norm_bias, eps=1e-5)
    return x.reshape(resid.shape) @ unembed.T
""", call="logit_lens, ['a', 'b']", message=r"not to use torch(\.nn\.functional)?\.group_norm")

wrong_answer("check_logit_lens", "method", "batch_norm over the transposed stream: a LayerNorm under another name", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    C = resid.shape[-1]
    x = F.batch_norm(resid.reshape(-1, C).T, None, None, training=True, eps=1e-5).T
    return (x.reshape(resid.shape) * norm_weight + norm_bias) @ unembed.T
""", call="logit_lens, ['a', 'b']", message=r"not to use torch(\.nn\.functional)?\.batch_norm")

wrong_answer("check_logit_lens", "method", "torch.ops.aten's layer_norm kernel, called directly", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    return torch.ops.aten.layer_norm(resid, [resid.shape[-1]], norm_weight, norm_bias, 1e-5) @ unembed.T
""", call="logit_lens, ['a', 'b']", message=r"not to use torch\.ops\.aten\.layer_norm")

wrong_answer("check_logit_lens", "mistake", "predicts that only the stream's scale is undone (the norm's centring forgotten)",
             "", call="lambda *a: None, ['a']", message=r"lens_unchanged: not right")

wrong_answer("check_logit_lens", "mistake", "predicts that the norm removes any fixed offset, a vector as well as a number",
             "", call="lambda *a: None, ['a', 'b', 'c']", message=r"lens_unchanged: not right")

wrong_answer("check_logit_lens", "value", "a prediction written as one string", "",
             call="lambda *a: None, 'ab'", message=r"should be a list of letters")

wrong_answer("check_logit_lens", "edge", "eps added to the standard deviation, outside the root", """
def logit_lens(resid, norm_weight, norm_bias, unembed):
    x = resid - resid.mean(-1, keepdim=True)
    x = x / (torch.sqrt((x ** 2).mean(-1, keepdim=True)) + 1e-5)
    return (x * norm_weight + norm_bias) @ unembed.T
""", call="logit_lens, ['a', 'b']", message=r"eps inside the root")

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


def _z_means(model, ids, axes):
    with torch.no_grad():
        _, cache = model.run_with_cache(ids[:, :-1], names=lambda n: n.endswith("hook_z"))
    return {n: z.mean(axes) for n, z in cache.items()}


def ablation_table(config, weights, ids, mode, axes=(0, 1), mean_ids=None):
    # mode "mean": each head's hook_z replaced by its mean over axes in a clean run on mean_ids
    # (default: ids), computed before any ablation
    model = _model(config, weights)
    means = _z_means(model, ids if mean_ids is None else mean_ids, axes)
    L, H = config["num_layers"], config["num_heads"]
    base = _loss(model, ids, {})
    out = torch.zeros(L, H)
    for layer in range(L):
        for head in range(H):
            name = f"blocks.{layer}.attn.hook_z"
            def ablate(z, n, head=head):
                z = z.clone()
                z[:, :, head] = 0.0 if mode == "zero" else means[n][head]
                return z
            out[layer, head] = _loss(model, ids, {name: ablate}) - base
    return out
"""

wrong_answer("check_head_ablation", "mistake", "ablates every head of the layer at once", _BUILD + """
def head_ablation(config, weights, ids, mode="zero"):
    model = _model(config, weights)
    L, H = config["num_layers"], config["num_heads"]
    base = _loss(model, ids, {})
    out = torch.zeros(L, H)
    for layer in range(L):
        delta = _loss(model, ids, {f"blocks.{layer}.attn.hook_z": lambda z, n: torch.zeros_like(z)}) - base
        out[layer] = delta
    return out
""", call="head_ablation, {'zero': 'changes the loss', 'mean': 'leaves the loss unchanged'}", message=r"one head of one layer at a time")

wrong_answer("check_head_ablation", "mistake", "returns the ablated loss, not its change", _BUILD + """
def head_ablation(config, weights, ids, mode="zero"):
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
""", call="head_ablation, {'zero': 'changes the loss', 'mean': 'leaves the loss unchanged'}", message=r"ablated loss minus the clean loss")

wrong_answer("check_head_ablation", "edge", "zeroes the head's channels after out_proj (hook_attn_out)", _BUILD + """
def head_ablation(config, weights, ids, mode="zero"):
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
""", call="head_ablation, {'zero': 'changes the loss', 'mean': 'leaves the loss unchanged'}", message=r"before out_proj mixes the heads")

wrong_answer("check_head_ablation", "value", "NaN", """
def head_ablation(config, weights, ids, mode="zero"):
    return torch.full((config["num_layers"], config["num_heads"]), float("nan"))
""", call="head_ablation, {'zero': 'changes the loss', 'mean': 'leaves the loss unchanged'}", message=r"NaN or infinity")

wrong_answer("check_head_ablation", "mistake", "zero ablation whatever the mode", _BUILD,
             call="lambda c, w, ids, mode: ablation_table(c, w, ids, 'zero'), {'zero': 'changes the loss', 'mean': 'leaves the loss unchanged'}",
             message=r"mode='mean'.*by 0")

wrong_answer("check_head_ablation", "mistake", "mean ablation with one scalar per head (the mean over D as well)", _BUILD,
             call="lambda c, w, ids, mode: ablation_table(c, w, ids, mode, axes=(0, 1, 3)), {'zero': 'changes the loss', 'mean': 'leaves the loss unchanged'}",
             message=r"one D-vector per head")

wrong_answer("check_head_ablation", "edge", "mean ablation from another batch (the mean of random sequences, not of ids)", _BUILD,
             call="lambda c, w, ids, mode: ablation_table(c, w, ids, mode, mean_ids=torch.randint("
                  "0, c['vocab_size'], ids.shape, generator=torch.Generator().manual_seed(0))), {'zero': 'changes the loss', 'mean': 'leaves the loss unchanged'}",
             message=r"mean over the batch and the positions of the\s+same run")

wrong_answer("check_head_ablation", "mistake", "predicts that removing a head that computes nothing changes nothing, "
             "whichever ablation", "", call="lambda *a: None, {'zero': 'leaves the loss unchanged', "
             "'mean': 'leaves the loss unchanged'}", message=r"constant_head: not right")

wrong_answer("check_head_ablation", "mistake", "predicts that any ablation of a head changes the loss", "",
             call="lambda *a: None, {'zero': 'changes the loss', 'mean': 'changes the loss'}",
             message=r"constant_head: not right")

_PATCH = """
from fundamentallm import Transformer, TransformerConfig

RIGHT = [6, 6, 11]

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
""", call="patch_activation, [6, 6, 11]", message=r"replace only the given position")

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
""", call="patch_activation, [6, 6, 11]", message=r"run the corrupted input")

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
""", call="patch_activation, [6, 6, 11]", message=r"axis 1")

wrong_answer("check_patch_activation", "mistake", "returns the clean run's logits", _PATCH + """
def patch_activation(config, weights, clean_ids, corrupt_ids, name, pos):
    with torch.no_grad():
        return _model(config, weights)(clean_ids)[0]
""", call="patch_activation, [6, 6, 11]", message=r"patched run's logits")

wrong_answer("check_patch_activation", "mistake", "predicts the map of the chapter's corruption (A changed), shifted: [5, 6, 11]",
             _PATCH, call="lambda *a: None, [5, 6, 11]", message=r"matches on, or the token it copies")

wrong_answer("check_patch_activation", "mistake", "predicts that layer 0 moves B's information one position on, as it moved A's: "
             "[6, 7, 11]", _PATCH, call="lambda *a: None, [6, 7, 11]", message=r"what did layer 0 move")

_DLA = """
def shares(components, norm_weight, norm_bias, unembed, targets, *, centre=True, own_scale=False, spread_bias=False):
    x = components.sum(0)
    sigma = (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    c = components - components.mean(-1, keepdim=True) if centre else components
    if own_scale:
        sigma = (components.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    out = ((c / sigma) * unembed[targets] * norm_weight).sum(-1)
    if spread_bias:
        out = out + (unembed[targets] * norm_bias).sum(-1) / components.shape[0]
    return out
"""

wrong_answer("check_logit_attribution", "mistake", "each term divided by its own standard deviation", _DLA,
             call="lambda *a: shares(*a, own_scale=True)", message=r"the whole stream's")

wrong_answer("check_logit_attribution", "mistake", "the terms not centred (the norm's mean left out)", _DLA,
             call="lambda *a: shares(*a, centre=False)", message=r"do not add up")

wrong_answer("check_logit_attribution", "edge", "the norm's bias spread over the terms: the shares make the whole logit", _DLA,
             call="lambda *a: shares(*a, spread_bias=True)", message=r"belongs to no term")

wrong_answer("check_logit_attribution", "edge", "the bias-like term given a share (the whole share put on the last term)", _DLA,
             call="lambda *a: torch.cat([shares(*a)[:-2], (shares(*a)[-2] - 1.0)[None], (shares(*a)[-1] + 1.0)[None]])",
             message=r"split wrongly")

wrong_answer("check_logit_attribution", "edge", "the scale without eps (the stream's standard deviation alone)",
             _DLA.replace("+ 1e-5).sqrt()", ").sqrt()"), call="shares", message=r"eps inside the root")

wrong_answer("check_logit_attribution", "method", "gradient x input with autograd (the norm is scale-invariant: the "
             "products add up to 0, not to the logit)", """
def shares(components, norm_weight, norm_bias, unembed, targets):
    c = components.clone().requires_grad_(True)
    x = c.sum(0)
    y = ((x - x.mean(-1, keepdim=True)) / (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
         * norm_weight + norm_bias) @ unembed.T
    y.gather(-1, targets[:, None]).sum().backward()
    return (c.grad * components).sum(-1)
""", call="shares", message=r"do not add up")
