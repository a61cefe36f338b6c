"""Tokenizers: text <-> lists of integer ids.

A ladder in the style of minbpe: ``Tokenizer`` (the shared interface and JSON save/load) ->
``CharacterTokenizer`` (one id per character seen in training) -> ``ByteBPETokenizer``
(byte-level byte-pair encoding, Sennrich et al. 2016 as used by GPT-2, Radford et al. 2019:
start from the 256 byte values, repeatedly merge the most frequent adjacent pair into a new id).
"""

from __future__ import annotations

import heapq
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional, Union

# GPT-2's pre-tokenisation pattern, rewritten for the standard-library ``re`` (which has no
# ``\p{L}``): contractions, optionally-space-prefixed runs of letters / digits / other symbols,
# and whitespace. Merges never cross these chunk boundaries, so " the" and "the." stay apart.
# subtle: ``[^\W\d_]`` means "a letter" (a word character that is neither digit nor underscore),
# and the last alternatives guarantee that every character of any text lands in some chunk.
GPT2_SPLIT_PATTERN = (r"'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")
PathLike = Union[str, os.PathLike]
# The split patterns a tokenizer FILE may name. A file is data and is meant to be safe to load, but
# a regular expression is a program: ``"(.|.)*Z"`` backtracks exponentially and hangs ``encode``.
# So ``Tokenizer.load`` accepts only these; a pattern of your own is passed in code instead.
KNOWN_PATTERNS = {"gpt2": GPT2_SPLIT_PATTERN, "none": None}


class Tokenizer:
    """Shared interface: ``encode(str) -> list[int]``, ``decode(list[int]) -> str``,
    ``vocab_size``, and ``save(path)`` / ``Tokenizer.load(path)`` as JSON."""

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def save(self, path: PathLike) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @staticmethod
    def from_dict(state: dict[str, Any]) -> Tokenizer:
        """Rebuild the tokenizer named by ``state["type"]``, validating every field (a tokenizer
        file is data: a bad one raises ``ValueError`` naming the field, never loads wrong)."""
        kinds = {"CharacterTokenizer": CharacterTokenizer, "ByteBPETokenizer": ByteBPETokenizer}
        if not isinstance(state, dict):
            raise ValueError(f"a tokenizer state must be a JSON object, got {type(state).__name__}")
        kind = state.get("type")
        if kind not in kinds:
            raise ValueError(f"tokenizer type {kind!r} is unknown; allowed values: {', '.join(kinds)}")
        if state.get("version") != 1:
            raise ValueError(f"tokenizer version={state.get('version')!r} is not supported; allowed: 1")
        return kinds[kind]._from_state(state)

    @classmethod
    def load(cls, path: PathLike) -> Tokenizer:
        try:
            state = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"tokenizer file {path} is not valid JSON: {err}") from err
        except UnicodeDecodeError as err:
            raise ValueError(f"tokenizer file {path} is not UTF-8 text ({err.reason} at byte "
                             f"{err.start}); is it a tokenizer saved by fundamentallm?") from err
        try:
            tok = Tokenizer.from_dict(state)
        except ValueError as err:
            raise ValueError(f"tokenizer file {path}: {err}") from err
        if cls is not Tokenizer and not isinstance(tok, cls):
            raise ValueError(f"{path} holds a {type(tok).__name__}, not a {cls.__name__}")
        return tok

    @staticmethod
    def _ids(ids: Iterable[int]) -> list[int]:
        """Token ids as Python ints; any integer type (NumPy's, a tensor's) is fine, a float or a
        bool is not."""
        if isinstance(ids, (str, bytes)):
            raise TypeError(f"ids must be a sequence of integer token ids, got {type(ids).__name__}")
        values = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        if not isinstance(values, list):  # a 0-d tensor or array
            values = [values]
        for i in values:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"ids must be integer token ids, got {i!r} ({type(i).__name__})")
        return values


