"""Chapter 10's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch10`
must reject, run live by ``python -m fundamentallm.course catches --chapter 10`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_repetition_penalty", "mistake", "CTRL's rule as printed: divides every repeated logit by the "
             "penalty, which makes a negative one more likely", """
def repetition_penalty(logits, ids, penalty):
    out = logits.clone()
    for b in range(logits.shape[0]):
        seen = torch.unique(ids[b])
        out[b, seen] = logits[b, seen] / penalty
    return out
""", call="repetition_penalty", message=r"MORE likely")

wrong_answer("check_repetition_penalty", "edge", "penalises once per occurrence: a token seen three times "
             "is divided three times", """
def repetition_penalty(logits, ids, penalty):
    out = logits.clone()
    for b in range(logits.shape[0]):
        for t in ids[b].tolist():
            out[b, t] = out[b, t] * penalty if out[b, t] < 0 else out[b, t] / penalty
    return out
""", call="repetition_penalty", message=r"once per token")

wrong_answer("check_repetition_penalty", "mistake", "subtracts log(penalty) from every repeated logit (a "
             "shift, not a rescaling)", """
def repetition_penalty(logits, ids, penalty):
    out = logits.clone()
    for b in range(logits.shape[0]):
        seen = torch.unique(ids[b])
        out[b, seen] = logits[b, seen] - math.log(penalty)
    return out
""", call="repetition_penalty", message=r"penalty")

wrong_answer("check_repetition_penalty", "edge", "rescales in place: the caller's logits change too", """
def repetition_penalty(logits, ids, penalty):
    for b in range(logits.shape[0]):
        seen = torch.unique(ids[b])
        z = logits[b, seen]
        logits[b, seen] = torch.where(z < 0, z * penalty, z / penalty)
    return logits
""", call="repetition_penalty", message=r"in place")

wrong_answer("check_top_p_filter", "mistake", "removes where the cumulative sum *including* the token exceeds p "
             "(drops the token that crosses p)", """
def top_p_filter(logits, p):
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    remove_sorted = torch.cumsum(torch.softmax(sorted_logits, -1), -1) > p
    return logits.masked_fill(remove_sorted.scatter(-1, order, remove_sorted), float("-inf"))
""", call="top_p_filter", message=r"kept|removed|NaN")

wrong_answer("check_top_p_filter", "mistake", "forgets to scatter the marks back to vocabulary order", """
def top_p_filter(logits, p):
    sorted_logits, _ = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, -1)
    return logits.masked_fill(torch.cumsum(probs, -1) - probs >= p, float("-inf"))
""", call="top_p_filter", message=r"should be (kept|removed)")

wrong_answer("check_top_p_filter", "edge", "sorts in ascending order: keeps the least likely tokens", """
def top_p_filter(logits, p):
    sorted_logits, order = torch.sort(logits, dim=-1)
    probs = torch.softmax(sorted_logits, -1)
    remove_sorted = torch.cumsum(probs, -1) - probs >= p
    return logits.masked_fill(remove_sorted.scatter(-1, order, remove_sorted), float("-inf"))
""", call="top_p_filter", message=r"should be (kept|removed)")

wrong_answer("check_top_p_filter", "method", "the package's top_p_filter under another name", """
from fundamentallm.generation import top_p_filter as nucleus
def top_p_filter(logits, p):
    return nucleus(logits, p)
""", call="top_p_filter", message=r"asks you not to use fundamentallm\.generation\.top_p_filter")

wrong_answer("check_greedy_decode", "edge", "returns only the new tokens, without the prompt", """
def greedy_decode(table, ids, n):
    out = ids
    for _ in range(n):
        out = torch.cat([out, table[out[:, -1]].argmax(-1, keepdim=True)], dim=1)
    return out[:, ids.shape[1]:]
""", call="greedy_decode", message=r"expected shape")

wrong_answer("check_greedy_decode", "mistake", "reads the table's column of the last token, not its row", """
def greedy_decode(table, ids, n):
    for _ in range(n):
        ids = torch.cat([ids, table[:, ids[:, -1]].T.argmax(-1, keepdim=True)], dim=1)
    return ids
""", call="greedy_decode", message=r"argmax of the row")

wrong_answer("check_greedy_decode", "edge", "writes into the caller's prompt", """
def greedy_decode(table, ids, n):
    out = ids
    for _ in range(n):
        out = torch.cat([out, table[out[:, -1]].argmax(-1, keepdim=True)], dim=1)
    ids[0, 0] = (ids[0, 0] + 1) % 11
    return out
