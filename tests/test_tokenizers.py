"""Tokenizers: round trips, known answers, the incremental BPE trainer vs a brute-force one."""

import json

import numpy as np
import pytest
import regex as re

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
    # known answer: "th", "he" (the x4) and "at" (cat, sat, mat, sat) tie at 80; the
    # lexicographically greatest pair of bytes, (b"t", b"h"), goes first; first-seen agrees here
    assert [tok.token_bytes(i) for i in range(256, 260)] == [b"th", b"the", b"at", b" the"]
    first = ByteBPETokenizer().train(CORPUS, vocab_size=300, tie="first-seen")
    assert [first.token_bytes(i) for i in range(256, 262)] == [b"th", b"the", b"at", b" the", b" s", b" sat"]
    assert ByteBPETokenizer().train("abc", 300).vocab_size == 256  # no pair occurs twice


def _reference_bpe(text, vocab_size, pattern, tie):
    """Brute force: recount every pair of every chunk before each merge. Ties: CS336's reference
    (max by (count, bytes, bytes)) or minbpe's (max over a dict filled in text order)."""
    chunks = [list(c.encode("utf-8")) for c in (re.findall(pattern, text) if pattern else [text])]
    merges, vocab = {}, {i: bytes([i]) for i in range(256)}
    while 256 + len(merges) < vocab_size:
        stats = {}
        for ch in chunks:
            for p in zip(ch, ch[1:]):
                stats[p] = stats.get(p, 0) + 1
        if not stats or max(stats.values()) < 2:
            break
        if tie == "lexicographic":
            pair = max(stats, key=lambda p: (stats[p], vocab[p[0]], vocab[p[1]]))
        else:
            pair = max(stats, key=stats.get)
        merges[pair] = 256 + len(merges)
        vocab[merges[pair]] = vocab[pair[0]] + vocab[pair[1]]
        chunks = [_merge(ch, pair, merges[pair]) for ch in chunks]
    return merges


@pytest.mark.parametrize("tie", ["lexicographic", "first-seen"])
@pytest.mark.parametrize("pattern", [GPT2_SPLIT_PATTERN, None])
def test_bpe_incremental_training_equals_brute_force(pattern, tie):
    text = CORPUS + " ".join(TEXTS[:5]) + " lowest newer wider " * 3
    fast = ByteBPETokenizer(pattern=pattern).train(text, vocab_size=330, tie=tie)
    ref = _reference_bpe(text, 330, pattern, tie)
    assert list(fast.merges.items()) == list(ref.items())
    other = "first-seen" if tie == "lexicographic" else "lexicographic"
    assert list(fast.merges) != list(_reference_bpe(text, 330, pattern, other))  # the rule matters


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


# --- Special tokens, streaming, other formats (issue 28) ----------------------------------------

EOT = "<|endoftext|>"
SPECIAL_TEXT = f"the cat{EOT}sat on the mat.{EOT}{EOT} the dog <|end|> {EOT[:-1]}"


@pytest.fixture(scope="module")
def special_tok():
    return ByteBPETokenizer.from_text(CORPUS + EOT + CORPUS, 270, special_tokens=[EOT, "<|end|>"])


def test_special_tokens_are_ids_never_split_and_decode_back(special_tok):
    tok = special_tok
    assert tok.special_tokens == {EOT: 268, "<|end|>": 269} and tok.vocab_size == 270
    ids = tok.encode(SPECIAL_TEXT)
    assert ids.count(268) == 3 and ids.count(269) == 1
    assert tok.decode(ids) == SPECIAL_TEXT
    assert tok.encode(EOT) == [268]
    # no learned token contains a special token's bytes or crosses one
    assert not any(b"<|" in tok.token_bytes(i) for i in range(256, 268))
    # neither allowed nor disallowed: ordinary text, several byte-level ids
    plain = tok.encode(SPECIAL_TEXT, allowed_special=set(), disallowed_special=())
    assert 268 not in plain and tok.decode(plain) == SPECIAL_TEXT
    assert tok.encode(SPECIAL_TEXT, allowed_special={"<|end|>"}, disallowed_special=()).count(268) == 0


