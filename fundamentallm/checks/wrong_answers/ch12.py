"""Chapter 12's wrong-answer table: the answers each check of :mod:`fundamentallm.checks.ch12`
must reject, run live by ``python -m fundamentallm.course catches --chapter 12`` and by
``tests/test_catches.py`` (see :mod:`fundamentallm.checks.wrong`)."""

from ..wrong import wrong_answer

wrong_answer("check_apply_operation", "mistake", "Last as the second-to-last digit (an off-by-one)", """
def apply_operation(op, digits):
    rules = {"First": 0, "Second": 1, "Last": -2}
    if op in rules:
        return digits[rules[op]]
    if op in ("Max", "Min"):
        return max(digits) if op == "Max" else min(digits)
    raise ValueError(f"op={op!r}; allowed First, Second, Last, Max, Min")
""", call="apply_operation", message=r"expected")

wrong_answer("check_apply_operation", "edge", "sorts the caller's list in place", """
def apply_operation(op, digits):
    if op not in ("First", "Second", "Last", "Max", "Min"):
        raise ValueError(f"op={op!r}; allowed First, Second, Last, Max, Min")
    first, second, last = digits[0], digits[1], digits[-1]
    digits.sort()
    return {"First": first, "Second": second, "Last": last, "Max": digits[-1], "Min": digits[0]}[op]
""", call="apply_operation", message=r"modified its argument")

wrong_answer("check_apply_operation", "value", "returns None for an unknown operation instead of raising", """
def apply_operation(op, digits):
    return {"First": digits[0], "Second": digits[1], "Last": digits[-1], "Max": max(digits),
            "Min": min(digits)}.get(op)
""", call="apply_operation", message=r"returned None")

wrong_answer("check_apply_operation", "value", "returns the answer as a token string, '5', not the int 5", """
def apply_operation(op, digits):
    if op not in ("First", "Second", "Last", "Max", "Min"):
        raise ValueError(f"op={op!r}; allowed First, Second, Last, Max, Min")
    return str({"First": digits[0], "Second": digits[1], "Last": digits[-1], "Max": max(digits),
                "Min": min(digits)}[op])
""", call="apply_operation", message=r"the answer is a digit as an int")

wrong_answer("check_apply_operation", "mistake", "a ValueError that names the operation but not the allowed ones", """
def apply_operation(op, digits):
    rules = {"First": lambda d: d[0], "Second": lambda d: d[1], "Last": lambda d: d[-1], "Max": max, "Min": min}
    if op not in rules:
        raise ValueError(f"unknown operation {op!r}")
    return rules[op](digits)
""", call="apply_operation", message=r"and the allowed operations")

wrong_answer("check_decoder_framing", "method", "the chapter's own framing, unchanged: lossless, but not solved", """
def frame(op, digits):
    return [op, "(", *[str(d) for d in digits], ")"]
""", call="frame", message=r"validation accuracy")

wrong_answer("check_decoder_framing", "mistake", "smuggles the answer in, as an extra digit", """
def frame(op, digits):
    answer = {"First": digits[0], "Second": digits[1], "Last": digits[-1], "Max": max(digits), "Min": min(digits)}[op]
    return [op, "(", *[str(d) for d in digits], ")", str(answer)]
""", call="frame", message=r"digit tokens of your framing")

wrong_answer("check_decoder_framing", "mistake", "smuggles the answer in, in base 4, in bracket and special tokens", """
def frame(op, digits):
    sym = ["(", ")", "<cls>", "<mask>"]
    answer = {"First": digits[0], "Second": digits[1], "Last": digits[-1], "Max": max(digits), "Min": min(digits)}[op]
    return [op, "(", *[str(d) for d in digits], ")", sym[answer // 4], sym[answer % 4]]
""", call="frame", message=r"depend only\s+on the operation and the number of digits")

wrong_answer("check_decoder_framing", "edge", "places the digits by the answer (the digits move, the other tokens do not)", """
def frame(op, digits):
    answer = {"First": digits[0], "Second": digits[1], "Last": digits[-1], "Max": max(digits), "Min": min(digits)}[op]
    pad = ["<cls>"] * (answer % 3)
    return [op, *pad, "(", *[str(d) for d in digits], ")", *["<cls>"] * (2 - answer % 3)]
""", call="frame", message=r"where the digits stand")

wrong_answer("check_decoder_framing", "mistake", "drops the operation: the model cannot tell Max from Min", """
def frame(op, digits):
    return ["(", *[str(d) for d in digits], ")"]
""", call="frame", message=r"must name the operation")

wrong_answer("check_decoder_framing", "edge", "sorts the digits (the positional operations lose their order)", """
def frame(op, digits):
    return [op, "(", *[str(d) for d in sorted(digits)], ")", op]
""", call="frame", message=r"digits in order")

