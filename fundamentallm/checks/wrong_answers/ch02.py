"""Chapter 2's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch02`
must reject, run live by ``python -m fundamentallm.course catches --chapter 02`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_softmax_rows", "mistake", "exp without subtracting the row max (overflows on large scores)", """
def softmax_rows(x):
    e = torch.exp(x)
    return e / e.sum(-1, keepdim=True)
""", call="softmax_rows", message=r"NaN|overflow")

wrong_answer("check_softmax_rows", "mistake", "normalises over the first dimension, not the last", """
def softmax_rows(x):
    e = torch.exp(x - x.amax(0, keepdim=True))
    return e / e.sum(0, keepdim=True)
""", call="softmax_rows", message=r"softmax of")

wrong_answer("check_softmax_rows", "method", "calls torch's softmax under another name", """
from torch.nn.functional import softmax as my_normaliser
def softmax_rows(x):
    return my_normaliser(x, dim=-1)
""", call="softmax_rows", message=r"softmax")

wrong_answer("check_softmax_rows", "edge", "subtracts the global max, not each row's (fails when rows differ by ~2000)", """
def softmax_rows(x):
    e = torch.exp(x - x.max())
    return e / e.sum(-1, keepdim=True)
""", call="softmax_rows", message=r"NaN")

wrong_answer("check_softmax_rows", "mistake", "subtracts the row mean, not the row max (NaN on -inf, overflow on a wide row)", """
def softmax_rows(x):
    e = torch.exp(x - x.mean(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)
""", call="softmax_rows", message=r"NaN")

wrong_answer("check_softmax_rows", "edge", "subtracts the mean of the finite scores (overflows on a row spanning ~200)", """
def softmax_rows(x):
    finite = torch.isfinite(x)
    m = torch.where(finite, x, 0.0).sum(-1, keepdim=True) / finite.sum(-1, keepdim=True)
    e = torch.exp(x - m)
    return e / e.sum(-1, keepdim=True)
""", call="softmax_rows", message=r"NaN")

wrong_answer("check_softmax_rows", "mistake", "exp(x - logsumexp(x)): the log-space form, which loses digits "
             "in float32 near 1000", """
def softmax_rows(x):
    return torch.exp(x - torch.logsumexp(x, -1, keepdim=True))
""", call="softmax_rows", message=r"loses digits")

wrong_answer("check_softmax_rows", "method", "torch's softmax kernel under its private name, torch._softmax", """
def softmax_rows(x):
    return torch._softmax(x, -1, False)
""", call="softmax_rows", message=r"_softmax")

wrong_answer("check_softmax_rows", "method", "the aten operator torch.ops.aten._softmax", """
def softmax_rows(x):
    return torch.ops.aten._softmax(x, -1, False)
""", call="softmax_rows", message=r"_softmax")

wrong_answer("check_softmax_rows", "method", "exponentiates torch's log_softmax", """
def softmax_rows(x):
    return torch.log_softmax(x, dim=-1).exp()
""", call="softmax_rows", message=r"log_softmax")

wrong_answer("check_softmax_rows", "edge", "works in place on its input", """
def softmax_rows(x):
    x -= x.amax(-1, keepdim=True)
    return x.exp() / x.exp().sum(-1, keepdim=True)
""", call="softmax_rows", message=r"in place|modif")

wrong_answer("check_make_causal_mask", "mistake", "upper triangle: each query sees the future", """
def make_causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).triu()
""", call="make_causal_mask", message=r"differ")

wrong_answer("check_make_causal_mask", "edge", "strictly below the diagonal: a token cannot see itself", """
def make_causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).tril(-1)
""", call="make_causal_mask", message=r"differ")

wrong_answer("check_make_causal_mask", "value", "a float mask of 0/1, not a boolean one", """
def make_causal_mask(T):
    return torch.ones(T, T).tril()
""", call="make_causal_mask", message=r"torch\.bool")

wrong_answer("check_make_causal_mask", "method", "nn.Transformer's float mask, compared with 0", """
def make_causal_mask(T):
    return nn.Transformer.generate_square_subsequent_mask(T) == 0
""", call="make_causal_mask", message=r"generate_square_subsequent_mask")

wrong_answer("check_make_causal_mask", "method", "the package's causal_mask under another name", """
from fundamentallm.attention import causal_mask as lower_triangle
def make_causal_mask(T):
    return lower_triangle(T)
