"""Token files: tokenize a text file once into ``train.bin``/``val.bin`` (as nanoGPT's
``prepare.py`` does) and map them back as ``numpy.memmap`` arrays, so a corpus larger than memory
trains in flat memory (``fundamentallm.data.get_batch`` slices them). ``python -m fundamentallm
prepare`` runs :func:`prepare`; ``fundamentallm.data`` exports these names too.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Iterable, Union

import numpy as np

PREPARED_DTYPES = ("uint16", "uint32")  # uint16 holds ids < 65536 (GPT-2's 50257 fit)
META_FILE = "meta.json"


def _text_pieces(path: Path, chunk_chars: int = 1 << 20) -> Iterable[str]:
    """A UTF-8 text file as pieces of about a million characters (memory stays flat)."""
    with open(path, encoding="utf-8") as f:
        while True:
            piece = f.read(chunk_chars)
            if not piece:
                return
            yield piece


def prepare(text_path: Union[str, os.PathLike], tokenizer, out_dir: Union[str, os.PathLike],
            val_fraction: float = 0.1) -> dict:
    """Tokenize a text file once into ``out_dir/train.bin`` and ``val.bin`` (raw little-endian
    ids, uint16 when the vocabulary fits, as nanoGPT's ``prepare.py`` writes them), plus
    ``tokenizer.json`` and ``meta.json`` (dtype, token counts, vocab_size). The validation split
    is the last ``val_fraction`` of the tokens. The text is streamed
    (``tokenizer.encode_iterable`` when it has one): memory does not grow with the file.
    Returns the meta dict. Read back with :func:`load_prepared`."""
    text_path, out_dir = Path(text_path), Path(out_dir)
    if not text_path.is_file():
        raise FileNotFoundError(f"text file {str(text_path)!r} does not exist")
    if not isinstance(val_fraction, float) or not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction!r} must be a float in (0, 1)")
    dtype = "uint16" if tokenizer.vocab_size <= 1 << 16 else "uint32"
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "all.bin.tmp"
    n = 0
    pieces = _text_pieces(text_path)
    stream = (tokenizer.encode_iterable(pieces) if hasattr(tokenizer, "encode_iterable")
              else itertools.chain.from_iterable(map(tokenizer.encode, pieces)))  # iterator of ids
    with open(tmp, "wb") as f:
        while batch := list(itertools.islice(stream, 1 << 20)):  # a million ids at a time
            array = np.asarray(batch, dtype=np.int64)
            if array.min() < 0 or array.max() >= 1 << (8 * np.dtype(dtype).itemsize):
                raise ValueError(f"tokenizer gave id {array.max()} that dtype={dtype!r} cannot hold")
            f.write(array.astype(dtype).tobytes())
            n += len(batch)
    n_train = int(n * (1.0 - val_fraction))
    if n_train == 0 or n_train == n:
        tmp.unlink()
        raise ValueError(f"val_fraction={val_fraction!r} of {n} tokens leaves an empty split")
    size = np.dtype(dtype).itemsize
    with open(tmp, "rb") as src, open(out_dir / "val.bin", "wb") as dst:  # copy the tail ...
        src.seek(n_train * size)
        while block := src.read(1 << 24):
            dst.write(block)
    os.truncate(tmp, n_train * size)  # ... and cut it off: the head is train.bin, never copied
    os.replace(tmp, out_dir / "train.bin")
    tokenizer.save(out_dir / "tokenizer.json")
    meta = {"format": 1, "dtype": dtype, "train_tokens": n_train, "val_tokens": n - n_train,
            "vocab_size": tokenizer.vocab_size, "tokenizer": "tokenizer.json", "source": str(text_path)}
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return meta


def tokenizer_for_text(text_path: Union[str, os.PathLike], kind: str, vocab_size: int = 512,
                       sample_chars: int = 10_000_000):
    """The tokenizer ``prepare`` uses: ``"char"`` (every character of the file, streamed),
    ``"bpe"`` (a :class:`ByteBPETokenizer` of ``vocab_size`` trained on the first
    ``sample_chars`` characters, with ``<|endoftext|>`` as a special token), the path of a saved
    tokenizer ``.json``, or a folder holding GPT-2's ``vocab.json`` + ``merges.txt``."""
    from .tokenizers import ByteBPETokenizer, CharacterTokenizer, Tokenizer

    if kind == "char":
        chars: set = set()
        for piece in _text_pieces(Path(text_path)):
            chars.update(piece)
        return CharacterTokenizer(chars)
    if kind == "bpe":
        with open(text_path, encoding="utf-8") as f:
            sample = f.read(sample_chars)
        return ByteBPETokenizer.from_text(sample, vocab_size, special_tokens=["<|endoftext|>"])
    path = Path(kind)
    if path.is_dir() and (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
        table = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
        specials = ["<|endoftext|>"] if "<|endoftext|>" in table else []
        return ByteBPETokenizer.from_gpt2_files(path / "vocab.json", path / "merges.txt", specials)
    if path.is_file():
        return Tokenizer.load(path)
    raise ValueError(f"tokenizer={kind!r} is not 'char', 'bpe', a tokenizer .json file or a folder "
                     f"with vocab.json + merges.txt")


def load_prepared(data_dir: Union[str, os.PathLike]):
    """-> ``(tokenizer, train, val, meta)`` from a folder written by :func:`prepare`; ``train``
    and ``val`` are read-only ``numpy.memmap``s (nothing is read until a batch slices them).
    A ``.bin`` whose size does not match ``meta.json``'s dtype and token count raises
    ``ValueError`` naming the file."""
    from .tokenizers import Tokenizer

    data_dir = Path(data_dir)
    meta_path = data_dir / META_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(f"data={str(data_dir)!r} has no {META_FILE}; write the folder with "
                                f"`python -m fundamentallm prepare TEXT --out {data_dir}`")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        dtype, counts = meta["dtype"], (meta["train_tokens"], meta["val_tokens"])
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{meta_path} is not a meta file written by prepare ({err!r})") from err
    if dtype not in PREPARED_DTYPES:
        raise ValueError(f"{meta_path}: dtype={dtype!r} is not supported; allowed values: "
                         f"{', '.join(map(repr, PREPARED_DTYPES))}")
    tokenizer = Tokenizer.load(data_dir / meta.get("tokenizer", "tokenizer.json"))
    if tokenizer.vocab_size > np.iinfo(dtype).max + 1:
        raise ValueError(f"{meta_path}: dtype={dtype!r} cannot hold the ids of a tokenizer with "
                         f"vocab_size={tokenizer.vocab_size}")
    arrays = []
    for name, count in zip(("train.bin", "val.bin"), counts):
        path = data_dir / name
        size = path.stat().st_size if path.is_file() else None
        expected = count * np.dtype(dtype).itemsize if isinstance(count, int) else None
        if size != expected or not count:
            raise ValueError(f"{path}: size {size} bytes does not match meta.json (dtype={dtype!r}, "
                             f"{count} tokens = {expected} bytes); was it written by another prepare?")
        arrays.append(np.memmap(path, dtype=dtype, mode="r"))
    return tokenizer, arrays[0], arrays[1], meta
