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

wrong_answer("check_shortcut_distribution", "mistake", "returns p: believes the shortcut is harmless", """
def shortcut_distribution(p, q):
    return p.clone()
""", call="shortcut_distribution", message=r"two ways a token can be kept")

wrong_answer("check_shortcut_distribution", "mistake", "adds the replacement without weighting it by a rejection", """
def shortcut_distribution(p, q):
    return torch.minimum(p, q) + p
""", call="shortcut_distribution", message=r"not 1")

wrong_answer("check_shortcut_distribution", "mistake", "the replacement drawn from q: mixes up the two models", """
def shortcut_distribution(p, q):
    kept = torch.minimum(p, q)
    return kept + (1 - kept.sum()) * q
""", call="shortcut_distribution", message=r"proposed with probability q, then accepted")

wrong_answer("check_shortcut_distribution", "mistake", "weights the replacement by 1 - sum p*q", """
def shortcut_distribution(p, q):
    return torch.minimum(p, q) + (1 - (p * q).sum()) * p
""", call="shortcut_distribution", message=r"not 1")

wrong_answer("check_shortcut_distribution", "edge", "q * min(1, p / q): 0/0 for a token neither proposes", """
def shortcut_distribution(p, q):
    kept = q * torch.clamp(p / q, max=1)
    return kept + (1 - kept.sum()) * p
""", call="shortcut_distribution", message=r"never proposes")

wrong_answer("check_shortcut_distribution", "method", "estimated by sampling, where the statement asks for it exactly", """
def shortcut_distribution(p, q):
    g = torch.Generator().manual_seed(0)
    n = 200_000
    x = torch.multinomial(q, n, replacement=True, generator=g)
    accept = torch.rand(n, generator=g, dtype=torch.float64) < torch.clamp(p[x] / q[x], max=1)
    out = torch.where(accept, x, torch.multinomial(p, n, replacement=True, generator=g))
    return torch.bincount(out, minlength=len(p)).double() / n
""", call="shortcut_distribution", message=r"close but not exact")


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
""", call="requests_that_fit", message=r"admitted in the order given")

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

wrong_answer("check_requests_that_fit", "edge", "memory // max_seq_len: more reservations than requests", """
def requests_that_fit(lengths, memory, max_seq_len, block_size):
    held, n = 0, 0
    for length in lengths:
        held += -(-length // block_size) * block_size
        if held > memory:
            break
        n += 1
    return memory // max_seq_len, n
""", call="requests_that_fit", message=r"more requests than there are")

wrong_answer("check_requests_that_fit", "mistake", "skips a request that does not fit and admits later ones", """
def requests_that_fit(lengths, memory, max_seq_len, block_size):
    held, n = 0, 0
    for length in lengths:
        need = -(-length // block_size) * block_size
        if held + need <= memory:
            held, n = held + need, n + 1
    return min(len(lengths), memory // max_seq_len), n
""", call="requests_that_fit", message=r"stops the admission")

wrong_answer("check_streamed_cross_entropy", "mistake", "exp without the maximum", """
import math
def streamed_cross_entropy(blocks, target):
    total, start, picked = 0.0, 0, None
    for block in blocks:
        total += float(torch.exp(block).sum())
        if start <= target < start + len(block):
            picked = float(block[target - start])
        start += len(block)
    return math.log(total) - picked
""", call="streamed_cross_entropy", message=r"overflows")

wrong_answer("check_streamed_cross_entropy", "mistake", "never rescales the running sum", """
import math
def streamed_cross_entropy(blocks, target):
    m, total, start, picked = float("-inf"), 0.0, 0, None
    for block in blocks:
        m = max(m, float(block.max()))
        total += float(torch.exp(block - m).sum())
        if start <= target < start + len(block):
            picked = float(block[target - start])
        start += len(block)
    return m + math.log(total) - picked
""", call="streamed_cross_entropy", message=r"rescale")

wrong_answer("check_streamed_cross_entropy", "mistake", "log of the running sum without adding the maximum back", """
import math
def streamed_cross_entropy(blocks, target):
    m, total, start, picked = float("-inf"), 0.0, 0, None
    for block in blocks:
        new = max(m, float(block.max()))
        total = total * math.exp(m - new) + float(torch.exp(block - new).sum())
        m = new
        if start <= target < start + len(block):
            picked = float(block[target - start])
        start += len(block)
    return math.log(total) - picked
""", call="streamed_cross_entropy", message=r"relative to m")

wrong_answer("check_streamed_cross_entropy", "edge", "starts the running maximum at 0: all scores far below 0 underflow", """
import math
def streamed_cross_entropy(blocks, target):
    m, total, start, picked = 0.0, torch.tensor(0.0, dtype=torch.float64), 0, None
    for block in blocks:
        new = max(m, float(block.max()))
        total = total * math.exp(m - new) + torch.exp(block - new).sum()
        m = new
        if start <= target < start + len(block):
            picked = float(block[target - start])
        start += len(block)
    return float(m + torch.log(total)) - picked
""", call="streamed_cross_entropy", message=r"underflows")

wrong_answer("check_streamed_cross_entropy", "method", "keeps every block, then takes the maximum in a second pass", """
import math
def streamed_cross_entropy(blocks, target):
    x = torch.cat(list(blocks))
    m = float(x.max())
    return m + math.log(float(torch.exp(x - m).sum())) - float(x[target])
""", call="streamed_cross_entropy", message=r"used after the next one was read")

wrong_answer("check_streamed_cross_entropy", "method", "torch.logsumexp on each block", """
def streamed_cross_entropy(blocks, target):
    parts, start, picked = [], 0, None
    for block in blocks:
        parts.append(torch.logsumexp(block, 0))
        if start <= target < start + len(block):
            picked = block[target - start].item()
        start += len(block)
    return float(torch.logsumexp(torch.stack(parts), 0)) - picked
""", call="streamed_cross_entropy", message=r"not to use torch\.logsumexp")
