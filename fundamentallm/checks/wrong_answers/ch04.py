"""Chapter 4's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch04`
must reject, run live by ``python -m fundamentallm.course catches --chapter 04`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_no_position_prediction", "mistake", "bidirectional outputs differ too", """
no_position_prediction = {"causal": True, "bidirectional": True, "neighbours": "shrink"}
""", call="no_position_prediction", message=r"same set of keys")

wrong_answer("check_no_position_prediction", "mistake", "the causal mask leaks nothing", """
no_position_prediction = {"causal": False, "bidirectional": False, "neighbours": "shrink"}
""", call="no_position_prediction", message=r"BOS's share")

wrong_answer("check_no_position_prediction", "mistake", "neighbours stay equally far apart", """
no_position_prediction = {"causal": True, "bidirectional": False, "neighbours": "stay"}
""", call="no_position_prediction", message=r"1/\(\(t \+ 1\)\(t \+ 2\)\)")

wrong_answer("check_no_position_prediction", "value", "1 for True", """
no_position_prediction = {"causal": 1, "bidirectional": False, "neighbours": "shrink"}
""", call="no_position_prediction", message=r"choose one of")

wrong_answer("check_rope_score_matrix", "mistake", "the transpose R_m R_n^T (the sign slip)", """
def rope_score_matrix(offset, D, base=10000.0):
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    c, s = torch.cos(offset * theta), torch.sin(offset * theta)
    M, i, h = torch.zeros(D, D, dtype=torch.float64), torch.arange(D // 2), D // 2
    M[i, i], M[i + h, i + h], M[i, i + h], M[i + h, i] = c, c, -s, s
    return M
""", call="rope_score_matrix", message=r"transpose")

wrong_answer("check_rope_score_matrix", "mistake", "the identity: 'RoPE does not change scores'", """
def rope_score_matrix(offset, D, base=10000.0):
    return torch.eye(D, dtype=torch.float64)
""", call="rope_score_matrix", message=r"rotated score")

wrong_answer("check_rope_score_matrix", "edge", "ignores base (always 10000)", """
def rope_score_matrix(offset, D, base=10000.0):
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    c, s = torch.cos(offset * theta), torch.sin(offset * theta)
    M, i, h = torch.zeros(D, D, dtype=torch.float64), torch.arange(D // 2), D // 2
    M[i, i], M[i + h, i + h], M[i, i + h], M[i + h, i] = c, c, s, -s
    return M
""", call="rope_score_matrix", message=r"rotated score")

wrong_answer("check_rope_score_matrix", "method", "measured through the package's RotaryEmbedding applied to the identity", """
from fundamentallm.positions import RotaryEmbedding as Rope
def rope_score_matrix(offset, D, base=10000.0):
    rope = Rope(D, 4 * abs(offset) + 2, base=base).double()
    n = 2 * abs(offset)
    def Rm(pos):
        cols = torch.eye(D, dtype=torch.float64)
        return torch.stack([rope(c[None, None, None, :], start_pos=pos)[0, 0, 0] for c in cols], dim=1)
    return Rm(n + offset).T @ Rm(n)
""", call="rope_score_matrix", message=r"asks you not to use")

wrong_answer("check_rope_score_matrix", "edge", "interleaved pairs (2k, 2k+1) instead of (i, i + D/2)", """
def rope_score_matrix(offset, D, base=10000.0):
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    c, s = torch.cos(offset * theta), torch.sin(offset * theta)
    M, k = torch.zeros(D, D, dtype=torch.float64), torch.arange(D // 2)
    M[2 * k, 2 * k], M[2 * k + 1, 2 * k + 1], M[2 * k, 2 * k + 1], M[2 * k + 1, 2 * k] = c, c, s, -s
    return M
""", call="rope_score_matrix", message=r"rotated score")

wrong_answer("check_rotate_half", "method", "Hugging Face's rotate_half from the LLaMA model", """
from transformers.models.llama.modeling_llama import rotate_half as hf_rotate_half
def rotate_half(x):
    if x.shape[-1] % 2:
        raise ValueError(f"the last dimension must be even, got {x.shape[-1]}")
    return hf_rotate_half(x)
""", call="rotate_half", message=r"transformers")

wrong_answer("check_rotate_half", "mistake", "rotates interleaved pairs (GPT-J layout)", """
def rotate_half(x):
    if x.shape[-1] % 2:
        raise ValueError(f"the last dimension {x.shape[-1]} must be even")
    return torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
""", call="rotate_half", message=r"not interleaved")

wrong_answer("check_rotate_half", "mistake", "(x2, -x1): the rotation by -90 degrees", """
def rotate_half(x):
    if x.shape[-1] % 2:
        raise ValueError(f"the last dimension {x.shape[-1]} must be even")
    h = x.shape[-1] // 2
    return torch.cat((x[..., h:], -x[..., :h]), -1)
""", call="rotate_half", message=r"differ")

wrong_answer("check_rotate_half", "edge", "no ValueError for an odd last dimension", """
def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)
""", call="rotate_half", message=r"ValueError")

wrong_answer("check_rotate_half", "method", "calls the package's rotate_half under another name", """
from fundamentallm.positions import rotate_half as turn
def rotate_half(x):
    if x.shape[-1] % 2:
        raise ValueError(f"the last dimension {x.shape[-1]} must be even")
    return turn(x)
""", call="rotate_half", message=r"asks you not to use")

_BASE = """
def _check_n(D, n_slow):
    if not 1 <= n_slow < D // 2:
        raise ValueError(f"n_slow={n_slow} must be between 1 and D/2 - 1 = {D // 2 - 1}")
"""

wrong_answer("check_base_for_slow_pairs", "mistake", "off by one pair: makes pair D/2 - n_slow + 1 turn "
             "exactly once (one slow pair short)", _BASE + """
def base_for_slow_pairs(D, context, n_slow):
    _check_n(D, n_slow)
    return (context / (2 * math.pi)) ** (D / (D - 2 * n_slow + 2))
""", call="base_for_slow_pairs", message=r"which one is the last to become slow")

wrong_answer("check_base_for_slow_pairs", "mistake", "theta_i = base^(-i/D): the 2 of the exponent lost", _BASE + """
def base_for_slow_pairs(D, context, n_slow):
    _check_n(D, n_slow)
    return (context / (2 * math.pi)) ** (D / (D // 2 - n_slow))
""", call="base_for_slow_pairs", message=r"pairs turn by\s+less than one turn|is not the threshold")

wrong_answer("check_base_for_slow_pairs", "mistake", "one radian instead of one full turn", _BASE + """
def base_for_slow_pairs(D, context, n_slow):
    _check_n(D, n_slow)
    return context ** (D / (D - 2 * n_slow))
""", call="base_for_slow_pairs", message=r"is not the threshold|pairs turn by")

wrong_answer("check_base_for_slow_pairs", "method", "bisection on the count of slow pairs, stopped at a "
             "relative 1e-6 (a search, not the inequality solved)", _BASE + """
def base_for_slow_pairs(D, context, n_slow):
    _check_n(D, n_slow)
    count = lambda b: sum(context * b ** (-2 * i / D) < 2 * math.pi for i in range(D // 2))
    lo, hi = 1.0, 10.0
    while count(hi) < n_slow:
        hi *= 10
    while hi / lo - 1 > 1e-6:
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if count(mid) < n_slow else (lo, mid)
    return hi
""", call="base_for_slow_pairs", message=r"instead of\s+searching")

wrong_answer("check_base_for_slow_pairs", "method", "bisection on log(base) counting the slow pairs, 200 steps "
             "(exact to rounding, but a search: it needs neither the inequality solved nor which pair decides)",
             _BASE + """
def base_for_slow_pairs(D, context, n_slow):
    _check_n(D, n_slow)
    count = lambda log_b: sum(bool(context * math.exp(-2 * i / D * log_b) < 2 * math.pi) for i in range(D // 2))
    lo, hi = 0.0, 2000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if count(mid) >= n_slow else (mid, hi)
    return math.exp(hi)
""", call="base_for_slow_pairs", message=r"no derivative")

wrong_answer("check_base_for_slow_pairs", "edge", "the right formula through math.log, which turns a tensor "
             "context into a plain number", _BASE + """
def base_for_slow_pairs(D, context, n_slow):
    _check_n(D, n_slow)
    return math.exp(D / (D - 2 * n_slow) * math.log(context / (2 * math.pi)))
""", call="base_for_slow_pairs", message=r"accept a tensor")

wrong_answer("check_base_for_slow_pairs", "edge", "no ValueError when every pair must be slow: returns "
             "infinity", """
def base_for_slow_pairs(D, context, n_slow):
    if n_slow >= D // 2:
        return float("inf")
    return (context / (2 * math.pi)) ** (D / (D - 2 * n_slow))
""", call="base_for_slow_pairs", message=r"should raise ValueError")

wrong_answer("check_base_for_slow_pairs", "value", "NaN", """
def base_for_slow_pairs(D, context, n_slow):
    return float("nan")
""", call="base_for_slow_pairs", message=r"finite number")

wrong_answer("check_alibi_mean_distance", "mistake", "1/m_h, the reach of an unbounded context", """
def alibi_mean_distance(num_heads, T):
    return 1 / 2.0 ** (-8.0 * torch.arange(1, num_heads + 1, dtype=torch.float64) / num_heads)
""", call="alibi_mean_distance", message=r"outside \[0, T - 1\]")

wrong_answer("check_alibi_mean_distance", "mistake", "heads in the reverse order", """
def alibi_mean_distance(num_heads, T):
    m = 2.0 ** (-8.0 * torch.arange(num_heads, 0, -1, dtype=torch.float64) / num_heads)
    d = torch.arange(T, dtype=torch.float64)
    w = torch.softmax(-m[:, None] * d, -1)
    return (w * d).sum(-1)
""", call="alibi_mean_distance", message=r"reverse order")

wrong_answer("check_alibi_mean_distance", "mistake", "the slope applied to +distance (a bias towards far keys)", """
def alibi_mean_distance(num_heads, T):
    m = 2.0 ** (-8.0 * torch.arange(1, num_heads + 1, dtype=torch.float64) / num_heads)
    d = torch.arange(T, dtype=torch.float64)
    w = torch.softmax(m[:, None] * d, -1)
    return (w * d).sum(-1)
""", call="alibi_mean_distance", message=r"weighted average")

wrong_answer("check_alibi_mean_distance", "edge", "distances 1..T (the query's own key at distance 1)", """
def alibi_mean_distance(num_heads, T):
    m = 2.0 ** (-8.0 * torch.arange(1, num_heads + 1, dtype=torch.float64) / num_heads)
    d = torch.arange(1, T + 1, dtype=torch.float64)
    w = torch.softmax(-m[:, None] * d, -1)
    return (w * d).sum(-1)
""", call="alibi_mean_distance", message=r"outside \[0, T - 1\]")

wrong_answer("check_alibi_mean_distance", "edge", "the geometric closed form, 0/0 at T = 1", """
def alibi_mean_distance(num_heads, T):
    m = 2.0 ** (-8.0 * torch.arange(1, num_heads + 1, dtype=torch.float64) / num_heads)
    r = torch.exp(-m)
    return r / (1 - r) - T * r ** T / (1 - r ** T) if T > 1 else torch.full((num_heads,), float("nan"))
""", call="alibi_mean_distance", message=r"not finite")

wrong_answer("check_interleaved_to_half", "mistake", "the inverse map (half -> interleaved)", """
def interleaved_to_half(weight, num_heads):
    D = weight.shape[0] // num_heads
    return weight.reshape(num_heads, 2, D // 2, *weight.shape[1:]).transpose(1, 2).reshape(weight.shape)
""", call="interleaved_to_half", message=r"attention scores")

wrong_answer("check_interleaved_to_half", "edge", "one permutation over all rows, ignoring the heads", """
def interleaved_to_half(weight, num_heads):
    n = weight.shape[0]
    return weight.reshape(n // 2, 2, *weight.shape[1:]).transpose(0, 1).reshape(weight.shape)
""", call="interleaved_to_half", message=r"attention scores")

wrong_answer("check_interleaved_to_half", "mistake", "pairs land on (k + D/2, k): a reflection, not the rotation", """
def interleaved_to_half(weight, num_heads):
    D = weight.shape[0] // num_heads
    half = weight.reshape(num_heads, D // 2, 2, *weight.shape[1:]).transpose(1, 2)
    return half.flip(1).reshape(weight.shape)
""", call="interleaved_to_half", message=r"attention scores")

wrong_answer("check_interleaved_to_half", "method", "calls the package's permute_rope_weights", """
from fundamentallm.interop import permute_rope_weights as convert
def interleaved_to_half(weight, num_heads):
    return convert(weight, num_heads)
""", call="interleaved_to_half", message=r"asks you not to use")
