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
