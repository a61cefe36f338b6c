"""Issue 28's bad inputs, one table: RoPE conventions, the BPE tokenizer's special tokens and
vocab/merges, and prepared token files. Each row asserts the exception type and that the message
names the parameter (tests/README.md lists the rows)."""

import json

import numpy as np
import pytest
import torch

from fundamentallm import TransformerConfig
from fundamentallm.data import load_prepared, prepare
from fundamentallm.interop import permute_rope_weights
from fundamentallm.positions import RotaryEmbedding
from fundamentallm.tokenizers import ByteBPETokenizer, CharacterTokenizer

BYTES = {i: bytes([i]) for i in range(256)}
VOCAB = {**BYTES, 256: b"ab", 257: b"abc"}
MERGES = [(b"a", b"b"), (b"ab", b"c")]
TOK = ByteBPETokenizer(special_tokens=["<|eot|>"])


def _prepared(tmp_path, change):
    """A folder written by prepare, then damaged by ``change(folder)``."""
    (tmp_path / "t.txt").write_text("hello world, " * 50, encoding="utf-8")
    prepare(tmp_path / "t.txt", CharacterTokenizer.from_text("hello world, "), tmp_path / "d")
    change(tmp_path / "d")
    return tmp_path / "d"


def _set_meta(folder, **values):
    meta = json.loads((folder / "meta.json").read_text())
    (folder / "meta.json").write_text(json.dumps({**meta, **values}))


def _truncate(path, n_bytes):
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - n_bytes)


CASES = [
    # RoPE: an unknown convention, positions past the table
    ("RotaryEmbedding style", lambda: RotaryEmbedding(8, 16, style="neox"), ValueError,
     r"style='neox' is not a RoPE convention; allowed values: 'half', 'interleaved'"),
    ("config rope_style", lambda: TransformerConfig(pos_encoding="rope", rope_style="meta"), ValueError,
     r"rope_style='meta' is not supported; allowed values: 'half', 'interleaved'"),
    ("permute_rope_weights to", lambda: permute_rope_weights(torch.zeros(8, 4), 2, to="meta"), ValueError,
     r"to='meta' is not a RoPE convention"),
    ("permute_rope_weights num_heads", lambda: permute_rope_weights(torch.zeros(6, 4), 2), ValueError,
     r"num_heads=2 must be .* first dimension 6"),
    ("RoPE sequence past max_seq_len", lambda: RotaryEmbedding(8, 16)(torch.zeros(1, 1, 17, 8)), ValueError,
     r"positions up to 16 requested but max_seq_len=16"),
    ("RoPE start_pos past max_seq_len", lambda: RotaryEmbedding(8, 16)(torch.zeros(1, 1, 4, 8), start_pos=13),
     ValueError, r"positions up to 16 .* max_seq_len=16 .*start_pos 13"),
    ("RoPE negative start_pos", lambda: RotaryEmbedding(8, 16)(torch.zeros(1, 1, 4, 8), start_pos=-1),
     ValueError, r"start_pos=-1 must be >= 0"),
    # special tokens
    ("special token not a str", lambda: ByteBPETokenizer(special_tokens=[50256]), TypeError,
     r"special_tokens must be non-empty strings, got 50256 \(int\)"),
    ("special tokens a bare str", lambda: ByteBPETokenizer(special_tokens="<|eot|>"), TypeError,
     r"special_tokens must be a list of strings, got str"),
    ("special token twice", lambda: ByteBPETokenizer(special_tokens=["<s>", "<s>"]), ValueError,
     r"special_tokens=\['<s>', '<s>'\] holds a token twice"),
    ("special token = a merge", lambda: ByteBPETokenizer.from_vocab_merges(VOCAB, MERGES, ["abc"]),
     ValueError, r"special_tokens: 'abc' collides with the merge \(b'ab', b'c'\)"),
    ("special token = a byte", lambda: ByteBPETokenizer.from_vocab_merges(VOCAB, MERGES, ["a"]),
     ValueError, r"special_tokens: 'a' is a single byte"),
    ("disallowed special in text", lambda: TOK.encode("x<|eot|>", allowed_special=set()), ValueError,
     r"special token '<\|eot\|>', which disallowed_special forbids"),
    ("allowed_special unknown", lambda: TOK.encode("x", allowed_special={"<s>"}), ValueError,
     r"allowed_special names '<s>', not special tokens of this tokenizer"),
    ("encode_iterable of a str", lambda: list(TOK.encode_iterable("abc")), TypeError,
     r"iterable must be an iterable of str pieces"),
    ("tie rule", lambda: ByteBPETokenizer().train("abab", 260, tie="smallest"), ValueError,
     r"tie='smallest' is not supported; allowed values: 'lexicographic', 'first-seen'"),
    # vocab and merges that do not fit together
    ("merge part not in vocab", lambda: ByteBPETokenizer.from_vocab_merges(VOCAB, [(b"ab", b"d!")]),
     ValueError, r"merges: \(b'ab', b'd!'\) does not fit the vocab: b'd!' is not in it"),
    ("merge result not in vocab", lambda: ByteBPETokenizer.from_vocab_merges(VOCAB, [(b"b", b"c")]),
     ValueError, r"merges: \(b'b', b'c'\) does not fit the vocab: b'bc' is not in it"),
    ("vocab without every byte", lambda: ByteBPETokenizer.from_vocab_merges({0: b"\x00"}, []), ValueError,
     r"vocab lacks the single bytes \[1, 2, "),
    ("vocab with one token twice", lambda: ByteBPETokenizer.from_vocab_merges({**BYTES, 300: b"a"}, []),
     ValueError, r"vocab: ids 97 and 300 both stand for b'a'"),
    ("merges not bytes", lambda: ByteBPETokenizer.from_vocab_merges(VOCAB, [("a", "b")]), ValueError,
     r"merges must be pairs of bytes, got \('a', 'b'\)"),
]


@pytest.mark.parametrize("name,call,error,message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_error(name, call, error, message):
    with pytest.raises(error, match=message):
        call()


BIN_CASES = [
    ("unsupported dtype", lambda d: _set_meta(d, dtype="float32"),
     r"dtype='float32' is not supported; allowed values: 'uint16'"),
    ("train.bin size", lambda d: _truncate(d / "train.bin", 1),
     r"train.bin: size \d+ bytes does not match meta.json \(dtype='uint16'"),
    ("dtype not the file's", lambda d: _set_meta(d, dtype="uint32"),
     r"train.bin: size \d+ bytes does not match meta.json \(dtype='uint32'"),
    ("val.bin missing", lambda d: (d / "val.bin").unlink(), r"val.bin: size None bytes does not match"),
    ("no meta.json", lambda d: (d / "meta.json").unlink(), r"data='.*' has no meta.json"),
]


@pytest.mark.parametrize("name,change,message", BIN_CASES, ids=[c[0] for c in BIN_CASES])
def test_bad_prepared_folder_is_a_clear_error(tmp_path, name, change, message):
    folder = _prepared(tmp_path, change)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_prepared(folder)


def test_get_batch_rejects_a_float_memmap(tmp_path):
    from fundamentallm.data import get_batch

    np.zeros(100, dtype=np.float32).tofile(tmp_path / "f.bin")
    with pytest.raises(ValueError, match="data must be a 1-D array of integer token ids, got .* float32"):
        get_batch(np.memmap(tmp_path / "f.bin", dtype=np.float32, mode="r"), 2, 4)