class CharacterTokenizer(Tokenizer):
    """One id per character. ``<pad>`` is 0 and ``<unk>`` is 1; the characters seen in training
    follow in sorted order. Encoding a character never seen gives ``<unk>``; decoding ``<unk>``
    gives U+FFFD (the replacement character) and ``<pad>`` gives nothing."""

    PAD, UNK = 0, 1
    SPECIALS = ("<pad>", "<unk>")

    def __init__(self, chars: Iterable[str] = ()) -> None:
        if isinstance(chars, (bytes, bytearray)) or not hasattr(chars, "__iter__"):
            raise TypeError(f"chars must be an iterable of single characters, got {type(chars).__name__}")
        chars = sorted(set(chars), key=str)
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise ValueError(f"chars must be single characters, got {bad[:5]}")
        self.itos = [*self.SPECIALS, *chars]
        self.stoi = {c: i for i, c in enumerate(chars, start=len(self.SPECIALS))}

    def train(self, text: str) -> CharacterTokenizer:
        """Set the vocabulary to the characters of ``text``; returns ``self``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        self.__init__(set(text))
        return self

    @classmethod
    def from_text(cls, text: str) -> CharacterTokenizer:
        return cls().train(text)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        return [self.stoi.get(c, self.UNK) for c in text]

    def decode(self, ids: Iterable[int]) -> str:
        out = []
        for i in self._ids(ids):
            if not 0 <= i < len(self.itos):
                raise ValueError(f"token id {i} is outside the vocabulary [0, {len(self.itos)})")
            out.append("" if i == self.PAD else "\ufffd" if i == self.UNK else self.itos[i])
        return "".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "CharacterTokenizer", "version": 1, "chars": "".join(self.itos[2:])}

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> CharacterTokenizer:
        chars = state.get("chars")
        if not isinstance(chars, str):
            raise ValueError(f"chars={chars!r} must be a string of the vocabulary's characters")
        # subtle: save writes them sorted and unique; anything else (a flipped or repeated byte)
        # would load with every later id shifted, decoding to the wrong text without an error.
        if list(chars) != sorted(set(chars)):
            raise ValueError("chars must be sorted and unique, as save writes them; the file was changed")
        return cls(chars)


def _merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Replace every non-overlapping occurrence of ``pair``, left to right:
    ``_merge([1, 2, 3, 1, 2], (1, 2), 4) -> [4, 3, 4]``."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


class ByteBPETokenizer(Tokenizer):
    """Byte-level BPE: ids 0..255 are the bytes, id ``256 + k`` is the k-th learned merge.

    Any text round-trips exactly (``decode(encode(s)) == s``): it is encoded as its UTF-8 bytes.
    An arbitrary id list may cut a multi-byte character; ``decode`` then writes U+FFFD for the
    broken bytes. ``pattern`` (default GPT-2-like, ``None`` for none) splits the text into chunks
    before merging.
    """

    def __init__(self, merges: Iterable[tuple[int, int]] = (),
                 pattern: Optional[str] = GPT2_SPLIT_PATTERN) -> None:
        if pattern is not None and not isinstance(pattern, str):
            raise TypeError(f"pattern must be a str (a regular expression) or None, got {type(pattern).__name__}")
        try:
            self._split = re.compile(pattern) if pattern else None
        except re.error as err:
            raise ValueError(f"pattern={pattern!r} is not a valid regular expression ({err})") from err
        self.pattern = pattern
        self.merges: dict[tuple[int, int], int] = {}  # (int, int) -> int, in training order
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}  # int -> bytes
        for merge in merges:
            if not isinstance(merge, (tuple, list)) or len(merge) != 2 or not all(
                    isinstance(i, int) and not isinstance(i, bool) for i in merge):
                raise ValueError(f"merges must be pairs of integer ids, got {merge!r}")
            a, b = merge
            if a not in self.vocab or b not in self.vocab:
                raise ValueError(f"merge ({a}, {b}) refers to an id not yet defined")
            if (a, b) in self.merges:
                raise ValueError(f"merge ({a}, {b}) appears twice")
            new_id = 256 + len(self.merges)
            self.merges[(a, b)] = new_id
            self.vocab[new_id] = self.vocab[a] + self.vocab[b]
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def _chunks(self, text: str) -> list[str]:
        return self._split.findall(text) if self._split else [text]

    def train(self, text: str, vocab_size: int) -> ByteBPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text``; returns ``self``. Stops early if no
        pair occurs twice. Ties between equally frequent pairs go to the smallest pair.

        Fast because nothing is recounted: the text becomes its unique chunks with their counts,
        and a merge only rewrites the chunks that contain the pair, updating the pair counts
        (and a lazy max-heap of them) by the difference.
        """
        if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 256:
            raise ValueError(f"vocab_size={vocab_size!r} must be an integer >= 256 (the byte values)")
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        self.__init__(pattern=self.pattern)
        chunk_counts = Counter(self._chunks(text))
        words = [list(c.encode("utf-8", errors="surrogatepass")) for c in chunk_counts]  # each unique chunk as ids
        freqs = list(chunk_counts.values())
        counts: Counter = Counter()  # (int, int) -> occurrences in the whole text
        where: dict[tuple[int, int], set[int]] = {}  # pair -> words that (may) contain it
        for w, (ids, f) in enumerate(zip(words, freqs)):
            for pair in zip(ids, ids[1:]):
                counts[pair] += f
                where.setdefault(pair, set()).add(w)
        heap = [(-n, pair) for pair, n in counts.items()]
        heapq.heapify(heap)
        while len(self.vocab) < vocab_size:
            while heap and -heap[0][0] != counts.get(heap[0][1], 0):
                heapq.heappop(heap)  # stale entry: the count changed since it was pushed
            if not heap or -heap[0][0] < 2:
                break
            pair = heap[0][1]
            new_id = 256 + len(self.merges)
            self.merges[pair] = new_id
            self.vocab[new_id] = self.vocab[pair[0]] + self.vocab[pair[1]]
            changed = set()
            for w in where.pop(pair, ()):
                ids, f = words[w], freqs[w]
                merged = _merge(ids, pair, new_id)
                if len(merged) == len(ids):
                    continue
                for p in zip(ids, ids[1:]):
                    counts[p] -= f
                    changed.add(p)
                for p in zip(merged, merged[1:]):
                    counts[p] += f
                    changed.add(p)
                    where.setdefault(p, set()).add(w)
                words[w] = merged
            for p in changed:
                if counts[p] > 0:
                    heapq.heappush(heap, (-counts[p], p))
                else:
                    del counts[p]
        return self

    @classmethod
    def from_text(cls, text: str, vocab_size: int, pattern: Optional[str] = GPT2_SPLIT_PATTERN):
        return cls(pattern=pattern).train(text, vocab_size)

    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = list(chunk.encode("utf-8", errors="surrogatepass"))
        while len(ids) >= 2:
            # apply the earliest-learned merge present, as in training
            pair = min(zip(ids, ids[1:]), key=lambda p: self.merges.get(p, float("inf")))
            if pair not in self.merges:
                break
            ids = _merge(ids, pair, self.merges[pair])
        return ids

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        out: list[int] = []
        for chunk in self._chunks(text):
            ids = self._cache.get(chunk)
            if ids is None:
                ids = self._encode_chunk(chunk)
                if len(self._cache) < 100_000:
                    self._cache[chunk] = ids
            out.extend(ids)
        return out

    def decode(self, ids: Iterable[int]) -> str:
        parts = []
        for i in self._ids(ids):
            if i not in self.vocab:
                raise ValueError(f"token id {i} is outside the vocabulary [0, {self.vocab_size})")
            parts.append(self.vocab[i])
        data = b"".join(parts)
        try:  # subtle: "surrogatepass" so that even lone surrogates in a str round-trip
            return data.decode("utf-8", errors="surrogatepass")
        except UnicodeDecodeError:
            return data.decode("utf-8", errors="replace")

    def token_bytes(self, i: int) -> bytes:
        """The bytes token ``i`` stands for (for displaying a vocabulary)."""
        if i not in self.vocab:
            raise ValueError(f"token id {i!r} is outside the vocabulary [0, {self.vocab_size})")
        return self.vocab[i]

    def to_dict(self) -> dict[str, Any]:
        return {"type": "ByteBPETokenizer", "version": 1, "pattern": self.pattern,
                "merges": [list(pair) for pair in self.merges]}

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> ByteBPETokenizer:
        merges, pattern = state.get("merges"), state.get("pattern")
        if not isinstance(merges, list):
            raise ValueError(f"merges={merges!r} must be a list of [id, id] pairs")
        if pattern not in KNOWN_PATTERNS.values():
            raise ValueError(f"pattern={pattern!r} is not a known split pattern (allowed: GPT-2's, "
                             f"GPT2_SPLIT_PATTERN, or null); a regular expression from a file could "
                             f"hang encode. Pass your own pattern in code: ByteBPETokenizer(merges, pattern=...)")
        return cls([tuple(p) if isinstance(p, list) else p for p in merges], pattern=pattern)