def test_overlapping_special_tokens_prefer_the_longest():
    tok = ByteBPETokenizer(special_tokens=["<a>", "<a><a>"])
    assert tok.encode("<a><a><a>") == [tok.special_tokens["<a><a>"], tok.special_tokens["<a>"]]


@pytest.mark.parametrize("allowed,disallowed,raises", [
    ("all", "all", False), (set(), "all", True), ({EOT}, "all", True), ({EOT, "<|end|>"}, "all", False),
    (set(), (), False), (set(), {"<|end|>"}, True),
])
def test_allowed_special_behaves_like_tiktoken(special_tok, allowed, disallowed, raises):
    """The same table for tiktoken: a disallowed special token in the text raises."""
    tiktoken = pytest.importorskip("tiktoken")
    enc = tiktoken.Encoding("t", pat_str=GPT2_SPLIT_PATTERN, special_tokens=special_tok.special_tokens,
                            mergeable_ranks={special_tok.vocab[i]: i for i in range(268)})
    for encode in (special_tok.encode, enc.encode):
        if raises:
            with pytest.raises(ValueError, match="disallowed"):
                encode(SPECIAL_TEXT, allowed_special=allowed, disallowed_special=disallowed)
    if not raises:
        assert special_tok.encode(SPECIAL_TEXT, allowed, disallowed) == enc.encode(
            SPECIAL_TEXT, allowed_special=allowed, disallowed_special=disallowed)


@pytest.mark.parametrize("seed", range(6))
def test_encode_iterable_equals_encode_for_any_split(special_tok, seed):
    rng = np.random.default_rng(seed)
    text = (SPECIAL_TEXT + "  \n\n  x  " + TEXTS[3] + TEXTS[2]) * 3
    cuts = sorted(rng.choice(len(text), size=12, replace=False))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    stream = special_tok.encode_iterable(iter(pieces))
    assert not isinstance(stream, list)  # lazy: a generator
    assert list(stream) == special_tok.encode(text)
    assert list(special_tok.encode_iterable(text.splitlines(keepends=True))) == special_tok.encode(text)


