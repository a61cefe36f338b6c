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

wrong_answer("check_acceptance_probability", "mistake", "sum of p * q: the chance both pick the same token", """
def acceptance_probability(p, q):
    return float((p * q).sum())
""", call="acceptance_probability", message=r"not the chance")

wrong_answer("check_acceptance_probability", "mistake", "min(1, p/q) summed without weighting by q", """
def acceptance_probability(p, q):
    return float(torch.clamp(p / q, max=1).sum())
""", call="acceptance_probability", message=r"draft's probability q|NaN or infinite")

wrong_answer("check_acceptance_probability", "mistake", "1 - sum |p - q|: the total variation without its 1/2", """
def acceptance_probability(p, q):
    return float(1 - (p - q).abs().sum())
""", call="acceptance_probability", message=r"average the acceptance rule")

wrong_answer("check_acceptance_probability", "edge", "q * min(1, p / q): 0/0 for a token neither proposes", """
def acceptance_probability(p, q):
    return float((q * torch.clamp(p / q, max=1)).sum())
""", call="acceptance_probability", message=r"never proposes")

wrong_answer("check_speculative_speedup", "mistake", "tokens per round: the draft's steps cost nothing", """
def speculative_speedup(alpha, k, c):
    return sum(alpha ** i for i in range(k + 1))
""", call="speculative_speedup", message=r"k draft steps and one target forward")

wrong_answer("check_speculative_speedup", "mistake", "forgets the target's own token", """
def speculative_speedup(alpha, k, c):
    return sum(alpha ** i for i in range(1, k + 1)) / (k * c + 1)
""", call="speculative_speedup", message=r"the one token the target always adds")

wrong_answer("check_speculative_speedup", "mistake", "alpha * k + 1: as if rejections did not end the round", """
def speculative_speedup(alpha, k, c):
    return (alpha * k + 1) / (k * c + 1)
""", call="speculative_speedup", message=r"stops at the first rejection")

wrong_answer("check_speculative_speedup", "edge", "the closed form divides by zero at alpha = 1", """
def speculative_speedup(alpha, k, c):
    return (1 - alpha ** (k + 1)) / (1 - alpha) / (k * c + 1) if alpha != 1 else float("nan")
""", call="speculative_speedup", message=r"finite|alpha = 1")

wrong_answer("check_requests_that_fit", "mistake", "contiguous counts the positions used, not reserved", """
def requests_that_fit(lengths, memory, max_seq_len, block_size):
    def fit(size):
        held, n = 0, 0
        for length in lengths:
            held += -(-length // size) * size
            if held > memory:
                break
            n += 1
        return n
    return fit(1), fit(block_size)
""", call="requests_that_fit", message=r"reserves max_seq_len")

wrong_answer("check_requests_that_fit", "mistake", "paged counts positions, not whole blocks", """
def requests_that_fit(lengths, memory, max_seq_len, block_size):
    held, n = 0, 0
    for length in lengths:
        held += length
        if held > memory:
            break
        n += 1
    return min(len(lengths), memory // max_seq_len), n
""", call="requests_that_fit", message=r"whole blocks")

wrong_answer("check_requests_that_fit", "mistake", "admits the shortest requests first", """
def requests_that_fit(lengths, memory, max_seq_len, block_size):
    held, n = 0, 0
    for length in sorted(lengths):
        held += -(-length // block_size) * block_size
        if held > memory:
            break
        n += 1
    return min(len(lengths), memory // max_seq_len), n
""", call="requests_that_fit", message=r"admitted in order")

wrong_answer("check_requests_that_fit", "edge", "held < memory: a batch that fills it exactly is refused", """
def requests_that_fit(lengths, memory, max_seq_len, block_size):
    held, n = 0, 0
    for length in lengths:
        held += -(-length // block_size) * block_size
        if held >= memory:
            break
        n += 1
    return min(len(lengths), memory // max_seq_len), n
""", call="requests_that_fit", message=r"fill the memory exactly")

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
