"""Chapter 3's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch03`
must reject, run live by ``python -m fundamentallm.course catches --chapter 03`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_split_heads", "mistake", "reshapes to (B, H, T, D) without the transpose", """
def split_heads(x, num_heads):
    B, T, C = x.shape
    if C % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide C={C}")
    return x.reshape(B, num_heads, T, C // num_heads)
""", call="split_heads", message=r"transpose")

wrong_answer("check_split_heads", "edge", "no ValueError when num_heads does not divide C", """
def split_heads(x, num_heads):
    B, T, C = x.shape
    return x[..., : C // num_heads * num_heads].reshape(B, T, num_heads, -1).transpose(1, 2)
""", call="split_heads", message=r"ValueError")

wrong_answer("check_split_heads", "edge", "a ValueError that does not say which argument is wrong", """
def split_heads(x, num_heads):
    B, T, C = x.shape
    if C % num_heads:
        raise ValueError("bad shape")
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)
""", call="split_heads", message=r"should name num_heads")

wrong_answer("check_split_heads", "edge", "a ValueError that names num_heads but not C", """
def split_heads(x, num_heads):
    B, T, C = x.shape
    if C % num_heads:
        raise ValueError(f"num_heads={num_heads} does not fit")
    return x.view(B, T, num_heads, C // num_heads).transpose(1, 2)
""", call="split_heads", message=r"not C")

wrong_answer("check_split_heads", "value", "forgets the transpose and returns (B, T, H, D)", """
def split_heads(x, num_heads):
    B, T, C = x.shape
    if C % num_heads:
        raise ValueError(f"num_heads={num_heads} must divide C={C}")
    return x.view(B, T, num_heads, C // num_heads)
""", call="split_heads", message=r"expected shape")

wrong_answer("check_buggy_split_prediction", "mistake", "the correct split's answer: every token in head 1",
             "p = [0, 1, 2, 3, 4, 5]", call="p", message=r"correct split")

wrong_answer("check_buggy_split_prediction", "mistake", "one token per row, tokens 3-5 twice",
             "p = [3, 4, 5, 3, 4, 5]", call="p", message=r"token after token")

wrong_answer("check_buggy_split_prediction", "edge", "the set of tokens, not one per row",
             "p = [3, 4, 5]", call="p", message=r"6 rows")

wrong_answer("check_buggy_split_prediction", "value", "a string", "p = '345'", call="p",
             message=r"list of integers")

wrong_answer("check_entropy_from_scores", "mistake", "entropy in bits (log2), not nats", """
def entropy_from_scores(s):
    z = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - z)
    return -(torch.where(p > 0, p * (s - z), torch.zeros_like(p)) / 0.6931471805599453).sum(-1)
""", call="entropy_from_scores", message=r"differ")

wrong_answer("check_entropy_from_scores", "edge", "0·(-inf) at the masked keys gives NaN", """
def entropy_from_scores(s):
    z = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - z)
    return -(p * (s - z)).sum(-1)
""", call="entropy_from_scores", message=r"0·\(-inf\)")

wrong_answer("check_entropy_from_scores", "mistake", "normalises over the queries (dim -2), not the keys", """
def entropy_from_scores(s):
    z = torch.logsumexp(s, -2, keepdim=True)
    p = torch.exp(s - z)
    return -torch.where(p > 0, p * (s - z), torch.zeros_like(p)).sum(-1)
""", call="entropy_from_scores", message=r"differ|NaN")

wrong_answer("check_entropy_from_scores", "edge", "exp of the raw scores, no shift (overflows in float32)", """
def entropy_from_scores(s):
    e = torch.exp(s)
    p = e / e.sum(-1, keepdim=True)
    return torch.logsumexp(s, -1) - (p * s).sum(-1)
""", call="entropy_from_scores", message=r"NaN|infinite")

wrong_answer("check_entropy_from_scores", "edge", "ln Z - sum p s without shifting the scores: cancels in float32 near 800", """
def entropy_from_scores(s):
    z = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - z)
    return z[..., 0] - torch.where(p > 0, p * s, torch.zeros_like(p)).sum(-1)
""", call="entropy_from_scores", message=r"shift of the scores")

wrong_answer("check_entropy_from_scores", "method", "the weights' form -sum p log p, with torch.log of the "
             "weights: the entropy's definition, not the scores' form", """
def entropy_from_scores(s):
    p = torch.exp(s - torch.logsumexp(s, -1, keepdim=True))
    return -torch.where(p > 0, p * torch.log(p), torch.zeros_like(p)).sum(-1)
""", call="entropy_from_scores", message=r"torch\.log")

wrong_answer("check_entropy_from_scores", "method", "the weights' form with the Tensor method p.log2() / log2(e)", """
def entropy_from_scores(s):
    p = torch.exp(s - torch.logsumexp(s, -1, keepdim=True))
    return -torch.where(p > 0, p * p.log2() * 0.6931471805599453, torch.zeros_like(p)).sum(-1)
""", call="entropy_from_scores", message=r"log2")

wrong_answer("check_entropy_from_scores", "method", "the weights' form with NumPy's log (a ufunc the profiler "
             "does not see)", """
