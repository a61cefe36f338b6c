"""Text corpora, shifted-window datasets and batches, and the digit-operations task.

* ``load_corpus("python-docs")`` is the Python reference documentation that ships with every
  Python (``pydoc_data``): about half a megabyte of English and code, no network needed.
* ``TextDataset`` turns one long stream of token ids into (input, target) windows where the
  target is the input shifted by one token -- next-token prediction (Radford et al. 2018).
* ``get_batch`` draws random windows by slicing, so the corpus may be a ``numpy.memmap`` of
  uint16 ids on disk: ``prepare`` tokenizes a text file once into ``train.bin``/``val.bin`` (as
  nanoGPT's ``prepare.py`` does) and ``load_prepared`` maps them, so a corpus larger than memory
  trains in flat memory.
* ``digit_operations`` generates the course's capstone task, ``Max ( 3 5 1 ) -> 5``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import mmap
import os
import random
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

# Downloadable corpora: name -> (url, sha256 of the file). Cached after the first download.
DOWNLOADS = {
    "tinyshakespeare": (
        "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    ),
}
CORPORA = ("python-docs", *DOWNLOADS)


def cache_dir() -> Path:
    """Where downloads are kept: ``$FUNDAMENTALLM_CACHE`` or ``~/.cache/fundamentallm``."""
    return Path(os.environ.get("FUNDAMENTALLM_CACHE") or Path.home() / ".cache" / "fundamentallm")


def _download(url: str, dest: Path) -> None:
    """Fetch ``url`` into ``dest`` (a module-level function so tests can replace it)."""
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (fixed https URL)
        dest.write_bytes(response.read())


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load_download(name: str) -> str:
    url, sha = DOWNLOADS[name]
    path = cache_dir() / f"{name}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        try:
            _download(url, tmp)
        except OSError as err:  # URLError, timeouts and socket errors are all OSErrors
            tmp.unlink(missing_ok=True)
            raise RuntimeError(
                f"could not download corpus {name!r} from {url} ({err}). If you are offline, "
                f"download the file elsewhere and pass its path: load_corpus('/path/to/{name}.txt'), "
                f"or place it at {path}; the built-in 'python-docs' corpus needs no network."
            ) from err
        tmp.replace(path)
    if _sha256(path) != sha:
        raise ValueError(f"checksum mismatch for cached corpus {name!r} at {path}: expected sha256 "
                         f"{sha}, got {_sha256(path)}. Delete the file to download it again.")
    return path.read_text(encoding="utf-8")


def load_corpus(name_or_path: Union[str, os.PathLike]) -> str:
    """The text of a corpus: ``"python-docs"`` (built in), ``"tinyshakespeare"`` (downloaded once,
    checksum-verified and cached in :func:`cache_dir`), or the path of a UTF-8 text file."""
    if isinstance(name_or_path, os.PathLike) or (isinstance(name_or_path, str) and os.path.isfile(name_or_path)):
        return _read_text_file(Path(name_or_path))
    if not isinstance(name_or_path, str):
        raise TypeError(f"name_or_path must be a corpus name or a path, got {type(name_or_path).__name__}")
    if name_or_path == "python-docs":
        from pydoc_data.topics import topics

        return "\n".join(topics[k] for k in sorted(topics))
    if name_or_path in DOWNLOADS:
        return _load_download(name_or_path)
    raise ValueError(f"corpus {name_or_path!r} is neither an existing file nor a known corpus; "
                     f"known corpora: {', '.join(map(repr, CORPORA))}")


def _read_text_file(path: Path) -> str:
    """A UTF-8 text file, with errors that name the file and say what was wrong."""
    if path.is_dir():
        raise ValueError(f"corpus path {str(path)!r} is a directory; pass a UTF-8 text file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"corpus file {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start}); "
                         f"convert it first, e.g. `iconv -f latin1 -t utf-8`") from err
    if not text:
        raise ValueError(f"corpus file {str(path)!r} is empty")
    if "\x00" in text:
        raise ValueError(f"corpus file {str(path)!r} contains NUL bytes: it looks binary, not text")
    return text


def _as_ids(ids) -> torch.Tensor:
    t = torch.as_tensor(ids)
    if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool:
        raise ValueError(f"ids must be a 1-D sequence of integer token ids, got shape "
                         f"{tuple(t.shape)} and dtype {t.dtype}")
    return t.long()


def train_val_split(ids, val_fraction: float = 0.1):
    """Split a token stream in two: the validation part is the LAST ``val_fraction`` (no shuffle,
    so no window straddles the two parts). Returns slices of the same type as ``ids``."""
    if not isinstance(val_fraction, float) or not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction!r} must be a float in (0, 1)")
    n_train = int(len(ids) * (1.0 - val_fraction))
    if n_train == 0 or n_train == len(ids):
        raise ValueError(f"val_fraction={val_fraction!r} of {len(ids)} tokens leaves an empty "
                         f"{'training' if n_train == 0 else 'validation'} split; choose a fraction "
                         f"that keeps at least one token on each side")
    return ids[:n_train], ids[n_train:]


class TextDataset(Dataset):
    """Shifted windows over a token stream: item ``i`` is ``(x, y)`` with
    ``x = ids[s : s + block_size]`` and ``y = ids[s + 1 : s + block_size + 1]``, ``s = i * stride``.

    ``stride=1`` gives every window (training); ``stride=block_size`` gives non-overlapping
    windows (evaluation on the whole split).
    """

    def __init__(self, ids, block_size: int, stride: int = 1) -> None:
        self.ids = _as_ids(ids)
        for name, value in (("block_size", block_size), ("stride", stride)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
        if len(self.ids) < block_size + 1:
            raise ValueError(f"{len(self.ids)} tokens are too few for one window of "
                             f"block_size={block_size} (need block_size + 1)")
        self.block_size, self.stride = block_size, stride

    def __len__(self) -> int:
        return (len(self.ids) - self.block_size - 1) // self.stride + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"window {i} out of range for {len(self)} windows")
        s = (i % len(self)) * self.stride
        chunk = self.ids[s:s + self.block_size + 1]
        return chunk[:-1], chunk[1:]  # (T,), (T,)


def _as_stream(data):
    """A 1-D integer token stream, kept as it is when it is a tensor or a NumPy array (a
    ``numpy.memmap`` stays on disk: nothing is read or converted here); a list becomes a tensor."""
    if isinstance(data, np.ndarray):
        if data.ndim != 1 or data.dtype.kind not in "iu":
            raise ValueError(f"data must be a 1-D array of integer token ids, got shape {data.shape} "
                             f"and dtype {data.dtype}")
        return data
    if isinstance(data, torch.Tensor):
        if data.dim() != 1 or data.is_floating_point() or data.is_complex() or data.dtype == torch.bool:
            raise ValueError(f"data must be a 1-D tensor of integer token ids, got shape "
                             f"{tuple(data.shape)} and dtype {data.dtype}")
        return data
    return _as_ids(data)


def _windows(data, starts: torch.Tensor, length: int) -> torch.Tensor:
    """Rows ``data[s : s + length]`` for each start, as int64 ``(B, length)``; only those tokens
    are read (from a memmap: only their pages), never the whole stream."""
    if isinstance(data, np.ndarray):
        if isinstance(data, np.memmap) and isinstance(data.base, mmap.mmap):
            # subtle: every page a mapping has read stays in the process's RSS (as shared file
            # pages) until it is unmapped, so RSS would grow batch after batch; reading through a
            # fresh mapping, dropped on return, keeps it flat (nanoGPT re-creates its memmap too)
            data = np.memmap(data.filename, dtype=data.dtype, mode="r", offset=data.offset, shape=data.shape)
        rows = np.stack([data[s:s + length] for s in starts.tolist()])  # (B, length)
        return torch.from_numpy(rows.astype(np.int64))
    return data[starts[:, None] + torch.arange(length)].long()  # (B, length)


def get_batch(data, batch_size: int, block_size: int, device=None,
              generator: Optional[torch.Generator] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of a token stream: ``x, y`` int64 ``(B, T)``, ``y`` being
    ``x`` shifted by one (nanoGPT's ``get_batch``). Pass a seeded ``torch.Generator`` for
    reproducible batches.

    ``data``: a 1-D tensor, list or NumPy array of ids -- a ``numpy.memmap`` of uint16 included:
    only the ``B·(T+1)`` tokens of the batch are read and converted, never the whole corpus.
    ``device``: where ``x, y`` go (on CUDA through pinned memory, copied asynchronously). A
    ``torch.Generator`` passed in ``device``'s place (positionally, as before ``device``
    existed) is taken as the generator.
    """
    if isinstance(device, torch.Generator) and generator is None:
        device, generator = None, device
    data = _as_stream(data)
    for name, value in (("batch_size", batch_size), ("block_size", block_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be an integer >= 1")
    if len(data) < block_size + 1:
        raise ValueError(f"{len(data)} tokens are too few for block_size={block_size}")
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)  # (B,)
    chunks = _windows(data, starts, block_size + 1)  # (B, T + 1)
    x, y = chunks[:, :-1], chunks[:, 1:]
    if device is not None:
        device = torch.device(device)
        if device.type == "cuda":
            return (x.pin_memory().to(device, non_blocking=True),
                    y.pin_memory().to(device, non_blocking=True))
        x, y = x.to(device), y.to(device)
    return x, y


class DataSource:
    """One interface over the data formats the :class:`~fundamentallm.training.Trainer` accepts:
    a 1-D token stream (random windows / all non-overlapping windows), a ``Dataset`` of
    ``(x, y[, attention_mask])`` tuples, or such a tuple of tensors. ``sample`` draws a random
    training batch (with replacement), ``sample_at`` the next one of a sequence without
    replacement (epochs); ``batches`` yields the whole split in order, for evaluation."""

    def __init__(self, data, block_size: Optional[int]) -> None:
        if isinstance(data, tuple) and all(isinstance(t, torch.Tensor) for t in data):
            data = TensorDataset(*data)  # (inputs, targets[, attention_mask])
        if isinstance(data, Dataset):
            self.stream, self.dataset = None, data
            if len(data) == 0:
                raise ValueError("the dataset is empty")
        else:
            self.stream, self.dataset = _as_stream(data), None
            if block_size is None:
                raise ValueError("a token stream needs a block_size: set TrainConfig.block_size or "
                                 "use a model with config.max_seq_len")
            if len(self.stream) < block_size + 1:
                raise ValueError(f"{len(self.stream)} tokens are too few for block_size={block_size}")
        self.block_size = block_size
        self._orders: dict[tuple[int, int], tuple[int, torch.Tensor]] = {}  # see _epoch_order

    def _collate(self, idx: list[int]) -> tuple[torch.Tensor, ...]:
        if isinstance(self.dataset, TensorDataset):  # fast path: index the tensors directly
            return tuple(t[idx] for t in self.dataset.tensors)
        items = [self.dataset[i] for i in idx]
        return tuple(torch.stack([torch.as_tensor(item[j]) for item in items]) for j in range(len(items[0])))

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """``batch_size`` windows (or examples) drawn at random, with replacement."""
        if self.stream is not None:
            return get_batch(self.stream, batch_size, self.block_size, generator=generator)
        return self._collate(torch.randint(len(self.dataset), (batch_size,), generator=generator).tolist())

    def epoch_size(self) -> int:
        """How many windows (or examples) one epoch of :meth:`sample_at` visits: the stream cut
        into non-overlapping windows (at an offset below ``block_size``), or the whole dataset."""
        if self.stream is None:
            return len(self.dataset)
        return (len(self.stream) - self.block_size) // self.block_size

    def sample_at(self, batch_size: int, first: int, seed: int) -> tuple[torch.Tensor, ...]:
        """Windows ``first, ..., first + batch_size - 1`` of a sequence drawn without
        replacement: epoch ``e`` (windows ``e·n`` to ``e·n + n - 1``, ``n = epoch_size()``) cuts
        the stream into non-overlapping windows at a random offset below ``block_size`` and
        visits them in a random order, so that every token of the stream (but at most
        ``2·block_size`` at its ends) is a target exactly once per epoch; a dataset's examples
        are visited in a random order per epoch. The order depends on ``seed`` and ``e`` only,
        and a window on its number only: no state to save, and resuming at window ``first``
        continues the same sequence."""
        for name, value, low in (("batch_size", batch_size, 1), ("first", first, 0), ("seed", seed, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name}={value!r} must be an integer >= {low}")
        n = self.epoch_size()
        if n < 1:
            raise ValueError(f"{len(self.stream)} tokens are too few to draw windows of block_size="
                             f"{self.block_size} without replacement: it needs at least {2 * self.block_size}")
        numbers = torch.arange(first, first + batch_size)
        picks = torch.empty(batch_size, dtype=torch.long)
        for epoch in numbers.div(n, rounding_mode="floor").unique().tolist():
            offset, order = self._epoch_order(seed, epoch, n)
            where = numbers // n == epoch
            picks[where] = offset + order[numbers[where] % n] * (self.block_size if self.stream is not None else 1)
        if self.stream is None:
            return self._collate(picks.tolist())
        chunks = _windows(self.stream, picks, self.block_size + 1)  # (B, T + 1)
        return chunks[:, :-1], chunks[:, 1:]

    def _epoch_order(self, seed: int, epoch: int, n: int) -> tuple[int, torch.Tensor]:
        """Epoch ``epoch``'s offset and window order (the last two epochs' are kept)."""
        cache = self._orders
        if (seed, epoch) not in cache:
            g = torch.Generator().manual_seed((seed * 1_000_003 + epoch) % 2**63)
            offset = int(torch.randint(self.block_size, (1,), generator=g)) if self.stream is not None else 0
            cache[(seed, epoch)] = (offset, torch.randperm(n, generator=g))
            while len(cache) > 2:
                cache.pop(next(iter(cache)))
        return cache[(seed, epoch)]

    def batches(self, batch_size: int):
        if self.stream is not None:  # every non-overlapping window; a short tail is left out
            T, n = self.block_size, (len(self.stream) - 1) // self.block_size
            for b in range(0, n, batch_size):
                starts = torch.arange(b, min(n, b + batch_size)) * T  # (B,)
                chunks = _windows(self.stream, starts, T + 1)  # (B, T + 1)
                yield chunks[:, :-1], chunks[:, 1:]
        else:
            for b in range(0, len(self.dataset), batch_size):
                yield self._collate(list(range(b, min(len(self.dataset), b + batch_size))))


# --- Token files: tokenize once, train from a memory map ----------------------------------------

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


# --- The digit-operations task -------------------------------------------------------------------

# Exactly 20 tokens. Specials first (so <pad> = 0, as in the character tokenizer):
#   <pad> fills short sequences; <cls> starts the encoder's input (its vector is pooled, as BERT's
#   [CLS]); <mask> hides a digit for masked-language-model pre-training (Devlin et al. 2019).
# Then the ten digits, the five operation names, and the two brackets. In the decoder framing
# ")" doubles as the separator: the answer digit is the token that follows it.
OPERATIONS = ("First", "Second", "Last", "Max", "Min")
DIGIT_VOCAB = ("<pad>", "<cls>", "<mask>", *"0123456789", *OPERATIONS, "(", ")")
DIGIT_STOI = {tok: i for i, tok in enumerate(DIGIT_VOCAB)}
DIGIT_PAD, DIGIT_CLS, DIGIT_MASK, DIGIT_OFFSET = 0, 1, 2, 3  # token id of digit d = d + 3
_APPLY = {"First": lambda d: d[0], "Second": lambda d: d[1], "Last": lambda d: d[-1],
          "Max": max, "Min": min}


def encode_digits(text: str) -> list[int]:
    """``"Max ( 3 5 1 )"`` -> token ids (tokens are separated by spaces)."""
    unknown = [tok for tok in text.split() if tok not in DIGIT_STOI]
    if unknown:
        raise ValueError(f"unknown token(s) {unknown}; the vocabulary is {list(DIGIT_VOCAB)}")
    return [DIGIT_STOI[tok] for tok in text.split()]


def decode_digits(ids, skip_pad: bool = True) -> str:
    """Token ids -> ``"Max ( 3 5 1 )"``; padding is dropped unless ``skip_pad=False``."""
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    return " ".join(DIGIT_VOCAB[i] for i in ids if not (skip_pad and i == DIGIT_PAD))


@dataclass
class DigitSplit:
    """One split of the digit task, as tensors (N examples, padded to a common length).

    Encoder (classifier) framing: ``input_ids`` ``(N, L)`` = ``<cls> op ( d1 .. dk )`` + padding,
    ``attention_mask`` ``(N, L)`` (True on real tokens), ``labels`` ``(N,)`` = the answer digit
    0..9 (use ``TransformerClassifier(config, num_classes=10)``).
    Decoder (sequence-completion) framing: ``lm_input_ids`` ``(N, L)`` = ``op ( d1 .. dk ) ans``
    + padding and ``lm_targets`` ``(N, L)`` = -100 everywhere except at ")", whose target is the
    answer's token id -- so a causal ``Transformer`` is scored only on predicting the answer.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    lm_input_ids: torch.Tensor
    lm_targets: torch.Tensor
    operations: list[str]
    digits: list[list[int]]

    def __len__(self) -> int:
        return len(self.labels)

    def classification(self) -> TensorDataset:
        """``(input_ids, labels, attention_mask)`` triples, ready for :class:`Trainer`."""
        return TensorDataset(self.input_ids, self.labels, self.attention_mask)

    def completion(self) -> TensorDataset:
        """``(lm_input_ids, lm_targets)`` pairs for a causal language model."""
        return TensorDataset(self.lm_input_ids, self.lm_targets)


@dataclass
class DigitTask:
    train: DigitSplit
    val: DigitSplit
    test: DigitSplit
    vocab: tuple[str, ...] = DIGIT_VOCAB


def _make_split(examples: list[tuple[str, tuple[int, ...]]], max_len: int) -> DigitSplit:
    L = max_len + 4  # <cls> op ( ... )   and   op ( ... ) ans
    n = len(examples)
    enc = torch.full((n, L), DIGIT_PAD, dtype=torch.long)
    dec = torch.full((n, L), DIGIT_PAD, dtype=torch.long)
    targets = torch.full((n, L), -100, dtype=torch.long)
    labels = torch.empty(n, dtype=torch.long)
    for i, (op, digits) in enumerate(examples):
        answer = _APPLY[op](digits)
        body = [DIGIT_STOI[op], DIGIT_STOI["("], *(d + DIGIT_OFFSET for d in digits), DIGIT_STOI[")"]]
        enc[i, :len(body) + 1] = torch.tensor([DIGIT_CLS, *body])
        dec[i, :len(body) + 1] = torch.tensor([*body, answer + DIGIT_OFFSET])
        targets[i, len(body) - 1] = answer + DIGIT_OFFSET  # predicted at ")"
        labels[i] = answer
    return DigitSplit(enc, enc != DIGIT_PAD, labels, dec, targets,
                      [op for op, _ in examples], [list(d) for _, d in examples])


def digit_operations(n_train: int = 2000, n_val: int = 200, n_test: int = 200,
                     min_len: int = 2, max_len: int = 6,
                     operations: Sequence[str] = OPERATIONS, seed: int = 0) -> DigitTask:
    """Seeded examples ``op ( d1 .. dk ) -> answer`` with k in ``[min_len, max_len]`` digits.

    The three splits hold distinct examples (no (operation, digits) pair appears twice), so the
    test accuracy measures generalisation, not memorisation.
    """
    for name, value, low in (("n_train", n_train, 1), ("n_val", n_val, 0), ("n_test", n_test, 0),
                             ("min_len", min_len, 2), ("max_len", max_len, min_len)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}={value!r} must be an integer >= {low}")
    bad = [op for op in operations if op not in OPERATIONS]
    if bad or not operations:
        raise ValueError(f"operations={list(operations)!r} must be a non-empty subset of {list(OPERATIONS)}")
    total = n_train + n_val + n_test
    space = len(operations) * sum(10**k for k in range(min_len, max_len + 1))
    if total > space // 2:
        raise ValueError(f"{total} distinct examples requested but only {space} exist for lengths "
                         f"{min_len}..{max_len}; ask for fewer or allow longer sequences")
    rng = random.Random(seed)
    seen: set[tuple[str, tuple[int, ...]]] = set()
    examples = []
    while len(examples) < total:
        k = rng.randint(min_len, max_len)
        ex = (rng.choice(list(operations)), tuple(rng.randrange(10) for _ in range(k)))
        if ex not in seen:
            seen.add(ex)
            examples.append(ex)
    cut1, cut2 = n_train, n_train + n_val
    return DigitTask(_make_split(examples[:cut1], max_len), _make_split(examples[cut1:cut2], max_len),
                     _make_split(examples[cut2:], max_len))