""", call="greedy_decode", message=r"modified")

wrong_answer("check_greedy_decode", "method", "wraps the table in a module and calls the package's generate", """
from fundamentallm.generation import generate as gen
class Bigram(nn.Module):
    def __init__(self, table):
        super().__init__()
        self.table = table
    def forward(self, ids):
        return self.table[ids]
def greedy_decode(table, ids, n):
    return gen(Bigram(table), ids, n, greedy=True)
""", call="greedy_decode", message=r"asks you not to use")

wrong_answer("check_min_p_filter", "mistake", "an absolute threshold: p >= min_p instead of min_p * p_max", """
def min_p_filter(logits, min_p):
    return logits.masked_fill(torch.softmax(logits, -1) < min_p, float("-inf"))
""", call="min_p_filter", message=r"min_p=0\.3")

wrong_answer("check_min_p_filter", "mistake", "compares logits instead of probabilities: z >= min_p * z_max", """
def min_p_filter(logits, min_p):
    return logits.masked_fill(logits < min_p * logits.amax(-1, keepdim=True), float("-inf"))
""", call="min_p_filter", message=r"should be (kept|removed)")

wrong_answer("check_min_p_filter", "value", "returns the filtered probabilities, not logits", """
def min_p_filter(logits, min_p):
    probs = torch.softmax(logits, -1)
    return torch.where(probs >= min_p * probs.amax(-1, keepdim=True), probs, torch.zeros_like(probs))
""", call="min_p_filter", message=r"-inf|unchanged")

_POSITIONS = """
def positions_processed(prompt_len, n_new, use_cache):
    if use_cache:
        return prompt_len + n_new - 1 if n_new else 0
    return n_new * prompt_len + n_new * (n_new - 1) // 2
"""

wrong_answer("check_positions_processed", "mistake", "predicts the one-token-prompt saving (n + 1) / 2 for "
             "P = 16", _POSITIONS, call="positions_processed, 10.5, 20", message=r"factor_p16: .*count both sides")

wrong_answer("check_positions_processed", "mistake", "predicts that a long prompt's saving keeps growing with P",
             _POSITIONS, call="positions_processed, 14.57, 1000", message=r"limit_factor: .*let P grow")

wrong_answer("check_positions_processed", "edge", "the cache also runs a forward pass after the last token "
             "(P + n, not P + n - 1)", """
def positions_processed(prompt_len, n_new, use_cache):
    if use_cache:
        return prompt_len + n_new
    return n_new * prompt_len + n_new * (n_new - 1) // 2
""", call="positions_processed, 14.57, 20", message=r"use_cache=True: .*once")

wrong_answer("check_positions_processed", "mistake", "counts only the new tokens when recomputing, as if the "
             "prompt were one token", """
def positions_processed(prompt_len, n_new, use_cache):
    if use_cache:
        return prompt_len + n_new - 1 if n_new else 0
    return n_new * (n_new + 1) // 2
""", call="positions_processed, 14.57, 20", message=r"use_cache=False: .*whole sequence")

wrong_answer("check_greedy_trap", "mistake", "a random table: greedy is usually (near) optimal on it", """
def make_trap():
    return torch.randn(6, 6, generator=torch.Generator().manual_seed(1)), 0
""", call="make_trap", message=r"within .* nats of the most likely one")

wrong_answer("check_greedy_trap", "mistake", "a trap that greedy falls into but 2 beams do too: the good path "
             "starts with the third most likely token", """
def make_trap():
    t = torch.zeros(6, 6)
    t[0] = torch.tensor([-9.0, 1.0, 0.9, 0.8, -9.0, -9.0])  # token 3 leads to certainty, ranked third
    t[3] = torch.full((6,), -20.0); t[3, 5] = 20.0
    t[5] = torch.full((6,), -20.0); t[5, 5] = 20.0
    return t, 0
""", call="make_trap", message=r"2 beams misses it too")

wrong_answer("check_greedy_trap", "edge", "a uniform table: every continuation ties, nothing to find", """
def make_trap():
    return torch.zeros(4, 4), 0
""", call="make_trap", message=r"within 0\.00 nats")

wrong_answer("check_greedy_trap", "value", "-inf logits for impossible steps", """
def make_trap():
    t = torch.full((4, 4), float("-inf"))
    t[0, 1], t[0, 2] = 0.4, 0.0
    t[1] = 0.0
    t[2, 3] = 0.0
    t[3, 3] = 0.0
    return t, 0
""", call="make_trap", message=r"NaN or inf")

wrong_answer("check_repetition_penalty", "method", "Hugging Face's RepetitionPenaltyLogitsProcessor", """
def repetition_penalty(logits, ids, penalty):
    from transformers import RepetitionPenaltyLogitsProcessor
    return RepetitionPenaltyLogitsProcessor(penalty)(ids, logits.clone())
