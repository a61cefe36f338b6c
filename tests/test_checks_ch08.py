"""The chapter 8 exercise checks, as a table: each wrong answer and the message it must get.
(Every book solution passes and every answer stub counts as not attempted: tests/test_course.py.)"""

from __future__ import annotations

import re

import torch
from book_solutions import book_solution
from check_tables import wrong_call_tests

from fundamentallm.tokenizers import CharacterTokenizer

char_encode = book_solution("ch08-ex1", "char_encode")
chunked_bpe_encode = book_solution("ch08-ex3", "chunked_bpe_encode")
make_windows = book_solution("ch08-ex4", "make_windows")
target_counts = book_solution("ch08-ex5", "target_counts")
PREDICTED = [0, 1, 2, 3, 3, 3, 3, 3, 2, 1]


def _encode_without_chunks(text, merges, pattern):
    """The whole text at once: merges cross the chunk boundaries."""
    return chunked_bpe_encode(text, merges, r"(?s).+")


def _chunks_latest_merge_first(text, merges, pattern):
    """Within each chunk, applies the latest-learned merge present first."""
    out = []
    for chunk in re.findall(pattern, text):
        ids = list(chunk.encode("utf-8"))
        while present := [p for p in zip(ids, ids[1:]) if p in merges]:
            pair, merged, i = max(present, key=merges.get), [], 0
            while i < len(ids):
                if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                    merged, i = merged + [merges[pair]], i + 2
                else:
                    merged, i = merged + [ids[i]], i + 1
            ids = merged
        out += ids
    return out


def _target_counts_inputs(n, block_size):
    """Counts where each token is an *input* (off by one)."""
    counts = torch.zeros(n, dtype=torch.long)
    for i in range(n - block_size):
        counts[i:i + block_size] += 1
    return counts


ROWS = [
    ("check_char_encode", (lambda text, stoi, unk_id: [stoi[c] for c in text if c in stoi],),
     r"expected \d+ ids, got \d+"),
    ("check_char_encode", (lambda text, stoi, unk_id: [stoi.get(c, 1) for c in text],),
     r"unk_id=99"),
    ("check_char_encode", (lambda text, stoi, unk_id: [stoi.setdefault(c, len(stoi)) for c in text],),
     r"you changed stoi"),
    ("check_bpe_prediction", (["abc", "abc", "abd"],), r"token 0 differs .* tie rule"),
    ("check_bpe_prediction", (["ab", "c", "ab", "c", "ab", "d"],), r"token 1 differs"),
    ("check_bpe_prediction", (["abcabc", "ab"],), r"join to 'abcabcab'"),
    ("check_bpe_prediction", ("ab cab cab d",), r"must be a list of strings"),
    ("check_chunked_bpe_encode", (_encode_without_chunks,), r"encoded the whole text at once"),
    ("check_chunked_bpe_encode", (_chunks_latest_merge_first,), r"first mismatch at position"),
    ("check_chunked_bpe_encode", (lambda text, merges, pattern: list(text.encode()),),
     r"expected \d+ ids, got \d+"),
    ("check_make_windows", (lambda ids, T: (lambda x, y: (x[:-1], y[:-1]))(*make_windows(ids, T)),),
     r"expected shape \(7, 3\), got \(6, 3\)"),
    ("check_make_windows", (lambda ids, T: (lambda x, y: (x, x))(*make_windows(ids, T)),),
     r"y for .*shifted"),
    ("check_make_windows", (lambda ids, T: make_windows(ids, T)[0],), r"return a pair \(x, y\)"),
    ("check_make_windows", (lambda ids, T: (lambda x, y: (x.T, y.T))(*make_windows(ids, T)),),
     r"expected shape \(7, 3\), got \(3, 7\)"),
    ("check_target_counts", (target_counts, [0, 1, 2, 3, 3, 3, 3, 3, 3, 3]),
     r"token 8 is a target of 2 windows, not 3"),
    ("check_target_counts", (target_counts, [3] * 10), r"token 0 is a target of 0 windows"),
    ("check_target_counts", (target_counts, PREDICTED[:9]), r"expected 10 counts"),
    ("check_target_counts", (_target_counts_inputs, PREDICTED), r"target_counts\(10, 3\)"),
    ("check_target_counts", (lambda n, t: torch.full((n,), t), PREDICTED), r"target_counts\(10, 3\)"),
]

test_wrong_answers_get_their_message = wrong_call_tests(ROWS)


def test_char_encode_agrees_with_the_package_tokenizer():
    tok = CharacterTokenizer.from_text("hello world")
    assert char_encode("hello, there", tok.stoi, tok.UNK) == tok.encode("hello, there")


def test_chunked_encode_equals_the_package_tokenizer_on_its_own_merges():
    from fundamentallm.checks.ch08 import _CH08_PATTERN, _ch08_train_bpe
    from fundamentallm.tokenizers import ByteBPETokenizer

    text = "the cat sat on the mat; the hat sat on the cat. " * 4
    merges = _ch08_train_bpe(text, 30)
    tok = ByteBPETokenizer(list(merges), pattern=_CH08_PATTERN)
    assert chunked_bpe_encode("the rat sat", merges, _CH08_PATTERN) == tok.encode("the rat sat")
