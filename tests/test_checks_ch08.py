"""Chapter 8 checks beyond their wrong-answer tables (those live next to the checks, in
fundamentallm/checks/ch08.py, and run in tests/test_catches.py; every book solution passes and
every answer stub counts as not attempted: tests/test_course.py)."""

from __future__ import annotations

import pytest
from book_solutions import book_solution

from fundamentallm.checks.ch08 import _CH08_TIE_RULES, _ch08_merge_strings, _ch08_train_bpe
from fundamentallm.tokenizers import ByteBPETokenizer, CharacterTokenizer

char_encode = book_solution("ch08-ex1", "char_encode")
chunked_bpe_encode = book_solution("ch08-ex3", "chunked_bpe_encode")


def test_char_encode_agrees_with_the_package_tokenizer():
    tok = CharacterTokenizer.from_text("hello world")
    assert char_encode("hello, there", tok.stoi, tok.UNK) == tok.encode("hello, there")


def test_chunked_encode_equals_the_package_tokenizer_on_its_own_merges():
    from fundamentallm.checks.ch08 import _CH08_PATTERN

    text = "the cat sat on the mat; the hat sat on the cat. " * 4
    merges = _ch08_train_bpe(text, 30)
    tok = ByteBPETokenizer(list(merges), pattern=_CH08_PATTERN)
    assert chunked_bpe_encode("the rat sat", merges, _CH08_PATTERN) == tok.encode("the rat sat")


@pytest.mark.parametrize("text", ["ab.xy.ab.xy", "xyab xyab", "abcabcabd", "the cat sat on the mat. " * 3])
def test_the_checks_tie_rule_is_the_chapters_and_the_packages(text):
    """The reference of check_bpe_prediction breaks ties by the greatest bytes, as the chapter's
    train_bpe and ByteBPETokenizer's default (tie="lexicographic"): the same merges, in order."""
    package = ByteBPETokenizer.from_text(text, 256 + 20, pattern=None)
    assert list(_ch08_train_bpe(text, 20).items()) == list(package.merges.items())


def test_the_tie_rules_differ_on_the_exercise_text():
    """On "ab.xy.ab.xy" every rule learns other merges (on "abcabcabd" the smallest-ids rule and the
    chapter's agree by coincidence), and the book's prediction is the chapter's rule's."""
    merges = {rule: _ch08_merge_strings(_ch08_train_bpe("ab.xy.ab.xy", 20, tie=rule)) for rule in _CH08_TIE_RULES}
    assert len({tuple(m) for m in merges.values()}) == len(_CH08_TIE_RULES)
    assert merges["greatest bytes"] == ["xy", "b.", "b.xy", "ab.xy"]
    assert (_ch08_merge_strings(_ch08_train_bpe("abcabcabd", 20, tie="smallest ids"))
            == _ch08_merge_strings(_ch08_train_bpe("abcabcabd", 20)))
    package = ByteBPETokenizer.from_text("ab.xy.ab.xy", 256 + 20, pattern=None)
    assert [package.token_bytes(i).decode() for i in package.merges.values()] == merges["greatest bytes"]


def test_the_tie_rule_is_checked():
    with pytest.raises(ValueError, match="tie='ids' must be one of"):
        _ch08_train_bpe("abab", 2, tie="ids")


def test_the_long_text_answer_follows_from_short_repetitions():
    """check_bpe_prediction's answer for "ab.xy." * 2**40 (worked out, never run): on 2**m repeats the
    package learns the same first five merges and m + 4 merges in all, so 2**40 gives 44."""
    from fundamentallm.checks.ch08 import _ch08_long_text_truth

    first, count, firsts = _ch08_long_text_truth()
    assert (first, count) == ("y.", 44) and firsts["first seen"] == "ab"
    for m in range(1, 7):
        package = ByteBPETokenizer.from_text("ab.xy." * 2 ** m, 256 + 100, pattern=None)
        learned = [package.token_bytes(i).decode() for i in package.merges.values()]
        assert learned[:5] == ["y.", "xy.", "b.", "b.xy.", "ab.xy."] and len(learned) == m + 4


def test_a_helper_in_the_answers_own_cell_is_allowed_one_from_another_cell_is_not():
    """check_chunked_bpe_encode refuses a call to a function another cell defines (the chapter's
    bpe_encode: the exercise asks for the colleague's loop fixed), not a helper of the answer's own cell."""
    from fundamentallm.checks import check_chunked_bpe_encode
    from fundamentallm.checks.core import CheckFailed

    helper = '''
def encode_chunk(chunk, merges):
    rank = lambda p: merges.get(p, float("inf"))
    ids = list(chunk.encode("utf-8"))
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=rank)
        if pair not in merges:
            break
        out, i = [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
                out.append(merges[pair]); i += 2
            else:
                out.append(ids[i]); i += 1
        ids = out
    return ids
'''
    answer = '''
import re
def chunked_bpe_encode(text, merges, pattern):
    return [i for chunk in re.findall(pattern, text) for i in encode_chunk(chunk, merges)]
'''
    same_cell: dict = {}
    exec(compile(helper + answer, "<one cell>", "exec"), same_cell)  # noqa: S102
    check_chunked_bpe_encode(same_cell["chunked_bpe_encode"])
    two_cells: dict = {}
    exec(compile(helper, "<the helper's cell>", "exec"), two_cells)  # noqa: S102
    exec(compile(answer, "<the answer's cell>", "exec"), two_cells)  # noqa: S102
    with pytest.raises(CheckFailed, match="encode_chunk, defined in another cell"):
        check_chunked_bpe_encode(two_cells["chunked_bpe_encode"])
