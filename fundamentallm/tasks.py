"""The course's tasks: small problems with exact answers, to train on and to verify.

* the digit operations (chapter 12's capstone): ``Max ( 3 5 1 ) -> 5``, a 20-token vocabulary,
  seeded disjoint splits in an encoder (classification) and a decoder (completion) framing
  (:func:`digit_operations`, :func:`encode_digits`, :func:`decode_digits`);
* two-digit addition (chapter 15's post-training task), verifiable by a program
  (:func:`addition_splits`, :func:`digit_verifier`), optionally with fixed-width operands and the
  answer written least-significant digit first (:func:`format_addition`; Lee et al. 2024,
  arXiv:2307.03381), and a noisy "web" corpus of it to pretrain a base model on
  (:func:`web_corpus`).

``fundamentallm.data`` and ``fundamentallm.posttrain`` still export these names.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch.utils.data import TensorDataset

Pair = tuple[str, str]  # (question, answer)


# --- The digit-operations task (chapter 12) -------------------------------------------------------

# Exactly 20 tokens. Specials first (so <pad> = 0, as in the character tokenizer):
#   <pad> fills short sequences; <cls> starts the encoder's input (its vector is pooled, as BERT's
#   [CLS]); <mask> hides a digit for masked-language-model pre-training (Devlin et al. 2019).
# Then the ten digits, the five operation names, and the two brackets. In the decoder framing
# ")" doubles as the separator: the answer digit is the token that follows it.
OPERATIONS = ("First", "Second", "Last", "Max", "Min")
DIGIT_VOCAB = ("<pad>", "<cls>", "<mask>", *"0123456789", *OPERATIONS, "(", ")")
DIGIT_STOI = {tok: i for i, tok in enumerate(DIGIT_VOCAB)}
DIGIT_PAD, DIGIT_CLS, DIGIT_MASK, DIGIT_OFFSET = 0, 1, 2, 3  # token id of digit d = d + 3
_APPLY = {"First": lambda d: d[0], "Second": lambda d: d[1], "Last": lambda d: d[-1],
          "Max": max, "Min": min}


def encode_digits(text: str) -> list[int]:
    """``"Max ( 3 5 1 )"`` -> token ids (tokens are separated by spaces)."""
    unknown = [tok for tok in text.split() if tok not in DIGIT_STOI]
    if unknown:
        raise ValueError(f"unknown token(s) {unknown}; the vocabulary is {list(DIGIT_VOCAB)}")
    return [DIGIT_STOI[tok] for tok in text.split()]


def decode_digits(ids, skip_pad: bool = True) -> str:
    """Token ids -> ``"Max ( 3 5 1 )"``; padding is dropped unless ``skip_pad=False``."""
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    return " ".join(DIGIT_VOCAB[i] for i in ids if not (skip_pad and i == DIGIT_PAD))


@dataclass
class DigitSplit:
    """One split of the digit task, as tensors (N examples, padded to a common length).

    Encoder (classifier) framing: ``input_ids`` ``(N, L)`` = ``<cls> op ( d1 .. dk )`` + padding,
    ``attention_mask`` ``(N, L)`` (True on real tokens), ``labels`` ``(N,)`` = the answer digit
    0..9 (use ``TransformerClassifier(config, num_classes=10)``).
    Decoder (sequence-completion) framing: ``lm_input_ids`` ``(N, L)`` = ``op ( d1 .. dk ) ans``
    + padding and ``lm_targets`` ``(N, L)`` = -100 everywhere except at ")", whose target is the
    answer's token id -- so a causal ``Transformer`` is scored only on predicting the answer.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    lm_input_ids: torch.Tensor
    lm_targets: torch.Tensor
    operations: list[str]
    digits: list[list[int]]

    def __len__(self) -> int:
        return len(self.labels)

    def classification(self) -> TensorDataset:
        """``(input_ids, labels, attention_mask)`` triples, ready for :class:`Trainer`."""
        return TensorDataset(self.input_ids, self.labels, self.attention_mask)

    def completion(self) -> TensorDataset:
        """``(lm_input_ids, lm_targets)`` pairs for a causal language model."""
        return TensorDataset(self.lm_input_ids, self.lm_targets)


