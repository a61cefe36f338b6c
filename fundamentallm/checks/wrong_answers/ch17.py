"""Chapter 17's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch17`
must reject, run live by ``python -m fundamentallm.course catches --chapter 17`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_quantize_rows", "mistake", "unsigned range: divides by 2^bits - 1", """
def quantize_rows(w, bits):
    scale = w.abs().amax(-1, keepdim=True) / (2 ** bits - 1)
    return torch.round(w / scale), scale
""", call="quantize_rows", message=r"largest code")

wrong_answer("check_quantize_rows", "mistake", "one scale for the whole matrix", """
def quantize_rows(w, bits):
    scale = w.abs().max() / (2 ** (bits - 1) - 1) * torch.ones(w.shape[0], 1)
    return torch.round(w / scale), scale
""", call="quantize_rows", message=r"one scale per row")

wrong_answer("check_quantize_rows", "mistake", "truncates instead of rounding", """
def quantize_rows(w, bits):
    scale = w.abs().amax(-1, keepdim=True) / (2 ** (bits - 1) - 1)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.trunc(w / scale), scale
""", call="quantize_rows", message=r"NEAREST")

wrong_answer("check_quantize_rows", "edge", "divides by a zero scale on a row of zeros", """
def quantize_rows(w, bits):
    scale = w.abs().amax(-1, keepdim=True) / (2 ** (bits - 1) - 1)
    return torch.round(w / scale), scale
""", call="quantize_rows", message=r"NaN or infinity")

wrong_answer("check_residual_distribution", "mistake", "p - q without clipping", """
def residual_distribution(p, q):
    r = p - q
    return r / r.sum()
""", call="residual_distribution", message=r"negative|NaN or infinity")

wrong_answer("check_residual_distribution", "mistake", "not normalised", """
def residual_distribution(p, q):
    return (p - q).clamp(min=0)
""", call="residual_distribution", message=r"sum to 1")

wrong_answer("check_residual_distribution", "mistake", "q - p: where the draft wants more", """
def residual_distribution(p, q):
    r = (q - p).clamp(min=0)
    return r / r.sum()
""", call="residual_distribution", message=r"beyond what the draft")

wrong_answer("check_residual_distribution", "mistake", "resamples from the target itself", """
def residual_distribution(p, q):
    return p.clone()
""", call="residual_distribution", message=r"beyond what the draft")

wrong_answer("check_expected_tokens", "mistake", "forgets the target's own token", """
def expected_tokens(alpha, k):
    return sum(alpha ** i for i in range(1, k + 1))
""", call="expected_tokens", message=r"the one token the target")

wrong_answer("check_expected_tokens", "mistake", "alpha * k + 1: as if rejections did not end the round", """
def expected_tokens(alpha, k):
    return alpha * k + 1
""", call="expected_tokens", message=r"first rejection")

wrong_answer("check_expected_tokens", "edge", "the closed form divides by zero at alpha = 1", """
def expected_tokens(alpha, k):
    return (1 - alpha ** (k + 1)) / (1 - alpha) if alpha != 1 else float("nan")
""", call="expected_tokens", message=r"finite|alpha = 1")

wrong_answer("check_blocks_needed", "mistake", "floor division drops the partly filled block", """
def blocks_needed(lengths, block_size):
    return sum(n // block_size for n in lengths)
""", call="blocks_needed", message=r"partly filled")

wrong_answer("check_blocks_needed", "mistake", "shares blocks between sequences", """
def blocks_needed(lengths, block_size):
    return -(-sum(lengths) // block_size)
""", call="blocks_needed", message=r"belong to one sequence")

wrong_answer("check_blocks_needed", "edge", "n // block_size + 1: one too many for an exact fit", """
def blocks_needed(lengths, block_size):
    return sum(n // block_size + 1 for n in lengths)
""", call="blocks_needed", message=r"none for positions")

wrong_answer("check_online_softmax", "mistake", "exp without the maximum", """
def online_softmax(x, block_size):
    total = 0.0
    for i in range(0, len(x), block_size):
        total = total + torch.exp(x[i:i + block_size]).sum()
    return torch.exp(x) / total
""", call="online_softmax", message=r"running maximum")

wrong_answer("check_online_softmax", "mistake", "never rescales the running sum", """
def online_softmax(x, block_size):
    m, total = float("-inf"), 0.0
    for i in range(0, len(x), block_size):
        block = x[i:i + block_size]
        m = max(m, float(block.max()))
        total = total + torch.exp(block - m).sum()
    return torch.exp(x - m) / total
""", call="online_softmax", message=r"rescale")

wrong_answer("check_online_softmax", "mistake", "the maximum of the last block only", """
def online_softmax(x, block_size):
    total = 0.0
    for i in range(0, len(x), block_size):
        block = x[i:i + block_size]
        m = block.max()
        total = total + torch.exp(block - m).sum()
    return torch.exp(x - m) / total
""", call="online_softmax", message=r"rescale|NaN or infinity")

wrong_answer("check_online_softmax", "method", "torch.softmax", """
def online_softmax(x, block_size):
    return torch.softmax(x, dim=-1)
""", call="online_softmax", message=r"not to use torch\.softmax")
