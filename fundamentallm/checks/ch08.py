"""Checks for the exercises of chapter 8: tokens and data."""

from __future__ import annotations

import re
from typing import Any, Callable

import torch

from ..tokenizers import _merge  # the package's pair replacement is the reference
from .core import CheckFailed, assert_same, check_shape, exercise_check
from .predict import int_list, require_prediction


def _ch08_int_list(got: Any, what: str) -> list[int]:
    """The student's sequence of token ids as a list of Python ints (tensor, list or tuple)."""
    if got is None:
        raise CheckFailed(f"{what}: got None -- did you forget to return a value?")
    if isinstance(got, torch.Tensor):
        got = got.tolist()
    if not isinstance(got, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                     for i in got):
        raise CheckFailed(f"{what}: expected a list of integer ids, got {type(got).__name__} "
                          f"{str(got)[:60]}")
    return list(got)


def _ch08_compare_ids(got: list[int], expected: list[int], what: str) -> None:
    if got != expected:
        if len(got) != len(expected):
            raise CheckFailed(f"{what}: expected {len(expected)} ids, got {len(got)} "
                              f"(expected {expected[:12]}..., got {got[:12]}...)")
        i = next(j for j, (a, b) in enumerate(zip(got, expected)) if a != b)
        raise CheckFailed(f"{what}: first mismatch at position {i}: expected {expected[i]}, "
                          f"got {got[i]} (expected {expected[max(0, i - 3):i + 4]} around it, "
                          f"got {got[max(0, i - 3):i + 4]})")


@exercise_check
def check_char_encode(char_encode: Callable) -> str:
    """``char_encode(text, stoi, unk_id)`` -> one id per character; characters missing from
    ``stoi`` become ``unk_id``."""
    base = {c: i for i, c in enumerate("abc ", start=2)}
    cases = [
        ("'a cab' (all characters known)", "a cab", base, 1),
        ("'a zebra' (z, e, r are unknown)", "a zebra", base, 1),
        ("the empty string", "", base, 1),
        ("unicode text with unk_id=99", "café → ok", {c: i for i, c in enumerate("acfé ok")}, 99),
        ("a vocabulary built from 'hello world'", "hello, world!",
         {c: i for i, c in enumerate(sorted(set("hello world")), start=2)}, 1),
    ]
    for name, text, stoi, unk_id in cases:
        stoi_copy = dict(stoi)
        got = _ch08_int_list(char_encode(text, stoi_copy, unk_id), f"ids for {name}")
        if stoi_copy != stoi:
            raise CheckFailed(f"for {name}: you changed stoi; encoding must not add characters")
        expected = [stoi[c] if c in stoi else unk_id for c in text]
        _ch08_compare_ids(got, expected, f"ids for {name} (unknown characters -> unk_id={unk_id})")
    return f"correct on {len(cases)} texts, unknown characters included"


@exercise_check
def check_make_windows(make_windows: Callable) -> str:
    """``make_windows(ids, block_size)`` -> ``(x, y)``, each ``(N, block_size)`` with
    ``N = len(ids) - block_size``: row ``i`` is ``ids[i:i+T]`` and its target ``ids[i+1:i+T+1]``."""
    g = torch.Generator().manual_seed(802)
    cases = [
        ("ids 0..9 with block_size=3", torch.arange(10), 3),
        ("ids 0..9 with block_size=1", torch.arange(10), 1),
        ("5 ids with block_size=4 (exactly one window)", torch.tensor([7, 3, 9, 1, 4]), 4),
        ("100 random ids with block_size=8", torch.randint(50, (100,), generator=g), 8),
    ]
    for name, ids, T in cases:
        ids_copy = ids.clone()
        res = make_windows(ids_copy, T)
        if not torch.equal(ids_copy, ids):
            raise CheckFailed(f"for {name}: you modified ids in place")
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise CheckFailed(f"for {name}: return a pair (x, y), got {type(res).__name__}")
        windows = ids.unfold(0, T + 1, 1)  # (N, T + 1): every window of T + 1 consecutive ids
        N = len(ids) - T
        x, y = (torch.as_tensor(t) for t in res)
        check_shape(x, (N, T), what=f"x for {name} (N = len(ids) - block_size windows)")
        check_shape(y, (N, T), what=f"y for {name}")
        assert_same(x, windows[:, :-1], what=f"x for {name}")
        assert_same(y, windows[:, 1:], what=f"y for {name} (x shifted left by one)")
    return f"correct on {len(cases)} cases"


def _ch08_target_counts_reference(n: int, block_size: int) -> torch.Tensor:
    counts = torch.zeros(n, dtype=torch.long)
    for i in range(n - block_size):  # window i predicts ids[i + 1 : i + block_size + 1]
        counts[i + 1:i + block_size + 1] += 1
    return counts


@exercise_check
def check_target_counts(target_counts: Callable, predicted_counts: Any) -> str:
    """``predicted_counts`` (the prediction for n = 10, T = 3, a list of 10 ints) and
    ``target_counts(n, block_size)`` -> ``(n,)`` int tensor: in how many of the ``n - block_size``
    windows of eq. (ch08-windows) token ``j`` of the stream is a target."""
    require_prediction(predicted_counts, "predicted_counts", "10 ints, one per token, for n = 10 and T = 3")
    predicted = int_list(predicted_counts, "predicted_counts")
    truth = _ch08_target_counts_reference(10, 3).tolist()
    if len(predicted) != 10:
        raise CheckFailed(f"predicted_counts: expected 10 counts (one per token of the stream), got {len(predicted)}")
    if predicted != truth:
        j = next(i for i, (a, b) in enumerate(zip(predicted, truth)) if a != b)
        raise CheckFailed(f"predicted_counts: token {j} is a target of {truth[j]} windows, not "
                          f"{predicted[j]}; list the windows i = 0..6 and their targets i + 1..i + 3")
    cases = [(10, 3), (5, 4), (20, 1), (9, 8), (12, 5), (1000, 64), (300, 299)]
    for n, block_size in cases:
        got = target_counts(n, block_size)
        if got is None:
            raise CheckFailed(f"n={n}, block_size={block_size}: got None -- return a tensor of n counts")
        got = torch.as_tensor(got)
        check_shape(got, (n,), f"target_counts({n}, {block_size})")
        assert_same(got.long(), _ch08_target_counts_reference(n, block_size),
                    f"target_counts({n}, {block_size})")
    return f"{len(cases)} stream lengths and window sizes, edges included"


