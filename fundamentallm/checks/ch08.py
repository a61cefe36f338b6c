"""Checks for the exercises of chapter 8: tokens and data."""

from __future__ import annotations

import inspect
import re
import types
from typing import Any, Callable

import numpy as np
import torch

from ..tokenizers import _merge  # the package's pair replacement is the reference
from .core import CheckFailed, assert_same, check_shape, exercise_check, rng
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
        ("'Hi hI' (case matters: 'I' is unknown, 'i' is known)", "Hi hI",
         {c: i for i, c in enumerate("Hih ", start=2)}, 1),
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


@exercise_check(forbidden=("torch.Tensor.unfold", "torch.Tensor.as_strided", "torch.as_strided",
                           "numpy.lib.stride_tricks.sliding_window_view", "numpy.lib.stride_tricks.as_strided",
                           "fundamentallm.data.TextDataset.__getitem__", "fundamentallm.data.get_batch"))
def check_make_windows(make_windows: Callable) -> str:
    """``make_windows(ids, block_size, stride)`` -> ``(x, y)``, each ``(N, block_size)``: the windows
    that start at ``0, stride, 2 stride, ...`` and still have a target, ``x`` row ``i`` =
    ``ids[s:s+T]``, ``y`` row ``i`` = ``ids[s+1:s+T+1]`` with ``s = i * stride``."""
    g = rng(802)
    n_random = int(torch.randint(60, 140, (1,), generator=g))
    cases = [
        ("ids 0..9 with block_size=3, stride=1", torch.arange(10), 3, 1),
        ("ids 0..9 with block_size=3, stride=3", torch.arange(10), 3, 3),
        ("ids 0..10 with block_size=3, stride=3 (the last window ends on the last id)", torch.arange(11), 3, 3),
        ("5 ids with block_size=4, stride=2 (exactly one window)", torch.tensor([7, 3, 9, 1, 4]), 4, 2),
        ("ids 0..11 with block_size=2, stride=5", torch.arange(12), 2, 5),
        (f"{n_random} random ids with block_size=8, stride=8", torch.randint(50, (n_random,), generator=g), 8, 8),
    ]
    for name, ids, T, stride in cases:
        ids_copy = ids.clone()
        res = make_windows(ids_copy, T, stride)
        if not torch.equal(ids_copy, ids):
            raise CheckFailed(f"for {name}: you modified ids in place")
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise CheckFailed(f"for {name}: return a pair (x, y), got {type(res).__name__}")
        windows = ids.unfold(0, T + 1, stride)  # every window of T + 1 ids that fits, every stride
        x, y = (torch.as_tensor(t) for t in res)
        if x.shape[0] != windows.shape[0] and x.dim() == 2 and x.shape[1] == T:
            fewer = x.shape[0] < windows.shape[0]
            raise CheckFailed(f"for {name}: {x.shape[0]} windows, {'too few' if fewer else 'too many'} -- "
                              f"which is the last start whose window still has a target for every position?")
        check_shape(x, tuple(windows[:, :-1].shape), what=f"x for {name}")
        check_shape(y, tuple(windows[:, 1:].shape), what=f"y for {name}")
        assert_same(x, windows[:, :-1], what=f"x for {name}")
        assert_same(y, windows[:, 1:], what=f"y for {name} (each x shifted left by one)")
    return f"correct on {len(cases)} cases, strides that do and do not divide the stream"


def _ch08_target_counts_reference(n: int, block_size: int, stride: int = 1) -> torch.Tensor:
    counts = torch.zeros(n, dtype=torch.long)
    for s in range(0, n - block_size, stride):  # window s predicts ids[s + 1 : s + block_size + 1]
        counts[s + 1:s + block_size + 1] += 1
    return counts


