"""Chapter 13's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch13`
must reject, run live by ``python -m fundamentallm.course catches --chapter 13`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

# --- What each check catches (python -m fundamentallm.course catches --chapter 13) -------------

_NAN = """
def good(pairs):
    return [n for n, t in pairs if t is not None and t.is_floating_point() and not torch.isfinite(t).all()]
"""

wrong_answer("check_find_nan_or_inf", "mistake", "looks for NaN only (misses +-inf, where NaNs are born)", """
def find(pairs):
    return [n for n, t in pairs if t is not None and torch.isnan(t).any()]
""", call="find", message=r"expected")

wrong_answer("check_find_nan_or_inf", "mistake", "looks for inf only", """
def find(pairs):
    return [n for n, t in pairs if t is not None and torch.isinf(t).any()]
""", call="find", message=r"expected")

wrong_answer("check_find_nan_or_inf", "edge", "crashes on a None gradient", """
def find(pairs):
    return [n for n, t in pairs if not torch.isfinite(t).all()]
""", call="find", message=r"raised|expected")

wrong_answer("check_find_nan_or_inf", "value", "returns how many, not which", _NAN,
             call="lambda pairs: len(good(pairs))", message=r"check_find_nan_or_inf")

_SPIKES = """
def spikes(losses, factor=2.0, window=10):
    out = []
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            out.append(i)
            continue
        before = [x for x in losses[max(0, i - window):i] if math.isfinite(x)]
        if before and loss > factor * sum(before) / len(before):
            out.append(i)
    return out
"""

wrong_answer("check_detect_loss_spike", "mistake", "compares with the previous step only", """
def spikes(losses, factor=2.0, window=10):
    return [i for i, x in enumerate(losses)
            if not math.isfinite(x) or (i and math.isfinite(losses[i - 1]) and x > factor * losses[i - 1])]
""", call="spikes", message=r"expected")

wrong_answer("check_detect_loss_spike", "edge", "never flags NaN (NaN > x is False) and lets NaN into the window", """
def spikes(losses, factor=2.0, window=10):
    out = []
    for i, x in enumerate(losses):
        prev = losses[max(0, i - window):i]
        if prev and x > factor * sum(prev) / len(prev):
            out.append(i)
    return out
""", call="spikes", message=r"expected")

wrong_answer("check_detect_loss_spike", "edge", "flags a loss equal to factor x the mean (>= instead of >)", """
def spikes(losses, factor=2.0, window=10):
    out = []
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            out.append(i)
            continue
        before = [x for x in losses[max(0, i - window):i] if math.isfinite(x)]
        if before and loss >= factor * sum(before) / len(before):
            out.append(i)
    return out
""", call="spikes", message=r"exactly at the threshold")

wrong_answer("check_detect_loss_spike", "mistake", "the median of the window instead of its mean", """
import statistics


def spikes(losses, factor=2.0, window=10):
    out = []
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            out.append(i)
            continue
        before = [x for x in losses[max(0, i - window):i] if math.isfinite(x)]
        if before and loss > factor * statistics.median(before):
            out.append(i)
    return out
""", call="spikes", message=r"not the median")

wrong_answer("check_detect_loss_spike", "mistake", "leaves earlier spikes out of the mean (the statement keeps every finite loss)", """
def spikes(losses, factor=2.0, window=10):
    out = []
    for i, loss in enumerate(losses):
        if not math.isfinite(loss):
            out.append(i)
            continue
        before = [x for j, x in enumerate(losses[max(0, i - window):i], start=max(0, i - window))
                  if math.isfinite(x) and j not in out]
        if before and loss > factor * sum(before) / len(before):
            out.append(i)
    return out
""", call="spikes", message=r"earlier spike stays")

wrong_answer("check_detect_loss_spike", "mistake", "ignores the window: the mean of every earlier step", _SPIKES,
             call="lambda losses, factor=2.0, window=10: spikes(losses, factor, len(losses) + 1)", message=r"expected")

_ROWS = """
def bad_rows(w, atol=1e-5):
    finite = torch.isfinite(w)
    safe = torch.where(finite, w, torch.zeros_like(w))
    return ~(finite.all(-1) & ((safe.sum(-1) - 1).abs() <= atol) & (safe.amin(-1) >= 0))
"""

wrong_answer("check_bad_attention_rows", "mistake", "checks the sums only (misses NaN and negative entries)", """
def bad_rows(w, atol=1e-5):
    return (w.sum(-1) - 1).abs() > atol
""", call="bad_rows", message=r"should be flagged")

wrong_answer("check_bad_attention_rows", "mistake", "the flags inverted (True for the good rows)", _ROWS,
             call="lambda w, atol=1e-5: ~bad_rows(w, atol)", message=r"should be flagged")

wrong_answer("check_bad_attention_rows", "edge", "misses negative entries whose row still sums to 1", """
def bad_rows(w, atol=1e-5):
    finite = torch.isfinite(w)
    safe = torch.where(finite, w, torch.zeros_like(w))
    return ~(finite.all(-1) & ((safe.sum(-1) - 1).abs() <= atol))
