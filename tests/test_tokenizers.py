"""Tokenizers: round trips, known answers, the incremental BPE trainer vs a brute-force one."""

import json
import re
from collections import Counter

import numpy as np
import pytest

from fundamentallm.tokenizers import (
    GPT2_SPLIT_PATTERN,
    ByteBPETokenizer,
    CharacterTokenizer,
    Tokenizer,
    _merge,
)

TEXTS = ["hello world", "", "naïve café — 東京 🙂👍🏽 e\u0301", "x = f(a_b, 3.14)\n\n\tdef g():  pass  ",
         "don't they'll WE'VE 123abc", "lone surrogate \ud800 ok"]
CORPUS = "the cat sat on the mat. the dog sat on the log. " * 20 + "🙂 emoji 🙂 emoji"


def test_merge_known_answer():
    assert _merge([1, 2, 3, 1, 2], (1, 2), 4) == [4, 3, 4]
    assert _merge([1, 1, 1], (1, 1), 9) == [9, 1]  # non-overlapping, left to right


@pytest.mark.parametrize("text", TEXTS)
def test_split_pattern_covers_every_character(text):
    assert "".join(re.findall(GPT2_SPLIT_PATTERN, text)) == text


def test_character_tokenizer_specials_and_round_trip():
    tok = CharacterTokenizer.from_text("hello")
    assert tok.vocab_size == 2 + 4
    assert tok.itos[:2] == ["<pad>", "<unk>"]
    assert tok.encode("hell") == [3, 2, 4, 4]  # sorted chars e, h, l, o start at 2
    assert tok.decode(tok.encode("hello")) == "hello"
    assert tok.encode("hex") == [3, 2, CharacterTokenizer.UNK]
    assert tok.decode([0, 3, 1]) == "h\ufffd"  # <pad> -> "", <unk> -> U+FFFD
    assert CharacterTokenizer().train("ba").itos[2:] == ["a", "b"]


def test_character_tokenizer_errors():
    tok = CharacterTokenizer.from_text("ab")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([99])
    with pytest.raises(TypeError, match="text must be a str"):
        tok.encode(b"ab")


@pytest.mark.parametrize("pattern", [GPT2_SPLIT_PATTERN, None])
@pytest.mark.parametrize("text", TEXTS)
def test_bpe_round_trip_any_unicode(text, pattern):
    tok = ByteBPETokenizer.from_text(CORPUS, vocab_size=300, pattern=pattern)
    assert tok.decode(tok.encode(text)) == text


def test_bpe_learns_merges_and_compresses():
    tok = ByteBPETokenizer().train(CORPUS, vocab_size=300)
    assert 256 < tok.vocab_size <= 300
    assert len(tok.encode(CORPUS)) < len(CORPUS.encode("utf-8")) / 2
    # known answer: "at" (cat, sat, mat) is the most frequent pair, then "he", "the", " the"
    assert [tok.token_bytes(i) for i in range(256, 260)] == [b"at", b"he", b"the", b" the"]
    assert ByteBPETokenizer().train("abc", 300).vocab_size == 256  # no pair occurs twice


def _reference_bpe(text, vocab_size, pattern):
    """Brute force, minbpe style: recount every pair of every chunk before each merge."""
    chunks = [list(c.encode("utf-8")) for c in (re.findall(pattern, text) if pattern else [text])]
    merges = {}
    while 256 + len(merges) < vocab_size:
        stats = Counter(p for ch in chunks for p in zip(ch, ch[1:]))
        if not stats or max(stats.values()) < 2:
            break
        top = max(stats.values())
        pair = min(p for p, n in stats.items() if n == top)  # ties -> smallest pair
        merges[pair] = 256 + len(merges)
        chunks = [_merge(ch, pair, merges[pair]) for ch in chunks]
    return merges


@pytest.mark.parametrize("pattern", [GPT2_SPLIT_PATTERN, None])
def test_bpe_incremental_training_equals_brute_force(pattern):
    text = CORPUS + " ".join(TEXTS[:5])
    fast = ByteBPETokenizer(pattern=pattern).train(text, vocab_size=330)
    assert fast.merges == _reference_bpe(text, 330, pattern)


def test_bpe_decode_partial_character_replaces():
    tok = ByteBPETokenizer()
    ids = tok.encode("🙂")
    assert len(ids) == 4
    assert tok.decode(ids[:2]) == "\ufffd"  # a cut multi-byte character does not raise


def test_bpe_errors():
    with pytest.raises(ValueError, match="vocab_size=255"):
        ByteBPETokenizer().train("abc", 255)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ByteBPETokenizer().decode([256])


@pytest.mark.parametrize("make", [lambda: CharacterTokenizer.from_text(CORPUS),
                                  lambda: ByteBPETokenizer.from_text(CORPUS, 300)])