@exercise_check
def check_target_counts(target_counts: Callable, predicted_counts: Any) -> str:
    """``predicted_counts`` (the prediction for n = 10, T = 3, stride 2: a list of 10 ints) and
    ``target_counts(n, block_size, stride)`` -> ``(n,)`` int tensor: in how many of the windows of
    exercise 4 (starts 0, stride, 2 stride, ... while the window has all its targets) token ``j``
    of the stream is a target."""
    require_prediction(predicted_counts, "predicted_counts", "10 ints, one per token, for n = 10, T = 3, stride 2")
    predicted = int_list(predicted_counts, "predicted_counts")
    truth = _ch08_target_counts_reference(10, 3, 2).tolist()
    if len(predicted) != 10:
        raise CheckFailed(f"predicted_counts: expected 10 counts (one per token of the stream), got {len(predicted)}")
    if predicted != truth:
        as_inputs = [0] * 10
        for start in range(0, 10 - 3, 2):
            for j in range(start, start + 3):
                as_inputs[j] += 1
        if predicted == as_inputs:
            why = "you counted where each token is an input; a target is the input shifted by one"
        elif predicted == _ch08_target_counts_reference(10, 3, 1).tolist():
            why = "those are the counts of stride 1; with stride 2 only every other start is a window"
        elif len(set(predicted)) == 1:
            why = "not every token is in the same number of windows: look at both ends, and at where windows overlap"
        else:
            why = "list the windows' starts and the positions of their targets, then count per token"
        raise CheckFailed(f"predicted_counts: {sum(a != b for a, b in zip(predicted, truth))} of the 10 counts "
                          f"are wrong -- {why}")
    cases = [(10, 3, 1), (10, 3, 2), (5, 4, 1), (20, 1, 3), (9, 8, 1), (12, 5, 5), (13, 3, 5), (1000, 64, 64),
             (1000, 64, 7), (300, 299, 1), (7, 3, 10), (4, 4, 1)]
    for n, block_size, stride in cases:
        got = target_counts(n, block_size, stride)
        if got is None:
            raise CheckFailed(f"n={n}, block_size={block_size}, stride={stride}: got None -- return a tensor of n counts")
        got = torch.as_tensor(got)
        what = f"target_counts({n}, {block_size}, {stride})"
        check_shape(got, (n,), what)
        expected = _ch08_target_counts_reference(n, block_size, stride)
        if not torch.equal(got.long(), expected):
            if stride > 1 and torch.equal(got.long(), _ch08_target_counts_reference(n, block_size, 1)):
                raise CheckFailed(f"{what}: these are the counts of stride 1; which windows does a stride "
                                  f"of {stride} keep?")
            assert_same(got.long(), expected, what + " (which windows exist, and which targets does each hold?)")
    return (f"{len(cases)} streams, window sizes and strides: a stride above the window, a stream with "
            f"no complete window and a single window included")


# --- BPE: predict the tokens; encode within chunks ------------------------------------------------

_CH08_TIE_RULES = ("greatest bytes", "smallest ids", "first seen", "smallest bytes")


def _ch08_train_bpe(text: str, num_merges: int, tie: str = "greatest bytes") -> dict:
    """Reference BPE training on the UTF-8 bytes: most frequent pair (overlaps counted), left-to-right
    replacement, stop when no pair occurs twice. Ties: the chapter's rule (and the package's default,
    ``tie="lexicographic"``) takes the pair whose bytes are greatest, first token's bytes then the
    second's; the other rules exist to recognise a prediction made with them."""
    ids, merges = list(text.encode("utf-8")), {}
    vocab = {i: bytes([i]) for i in range(256)}
    for new_id in range(256, 256 + num_merges):
        counts: dict = {}
        for pair in zip(ids, ids[1:]):  # insertion order = order first seen
            counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        if tie == "greatest bytes":
            pair = max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))
        elif tie == "smallest ids":
            pair = min(counts, key=lambda p: (-counts[p], p))
        elif tie == "first seen":
            pair = max(counts, key=counts.get)  # the first maximal one
        elif tie == "smallest bytes":
            pair = min(counts, key=lambda p: (-counts[p], vocab[p[0]], vocab[p[1]]))
        else:
            raise ValueError(f"tie={tie!r} must be one of {list(_CH08_TIE_RULES)}")
        if counts[pair] < 2:
            break
        merges[pair] = new_id
        vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
        ids = _merge(ids, pair, new_id)
    return merges


def _ch08_merge_strings(merges: dict) -> list:
    """The merged tokens, as strings, in the order they were learned."""
    vocab = {i: bytes([i]) for i in range(256)}
    out = []
    for (a, b), new_id in merges.items():
        vocab[new_id] = vocab[a] + vocab[b]
        out.append(vocab[new_id].decode("utf-8", errors="replace"))
    return out


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


BPE_PREDICT_TEXT = "ab.xy.ab.xy"