""", call="make_causal_mask", message=r"causal_mask")

_ATTENTION = """
def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    dead = torch.isneginf(scores.amax(-1, keepdim=True))
    w = torch.softmax(scores.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return w @ v, w
"""

wrong_answer("check_attention", "mistake", "ignores the mask", _ATTENTION + """
def ignores_mask(q, k, v, mask=None):
    return attention(q, k, v)
""", call="ignores_mask", message=r"differ")

wrong_answer("check_attention", "mistake", "treats a float (additive) mask as a boolean one", _ATTENTION + """
def float_as_bool(q, k, v, mask=None):
    return attention(q, k, v, None if mask is None else mask.bool())
""", call="float_as_bool", message=r"differ")

wrong_answer("check_attention", "edge", "a fully masked query gets NaN (softmax of a row of -inf)", """
def attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    w = torch.softmax(scores, -1)
    return w @ v, w
""", call="attention", message=r"all-zero weights")

wrong_answer("check_attention", "value", "returns the output only, not the pair (output, weights)", _ATTENTION + """
def output_only(q, k, v, mask=None):
    return attention(q, k, v, mask)[0]
""", call="output_only", message=r"pair")

wrong_answer("check_attention", "method", "torch's math kernel, torch.ops.aten._scaled_dot_product_attention_math", """
def attention(q, k, v, mask=None):
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, float("-inf"))
    _, w = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, mask)
    w = w.nan_to_num(0.0)
    return w @ v, w
""", call="attention", message=r"_scaled_dot_product_attention_math")

wrong_answer("check_attention", "method", "wraps the package's attention", """
from fundamentallm.attention import scaled_dot_product_attention as sdpa
def attention(q, k, v, mask=None):
    if mask is not None and mask.dtype != torch.bool:
        mask = ~torch.isneginf(mask)
    return sdpa(q, k, v, mask=mask, return_weights=True)
""", call="attention", message=r"scaled_dot_product_attention")

wrong_answer("check_score_scale", "mistake", "1/sqrt(d_k) whatever the variances", """
def score_scale(d_k, sigma_q, sigma_k):
    return 1 / math.sqrt(d_k)
""", call="score_scale", message=r"unit-variance")

wrong_answer("check_score_scale", "mistake", "divides by the variance, not the standard deviation", """
def score_scale(d_k, sigma_q, sigma_k):
    return 1 / (sigma_q ** 2 * sigma_k ** 2 * math.sqrt(d_k))
""", call="score_scale", message=r"square")

wrong_answer("check_score_scale", "edge", "1/d_k: right for d_k = 1 only", """
def score_scale(d_k, sigma_q, sigma_k):
    return 1 / (sigma_q * sigma_k * d_k)
""", call="score_scale", message=r"variance")

wrong_answer("check_score_scale", "method", "estimates the variance from samples instead of deriving it", """
def score_scale(d_k, sigma_q, sigma_k):
    q = torch.randn(4000, d_k, dtype=torch.float64) * sigma_q
    k = torch.randn(4000, d_k, dtype=torch.float64) * sigma_k
    return 1 / (q * k).sum(-1).std().item()
""", call="score_scale", message=r"estimate")

_PREFIX = """
def prefix_lm_mask(T, p):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j <= i) | (j < p)
"""

wrong_answer("check_prefix_lm_mask", "mistake", "the plain causal mask: the prefix is not bidirectional", """
def prefix_lm_mask(T, p):
    return torch.ones(T, T, dtype=torch.bool).tril()
""", call="prefix_lm_mask", message=r"whole prefix")

wrong_answer("check_prefix_lm_mask", "edge", "off by one: the prefix taken one token longer", _PREFIX + """
def off_by_one(T, p):
    return prefix_lm_mask(T, min(p + 1, T))
""", call="off_by_one", message=r"a key after the prefix")

wrong_answer("check_prefix_lm_mask", "value", "returns an int mask", _PREFIX + """
def as_int(T, p):
    return prefix_lm_mask(T, p).int()
""", call="as_int", message=r"torch\.bool")

wrong_answer("check_permutation_prediction", "mistake", "thinks keys and values permute the output",
             'p = {"keys_and_values": "permuted", "queries": "permuted"}', call="p", message=r"terms of that sum")

wrong_answer("check_permutation_prediction", "mistake", "thinks permuting queries leaves the output unchanged",
             'p = {"keys_and_values": "unchanged", "queries": "unchanged"}', call="p", message=r"moves its output row")

wrong_answer("check_permutation_prediction", "value", "an answer outside the three choices",
             'p = {"keys_and_values": "same", "queries": "permuted"}', call="p", message=r"choose one of")

# torch's other names for a forbidden function (core._aliases), each refused under its own name
wrong_answer("check_softmax_rows", "method", "the aten operator's overload torch.ops.aten.softmax.int", """
def softmax_rows(x):
    return torch.ops.aten.softmax.int(x, -1)
""", call="softmax_rows", message=r"not to use torch\.ops\.aten\.softmax\.int \(torch\.softmax under another name\)")
