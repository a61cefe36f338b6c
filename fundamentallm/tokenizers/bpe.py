r"""Byte-level BPE (Sennrich et al. 2016 as used by GPT-2, Radford et al. 2019): start from the 256
byte values, repeatedly merge the most frequent adjacent pair into a new id. GPT-2's pre-tokenizer
regex exactly (via the ``regex`` package, which knows ``\p{L}``), merges applied in the order they
were learned, special tokens never split and never merged across, with ``allowed_special`` /
``disallowed_special`` as in ``tiktoken``. Other file formats: :mod:`.vocab_files`."""

from __future__ import annotations

import heapq
import re as std_re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Union

import regex as re  # the standard library's ``re`` has no ``\p{L}`` (any letter of any script)

from . import vocab_files
from .base import (
    GPT2_SPLIT_PATTERN,
    KNOWN_PATTERNS,
    LEGACY_SPLIT_PATTERN,
    TIE_RULES,
    PathLike,
    Tokenizer,
    _check_specials,
    _is_id,
)


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
    """Byte-level BPE (GPT-2's): every text is its UTF-8 bytes, merged by learned pairs.

    State: ``vocab`` (id -> bytes), ``merges`` ((id, id) -> new id, in learning order: encoding
    applies the earliest-learned merge present, as GPT-2 and Hugging Face do) and
    ``special_tokens`` (str -> id). A tokenizer trained here (or built from ``merges`` pairs)
    has ids 0..255 for the bytes, ``256 + k`` for the k-th merge, then the special tokens, as
    GPT-2's vocabulary is laid out; one built by :meth:`from_vocab_merges` or
    :meth:`from_gpt2_files` keeps the ids it was given.

    Any text round-trips exactly (``decode(encode(s)) == s``). An arbitrary id list may cut a
    multi-byte character; ``decode`` then writes U+FFFD for the broken bytes. ``pattern``
    (default GPT-2's exact regex, ``None`` for none) splits the text into chunks before merging.
    """

    def __init__(self, merges: Iterable[tuple[int, int]] = (),
                 pattern: Optional[str] = GPT2_SPLIT_PATTERN,
                 special_tokens: Optional[Iterable[str]] = None) -> None:
        if pattern is not None and not isinstance(pattern, str):
            raise TypeError(f"pattern must be a str (a regular expression) or None, got {type(pattern).__name__}")
        try:
            # subtle: the legacy pattern was written for the standard library's ``re``, whose \w
            # holds ² and ① (``regex``'s does not); compiled there, old files encode as before.
            engine = std_re if pattern == LEGACY_SPLIT_PATTERN else re
            self._split = engine.compile(pattern) if pattern else None
        except (re.error, std_re.error) as err:
            raise ValueError(f"pattern={pattern!r} is not a valid regular expression ({err})") from err
        self.pattern = pattern
        vocab = {i: bytes([i]) for i in range(256)}  # int -> bytes
        merge_ids = []
        for merge in merges:
            if not isinstance(merge, (tuple, list)) or len(merge) != 2 or not all(map(_is_id, merge)):
                raise ValueError(f"merges must be pairs of integer ids, got {merge!r}")
            a, b = merge
            if a not in vocab or b not in vocab:
                raise ValueError(f"merge ({a}, {b}) refers to an id not yet defined")
            if any((a, b) == m[:2] for m in merge_ids):
                raise ValueError(f"merge ({a}, {b}) appears twice")
            new_id = len(vocab)
            vocab[new_id] = vocab[a] + vocab[b]
            merge_ids.append((a, b, new_id))
        self._set(vocab, merge_ids, _check_specials(special_tokens))

    def _set(self, vocab: dict[int, bytes], merges: list[tuple[int, int, int]],
             specials: list[str], special_ids: Optional[dict[str, int]] = None) -> None:
        """Install a vocabulary (no special tokens in it), merges ``(a, b, new)`` in rank order,
        and special tokens: an id from ``special_ids`` or, else, the next free id."""
        self.vocab: dict[int, bytes] = dict(vocab)  # int -> bytes (special tokens included below)
        self.merges: dict[tuple[int, int], int] = {(a, b): n for a, b, n in merges}  # in rank order
        self._ranks = {pair: r for r, pair in enumerate(self.merges)}  # (int, int) -> rank
        by_bytes = {v: i for i, v in vocab.items()}
        self._byte_ids = [by_bytes[bytes([b])] for b in range(256)]  # byte value -> id
        merged = set(self.merges.values())
        self.special_tokens: dict[str, int] = {}  # str -> id
        for s in specials:
            i = (special_ids or {}).get(s)
            if i is None:
                i = max(self.vocab, default=-1) + 1
            elif i in merged or i in self._byte_ids:
                raise ValueError(f"special_tokens: {s!r} is token {i} of the vocabulary, a byte or the "
                                 f"result of a merge; a special token must not be reachable by merges")
            self.special_tokens[s] = i
            self.vocab[i] = s.encode("utf-8")
        self._special_ids = {i: s for s, i in self.special_tokens.items()}
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """Number of ids (bytes, merges, special tokens): one more than the largest id for a
        tokenizer without gaps."""
        return len(self.vocab)

    # ---------------------------------------------------------------- training

    def train(self, text: str, vocab_size: int, special_tokens: Optional[Iterable[str]] = None,
              tie: str = "lexicographic") -> ByteBPETokenizer:
        """Learn merges from ``text`` until ``vocab_size`` ids (the 256 bytes, the merges and the
        ``special_tokens``) exist; returns ``self``. Stops early if no pair occurs twice.

        Special tokens are cut out of the text first: nothing is counted or merged across them,
        and their ids follow the merges. Ties between equally frequent pairs follow ``tie``:

        - ``"lexicographic"`` (default): the lexicographically greatest pair of byte strings,
          ``max(pairs, key=lambda p: (count[p], vocab[p[0]], vocab[p[1]]))``, the rule of
          Stanford CS336's reference (it does not depend on how ids are numbered);
        - ``"first-seen"``: the pair that occurs first in the (partly merged) text, as minbpe's
          ``max(stats, key=stats.get)`` over a dict filled in text order.

        Fast because nothing is recounted: the text becomes its unique chunks with their counts,
        and a merge only rewrites the chunks that contain the pair, updating the pair counts
        (and a lazy max-heap of them) by the difference.
        """
        if not _is_id(vocab_size) or vocab_size < 256:
            raise ValueError(f"vocab_size={vocab_size!r} must be an integer >= 256 (the byte values)")
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if tie not in TIE_RULES:
            raise ValueError(f"tie={tie!r} is not supported; allowed values: {', '.join(map(repr, TIE_RULES))}")
        specials = _check_specials(special_tokens)
        if vocab_size < 256 + len(specials):
            raise ValueError(f"vocab_size={vocab_size} leaves no room for the 256 bytes and "
                             f"{len(specials)} special tokens")
        self._set({i: bytes([i]) for i in range(256)}, [], [])
        chunk_counts: Counter = Counter()
        for part in self._split_specials(text, specials):
            chunk_counts.update(self._chunks(part))
        words = [list(c.encode("utf-8", errors="surrogatepass")) for c in chunk_counts]  # unique chunks
        freqs = list(chunk_counts.values())
        counts: Counter = Counter()  # (int, int) -> occurrences in the whole text
        where: dict[tuple[int, int], set[int]] = {}  # pair -> words that (may) contain it
        for w, (ids, f) in enumerate(zip(words, freqs)):
            for pair in zip(ids, ids[1:]):
                counts[pair] += f
                where.setdefault(pair, set()).add(w)
        vocab = dict(self.vocab)
        # "lexicographic": a min-heap keyed by (-count, inverted bytes), so its top is the most
        # frequent pair and, among equals, the greatest bytes. inv(s) reverses byte order:
        # 255 - byte, then 256 as an end marker (so a prefix sorts after the longer string).
        inv = {i: (255 - i, 256) for i in range(256)}
        key = (lambda p: (inv[p[0]], inv[p[1]])) if tie == "lexicographic" else (lambda p: ())
        heap = [(-n, key(pair), pair) for pair, n in counts.items()]
        heapq.heapify(heap)
        merges: list[tuple[int, int, int]] = []
        while len(vocab) + len(specials) < vocab_size:
            while heap and -heap[0][0] != counts.get(heap[0][2], 0):
                heapq.heappop(heap)  # stale entry: the count changed since it was pushed
            if not heap or -heap[0][0] < 2:
                break
            pair = heap[0][2]
            if tie == "first-seen":
                pair = self._first_seen(heap, counts, where, words)
            new_id = len(vocab)
            merges.append((*pair, new_id))
            vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
            inv[new_id] = tuple(255 - b for b in vocab[new_id]) + (256,)
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
                    heapq.heappush(heap, (-counts[p], key(p), p))
                else:
                    del counts[p]
        self._set(vocab, merges, specials)
        return self

    @staticmethod
    def _first_seen(heap: list, counts: Counter, where: dict, words: list) -> tuple[int, int]:
        """Among the valid heap entries with the top count, the pair whose first occurrence in the
        text comes first: (first unique chunk holding it, position there). Unique chunks are in
        order of first appearance, so that is the order minbpe's dict of pair counts has."""
        top, tied = heap[0][0], []
        while heap and heap[0][0] == top:
            entry = heapq.heappop(heap)
            if -entry[0] == counts.get(entry[2], 0) and entry not in tied:
                tied.append(entry)

        def first(pair):
            for w in sorted(where.get(pair, ())):
                ids = words[w]
                for i in range(len(ids) - 1):
                    if ids[i] == pair[0] and ids[i + 1] == pair[1]:
                        return (w, i)
            return (len(words), 0)
        best = min(tied, key=lambda e: first(e[2]))
        for entry in tied:
            if entry is not best:
                heapq.heappush(heap, entry)
        return best[2]

    @classmethod
    def from_text(cls, text: str, vocab_size: int, pattern: Optional[str] = GPT2_SPLIT_PATTERN,
                  special_tokens: Optional[Iterable[str]] = None, tie: str = "lexicographic"):
        """``ByteBPETokenizer(pattern=pattern).train(text, vocab_size, special_tokens, tie)``."""
        return cls(pattern=pattern).train(text, vocab_size, special_tokens=special_tokens, tie=tie)

    # ---------------------------------------------------------------- encoding

    def _chunks(self, text: str) -> list[str]:
        return self._split.findall(text) if self._split else [text]

    @staticmethod
    def _special_regex(specials: Iterable[str]):
        # longest first, so that of two overlapping special tokens the longer one wins
        return re.compile("(" + "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)) + ")")

    def _split_specials(self, text: str, specials: Iterable[str]) -> list[str]:
        """``text`` cut at the special tokens, which are dropped: the pieces between them."""
        specials = list(specials)
        return self._special_regex(specials).split(text)[::2] if specials else [text]

    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = [self._byte_ids[b] for b in chunk.encode("utf-8", errors="surrogatepass")]
        while len(ids) >= 2:
            # apply the earliest-learned merge present, as in training
            pair = min(zip(ids, ids[1:]), key=lambda p: self._ranks.get(p, float("inf")))
            if pair not in self._ranks:
                break
            ids = _merge(ids, pair, self.merges[pair])
        return ids

    def _allowed(self, allowed_special: Any, disallowed_special: Any, text: Optional[str]) -> set[str]:
        """The special tokens to encode as such; raises if ``text`` holds a disallowed one."""
        known = set(self.special_tokens)
        sets = []
        for name, value in (("allowed_special", allowed_special), ("disallowed_special", disallowed_special)):
            if value == "all":
                sets.append(known)
                continue
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise TypeError(f"{name} must be 'all' or a set of special tokens, got {value!r}")
            unknown = sorted(map(repr, set(value) - known))
            if unknown:
                raise ValueError(f"{name} names {', '.join(unknown)}, not special tokens of this "
                                 f"tokenizer (its special tokens: {sorted(known)})")
            sets.append(set(value))
        allowed = sets[0]
        disallowed = sets[1] - allowed if disallowed_special == "all" else sets[1]
        if disallowed and text is not None:
            found = self._special_regex(disallowed).search(text)
            if found:
                raise ValueError(f"the text holds the special token {found.group()!r}, which "
                                 f"disallowed_special forbids; pass allowed_special={{{found.group()!r}}} "
                                 f"to encode it as a special token, or disallowed_special=() to "
                                 f"encode it as ordinary text")
        return allowed

    def _encode_ordinary(self, chunks: Iterable[str], out: list[int]) -> None:
        for chunk in chunks:
            ids = self._cache.get(chunk)
            if ids is None:
                ids = self._encode_chunk(chunk)
                if len(self._cache) < 100_000:
                    self._cache[chunk] = ids
            out.extend(ids)

    def encode(self, text: str, allowed_special: Union[str, Iterable[str]] = "all",
               disallowed_special: Union[str, Iterable[str]] = "all") -> list[int]:
        """Text -> ids. Special tokens are found first and never split; the text between them
        is pre-tokenized and merged.

        ``allowed_special``/``disallowed_special`` work as in ``tiktoken``: an allowed special
        token in the text becomes its id; a disallowed one raises ``ValueError``; one that is
        neither is encoded as ordinary text. ``"all"`` means every special token; a disallowed
        ``"all"`` means every special token not allowed. Only the default differs from
        tiktoken's (which allows none, so ``"<|endoftext|>"`` in a text raises): here every
        special token is allowed, as in Hugging Face's tokenizers and Stanford CS336's reference.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        allowed = self._allowed(allowed_special, disallowed_special, text)
        out: list[int] = []
        if not allowed:
            self._encode_ordinary(self._chunks(text), out)
            return out
        for k, part in enumerate(self._special_regex(allowed).split(text)):
            if k % 2:
                out.append(self.special_tokens[part])
            else:
                self._encode_ordinary(self._chunks(part), out)
        return out

    def encode_iterable(self, iterable: Iterable[str], allowed_special: Union[str, Iterable[str]] = "all",
                        disallowed_special: Union[str, Iterable[str]] = "all") -> Iterator[int]:
        """Yield the ids of ``"".join(iterable)`` lazily, e.g. over an open text file (its lines):
        the result equals :meth:`encode` of the whole text, in memory that does not grow with it.

        subtle: a pre-token chunk or a special token may continue in the next piece, so the last
        chunk of each piece (and any tail that could start a special token) is held back and
        encoded with the next one; chunks before it are final, since GPT-2's pattern decides a
        chunk's end by the character after it.
        """
        if isinstance(iterable, (str, bytes)) or not hasattr(iterable, "__iter__"):
            raise TypeError(f"iterable must be an iterable of str pieces (e.g. an open text file), "
                            f"got {type(iterable).__name__}; use encode for one string")
        allowed = self._allowed(allowed_special, disallowed_special, None)
        carry = ""
        for piece in iterable:
            if not isinstance(piece, str):
                raise TypeError(f"iterable must yield str pieces, got {type(piece).__name__}")
            buf = carry + piece
            self._allowed(allowed_special, disallowed_special, buf)  # a disallowed special raises
            hold = len(buf)
            for s in self.special_tokens:  # a tail that may be the start of a special token
                for k in range(min(len(s) - 1, len(buf)), 0, -1):
                    if buf.endswith(s[:k]):
                        hold = min(hold, len(buf) - k)
                        break
            head = buf[:hold]
            parts = self._special_regex(allowed).split(head) if allowed else [head]
            last = parts[-1]
            chunks = self._chunks(last) if last else []
            cut = len(head) - (len(chunks[-1]) if chunks else 0)
            out: list[int] = []
            for k, part in enumerate(parts[:-1]):
                if k % 2:
                    out.append(self.special_tokens[part])
                else:
                    self._encode_ordinary(self._chunks(part), out)
            self._encode_ordinary(chunks[:-1], out)
            yield from out
            carry = buf[cut:]
        yield from self.encode(carry, allowed_special, disallowed_special)

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text: the bytes of each id (a special token's: its UTF-8 string), joined and
        decoded as UTF-8; bytes that do not form a character become U+FFFD."""
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

    # ---------------------------------------------------------------- other formats (vocab_files)

    @classmethod
    def from_vocab_merges(cls, vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]],
                          special_tokens: Optional[Iterable[str]] = None,
                          pattern: Optional[str] = GPT2_SPLIT_PATTERN) -> ByteBPETokenizer:
        """Build from a vocabulary ``{id: bytes}`` and merges ``[(bytes, bytes), ...]`` in rank
        order, keeping the ids: :func:`fundamentallm.tokenizers.vocab_files.from_vocab_merges`."""
        return vocab_files.from_vocab_merges(cls, vocab, merges, special_tokens, pattern)

    @classmethod
    def from_gpt2_files(cls, vocab_path: PathLike, merges_path: PathLike,
                        special_tokens: Optional[Iterable[str]] = None) -> ByteBPETokenizer:
        """Load GPT-2's ``vocab.json`` and ``merges.txt``, keeping their ids:
        :func:`fundamentallm.tokenizers.vocab_files.from_gpt2_files`."""
        return vocab_files.from_gpt2_files(cls, vocab_path, merges_path, special_tokens)

    def save_gpt2_files(self, directory: PathLike) -> tuple[Path, Path]:
        """Write ``vocab.json`` and ``merges.txt`` in GPT-2's format; returns their paths:
        :func:`fundamentallm.tokenizers.vocab_files.save_gpt2_files`."""
        return vocab_files.save_gpt2_files(self, directory)

    # ---------------------------------------------------------------- save / load

    def to_dict(self) -> dict[str, Any]:
        """Version 2: the vocabulary (id -> hex bytes), the merges as ``[a, b, new]`` id triples in
        rank order, the special tokens. Version 1 files (merges as pairs, ids 256 + k) still load."""
        specials = set(self._special_ids)
        return {"type": "ByteBPETokenizer", "version": 2, "pattern": self.pattern,
                "vocab": {str(i): v.hex() for i, v in sorted(self.vocab.items()) if i not in specials},
                "merges": [[a, b, n] for (a, b), n in self.merges.items()],
                "special_tokens": dict(self.special_tokens)}

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> ByteBPETokenizer:
        merges, pattern = state.get("merges"), state.get("pattern")
        if not isinstance(merges, list):
            raise ValueError(f"merges={merges!r} must be a list of [id, id] pairs")
        if pattern not in KNOWN_PATTERNS.values():
            raise ValueError(f"pattern={pattern!r} is not a known split pattern (allowed: GPT-2's, "
                             f"GPT2_SPLIT_PATTERN, or null); a regular expression from a file could "
                             f"hang encode. Pass your own pattern in code: ByteBPETokenizer(merges, pattern=...)")
        if state["version"] == 1:
            return cls([tuple(p) if isinstance(p, list) else p for p in merges], pattern=pattern)
        vocab, specials = state.get("vocab"), state.get("special_tokens")
        if not isinstance(vocab, dict) or not isinstance(specials, dict):
            raise ValueError("vocab and special_tokens must be JSON objects")
        try:
            vocab = {int(i): bytes.fromhex(v) for i, v in vocab.items()}
        except (ValueError, TypeError) as err:
            raise ValueError(f"vocab must map ids to hex strings of bytes ({err})") from err
        pairs = []
        for m in merges:
            if not isinstance(m, list) or len(m) != 3 or not all(_is_id(i) and i in vocab for i in m):
                raise ValueError(f"merges must be [id, id, id] triples of vocab ids, got {m!r}")
            pairs.append((vocab[m[0]], vocab[m[1]]))
        tok = cls.from_vocab_merges(vocab, pairs, list(specials), pattern=pattern)
        if tok.special_tokens != specials or list(tok.merges.items()) != [((a, b), n) for a, b, n in merges]:
            raise ValueError("special_tokens or merges do not fit the vocab (the file was changed)")
        return tok