@dataclass
class DigitTask:
    train: DigitSplit
    val: DigitSplit
    test: DigitSplit
    vocab: tuple[str, ...] = DIGIT_VOCAB


def _make_split(examples: list[tuple[str, tuple[int, ...]]], max_len: int) -> DigitSplit:
    L = max_len + 4  # <cls> op ( ... )   and   op ( ... ) ans
    n = len(examples)
    enc = torch.full((n, L), DIGIT_PAD, dtype=torch.long)
    dec = torch.full((n, L), DIGIT_PAD, dtype=torch.long)
    targets = torch.full((n, L), -100, dtype=torch.long)
    labels = torch.empty(n, dtype=torch.long)
    for i, (op, digits) in enumerate(examples):
        answer = _APPLY[op](digits)
        body = [DIGIT_STOI[op], DIGIT_STOI["("], *(d + DIGIT_OFFSET for d in digits), DIGIT_STOI[")"]]
        enc[i, :len(body) + 1] = torch.tensor([DIGIT_CLS, *body])
        dec[i, :len(body) + 1] = torch.tensor([*body, answer + DIGIT_OFFSET])
        targets[i, len(body) - 1] = answer + DIGIT_OFFSET  # predicted at ")"
        labels[i] = answer
    return DigitSplit(enc, enc != DIGIT_PAD, labels, dec, targets,
                      [op for op, _ in examples], [list(d) for _, d in examples])


def digit_operations(n_train: int = 2000, n_val: int = 200, n_test: int = 200,
                     min_len: int = 2, max_len: int = 6,
                     operations: Sequence[str] = OPERATIONS, seed: int = 0) -> DigitTask:
    """Seeded examples ``op ( d1 .. dk ) -> answer`` with k in ``[min_len, max_len]`` digits.

    The three splits hold distinct examples (no (operation, digits) pair appears twice), so the
    test accuracy measures generalisation, not memorisation.
    """
    for name, value, low in (("n_train", n_train, 1), ("n_val", n_val, 0), ("n_test", n_test, 0),
                             ("min_len", min_len, 2), ("max_len", max_len, min_len)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}={value!r} must be an integer >= {low}")
    bad = [op for op in operations if op not in OPERATIONS]
    if bad or not operations:
        raise ValueError(f"operations={list(operations)!r} must be a non-empty subset of {list(OPERATIONS)}")
    total = n_train + n_val + n_test
    space = len(operations) * sum(10**k for k in range(min_len, max_len + 1))
    if total > space // 2:
        raise ValueError(f"{total} distinct examples requested but only {space} exist for lengths "
                         f"{min_len}..{max_len}; ask for fewer or allow longer sequences")
    rng = random.Random(seed)
    seen: set[tuple[str, tuple[int, ...]]] = set()
    examples = []
    while len(examples) < total:
        k = rng.randint(min_len, max_len)
        ex = (rng.choice(list(operations)), tuple(rng.randrange(10) for _ in range(k)))
        if ex not in seen:
            seen.add(ex)
            examples.append(ex)
    cut1, cut2 = n_train, n_train + n_val
    return DigitTask(_make_split(examples[:cut1], max_len), _make_split(examples[cut1:cut2], max_len),
                     _make_split(examples[cut2:], max_len))


# --- Two-digit addition, and its verifier (chapter 15) --------------------------------------------

def carries(a: int, b: int) -> int:
    """Number of columns of ``a + b`` that produce a carry: ``carries(58, 67) -> 2``."""
    count, carry = 0, 0
    while a or b:
        carry = int(a % 10 + b % 10 + carry >= 10)
        count += carry
        a, b = a // 10, b // 10
    return count


def _check_bool(**values) -> None:
    for name, value in values.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name}={value!r} must be True or False")