""", call="bad_rows", message=r"should be flagged")

_DIVERGE = """
def outputs(config, state, ids):
    model = fundamentallm.Transformer(fundamentallm.TransformerConfig(**config)).eval()
    model.load_state_dict(state)
    out, handles = [], []
    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(lambda m, i, o, name=name: out.append((name, o))))
    with torch.no_grad():
        model(ids)
    for h in handles:
        h.remove()
    return [(n, o) for n, o in out if isinstance(o, torch.Tensor)]


def differing(config, a, b, ids, atol):
    other = dict(outputs(config, b, ids))
    return [n for n, o in outputs(config, a, ids)
            if n in other and (o.shape != other[n].shape or (o - other[n]).abs().max() > atol)]
"""

wrong_answer("check_first_divergence", "mistake", "returns the last differing submodule, not the first", _DIVERGE,
             call="lambda c, a, b, ids, atol=1e-5: (differing(c, a, b, ids, atol) or [None])[-1]",
             message=r"expected 'blocks\.1\.ff\.up', got")

wrong_answer("check_first_divergence", "method", "compares parameters instead of outputs", """
def params(config, a, b, ids, atol=1e-5):
    for n, p in a.items():
        if (p - b[n]).abs().max() > atol:
            return n.rsplit(".", 1)[0]
    return None
