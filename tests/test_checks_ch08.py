"""The chapter 8 exercise checks: they pass correct answers and fail, with CheckFailed, a stub and
plausible wrong answers."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from book_solutions import book_solution
from check_tables import table_tests

from fundamentallm import checks
from fundamentallm.checks import CheckFailed
from fundamentallm.data import TextDataset
from fundamentallm.tokenizers import CharacterTokenizer, _merge

# --- correct answers ---------------------------------------------------------------------------


char_encode = book_solution("ch08-ex1", "char_encode")


get_pair_counts = book_solution("ch08-ex2", "get_pair_counts")


merge_pair = book_solution("ch08-ex3", "merge_pair")


make_windows = book_solution("ch08-ex4", "make_windows")


def make_windows_package(ids, block_size):
    """The package's TextDataset, stacked: also a correct answer."""
    ds = TextDataset(ids, block_size)
    xs, ys = zip(*(ds[i] for i in range(len(ds))))
    return torch.stack(xs), torch.stack(ys)


CORRECT = {
    "check_char_encode": [char_encode, lambda text, stoi, unk_id: torch.tensor(
        [stoi.get(c, unk_id) for c in text], dtype=torch.long)],
    "check_get_pair_counts": [get_pair_counts, lambda ids: Counter(zip(ids, ids[1:]))],
    "check_merge_pair": [merge_pair, _merge],
    "check_make_windows": [make_windows, make_windows_package],
}


def _merge_with_str_replace(ids, pair, new_id):
    """Merges only the first occurrence."""
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new_id] + ids[i + 2:]
    return list(ids)


def _merge_right_to_left(ids, pair, new_id):
    return merge_pair(ids[::-1], pair[::-1], new_id)[::-1]


def _merge_in_place(ids, pair, new_id):
    ids[:] = merge_pair(ids, pair, new_id)
    return ids


WRONG = {
    "check_char_encode": [
        lambda text, stoi, unk_id: [stoi[c] for c in text if c in stoi],  # drops unknown chars
        lambda text, stoi, unk_id: [stoi.get(c, 1) for c in text],  # unk_id hard-coded to 1
        lambda text, stoi, unk_id: [stoi.setdefault(c, len(stoi)) for c in text],  # grows stoi
    ],
    "check_get_pair_counts": [
        lambda ids: {p: 1 for p in zip(ids, ids[1:])},  # presence, not counts
        lambda ids: dict(Counter(zip(ids[::2], ids[1::2]))),  # non-overlapping pairs only
        lambda ids: dict(Counter(zip(ids, ids[2:]))),  # skips one
    ],
    "check_merge_pair": [_merge_with_str_replace, _merge_right_to_left, _merge_in_place,
                         lambda ids, pair, new_id: [new_id if (a, b) == pair else a
                                                    for a, b in zip(ids, ids[1:] + [None])]],
    "check_make_windows": [
        lambda ids, T: (lambda x, y: (x[:-1], y[:-1]))(*make_windows(ids, T)),  # drops the last
        lambda ids, T: (lambda x, y: (x, x))(*make_windows(ids, T)),  # y not shifted
        lambda ids, T: make_windows(ids, T)[0],  # returns only x
        lambda ids, T: (lambda x, y: (x.T, y.T))(*make_windows(ids, T)),  # (T, N)
    ],
}


test_check_passes_on_correct_answer, test_check_fails_on_stub, test_check_fails_on_wrong_answer = \
    table_tests(CORRECT, WRONG)


def test_char_encode_agrees_with_the_package_tokenizer():
    tok = CharacterTokenizer.from_text("hello world")
    assert char_encode("hello, there", tok.stoi, tok.UNK) == tok.encode("hello, there")


def test_messages_point_at_the_mistake():
    with pytest.raises(CheckFailed, match="unk_id"):
        checks.check_char_encode(WRONG["check_char_encode"][0])
    with pytest.raises(CheckFailed, match="modified its argument 1 in place"):
        checks.check_merge_pair(_merge_in_place)
    with pytest.raises(CheckFailed, match=r"expected shape \(7, 3\), got \(6, 3\)"):
        checks.check_make_windows(WRONG["check_make_windows"][0])


# --- target_counts: predict, then measure ----------------------------------------------------


def _target_counts(n, block_size):
    """Window i (0 <= i < n - T) has targets i + 1 .. i + T: token j is one for i in [j - T, j - 1]."""
    j = torch.arange(n)
    last = torch.clamp(j - 1, max=n - block_size - 1)
    first = torch.clamp(j - block_size, min=0)
    return (last - first + 1).clamp(min=0)


def _target_counts_inputs(n, block_size):
    """Counts where each token is an *input* (off by one)."""
    counts = torch.zeros(n, dtype=torch.long)
    for i in range(n - block_size):
        counts[i:i + block_size] += 1
    return counts


def test_target_counts_correct(capsys):
    assert checks.check_target_counts(_target_counts) is True
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [_target_counts_inputs, lambda n, t: torch.full((n,), t)])
def test_target_counts_wrong(wrong):
    with pytest.raises(CheckFailed, match="check_target_counts"):
        checks.check_target_counts(wrong)