""", call="repetition_penalty", message=r"not to use transformers")

wrong_answer("check_repetition_penalty", "edge", "a different rule at a logit of exactly 0 (pushes it to "
             "-log(penalty))", """
def repetition_penalty(logits, ids, penalty):
    out = logits.clone()
    for b in range(out.shape[0]):
        for t in set(ids[b].tolist()):
            z = float(out[b, t])
            out[b, t] = z * penalty if z < 0 else (z / penalty if z > 0 else -math.log(penalty))
    return out
""", call="repetition_penalty", message=r"exactly 0")

wrong_answer("check_top_p_filter", "method", "the chapter's one-row top_p_filter (cell 15) in a loop over the "
             "rows: no debugging, and not one batched pass", """
def _row(logits, p):
    if p >= 1.0:
        return logits
    probs = torch.softmax(logits.float(), dim=-1)
    keep = torch.zeros_like(logits, dtype=torch.bool)
    mass = 0.0
    for i in torch.argsort(logits, descending=True).tolist():
        if mass >= p:
            break
        keep[i] = True
        mass += probs[i].item()
    return logits.masked_fill(~keep, float("-inf"))

def top_p_filter(logits, p):
    rows = logits.reshape(-1, logits.shape[-1])
    return torch.stack([_row(r, p) for r in rows]).reshape(logits.shape)
""", call="top_p_filter", message=r"Python loop over the rows")

wrong_answer("check_top_p_filter", "method", "Hugging Face's TopPLogitsWarper", """
def top_p_filter(logits, p):
    from transformers import TopPLogitsWarper
    rows = logits.reshape(-1, logits.shape[-1]).clone()
    return TopPLogitsWarper(p)(None, rows).reshape(logits.shape)
""", call="top_p_filter", message=r"not to use transformers")

wrong_answer("check_min_p_filter", "method", "a Python loop over the rows", """
def min_p_filter(logits, min_p):
    rows = logits.reshape(-1, logits.shape[-1])
    out = []
    for r in rows:
        pr = torch.softmax(r, dim=-1)
        out.append(r.masked_fill(pr < min_p * pr.max(), float("-inf")))
    return torch.stack(out).reshape(logits.shape)
""", call="min_p_filter", message=r"Python loop over the rows")

wrong_answer("check_min_p_filter", "method", "Hugging Face's MinPLogitsWarper", """
def min_p_filter(logits, min_p):
    from transformers import MinPLogitsWarper
    rows = logits.reshape(-1, logits.shape[-1]).clone()
    return MinPLogitsWarper(min_p)(None, rows).reshape(logits.shape)
""", call="min_p_filter", message=r"not to use transformers")

wrong_answer("check_greedy_trap", "method", "a random search over tables with the package's beam_search", """
def make_trap():
    from fundamentallm.beam import beam_search

    class Bigram(nn.Module):
        def __init__(self, t):
            super().__init__()
            self.t = t

        def forward(self, ids):
            return self.t[ids]

    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        t = torch.randn(5, 5, generator=g, dtype=torch.float64) * 4
        beam_search(Bigram(t), torch.tensor([0]), num_beams=2, max_new_tokens=3, length_penalty=0.0)
    return t.float(), 0
""", call="make_trap", message=r"not to use fundamentallm\.beam")

wrong_answer("check_greedy_trap", "edge", "greedy misses the best path only through argmax's tie-break "
             "(two first tokens with equal logits)", """
def make_trap():
    t = torch.full((4, 4), -20.0)
    t[0] = torch.tensor([-20.0, 0.0, 0.0, -20.0])
    t[1] = 0.0
    t[2, 2] = 20.0
    return t, 0
""", call="make_trap", message=r"tie")

wrong_answer("check_greedy_trap", "method", "a search of its own: random tables until one passes, each scored "
             "by exhaustive enumeration (no design, no package)", """
import itertools
def make_trap():
    g = torch.Generator().manual_seed(0)
    while True:
        t = torch.randn(4, 4, generator=g) * 5
        lp = torch.log_softmax(t.double(), -1)
        seq, total = [0], 0.0
        for _ in range(3):
            k = int(lp[seq[-1]].argmax())
            total += float(lp[seq[-1], k])
            seq.append(k)
        best = max(sum(float(lp[a, b]) for a, b in zip((0,) + c, c))
                   for c in itertools.product(range(4), repeat=3))
        if best - total >= 1.2:
            return t, 0
""", call="make_trap", message=r"search over tables, not a design")