wrong_answer("check_mean_pool", "mistake", "hidden.mean(dim=1): padding averaged in", """
def mean_pool(hidden, mask):
    return hidden.mean(dim=1)
""", call="mean_pool, 0.1413", message=r"output for")

wrong_answer("check_mean_pool", "mistake", "masks the padding but divides by T", """
def mean_pool(hidden, mask):
    return (hidden * mask.to(hidden.dtype).unsqueeze(-1)).sum(1) / hidden.shape[1]
""", call="mean_pool, 0.1413", message=r"output for")

wrong_answer("check_mean_pool", "edge", "assumes the padding is at the end (counts a prefix)", """
def mean_pool(hidden, mask):
    n = mask.long().sum(1)
    return torch.stack([hidden[b, :int(n[b])].mean(0) for b in range(hidden.shape[0])])
""", call="mean_pool, 0.1413", message=r"padding in the middle")

_MEAN = """
def mean_pool(hidden, mask):
    keep = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * keep).sum(1) / keep.sum(1)
"""

wrong_answer("check_mean_pool", "mistake", "predicts the padding's weight as if a k-digit example had k real tokens",
             _MEAN, call="mean_pool, 0.5413",
             message=r"predicted_padding: .* not right")

wrong_answer("check_mean_pool", "edge", "averages the padding weight over the five lengths, not over the examples",
             _MEAN, call="mean_pool, 0.2", message=r"predicted_padding: .* not right")

_EXACT = """
def exact(input_ids, seed, mask_id=2, vocab_size=20, special_ids=(0, 1), select_prob=0.15, *, uniform=True):
    g = torch.Generator().manual_seed(seed)
    shape = input_ids.shape
    eligible = ~torch.isin(input_ids, torch.tensor(special_ids, dtype=input_ids.dtype))
    n = eligible.sum(1)
    k = torch.minimum((select_prob * n).round().long().clamp(min=1), n)
    if uniform:
        keys = torch.rand(shape, generator=g).masked_fill(~eligible, 2.0)
    else:  # the first eligible positions of each row
        keys = torch.arange(shape[1], dtype=torch.float).expand(shape).masked_fill(~eligible, 1e9)
    selected = keys.argsort(1).argsort(1) < k[:, None]
    labels = torch.where(selected, input_ids, -100)
    u = torch.rand(shape, generator=g)
    rand = torch.randint(vocab_size, shape, generator=g)
    out = torch.where(selected & (u < 0.8), mask_id, input_ids)
    return torch.where(selected & (u >= 0.8) & (u < 0.9), rand, out), labels
"""

wrong_answer("check_mlm_mask_exact", "method", "the chapter's per-token rule (mask_tokens), copied", """
def per_token(input_ids, seed, mask_id=2, vocab_size=20, special_ids=(0, 1), select_prob=0.15):
    g = torch.Generator().manual_seed(seed)
    special = torch.isin(input_ids, torch.tensor(special_ids, dtype=input_ids.dtype))
    labels, inputs = input_ids.clone(), input_ids.clone()
    shape = input_ids.shape
    selected = torch.bernoulli(torch.full(shape, select_prob).masked_fill(special, 0.0), generator=g).bool()
    labels[~selected] = -100
    to_mask = torch.bernoulli(torch.full(shape, 0.8), generator=g).bool() & selected
    inputs[to_mask] = mask_id
    to_random = torch.bernoulli(torch.full(shape, 0.5), generator=g).bool() & selected & ~to_mask
    inputs[to_random] = torch.randint(vocab_size, shape, generator=g)[to_random]
    return inputs, labels
""", call="per_token, 0.85 ** 5", message=r"fixed number per row")

wrong_answer("check_mlm_mask_exact", "mistake", "the right counts, but always the first eligible positions", _EXACT,
             call="lambda *a, **k: exact(*a, **k, uniform=False), 0.85 ** 5", message=r"equally likely")

wrong_answer("check_mlm_mask_exact", "mistake", "predicts 0.15 ** 5 (all five selected) for no token selected", _EXACT,
             call="exact, 0.15 ** 5", message=r"predicted_empty: .* not right")

wrong_answer("check_mlm_mask_exact", "edge", "draws from the global generator: not reproducible from the seed", _EXACT + """
def global_rng(input_ids, seed, *args, **kwargs):
    return exact(input_ids, int(torch.randint(0, 10 ** 6, (1,))), *args, **kwargs)
""", call="global_rng, 0.85 ** 5", message=r"same seed gave different results")

