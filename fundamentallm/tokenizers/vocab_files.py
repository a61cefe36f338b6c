"""Byte-level BPE in other formats: a vocabulary ``{id: bytes}`` with merges ``[(bytes, bytes)]``
(Stanford CS336's form), and GPT-2's ``vocab.json`` + ``merges.txt``, read and written with the
ids they hold. :class:`~fundamentallm.tokenizers.ByteBPETokenizer`'s ``from_vocab_merges``,
``from_gpt2_files`` and ``save_gpt2_files`` call these."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional

from .base import GPT2_SPLIT_PATTERN, PathLike, _check_specials, _is_id


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map byte -> printable character used in ``vocab.json``/``merges.txt``:
    printable bytes stand for themselves, the other 68 (space, controls, ...) for chr(256 + n)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, n = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def from_vocab_merges(cls, vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]],
                      special_tokens: Optional[Iterable[str]] = None,
                      pattern: Optional[str] = GPT2_SPLIT_PATTERN) -> Any:
    """Build from a vocabulary ``{id: bytes}`` and merges ``[(bytes, bytes), ...]`` in rank
    order (the form of Stanford CS336's assignment and of GPT-2's files), keeping the ids.

    Every single byte must be in ``vocab``, and each merge's two parts and their
    concatenation too (else ``ValueError`` naming the merge). A special token whose bytes are
    in ``vocab`` (GPT-2's ``<|endoftext|>``) keeps that id, unless a merge or a byte makes it
    (then ``ValueError``); any other special token gets the next free id.
    """
    if not isinstance(vocab, dict):
        raise TypeError(f"vocab must be a dict {{id: bytes}}, got {type(vocab).__name__}")
    for i, v in vocab.items():
        if not _is_id(i) or i < 0 or not isinstance(v, bytes) or not v:
            raise ValueError(f"vocab must map integer ids >= 0 to non-empty bytes, got {i!r}: {v!r}")
    specials = _check_specials(special_tokens)
    special_bytes = {s.encode("utf-8"): s for s in specials}
    for b, s in special_bytes.items():
        if len(b) == 1:
            raise ValueError(f"special_tokens: {s!r} is a single byte, which the byte-level "
                             f"vocabulary needs as an ordinary token")
    by_bytes: dict[bytes, int] = {}
    for i, v in vocab.items():
        if v in by_bytes and v not in special_bytes:
            raise ValueError(f"vocab: ids {by_bytes[v]} and {i} both stand for {v!r}")
        by_bytes[v] = i
    missing = [b for b in range(256) if bytes([b]) not in by_bytes]
    if missing:
        raise ValueError(f"vocab lacks the single bytes {missing[:8]}{' ...' if len(missing) > 8 else ''}; "
                         f"a byte-level vocabulary needs all 256")
    if isinstance(merges, (str, bytes)) or not hasattr(merges, "__iter__"):
        raise TypeError(f"merges must be a list of (bytes, bytes) pairs, got {type(merges).__name__}")
    triples, seen = [], set()
    for merge in merges:
        if not isinstance(merge, (tuple, list)) or len(merge) != 2 or not all(
                isinstance(m, bytes) for m in merge):
            raise ValueError(f"merges must be pairs of bytes, got {merge!r}")
        a, b = merge
        for part in (a, b, a + b):
            if part not in by_bytes:
                raise ValueError(f"merges: ({a!r}, {b!r}) does not fit the vocab: {part!r} is not in it")
        pair = (by_bytes[a], by_bytes[b])
        if pair in seen:
            raise ValueError(f"merge ({a!r}, {b!r}) appears twice")
        seen.add(pair)
        triples.append((*pair, by_bytes[a + b]))
        if a + b in special_bytes:
            raise ValueError(f"special_tokens: {special_bytes[a + b]!r} collides with the merge "
                             f"({a!r}, {b!r}); a special token must not be reachable by merges")
    tok = cls(pattern=pattern)
    ordinary = {i: v for i, v in vocab.items() if v not in special_bytes}
    ids = {s: by_bytes[s.encode("utf-8")] for s in specials if s.encode("utf-8") in by_bytes}
    tok._set(ordinary, triples, specials, ids)
    return tok

def from_gpt2_files(cls, vocab_path: PathLike, merges_path: PathLike,
                    special_tokens: Optional[Iterable[str]] = None) -> Any:
    """Load GPT-2's ``vocab.json`` (token -> id) and ``merges.txt`` (``#version`` line, then
    one merge ``"a b"`` a line, in rank order), keeping their ids; tokens are written in
    GPT-2's printable stand-ins for bytes (:func:`_bytes_to_unicode`). With
    ``special_tokens=["<|endoftext|>"]`` GPT-2's own files give GPT-2's ids exactly."""
    decode_char = {c: b for b, c in _bytes_to_unicode().items()}

    def to_bytes(token: str, where: str) -> bytes:
        try:
            return bytes(decode_char[c] for c in token)
        except KeyError as err:
            raise ValueError(f"{where}: token {token!r} has a character ({err.args[0]!r}) that "
                             f"is not one of GPT-2's byte stand-ins") from None
    try:
        table = json.loads(Path(vocab_path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"vocab_path={str(vocab_path)!r} is not a JSON file ({err})") from err
    if not isinstance(table, dict):
        raise ValueError(f"vocab_path={str(vocab_path)!r} must hold a JSON object token -> id")
    vocab = {i: to_bytes(t, "vocab_path") for t, i in table.items()}
    merges = []
    for n, line in enumerate(Path(merges_path).read_text(encoding="utf-8").splitlines(), 1):
        if not line or (n == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ValueError(f"merges_path line {n}: {line!r} is not two tokens separated by a space")
        merges.append((to_bytes(parts[0], "merges_path"), to_bytes(parts[1], "merges_path")))
    return from_vocab_merges(cls, vocab, merges, special_tokens)

def save_gpt2_files(tok, directory: PathLike) -> tuple[Path, Path]:
    """Write ``vocab.json`` and ``merges.txt`` in GPT-2's format (special tokens are in
    ``vocab.json``, as GPT-2's ``<|endoftext|>``); returns their paths. Reload with
    ``from_gpt2_files(..., special_tokens=list(tok.special_tokens))``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    char = _bytes_to_unicode()
    text = {i: "".join(char[b] for b in v) for i, v in tok.vocab.items()}
    if len(set(text.values())) != len(text):
        raise ValueError("two ids of this vocabulary stand for the same bytes; GPT-2's vocab.json "
                         "(token -> id) cannot hold that")
    vocab_path, merges_path = directory / "vocab.json", directory / "merges.txt"
    vocab_path.write_text(json.dumps({text[i]: i for i in sorted(text)}, ensure_ascii=False), encoding="utf-8")
    lines = ["#version: 0.2"] + [f"{text[a]} {text[b]}" for a, b in tok.merges]
    merges_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return vocab_path, merges_path
