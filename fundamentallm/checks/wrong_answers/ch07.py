"""Chapter 7's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch07`
must reject, run live by ``python -m fundamentallm.course catches --chapter 07`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

_CH07_FFN_BACKWARD = '''
def _parts(x, w_up, b_up, w_down, b_down, grad_out):
    c = math.sqrt(2.0 / math.pi)
    h = x @ w_up.T + b_up
    u = c * (h + 0.044715 * h ** 3)
    t = torch.tanh(u)
    a = 0.5 * h * (1.0 + t)
    dgelu = 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t ** 2) * c * (1.0 + 3 * 0.044715 * h ** 2)
    return h, a, dgelu
'''

wrong_answer("check_feed_forward_backward", "mistake", "the GELU's derivative without the tanh's own derivative",
             _CH07_FFN_BACKWARD + """
def feed_forward_backward(x, w_up, b_up, w_down, b_down, grad_out):
    h, a, _ = _parts(x, w_up, b_up, w_down, b_down, grad_out)
    dh = (grad_out @ w_down) * 0.5 * (1.0 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    return {"x": dh @ w_up, "w_up": dh.T @ x, "b_up": dh.sum(0), "w_down": grad_out.T @ a, "b_down": grad_out.sum(0)}
""", call="feed_forward_backward", message=r"gradient of b_up .*derivative")

wrong_answer("check_feed_forward_backward", "mistake", "weight gradients in (in, out) layout", _CH07_FFN_BACKWARD + """
def feed_forward_backward(x, w_up, b_up, w_down, b_down, grad_out):
    h, a, dgelu = _parts(x, w_up, b_up, w_down, b_down, grad_out)
    dh = (grad_out @ w_down) * dgelu
    return {"x": dh @ w_up, "w_up": x.T @ dh, "b_up": dh.sum(0), "w_down": a.T @ grad_out, "b_down": grad_out.sum(0)}
""", call="feed_forward_backward", message=r"expected shape|transposed")

wrong_answer("check_feed_forward_backward", "mistake", "the bias gradients averaged over the rows", _CH07_FFN_BACKWARD + """
def feed_forward_backward(x, w_up, b_up, w_down, b_down, grad_out):
    h, a, dgelu = _parts(x, w_up, b_up, w_down, b_down, grad_out)
    dh = (grad_out @ w_down) * dgelu
    return {"x": dh @ w_up, "w_up": dh.T @ x, "b_up": dh.mean(0), "w_down": grad_out.T @ a, "b_down": grad_out.mean(0)}
""", call="feed_forward_backward", message=r"gradient of b_down .*sums over the rows")

wrong_answer("check_feed_forward_backward", "edge", "the exact (erf) GELU's derivative instead of the tanh form's", """
def feed_forward_backward(x, w_up, b_up, w_down, b_down, grad_out):
    h = x @ w_up.T + b_up
    cdf = 0.5 * (1 + torch.erf(h / math.sqrt(2)))
    a = h * cdf
    dh = (grad_out @ w_down) * (cdf + h * torch.exp(-h ** 2 / 2) / math.sqrt(2 * math.pi))
    return {"x": dh @ w_up, "w_up": dh.T @ x, "b_up": dh.sum(0), "w_down": grad_out.T @ a, "b_down": grad_out.sum(0)}
""", call="feed_forward_backward", message=r"is wrong")

wrong_answer("check_feed_forward_backward", "method", "autograd through the forward pass", """
def feed_forward_backward(x, w_up, b_up, w_down, b_down, grad_out):
    leaves = [t.clone().requires_grad_(True) for t in (x, w_up, b_up, w_down, b_down)]
    h = leaves[0] @ leaves[1].T + leaves[2]
    a = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    (a @ leaves[3].T + leaves[4]).backward(grad_out)
    return dict(zip(["x", "w_up", "b_up", "w_down", "b_down"], [t.grad for t in leaves]))
""", call="feed_forward_backward", message=r"not to use torch\.Tensor\.backward")

_CH07_COUNT = '''
def count_parameters(config, tied_head=True, positions=True, bias_norm=True):
    V, d, L = config["vocab_size"], config["d_model"], config["num_layers"]
    activation = config.get("activation", "gelu")
    bias = config.get("bias", True)
    d_ff = config.get("d_ff")
    if d_ff is None:
        d_ff = 8 * ((int(8 * d / 3) + 7) // 8) if activation == "swiglu" else 4 * d
    layernorm = config.get("norm", "layernorm") == "layernorm"
    norm = d + (d if layernorm and bias and bias_norm else 0)
    attention = 4 * d * d + (4 * d if bias else 0)
    matrices = 3 if activation == "swiglu" else 2
    ffn = matrices * d * d_ff + (((matrices - 1) * d_ff + d) if bias else 0)
    pos = config["max_seq_len"] * d if positions and config.get("pos_encoding", "learned") == "learned" else 0
    head = 0 if (tied_head and config.get("tie_weights", True)) else V * d
    return V * d + pos + L * (2 * norm + attention + ffn) + norm + head
'''

wrong_answer("check_count_parameters", "mistake", "counts the tied output matrix a second time", _CH07_COUNT + """
def answer(config):
    return count_parameters(config, tied_head=False)
""", call="answer", message=r"expected .* parameters, got")

wrong_answer("check_count_parameters", "mistake", "forgets the learned position table", _CH07_COUNT + """
def answer(config):
    return count_parameters(config, positions=False)
""", call="answer", message=r"expected .* parameters, got")

wrong_answer("check_count_parameters", "edge", "gives RMSNorm / bias=False LayerNorm a bias", _CH07_COUNT + """
def answer(config):
    c = dict(config)
    return count_parameters({**c, "norm": "layernorm", "bias": True}) if c.get("norm") == "rmsnorm" else count_parameters(c)
""", call="answer", message=r"expected .* parameters, got")

wrong_answer("check_count_parameters", "edge", "GPT-2's formula for every configuration", """
def answer(config):
    d, f = config["d_model"], 4 * config["d_model"]
    V, L = config["vocab_size"], config["num_layers"]
    return V * d + config["max_seq_len"] * d + L * (4 * d + 4 * d * d + 4 * d + 2 * d * f + f + d) + 2 * d
""", call="answer", message=r"expected .* parameters, got")

wrong_answer("check_count_parameters", "method", "builds the package's model and counts", """
from fundamentallm import Transformer as Model, TransformerConfig as Config
def answer(config):
    return Model(Config(**config)).num_parameters()
""", call="answer", message=r"not to use fundamentallm.model.Transformer")

wrong_answer("check_swiglu_matched_width", "mistake", "2/3 of d_ff, the match without biases", """
def swiglu_matched_width(d_model, d_ff):
    return max(1, round(2 * d_ff / 3))
""", call="swiglu_matched_width", message=r"count the biases")

wrong_answer("check_swiglu_matched_width", "edge", "rounds down instead of to the nearest width", """
def swiglu_matched_width(d_model, d_ff):
    return max(1, (2 * d_model * d_ff + d_ff) // (3 * d_model + 2))
""", call="swiglu_matched_width", message=r"another width comes within")

wrong_answer("check_swiglu_matched_width", "value", "the unrounded float width", """
def swiglu_matched_width(d_model, d_ff):
    return (2 * d_model * d_ff + d_ff) / (3 * d_model + 2)
""", call="swiglu_matched_width", message=r"positive int")

_CH07_ACCOUNTING = '''
def accounting(config, P, B, T, attention=True, head=True, fma=2, floats=4):
    C, L, V = config["d_model"], config["num_layers"], config["vocab_size"]
    activation = config.get("activation", "gelu")
    d_ff = config.get("d_ff") or (8 * ((int(8 * C / 3) + 7) // 8) if activation == "swiglu" else 4 * C)
    m = 3 if activation == "swiglu" else 2
    N = B * T
    layer = fma * N * 3 * C * C + fma * N * C * C + fma * N * m * C * d_ff + (2 * fma * B * T * T * C if attention else 0)
    return {"forward_flops": L * layer + (fma * N * C * V if head else 0), "training_bytes": floats * 4 * P}
'''

wrong_answer("check_resource_accounting", "mistake", "leaves out attention's Q K^T and weights @ V", _CH07_ACCOUNTING + """
def answer(config, num_parameters, batch_size, seq_len):
    return accounting(config, num_parameters, batch_size, seq_len, attention=False)
""", call="answer", message=r"hold no parameters")

wrong_answer("check_resource_accounting", "mistake", "drops the tied output layer (it is 'only the embedding')", _CH07_ACCOUNTING + """
def answer(config, num_parameters, batch_size, seq_len):
    return accounting(config, num_parameters, batch_size, seq_len, head=False)
""", call="answer", message=r"stored once; is it multiplied once")

wrong_answer("check_resource_accounting", "mistake", "one FLOP per multiply-add", _CH07_ACCOUNTING + """
def answer(config, num_parameters, batch_size, seq_len):
    return accounting(config, num_parameters, batch_size, seq_len, fma=1)
""", call="answer", message=r"multiply-add counts as 2")

wrong_answer("check_resource_accounting", "mistake", "the rule of thumb 2 x parameters x tokens", _CH07_ACCOUNTING + """
def answer(config, num_parameters, batch_size, seq_len):
    r = accounting(config, num_parameters, batch_size, seq_len)
    return {**r, "forward_flops": 2 * num_parameters * batch_size * seq_len}
""", call="answer", message=r"usual estimate")

wrong_answer("check_resource_accounting", "edge", "weights, gradients and one AdamW moment (12 bytes)", _CH07_ACCOUNTING + """
def answer(config, num_parameters, batch_size, seq_len):
    return accounting(config, num_parameters, batch_size, seq_len, floats=3)
""", call="answer", message=r"is missing")

wrong_answer("check_resource_accounting", "method", "measures with FlopCounterMode on a model it builds", """
from torch.utils.flop_counter import FlopCounterMode as Counter
from fundamentallm import Transformer, TransformerConfig
def answer(config, num_parameters, batch_size, seq_len):
    model = Transformer(TransformerConfig(**config, attn_impl="explicit"))
    with Counter(display=False) as c, torch.no_grad():
        model(torch.zeros(batch_size, seq_len, dtype=torch.long))
    return {"forward_flops": c.get_total_flops(), "training_bytes": 16 * num_parameters}
""", call="answer", message=r"not to use")

wrong_answer("check_swiglu_ablation_prediction", "mistake", "the wider GELU layer stores more", """
lower_error = "gelu"
""", call="lower_error", message=r"richer function per parameter")

wrong_answer("check_swiglu_ablation_prediction", "mistake", "equal parameters, equal error", """
lower_error = "same"
""", call="lower_error", message=r"not something a GELU unit can form")

wrong_answer("check_swiglu_ablation_prediction", "value", "an activation that is not among the options", """
lower_error = "relu"
""", call="lower_error", message=r"choose one of")

_CH07_WIRED = '''
def sublayers(config, weights):
    return fundamentallm.block_sublayers(config, weights).values()
'''

wrong_answer("check_parallel_block", "mistake", "the sequential pre-LN block", _CH07_WIRED + """
def parallel_block(x, config, weights):
    attn, ff, norm = sublayers(config, weights)
    h = x + attn(norm(x))
    return h + ff(norm(h))
""", call="parallel_block", message=r"sequential pre-LN block")

wrong_answer("check_parallel_block", "mistake", "no norm: the sublayers read the raw stream", _CH07_WIRED + """
def parallel_block(x, config, weights):
    attn, ff, norm = sublayers(config, weights)
    return x + attn(x) + ff(x)
""", call="parallel_block", message=r"elements differ")

wrong_answer("check_parallel_block", "edge", "drops the residual stream x", _CH07_WIRED + """
def parallel_block(x, config, weights):
    attn, ff, norm = sublayers(config, weights)
    n = norm(x)
    return attn(n) + ff(n)
""", call="parallel_block", message=r"elements differ")

wrong_answer("check_leak_reach_prediction", "mistake", "the leak does not compound: k for any depth", """
leak_reach = {(1, 1): 1, (1, 3): 1, (2, 1): 2, (2, 3): 2}
""", call="leak_reach", message=r"three layers, 2 of 2 wrong")

wrong_answer("check_leak_reach_prediction", "mistake", "one position per layer whatever k", """
leak_reach = {(1, 1): 1, (1, 3): 3, (2, 1): 1, (2, 3): 3}
""", call="leak_reach", message=r"one layer, 1 of 2 wrong")

wrong_answer("check_leak_reach_prediction", "mistake", "the leak runs forward (no position before t changes)", """
leak_reach = {(1, 1): 0, (1, 3): 0, (2, 1): 0, (2, 3): 0}
""", call="leak_reach", message=r"which keys can query s read")

wrong_answer("check_leak_reach_prediction", "value", "a float distance", """
leak_reach = {(1, 1): 1.0, (1, 3): 3, (2, 1): 2, (2, 3): 6}
""", call="leak_reach", message=r"should be an int")

wrong_answer("check_feed_forward_backward", "method", "the GELU's derivative by torch's own backward operator", """
def feed_forward_backward(x, w_up, b_up, w_down, b_down, grad_out):
    h = x @ w_up.T + b_up
    a = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    dh = torch.ops.aten.gelu_backward(grad_out @ w_down, h, approximate="tanh")
    return {"x": dh @ w_up, "w_up": dh.T @ x, "b_up": dh.sum(0), "w_down": grad_out.T @ a, "b_down": grad_out.sum(0)}
""", call="feed_forward_backward", message=r"not to use torch.ops.aten.gelu_backward")

wrong_answer("check_feed_forward_backward", "method", "the GELU's derivative by a central finite difference", """
def feed_forward_backward(x, w_up, b_up, w_down, b_down, grad_out):
    def gelu(z):
        return 0.5 * z * (1.0 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))
    h = x @ w_up.T + b_up
    a = gelu(h)
    eps = 1e-5
    dh = (grad_out @ w_down) * (gelu(h + eps) - gelu(h - eps)) / (2 * eps)
    return {"x": dh @ w_up, "w_up": dh.T @ x, "b_up": dh.sum(0), "w_down": grad_out.T @ a, "b_down": grad_out.sum(0)}
""", call="feed_forward_backward", message=r"gradient of b_up .*is wrong")

wrong_answer("check_count_parameters", "method", "builds the blocks from the package and counts them", """
from fundamentallm import TransformerConfig as Config
from fundamentallm.model import TransformerBlock
def answer(config):
    cfg = Config(**config)
    block = sum(p.numel() for p in TransformerBlock(cfg).parameters())
    V, d, L = cfg.vocab_size, cfg.d_model, cfg.num_layers
    return V * d + cfg.max_seq_len * d + L * block + 2 * d
""", call="answer", message=r"not to use fundamentallm.model.TransformerBlock")

wrong_answer("check_swiglu_matched_width", "method", "a search over widths that counts the package's "
             "FeedForward parameters (on the meta device, so it is fast): no counting by hand", """
def swiglu_matched_width(d_model, d_ff):
    with torch.device("meta"):
        count = lambda w, act: sum(p.numel() for p in fundamentallm.FeedForward(d_model, w, activation=act).parameters())
        target = count(d_ff, "gelu")
        return min(range(1, 3 * d_ff + 2), key=lambda w: abs(count(w, "swiglu") - target))
""", call="swiglu_matched_width", message=r"asks you not to use fundamentallm.feedforward.FeedForward")

# torch's other names for a forbidden function (core._aliases), each refused under its own name
wrong_answer("check_feed_forward_backward", "method", "torch.func.vjp of the forward pass", """
def feed_forward_backward(x, w_up, b_up, w_down, b_down, grad_out):
    def ffn(x, w_up, b_up, w_down, b_down):
        h = x @ w_up.T + b_up
        return (0.5 * h * (1.0 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))) @ w_down.T + b_down
    _, pull = torch.func.vjp(ffn, x, w_up, b_up, w_down, b_down)
    return dict(zip(["x", "w_up", "b_up", "w_down", "b_down"], pull(grad_out)))
""", call="feed_forward_backward", message=r"not to use torch\.func\.vjp")

wrong_answer("check_feed_forward_backward", "method", "the GELU by its aten operator's overload, torch.ops.aten.gelu.default", """
def feed_forward_backward(x, w_up, b_up, w_down, b_down, grad_out):
    h = x @ w_up.T + b_up
    a = torch.ops.aten.gelu.default(h, approximate="tanh")
    s = torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3))
    dh = (grad_out @ w_down) * (0.5 * (1 + s) + 0.5 * h * (1 - s * s) * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * h * h))
    return {"x": dh @ w_up, "w_up": dh.T @ x, "b_up": dh.sum(0), "w_down": grad_out.T @ a, "b_down": grad_out.sum(0)}
""", call="feed_forward_backward", message=r"not to use torch\.ops\.aten\.gelu\.default \(torch\.nn\.functional\.gelu under another name\)")