wrong_answer("check_mlm_mask_exact", "value", "a NaN prediction", _EXACT, call="exact, float('nan')", message=r"is nan: the answer is a finite number")

wrong_answer("check_mlm_mask_exact", "mistake", "the random replacement is never the original token", _EXACT.replace(
    "rand = torch.randint(vocab_size, shape, generator=g)",
    "rand = (input_ids + 1 + torch.randint(vocab_size - 1, shape, generator=g)) % vocab_size"),
             call="exact, 0.85 ** 5", message=r"all of\s+range\(vocab_size\)")

wrong_answer("check_mlm_shares", "mistake", "the rule's 80/10/10, ignoring that a random draw can hit <mask> or the original", """
def shares(vocab_size, mask_prob=0.8, random_prob=0.1):
    return {"mask": mask_prob, "random": random_prob, "unchanged": 1 - mask_prob - random_prob}
""", call="shares", message=r"is not right\. Follow a selected")

wrong_answer("check_mlm_shares", "mistake", "counts the hits on the original but not on <mask>", """
def shares(vocab_size, mask_prob=0.8, random_prob=0.1):
    hit = random_prob / vocab_size
    return {"mask": mask_prob, "random": random_prob - hit, "unchanged": 1 - mask_prob - random_prob + hit}
""", call="shares", message=r"is not right\. Follow a selected")

wrong_answer("check_mlm_shares", "value", "NaN where the draw is undefined (a 0/0)", """
def shares(vocab_size, mask_prob=0.8, random_prob=0.1):
    hit = random_prob / vocab_size
    return {"mask": float("nan"), "random": random_prob - 2 * hit, "unchanged": 1 - mask_prob - random_prob + hit}
""", call="shares", message=r"is nan: the answer is a finite number")

_SUM = """
import random
def sum_examples(n, seed, min_len=2, max_len=6, *, label=lambda d: sum(d) % 10, dedupe=True,
                 length=lambda r, lo, hi: r.randint(lo, hi), draw=lambda r, k: [r.randrange(10) for _ in range(k)]):
    r, seen, out = random.Random(seed), set(), []
    while len(out) < n:
        d = tuple(draw(r, length(r, min_len, max_len)))
        if dedupe and d in seen:
            continue
        seen.add(d)
        out.append(["Sum", "(", *map(str, d), ")", str(label(d))])
    return out
"""

wrong_answer("check_sum_examples", "mistake", "the sum itself as the answer, not its last digit", _SUM + """
def whole_sum(n, seed, min_len=2, max_len=6):
    return sum_examples(n, seed, min_len, max_len, label=sum)
""", call="whole_sum", message=r"the answer token is wrong")

wrong_answer("check_sum_examples", "mistake", "draws without checking for repeats", _SUM + """
def repeats(n, seed, min_len=2, max_len=6):
    return sum_examples(n, seed, min_len, max_len, dedupe=False)
""", call="repeats", message=r"repeat")

wrong_answer("check_sum_examples", "edge", "draws a k-digit number: never a leading 0", _SUM + """
def as_number(n, seed, min_len=2, max_len=6):
    return sum_examples(n, seed, min_len, max_len,
                        draw=lambda r, k: map(int, str(r.randint(10 ** (k - 1), 10 ** k - 1))))
""", call="as_number", message=r"start with the digit 0")

wrong_answer("check_sum_examples", "edge", "randrange(min_len, max_len): max_len never drawn", _SUM + """
def short(n, seed, min_len=2, max_len=6):
    return sum_examples(n, seed, min_len, max_len, length=lambda r, lo, hi: r.randrange(lo, hi))
""", call="short", message=r"both ends included")

wrong_answer("check_sum_examples", "method", "seeds Python's global generator instead of its own random.Random(seed)", """
import random
def sum_examples(n, seed, min_len=2, max_len=6):
    random.seed(seed)
    seen, out = set(), []
    while len(out) < n:
        d = tuple(random.randrange(10) for _ in range(random.randint(min_len, max_len)))
        if d not in seen:
            seen.add(d)
            out.append(["Sum", "(", *map(str, d), ")", str(sum(d) % 10)])
    return out
""", call="sum_examples", message=r"global random generator")

wrong_answer("check_sum_examples", "method", "reuses the package's generator for Max and renames the operation", """
from fundamentallm.data import digit_operations
def sum_examples(n, seed, min_len=2, max_len=6):
    split = digit_operations(n_train=n, n_val=0, n_test=0, min_len=min_len, max_len=max_len,
                             operations=("Max",), seed=seed).train
    return [["Sum", "(", *map(str, d), ")", str(int(y))] for d, y in zip(split.digits, split.labels)]
""", call="sum_examples", message=r"asks you not to use|answer token is wrong")