def test_save_load_round_trip(tmp_path, make):
    tok = make()
    tok.save(tmp_path / "tok.json")
    again = Tokenizer.load(tmp_path / "tok.json")
    assert type(again) is type(tok)
    assert again.vocab_size == tok.vocab_size
    assert again.encode(CORPUS) == tok.encode(CORPUS)
    assert type(tok).load(tmp_path / "tok.json").to_dict() == tok.to_dict()


def test_load_errors(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        Tokenizer.load(tmp_path / "bad.json")
    (tmp_path / "odd.json").write_text('{"type": "Nope"}')
    with pytest.raises(ValueError, match="tokenizer type 'Nope'"):
        Tokenizer.load(tmp_path / "odd.json")
    CharacterTokenizer.from_text("ab").save(tmp_path / "char.json")
    with pytest.raises(ValueError, match="not a ByteBPETokenizer"):
        ByteBPETokenizer.load(tmp_path / "char.json")


# --- Bad tokenizer files and arguments (issue 15; tests/README.md lists every probe) -------------

def _write(tmp_path, state) -> str:
    path = tmp_path / "tok.json"
    path.write_text(state if isinstance(state, str) else json.dumps(state), encoding="utf-8")
    return str(path)


def test_a_file_pattern_must_be_a_known_one(tmp_path):
    state = ByteBPETokenizer.from_text(CORPUS, 260).to_dict()
    path = _write(tmp_path, {**state, "pattern": "(.|.)*Z"})  # catastrophic backtracking
    with pytest.raises(ValueError, match=r"tok.json: pattern='\(\.\|\.\)\*Z' is not a known split pattern"):
        Tokenizer.load(path)
    assert Tokenizer.load(_write(tmp_path, {**state, "pattern": None})).pattern is None
    assert ByteBPETokenizer(pattern="(.|.)*Z").pattern == "(.|.)*Z"  # in code, the user's choice


@pytest.mark.parametrize("state,message", [
    ({"type": "CharacterTokenizer", "version": 1, "chars": "bac"}, "chars must be sorted and unique"),
    ({"type": "CharacterTokenizer", "version": 1, "chars": "abb"}, "chars must be sorted and unique"),
    ({"type": "CharacterTokenizer", "version": 1}, "chars=None must be a string"),
    ({"type": "CharacterTokenizer", "version": 2, "chars": "ab"}, "version=2 is not supported"),
    ({"type": "ByteBPETokenizer", "version": 1}, "merges=None must be a list"),
    ({"type": "ByteBPETokenizer", "version": 1, "merges": [[1, 2, 3]]}, "merges must be pairs"),
    ({"type": "ByteBPETokenizer", "version": 1, "merges": [[1, 2], [1, 2]]}, r"merge \(1, 2\) appears twice"),
    ({"type": "ByteBPETokenizer", "version": 1, "merges": [[1, 999]]}, "refers to an id not yet defined"),
    ({"type": "ByteBPETokenizer", "version": 1, "merges": [["a", "b"]]}, "merges must be pairs of integer"),
    ([1, 2], "must be a JSON object"),
])
def test_bad_tokenizer_files_name_the_field(tmp_path, state, message):
    with pytest.raises(ValueError, match=message):
        Tokenizer.load(_write(tmp_path, state))


def test_binary_and_latin1_tokenizer_files_name_the_file(tmp_path):
    (tmp_path / "latin1.json").write_bytes('{"chars": "é"}'.encode("latin-1"))
    with pytest.raises(ValueError, match="latin1.json is not UTF-8 text"):
        Tokenizer.load(tmp_path / "latin1.json")
    with pytest.raises(FileNotFoundError, match="missing.json"):
        Tokenizer.load(tmp_path / "missing.json")


def test_bad_arguments_in_code():
    with pytest.raises(ValueError, match="pattern='\\(' is not a valid regular expression"):
        ByteBPETokenizer(pattern="(")
    with pytest.raises(TypeError, match="pattern must be a str"):
        ByteBPETokenizer(pattern=3)
    with pytest.raises(TypeError, match="chars must be an iterable"):
        CharacterTokenizer(5)
    tok = CharacterTokenizer.from_text("abc")
    with pytest.raises(TypeError, match="ids must be integer token ids, got 2.0"):
        tok.decode([2.0])
    with pytest.raises(TypeError, match="ids must be integer token ids, got True"):
        tok.decode([True])
    with pytest.raises(TypeError, match="ids must be a sequence"):
        tok.decode("abc")
    assert tok.decode(np.array([2, 3])) == "ab"  # NumPy integers are integers
    with pytest.raises(ValueError, match="token id 999"):
        ByteBPETokenizer().token_bytes(999)
