"""Checks for the exercises of chapter 8: tokens and data."""

from __future__ import annotations

from typing import Any, Callable

import torch

from .core import CheckFailed, assert_same, check_shape, exercise_check


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
def check_get_pair_counts(get_pair_counts: Callable) -> str:
    """``get_pair_counts(ids)`` -> ``{(a, b): count}`` over adjacent (overlapping) pairs."""
    g = torch.Generator().manual_seed(800)
    cases = [
        ("[1, 2, 3, 1, 2]", [1, 2, 3, 1, 2]),
        ("[5, 5, 5] (overlapping pairs: (5, 5) occurs twice)", [5, 5, 5]),
        ("an empty list", []),
        ("a single id", [7]),
        ("the UTF-8 bytes of 'aaabdaaabac'", list(b"aaabdaaabac")),
        ("300 random ids in [0, 6)", torch.randint(6, (300,), generator=g).tolist()),
    ]
    for name, ids in cases:
        ids_copy = list(ids)
        got = get_pair_counts(ids_copy)
        if ids_copy != ids:
            raise CheckFailed(f"for {name}: you modified ids in place")
        if not isinstance(got, dict):
            raise CheckFailed(f"for {name}: expected a dict {{(a, b): count}}, got {type(got).__name__}")
        expected: dict = {}
        for i in range(len(ids) - 1):  # reference: every adjacent position, overlaps included
            expected[(ids[i], ids[i + 1])] = expected.get((ids[i], ids[i + 1]), 0) + 1
        got = {tuple(k): v for k, v in got.items()}
        for pair in sorted(set(expected) | set(got)):
            if got.get(pair, 0) != expected.get(pair, 0):
                raise CheckFailed(f"for {name}: pair {pair} should be counted "
                                  f"{expected.get(pair, 0)} times, got {got.get(pair, 0)}")
    return f"correct on {len(cases)} id lists, overlapping pairs and empty input included"


@exercise_check(forbidden=("fundamentallm.tokenizers._merge",))
def check_merge_pair(merge_pair: Callable) -> str:
    """``merge_pair(ids, pair, new_id)`` -> a new list, every non-overlapping occurrence of ``pair``
    (scanning left to right) replaced by ``new_id``."""
    g = torch.Generator().manual_seed(801)
    cases = [
        ("[1, 2, 3, 1, 2] with (1, 2) -> 4", [1, 2, 3, 1, 2], (1, 2), 4),
        ("[1, 1, 1] with (1, 1) -> 9 (left to right: [9, 1])", [1, 1, 1], (1, 1), 9),
        ("[1, 1, 1, 1] with (1, 1) -> 9", [1, 1, 1, 1], (1, 1), 9),
        ("[3, 4, 5] with the absent pair (4, 3)", [3, 4, 5], (4, 3), 7),
        ("[3, 4] with (3, 4) -> 256 (the whole list)", [3, 4], (3, 4), 256),
        ("an empty list", [], (1, 2), 3),
        ("200 random ids in [0, 3) with (0, 1) -> 3",
         torch.randint(3, (200,), generator=g).tolist(), (0, 1), 3),
    ]
    for name, ids, pair, new_id in cases:
        ids_copy = list(ids)
        got = _ch08_int_list(merge_pair(ids_copy, pair, new_id), f"result for {name}")
        if ids_copy != ids:
            raise CheckFailed(f"for {name}: you modified ids in place; return a new list")
        expected, i = [], 0
        while i < len(ids):  # reference: a left-to-right scan
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
                expected.append(new_id)
                i += 2
            else:
                expected.append(ids[i])
                i += 1
        _ch08_compare_ids(got, expected, f"result for {name}")
    return f"correct on {len(cases)} cases, overlapping pairs included"


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
def check_target_counts(target_counts: Callable) -> str:
    """``target_counts(n, block_size)`` -> ``(n,)`` int tensor: in how many of the ``n - block_size``
    windows of eq. (ch08-windows) token ``j`` of the stream is a target."""
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
