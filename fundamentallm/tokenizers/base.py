"""The tokenizer interface (``encode``, ``decode``, ``vocab_size``, JSON save/load), the split
patterns a tokenizer file may name, and the checks the tokenizers share."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Union

# GPT-2's pre-tokenisation pattern, exactly as in its encoder.py (Radford et al. 2019):
# contractions, optionally-space-prefixed runs of letters / numbers / other symbols, and
# whitespace. Merges never cross these chunk boundaries, so " the" and "the." stay apart.
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# The approximation used before the ``regex`` package (``[^\W\d_]`` for a letter): it differs from
# GPT-2 on a letter next to a character such as ² or ①. Kept so tokenizer files saved with it load
# and encode exactly as before.
LEGACY_SPLIT_PATTERN = r"'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"
PathLike = Union[str, os.PathLike]
# The split patterns a tokenizer FILE may name. A file is data and is meant to be safe to load, but
# a regular expression is a program: ``"(.|.)*Z"`` backtracks exponentially and hangs ``encode``.
# So ``Tokenizer.load`` accepts only these; a pattern of your own is passed in code instead.
KNOWN_PATTERNS = {"gpt2": GPT2_SPLIT_PATTERN, "legacy": LEGACY_SPLIT_PATTERN, "none": None}
# How training breaks a tie between equally frequent pairs (see ByteBPETokenizer.train).
TIE_RULES = ("lexicographic", "first-seen")


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
        from .bpe import ByteBPETokenizer  # here: the subclasses import this module
        from .char import CharacterTokenizer

        kinds = {"CharacterTokenizer": CharacterTokenizer, "ByteBPETokenizer": ByteBPETokenizer}
        if not isinstance(state, dict):
            raise ValueError(f"a tokenizer state must be a JSON object, got {type(state).__name__}")
        kind = state.get("type")
        if kind not in kinds:
            raise ValueError(f"tokenizer type {kind!r} is unknown; allowed values: {', '.join(kinds)}")
        versions = (1, 2) if kind == "ByteBPETokenizer" else (1,)
        if state.get("version") not in versions:
            raise ValueError(f"tokenizer version={state.get('version')!r} is not supported; allowed: "
                             f"{', '.join(map(str, versions))}")
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


def _is_id(i: Any) -> bool:
    return isinstance(i, int) and not isinstance(i, bool)


def _check_specials(special_tokens: Any) -> list[str]:
    """``special_tokens`` as a list of distinct non-empty strings, or a clear error."""
    if special_tokens is None:
        return []
    if isinstance(special_tokens, (str, bytes)) or not hasattr(special_tokens, "__iter__"):
        raise TypeError(f"special_tokens must be a list of strings, got {type(special_tokens).__name__}")
    specials = list(special_tokens)
    for s in specials:
        if not isinstance(s, str) or not s:
            raise TypeError(f"special_tokens must be non-empty strings, got {s!r} ({type(s).__name__})")
    if len(set(specials)) != len(specials):
        raise ValueError(f"special_tokens={specials!r} holds a token twice")
    return specials