def test_encode_iterable_memory_does_not_grow(tmp_path, special_tok):
    """A 1.5 MB file streamed line by line: the tokenizer holds one line and one chunk at a time
    (the ids alone would take several MB as a list)."""
    import tracemalloc

    path = tmp_path / "big.txt"
    line = "the cat sat on the mat. " * 4 + EOT + "\n"
    path.write_text(line * (1_500_000 // len(line)), encoding="utf-8")
    tracemalloc.start()
    with open(path, encoding="utf-8") as f:
        n = sum(1 for _ in special_tok.encode_iterable(f))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert n > 100_000 and peak < 500_000, (n, peak)


def test_from_vocab_merges_keeps_the_ids(special_tok):
    # the same tokenizer with every id shuffled: same tokens, different numbers
    rng = np.random.default_rng(0)
    ordinary = {i: v for i, v in special_tok.vocab.items() if i < 268}
    new_ids = dict(zip(ordinary, (int(i) for i in rng.permutation(len(ordinary)))))
    vocab = {new_ids[i]: v for i, v in ordinary.items()}
    merges = [(special_tok.vocab[a], special_tok.vocab[b]) for a, b in special_tok.merges]
    tok = ByteBPETokenizer.from_vocab_merges(vocab, merges, special_tokens=[EOT])
    assert tok.special_tokens == {EOT: 268}
    ids = tok.encode(SPECIAL_TEXT)
    assert [tok.vocab[i] for i in ids] == [special_tok.vocab[i] for i in special_tok.encode(
        SPECIAL_TEXT, allowed_special={EOT}, disallowed_special=())]
    assert tok.decode(ids) == SPECIAL_TEXT


def _gpt2_fixture(tmp_path, tok):
    """GPT-2-format files from a trained tokenizer, renumbered as GPT-2 numbers its bytes
    (printable bytes first), so that loading must take the ids from the file."""
    from fundamentallm.tokenizers import _bytes_to_unicode

    order = list(_bytes_to_unicode())  # GPT-2's byte order: id k is byte order[k]
    renumber = {b: k for k, b in enumerate(order)}
    vocab = {renumber.get(i, i) if i < 256 else i: v for i, v in tok.vocab.items()}
    merges = [(tok.vocab[a], tok.vocab[b]) for a, b in tok.merges]
    gpt2_like = ByteBPETokenizer.from_vocab_merges(vocab, merges, special_tokens=list(tok.special_tokens))
    return gpt2_like, gpt2_like.save_gpt2_files(tmp_path)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from fundamentallm.data import load_corpus

    text = load_corpus("python-docs")[:80_000]
    return ByteBPETokenizer.from_text(text, 800, special_tokens=[EOT]), load_corpus("python-docs")[-40_000:]


def test_gpt2_files_equal_transformers_and_tiktoken(tmp_path, trained):
    transformers = pytest.importorskip("transformers")
    tiktoken = pytest.importorskip("tiktoken")
    tok, held_out = trained
    gpt2_like, (vocab_path, merges_path) = _gpt2_fixture(tmp_path, tok)
    assert json.loads(vocab_path.read_text(encoding="utf-8"))["!"] == 0  # GPT-2's first id
    loaded = ByteBPETokenizer.from_gpt2_files(vocab_path, merges_path, special_tokens=[EOT])
    assert loaded.vocab == gpt2_like.vocab and loaded.merges == gpt2_like.merges
    text = held_out + EOT + TEXTS[2] + " x² ①a 3½ don't" + EOT
    ours = loaded.encode(text)
    hf = transformers.GPT2Tokenizer.from_pretrained(str(tmp_path))  # a local folder: no network
    assert hf.encode(text) == ours
    ranks = {v: i for i, v in loaded.vocab.items() if i != loaded.special_tokens[EOT]}
    r50k = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
    enc = tiktoken.Encoding("fixture", pat_str=r50k, mergeable_ranks=ranks, special_tokens=loaded.special_tokens)
    assert enc.encode(text, allowed_special="all") == ours
    assert loaded.decode(ours) == text


def test_gpt2_regex_is_exact():
    """A letter next to ² or ① is its own chunk in GPT-2 (\\p{L} vs \\p{N}/symbols)."""
    assert re.findall(GPT2_SPLIT_PATTERN, "x² a①b 3½ don't") == ["x", "²", " a", "①", "b", " 3½", " don", "'t"]
    from fundamentallm.tokenizers import LEGACY_SPLIT_PATTERN

    assert ByteBPETokenizer(pattern=LEGACY_SPLIT_PATTERN)._chunks("x²") == ["x²"]  # the approximation replaced


def test_version_1_files_still_load(tmp_path):
    """A file written before issue 28 (merges as pairs, the re-compatible pattern) encodes as then."""
    from fundamentallm.tokenizers import LEGACY_SPLIT_PATTERN

    old = {"type": "ByteBPETokenizer", "version": 1, "pattern": LEGACY_SPLIT_PATTERN,
           "merges": [[116, 104], [256, 101], [32, 257]]}
    tok = Tokenizer.load(_write(tmp_path, old))
    assert tok.encode("the x² the") == [257, 32, 120, 194, 178, 258]
    assert Tokenizer.from_dict(tok.to_dict()).encode("the x² the") == tok.encode("the x² the")


def test_save_load_keeps_special_tokens_and_ids(tmp_path, trained):
    tok, held_out = trained
    gpt2_like, _ = _gpt2_fixture(tmp_path, tok)
    gpt2_like.save(tmp_path / "t.json")
    again = Tokenizer.load(tmp_path / "t.json")
    assert again.vocab == gpt2_like.vocab and again.special_tokens == gpt2_like.special_tokens
    assert again.encode(held_out + EOT) == gpt2_like.encode(held_out + EOT)