""", call="params", message=r"compare outputs, not parameters")

wrong_answer("check_first_divergence", "edge", "a looser tolerance than asked: misses a small real change", _DIVERGE,
             call="lambda c, a, b, ids, atol=1e-5: (differing(c, a, b, ids, 1e-3) or [None])[0]",
             message=r"above atol=1e-5\): expected 'blocks\.0\.norm1', got None")

_SOURCE = """
def source(h, t, d, T, C, H):
    return ((h * T + t) * (C // H) + d) // C
"""

wrong_answer("check_source_token", "method", "reshapes an arange instead of deriving the index", """
def source(h, t, d, T, C, H):
    return int(torch.arange(T * C).view(T, C).reshape(H, T, C // H)[h, t, d] // C)
""", call="source, [2, 2, 3, 3]", message=r"fits\s+in no memory")

wrong_answer("check_source_token", "method", "torch.unravel_index on the flat position", """
def source(h, t, d, T, C, H):
    flat = (h * T + t) * (C // H) + d
    return int(torch.unravel_index(torch.tensor(flat), (T, C))[0])
""", call="source, [2, 2, 3, 3]", message=r"asks you not to use torch\.unravel_index")

wrong_answer("check_source_token", "method", "numpy.unravel_index on the flat position", """
def source(h, t, d, T, C, H):
    return int(np.unravel_index((h * T + t) * (C // H) + d, (T, C))[0])
""", call="source, [2, 2, 3, 3]", message=r"asks you not to use numpy\.unravel_index")

wrong_answer("check_source_token", "method", "numpy.ravel_multi_index for the flat position, then a division", """
def source(h, t, d, T, C, H):
    return int(np.ravel_multi_index((h, t, d), (H, T, C // H))) // C
""", call="source, [2, 2, 3, 3]", message=r"asks you not to use numpy\.ravel_multi_index")

wrong_answer("check_source_token", "mistake", "the right split's token (t): assumes the reshape keeps tokens together",
             "def source(h, t, d, T, C, H):\n    return t\n", call="source, [2, 2, 3, 3]", message=r"find the flat position")

wrong_answer("check_source_token", "mistake", "divides the flat position by D (channels per head), not C", """
def source(h, t, d, T, C, H):
    return ((h * T + t) * (C // H) + d) // (C // H)
""", call="source, [2, 2, 3, 3]", message=r"find the flat position")

wrong_answer("check_source_token", "mistake", "predicts head 1's rows hold the tokens of the right split (0, 1, 2, 3)",
             _SOURCE, call="source, [0, 1, 2, 3]", message=r"predicted_row: not what")

wrong_answer("check_source_token", "mistake", "predicts head 1 starts where token 1 starts (tokens 1, 1, 2, 2)",
             _SOURCE, call="source, [1, 1, 2, 2]", message=r"where does\s+head 1 start")

wrong_answer("check_source_token", "value", "a prediction that is not a list", _SOURCE,
             call="source, '2'", message=r"must be a list of ints")

_COLLEAGUE = '''
class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.num_heads = HEADS or config.num_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x):
        B, T, C = x.shape
        H = self.num_heads
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.qkv(x).split(C, dim=-1))
        scores = q @ k.transpose(-2, -1) / (math.sqrt(C // H) if SCALE else 1.0)
        allowed = torch.ones(T, T, dtype=torch.bool).tril(diagonal=DIAGONAL)
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(config.d_model), nn.LayerNorm(config.d_model)
        self.attn = Attention(config)
        self.ff = nn.Module()
        self.ff.up = nn.Linear(config.d_model, 4 * config.d_model)
        self.ff.down = nn.Linear(4 * config.d_model, config.d_model)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ff.down(F.gelu(self.ff.up(self.norm2(x)), approximate="tanh"))


class LM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_encoding = nn.Module()
        self.pos_encoding.weight = nn.Parameter(torch.zeros(config.max_seq_len, config.d_model))
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.token_embedding.weight

    def forward(self, ids):
        x = self.token_embedding(ids) + self.pos_encoding.weight[:ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm_f(x))


def model_class(diagonal=0, heads=None, scale=True):
    ns = dict(globals(), DIAGONAL=diagonal, HEADS=heads, SCALE=scale)
    exec(SOURCE, ns)
    return ns["LM"]


Colleague = model_class(diagonal=1)
'''

_COLLEAGUE = "SOURCE = " + repr(_COLLEAGUE.split("\n\ndef model_class")[0]) + "\n" + _COLLEAGUE

wrong_answer("check_fixed_model", "mistake", "hands back the colleague's model unchanged", _COLLEAGUE,
             call="Colleague", message=r"still reads the future")

wrong_answer("check_fixed_model", "mistake", "over-corrects the mask (tril(-1)): no position sees itself", _COLLEAGUE,
             call="model_class(diagonal=-1)", message=r"changed\s+something else")

wrong_answer("check_fixed_model", "mistake", "fixes the mask and drops the 1/sqrt(D) scaling", _COLLEAGUE,
             call="model_class(scale=False)", message=r"changed\s+something else")

wrong_answer("check_fixed_model", "edge", "fixes the mask with the chapter's 4 heads written in", _COLLEAGUE,
             call="model_class(heads=4)", message=r"changed\s+something else|could not use")

wrong_answer("check_fixed_model", "method", "calls fundamentallm.Transformer's forward on the colleague's weights",
             _COLLEAGUE + """
class Wrapped(Colleague):
    def forward(self, ids):
        return fundamentallm.model.Transformer.forward(self, ids)[0]
""", call="Wrapped", message=r"asks you not to use .*Transformer")

wrong_answer("check_fixed_model", "value", "a fix that renames a weight", _COLLEAGUE + """
Fixed = model_class()


class Renamed(Fixed):
    def __init__(self, config):
        super().__init__(config)
        self.final_norm = self.norm_f
        del self.norm_f

    def forward(self, ids):
        self.norm_f = self.final_norm
        return super().forward(ids)
""", call="Renamed", message=r"should not add, remove, rename")

_LOOP = """
from fundamentallm import Transformer, TransformerConfig
from fundamentallm.data import get_batch


def loop(config, weights, data, steps, lr=3e-3, seed=0, batch=16, block=16, *, zero="each", lr_scale=1.0,
         clip=None, opt="adamw", load=True, trained=True):
    model = Transformer(TransformerConfig(**config))
    if load:
        model.load_state_dict(weights)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    if opt == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr * lr_scale, betas=(0.9, 0.95), weight_decay=0.0)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=lr * lr_scale)
    g = torch.Generator().manual_seed(seed)
    losses, norms = [], []
    if zero == "once":
        optimizer.zero_grad()
    for step in range(steps):
        x, y = get_batch(data, batch, block, generator=g)
        loss = F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten())
        if zero == "each" or (zero == "even" and step % 2 == 0):
            optimizer.zero_grad()
        loss.backward()
        norms.append(torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]).norm().item())
        if zero == "before_step":
            optimizer.zero_grad()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses, norms, model.state_dict() if trained else initial
"""

wrong_answer("check_fixed_train", "mistake", "the colleague's loop unchanged: gradients accumulate", _LOOP,
             call="lambda *a, **k: loop(*a, **k, zero='once')", message=r"gradient norm you record")

wrong_answer("check_fixed_train", "mistake", "zero_grad between backward and step: nothing is ever updated", _LOOP,
             call="lambda *a, **k: loop(*a, **k, zero='before_step')", message=r"loss .* differs")

wrong_answer("check_fixed_train", "mistake", "tames the symptom with a 10x smaller learning rate", _LOOP,
             call="lambda *a, **k: loop(*a, **k, zero='once', lr_scale=0.1)", message=r"differs|gradient norm")

wrong_answer("check_fixed_train", "mistake", "fixes zero_grad and adds gradient clipping", _LOOP,
             call="lambda *a, **k: loop(*a, **k, clip=0.05)", message=r"differs|gradient norm")

wrong_answer("check_fixed_train", "edge", "zeroes the gradients every other step", _LOOP,
             call="lambda *a, **k: loop(*a, **k, zero='even')", message=r"gradient norm you record")

wrong_answer("check_fixed_train", "mistake", "fixes zero_grad and swaps AdamW for SGD", _LOOP,
             call="lambda *a, **k: loop(*a, **k, opt='sgd')", message=r"differs")

wrong_answer("check_fixed_train", "mistake", "builds the model but does not load the weights it is given", _LOOP,
             call="lambda *a, **k: loop(*a, **k, load=False)", message=r"step 0: .*weights loaded")

wrong_answer("check_fixed_train", "edge", "fixes the loop but returns the weights it was given, not the trained ones",
             _LOOP, call="lambda *a, **k: loop(*a, **k, trained=False)", message=r"not the trained weights")