# --- BPE: predict the tokens; encode within chunks ------------------------------------------------

def _ch08_train_bpe(text: str, num_merges: int) -> dict:
    """Reference BPE training on the UTF-8 bytes: most frequent pair (overlaps counted), the
    smallest pair among equals, left-to-right replacement; stops when no pair occurs twice."""
    ids, merges = list(text.encode("utf-8")), {}
    for new_id in range(256, 256 + num_merges):
        counts: dict = {}
        for pair in zip(ids, ids[1:]):
            counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        if counts[pair] < 2:
            break
        merges[pair] = new_id
        ids = _merge(ids, pair, new_id)
    return merges


def _ch08_encode(data: bytes, merges: dict) -> list:
    ids = list(data)
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=lambda p: merges.get(p, float("inf")))
        if pair not in merges:
            break
        ids = _merge(ids, pair, merges[pair])
    return ids


def _ch08_token_strings(ids: list, merges: dict) -> list:
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new_id in merges.items():
        vocab[new_id] = vocab[a] + vocab[b]
    return [vocab[i].decode("utf-8", errors="replace") for i in ids]


BPE_PREDICT_TEXT = "abcabcabd"


@exercise_check
def check_bpe_prediction(predicted_tokens: Any) -> str:
    """``predicted_tokens``: the tokens (as strings) of ``"abcabcabd"`` after training byte-level BPE
    on that text alone, with the chapter's rules (overlapping pairs counted, the smallest pair
    among equals, stop when no pair occurs twice)."""
    require_prediction(predicted_tokens, "predicted_tokens", "a list of strings")
    if not isinstance(predicted_tokens, (list, tuple)) or not all(isinstance(t, str) for t in predicted_tokens):
        raise CheckFailed(f"predicted_tokens must be a list of strings, got {str(predicted_tokens)[:60]}")
    merges = _ch08_train_bpe(BPE_PREDICT_TEXT, 20)
    truth = _ch08_token_strings(_ch08_encode(BPE_PREDICT_TEXT.encode(), merges), merges)
    got = list(predicted_tokens)
    if "".join(got) != BPE_PREDICT_TEXT:
        raise CheckFailed(f"your tokens join to {''.join(got)!r}, not {BPE_PREDICT_TEXT!r}: BPE "
                          f"loses nothing, so the tokens must spell the text")
    if got != truth:
        i = next((j for j, (a, b) in enumerate(zip(got, truth)) if a != b), min(len(got), len(truth)))
        raise CheckFailed(f"token {i} differs from what training gives ({len(truth)} tokens in all, "
                          f"you predicted {len(got)}); after the first merge, count the pairs again, "
                          f"and remember the tie rule: the smallest pair of ids wins, and a new id is "
                          f"larger than every byte")
    return f"{len(merges)} merges, tokens {truth}"


_CH08_PATTERN = r"'(?:s|t|re|ve|m|ll|d)| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+"


@exercise_check(forbidden=("fundamentallm.tokenizers",))
def check_chunked_bpe_encode(chunked_bpe_encode: Callable) -> str:
    """``chunked_bpe_encode(text, merges, pattern)`` -> the ids of each chunk of
    ``re.findall(pattern, text)`` encoded on its own (earliest-learned merge first), concatenated.
    The merges are learned on text without chunks, so some of them cross a chunk boundary."""
    train = ("the cat sat on the mat. the hat is on the cat, and the rat sat there; "
             "then the cat ate the rat's hat. 123 + 456 = 579 ") * 3
    merges = _ch08_train_bpe(train, 60)
    texts = [("a sentence of the training text", "the cat sat on the mat."),
             ("words the merges span across", "sat on the mat, the hat"),
             ("digits and punctuation", "123 + 456 = 579!"),
             ("text with unicode", "the café → a hat"),
             ("the empty string", ""),
             ("a contraction and several spaces", "the rat's   hat  ")]
    cases = [(what, text, merges) for what, text in texts]
    cases.append(("'abc ab bc' with two merges that compete for the 'b' ('bc' learned first)",
                  "abc ab bc", {(98, 99): 256, (97, 98): 257}))
    for what, text, merges in cases:
        got = _ch08_int_list(chunked_bpe_encode(text, dict(merges), _CH08_PATTERN), f"ids of {what}")
        chunks = re.findall(_CH08_PATTERN, text)
        expected = [i for chunk in chunks for i in _ch08_encode(chunk.encode("utf-8"), merges)]
        if len(merges) > 2 and got == _ch08_encode(text.encode("utf-8"), merges) and got != expected:
            raise CheckFailed(f"{what} ({text!r}): you encoded the whole text at once; split it with "
                              f"re.findall(pattern, text) and encode each chunk on its own, so that no "
                              f"merge crosses a chunk boundary")
        _ch08_compare_ids(got, expected, f"ids of {what} ({text!r}); apply the earliest-learned merge "
                                         f"present first")
    return f"{len(cases)} texts, merges that cross chunk boundaries and merges that compete"