BPE_LONG_PERIOD, BPE_LONG_REPEATS = "ab.xy.", 2 ** 40  # a text of 6.6 TB: predicted, never run


def _ch08_long_text_truth() -> tuple[str, int, dict]:
    """(first merge, number of merges, {tie rule: its first merge}) of BPE trained on
    ``"ab.xy." * 2**40`` with room for 100 merges. Worked out, not run: the merges inside the period
    are those of a shorter repetition with the same ties (every pair of the period occurs once per
    repeat, the one across the end of the text once less); then the text is one token repeated
    2**40 times, and each merge of (X, X), replacing left to right, halves the count until two
    tokens remain, whose one pair does not occur twice."""
    short = _ch08_merge_strings(_ch08_train_bpe(BPE_LONG_PERIOD * 16, 100))
    inside = sum(len(t) <= len(BPE_LONG_PERIOD) for t in short)
    n, doublings = BPE_LONG_REPEATS, 0
    while n - 1 >= 2:  # the pair (X, X) occurs n - 1 times (overlaps counted)
        n, doublings = n // 2, doublings + 1
    firsts = {rule: _ch08_merge_strings(_ch08_train_bpe(BPE_LONG_PERIOD * 16, 1, tie=rule))[0]
              for rule in _CH08_TIE_RULES}
    return short[0], inside + doublings, firsts


def _ch08_check_long_text(long_text_prediction: Any) -> None:
    require_prediction(long_text_prediction, "long_text_prediction", 'a dict {"first": str, "merges": int}')
    answer = long_text_prediction
    if not isinstance(answer, dict) or set(answer) != {"first", "merges"}:
        raise CheckFailed('long_text_prediction needs exactly the keys "first" (a string) and "merges" (an int)')
    first, count, firsts = _ch08_long_text_truth()
    if not isinstance(answer["first"], str):
        raise CheckFailed(f'long_text_prediction["first"] must be a string, got {answer["first"]!r}')
    if answer["first"] != first:
        if answer["first"] == _ch08_merge_strings(_ch08_train_bpe(BPE_PREDICT_TEXT, 1))[0]:
            why = ("that is the first merge of 'ab.xy.ab.xy', which ends with 'y'; this text ends with '.' "
                   "and is periodic: which pairs of one period occur equally often now, and which does "
                   "the chapter's rule pick among them?")
        else:
            rule = next((r for r in _CH08_TIE_RULES[1:] if answer["first"] == firsts[r]), None)
            why = (f"that is the choice of the tie rule '{rule}', not of train_bpe" if rule else
                   "list the pairs of one period 'ab.xy.' and the one across the boundary to the next; "
                   "how often does each occur in 2**40 repeats, and which does the chapter's rule pick?")
        raise CheckFailed(f'long_text_prediction["first"] = {answer["first"]!r}: {why}')
    merges = answer["merges"]
    if isinstance(merges, bool) or not isinstance(merges, (int, np.integer)):
        raise CheckFailed(f'long_text_prediction["merges"] must be an int, got {merges!r}')
    if merges != count:
        inside = count - 39
        if merges == inside:
            why = ("once the period is one token, the text is that token repeated 2**40 times: does the "
                   "pair of two equal tokens occur twice?")
        elif merges in (count + 1, inside + 40):
            why = "when does training stop? Count the pairs when two tokens are left"
        else:
            why = ("merge the period first, then follow the number of tokens: what does one merge of "
                   "(X, X), replacing left to right, do to n identical tokens, and when does training stop?")
        raise CheckFailed(f'long_text_prediction["merges"] = {merges}: {why}')


