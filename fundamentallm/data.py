"""Text corpora, shifted-window datasets and batches.

* ``load_corpus("python-docs")`` is the Python reference documentation that ships with every
  Python (``pydoc_data``): about half a megabyte of English and code, no network needed.
* ``TextDataset`` turns one long stream of token ids into (input, target) windows where the
  target is the input shifted by one token -- next-token prediction (Radford et al. 2018).
* ``get_batch`` draws random windows by slicing, so the corpus may be a ``numpy.memmap`` of
  uint16 ids on disk: ``prepare`` tokenizes a text file once into ``train.bin``/``val.bin`` (as
  nanoGPT's ``prepare.py`` does) and ``load_prepared`` maps them, so a corpus larger than memory
  trains in flat memory (both in :mod:`fundamentallm.tokenfiles`, exported here too).

The course's tasks (``digit_operations``, chapter 12) are in :mod:`fundamentallm.tasks`; the names
are exported here too, where the chapters import them.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import urllib.request
from pathlib import Path
from typing import Optional, Union

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


# --- Exported here, defined next door ---------------------------------------------------------------
from .tasks import (  # noqa: E402,F401  (chapter 12 and older code import the task from here)
    DIGIT_CLS,
    DIGIT_MASK,
    DIGIT_OFFSET,
    DIGIT_PAD,
    DIGIT_STOI,
    DIGIT_VOCAB,
    OPERATIONS,
    DigitSplit,
    DigitTask,
    decode_digits,
    digit_operations,
    encode_digits,
)
from .tokenfiles import (  # noqa: E402,F401
    META_FILE,
    PREPARED_DTYPES,
    load_prepared,
    prepare,
    tokenizer_for_text,
)