def format_addition(a: int, b: int, digits: tuple[int, int] = (2, 1), pad: bool = False,
                    reverse: bool = False) -> Pair:
    """One problem as ``(question, answer)``: ``(57, 8) -> ("57+8", "65")``. ``pad`` writes each
    operand at its fixed width (``7+8`` becomes ``07+8`` for ``digits=(2, 1)``), so every digit
    sits at the same position in every question; ``reverse`` writes the answer least-significant
    digit first (``"56"`` for 65), the order in which addition produces it: each digit then comes
    after the digits (and the carry) it depends on (Lee et al. 2024)."""
    _check_bool(pad=pad, reverse=reverse)
    x, y = (str(a).zfill(digits[0]), str(b).zfill(digits[1])) if pad else (str(a), str(b))
    total = str(a + b)
    return f"{x}+{y}", total[::-1] if reverse else total


def addition_splits(n_test: int = 200, n_hard: int = 200, digits: tuple[int, int] = (2, 1),
                    seed: int = 0, pad: bool = False, reverse: bool = False) -> dict[str, list[Pair]]:
    """All problems ``a+b`` with ``a < 10**digits[0]`` and ``b < 10**digits[1]``, split into
    ``hard`` (held out: a carry in every column where both numbers have a digit), ``test`` (held
    out, random) and ``train`` (the rest); disjoint. ``{"train": [("12+7", "19"), ...], ...}``.
    ``pad`` and ``reverse``: the format of :func:`format_addition` (judge reversed answers with
    ``digit_verifier(..., reverse=True)``); the same problems land in the same splits."""
    if (not isinstance(digits, (tuple, list)) or len(digits) != 2
            or any(isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= 3 for d in digits)):
        raise ValueError(f"digits={digits!r} must be two integers in 1..3 (digits of a and of b)")
    _check_bool(pad=pad, reverse=reverse)
    every = [(a, b) for a in range(10**digits[0]) for b in range(10**digits[1])]
    random.Random(seed).shuffle(every)
    hard = [p for p in every if carries(*p) >= min(digits)][:n_hard]
    taken = set(hard)
    test = [p for p in every if p not in taken][:n_test]
    taken |= set(test)
    if len(taken) > len(every) // 2:
        raise ValueError(f"n_test={n_test} and n_hard={n_hard} leave too few of the {len(every)} problems to train on")
    fmt = lambda ps: [format_addition(a, b, tuple(digits), pad, reverse) for a, b in ps]  # noqa: E731
    return {"train": fmt(p for p in every if p not in taken), "test": fmt(test), "hard": fmt(hard)}


def web_corpus(problems: Sequence[Pair], wrong: float = 0.25, other_formats: float = 0.25, seed: int = 0) -> str:
    """Text that looks like the web: mostly ``12+34=46`` lines, a share of wrong answers, other
    phrasings (``12 plus 34 is 46``, ``46=12+34``). A model trained on it continues text; nothing
    in it is a question followed by an answer."""
    rng = random.Random(seed)
    lines = []
    for q, ans in problems:
        a, b = q.split("+")
        if rng.random() < wrong:
            ans = str(max(0, int(ans) + rng.choice((-10, -1, 1, 10))))
        r = rng.random()
        lines.append(f"{a} plus {b} is {ans}" if r < other_formats / 2 else
                     f"{ans}={q}" if r < other_formats else f"{q}={ans}")
    return "\n".join(lines) + "\n"


def digit_verifier(question: str, answer: Optional[str], reverse: bool = False) -> float:
    """1.0 if ``answer`` is exactly the sum asked by ``question`` (``"12+34"``, operands may be
    zero-padded: ``"07+8"``), written least-significant digit first if ``reverse`` (``"56"`` for
    ``"57+8"``), else 0.0. Pass it as a reward function with ``functools.partial(digit_verifier,
    reverse=True)``."""
    _check_bool(reverse=reverse)
    a, b = question.split("+")
    total = str(int(a) + int(b))
    return float(answer is not None and answer == (total[::-1] if reverse else total))