@exercise_check
def check_bpe_prediction(predicted_merges: Any, long_text_prediction: Any = None) -> str:
    """``predicted_merges``: the tokens that byte-level BPE creates, as strings, in the order it learns
    them, trained on ``"ab.xy.ab.xy"`` alone with the chapter's rules (overlapping pairs counted; among
    equally frequent pairs the greatest bytes, as ``train_bpe`` and ``ByteBPETokenizer``; stop when no
    pair occurs twice). ``long_text_prediction``: ``{"first": the first merge, "merges": how many}``
    for ``"ab.xy." * 2**40`` with room for 100 merges, a text too long to run (the part that running
    ``train_bpe`` on the exercise's text cannot answer)."""
    require_prediction(predicted_merges, "predicted_merges", "a list of strings")
    if not isinstance(predicted_merges, (list, tuple)) or not all(isinstance(t, str) for t in predicted_merges):
        raise CheckFailed(f"predicted_merges must be a list of strings, got {str(predicted_merges)[:60]}")
    got = list(predicted_merges)
    truth = _ch08_merge_strings(_ch08_train_bpe(BPE_PREDICT_TEXT, 20))
    if got == truth:
        _ch08_check_long_text(long_text_prediction)
        return (f"{len(truth)} merges in the chapter's order on 'ab.xy.ab.xy'; the first merge and the "
                "number of merges of the 6.6 TB text")
    if any(t not in BPE_PREDICT_TEXT or len(t) < 2 for t in got):
        raise CheckFailed("every merged token is two or more adjacent characters of the text, and a merge "
                          "joins two tokens that already exist")
    for rule in _CH08_TIE_RULES[1:]:
        if got == _ch08_merge_strings(_ch08_train_bpe(BPE_PREDICT_TEXT, 20, tie=rule)):
            raise CheckFailed(f"these are the merges of the tie rule '{rule}', not of the chapter's: reread "
                              f"how train_bpe chooses among equally frequent pairs")
    if len(got) != len(truth):
        raise CheckFailed("training makes a different number of merges: after each merge, count the pairs of "
                          "the new sequence again (overlaps count) and stop when no pair occurs twice")
    raise CheckFailed("these are not the merges training makes, in its order: after each merge count the pairs "
                      "of the new sequence again (overlaps count), and among equally frequent pairs apply the "
                      "chapter's tie rule")


_CH08_PATTERN = r"'(?:s|t|re|ve|m|ll|d)| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+"


def _ch08_other_cells(fn: Callable) -> list[str]:
    """The names of the functions ``fn`` calls by name that another notebook cell (another student
    file) defines: the chapter's ``bpe_encode`` is one. The answer must be self-contained."""
    from .core import _STUDENT, _file_kind

    fn = inspect.unwrap(fn)  # the check receives the student's function wrapped
    code, env = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if not isinstance(code, types.CodeType) or not isinstance(env, dict):
        return []
    names, stack = set(), [code]
    while stack:  # the function and the functions, lambdas and comprehensions inside it
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    found = []
    for name in sorted(names):
        obj = env.get(name)
        other = getattr(inspect.unwrap(obj), "__code__", None) if callable(obj) else None
        if (isinstance(other, types.CodeType) and other.co_filename != code.co_filename
                and _file_kind(other.co_filename) == _STUDENT):
            found.append(name)
    return found


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
    cases.append(("'abc ab bc' with two merges that compete for the 'b'",
                  "abc ab bc", {(98, 99): 256, (97, 98): 257}))
    outside = _ch08_other_cells(chunked_bpe_encode)
    if outside:
        raise CheckFailed(f"chunked_bpe_encode calls {', '.join(outside)}, defined in another cell: the "
                          "exercise asks for a self-contained encoder, the colleague's loop with its bugs "
                          "fixed; encoding each chunk with the chapter's encoder skips finding them")
    for what, text, merges in cases:
        got = _ch08_int_list(chunked_bpe_encode(text, dict(merges), _CH08_PATTERN), f"ids of {what}")
        chunks = re.findall(_CH08_PATTERN, text)
        expected = [i for chunk in chunks for i in _ch08_encode(chunk.encode("utf-8"), merges)]
        if len(merges) > 2 and got == _ch08_encode(text.encode("utf-8"), merges) and got != expected:
            raise CheckFailed(f"{what} ({text!r}): you encoded the whole text at once; split it with "
                              f"re.findall(pattern, text) and encode each chunk on its own, so that no "
                              f"merge crosses a chunk boundary")
        if got != expected and any(ord(c) > 127 for c in text) and len(got) != len(expected):
            raise CheckFailed(f"{what} ({text!r}): {len(got)} ids where there should be {len(expected)}; "
                              f"what does byte-level BPE start from for a character outside ASCII?")
        _ch08_compare_ids(got, expected, f"ids of {what} ({text!r}); in which order did training "
                                         f"create the merges that compete here?")
    return f"{len(cases)} texts, merges that cross chunk boundaries and merges that compete"