def entropy_from_scores(s):
    p = torch.exp(s - torch.logsumexp(s, -1, keepdim=True))
    log_p = torch.from_numpy(np.log(np.where(p.numpy() > 0, p.numpy(), 1.0)))
    return -(p * log_p).sum(-1)
""", call="entropy_from_scores", message=r"left torch for NumPy")

wrong_answer("check_entropy_from_scores", "method", "the weights from torch's softmax kernel, torch._softmax", """
def entropy_from_scores(s):
    p = torch._softmax(s, -1, False)
    return (torch.logsumexp(s, -1) - torch.where(p > 0, p * s, torch.zeros_like(p)).sum(-1))
""", call="entropy_from_scores", message=r"_softmax")

wrong_answer("check_entropy_from_scores", "method", "torch's Categorical computes it", """
from torch.distributions import Categorical as Dist
def entropy_from_scores(s):
    return Dist(logits=s).entropy()
""", call="entropy_from_scores", message=r"not to use")

_CROSS = """
def cross(x, memory, w_q, w_k, w_v, w_o, num_heads, memory_mask=None, scale_by_C=False, invert=False):
    B, T_q, C = x.shape
    T_k, H = memory.shape[1], num_heads
    D = C // H
    q = (x @ w_q.T).view(B, T_q, H, D).transpose(1, 2)
    k = (memory @ w_k.T).view(B, T_k, H, D).transpose(1, 2)
    v = (memory @ w_v.T).view(B, T_k, H, D).transpose(1, 2)
    s = q @ k.transpose(-2, -1) / math.sqrt(C if scale_by_C else D)
    if memory_mask is not None:
        keep = ~memory_mask if invert else memory_mask
        s = s.masked_fill(~keep[:, None, None, :], float("-inf"))
    out = torch.softmax(s, -1) @ v
    return out.transpose(1, 2).reshape(B, T_q, C) @ w_o.T
"""

wrong_answer("check_cross_attention", "mistake", "scales by sqrt(C), not sqrt(D)", _CROSS + """
def f(*a, memory_mask=None):
    return cross(*a, memory_mask=memory_mask, scale_by_C=True)
""", call="f", message=r"one head's dot product")

wrong_answer("check_cross_attention", "mistake", "self-attention: keys and values from x, not from memory", _CROSS + """
def f(x, memory, *a, memory_mask=None):
    return cross(x, x, *a, memory_mask=None)
""", call="f", message=r"vs nn\.MultiheadAttention")

wrong_answer("check_cross_attention", "edge", "ignores the padding of the memory", _CROSS + """
def f(*a, memory_mask=None):
    return cross(*a)
""", call="f", message=r"padded memory")

wrong_answer("check_cross_attention", "mistake", "nn.MultiheadAttention's convention: treats True as padding", _CROSS + """
def f(*a, memory_mask=None):
    return cross(*a, memory_mask=memory_mask, invert=True)
""", call="f", message=r"NaN|padded memory")

wrong_answer("check_cross_attention", "method", "wraps nn.MultiheadAttention", """
def f(x, memory, w_q, w_k, w_v, w_o, num_heads, memory_mask=None):
    m = nn.MultiheadAttention(x.shape[-1], num_heads, bias=False, batch_first=True).to(x.dtype)
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([w_q, w_k, w_v]))
        m.out_proj.weight.copy_(w_o)
    return m(x, memory, memory, key_padding_mask=None if memory_mask is None else ~memory_mask)[0]
""", call="f", message=r"not to use")

_GQA = """
def gqa(q, k, v, causal=False, cycled=False, ignore_causal=False):
    groups = q.shape[1] // k.shape[1]
    k, v = ((t.repeat(1, groups, 1, 1) if cycled else t.repeat_interleave(groups, dim=1)) for t in (k, v))
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal and not ignore_causal:
        T = q.shape[2]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v
"""

wrong_answer("check_grouped_query_attention", "mistake", "head h reads group h % G (repeat, not repeat_interleave)", _GQA + """
def f(q, k, v, causal=False):
    return gqa(q, k, v, causal, cycled=True)
""", call="f", message=r"in a cycle")

wrong_answer("check_grouped_query_attention", "edge", "ignores causal=True", _GQA + """
def f(q, k, v, causal=False):
    return gqa(q, k, v, causal, ignore_causal=True)
""", call="f", message=r"causal=True")

wrong_answer("check_grouped_query_attention", "value", "returns only the G key/value heads' outputs", _GQA + """
def f(q, k, v, causal=False):
    return gqa(q, k, v, causal)[:, : k.shape[1]]
""", call="f", message=r"expected shape")

wrong_answer("check_grouped_query_attention", "method", "torch's aten math kernel on repeated key/value heads", """
def f(q, k, v, causal=False):
    r = q.shape[1] // k.shape[1]
    return torch.ops.aten._scaled_dot_product_attention_math(
        q, k.repeat_interleave(r, 1), v.repeat_interleave(r, 1), is_causal=causal)[0]
""", call="f", message=r"not to use torch\.ops\.aten")

wrong_answer("check_grouped_query_attention", "method", "calls torch's attention with enable_gqa", """
from torch.nn.functional import scaled_dot_product_attention as attend
def f(q, k, v, causal=False):
    return attend(q, k, v, is_causal=causal, enable_gqa=True)
""", call="f", message=r"not to use")
