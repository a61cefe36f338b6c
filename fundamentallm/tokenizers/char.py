"""The character tokenizer: one id per character seen in training."""

from __future__ import annotations

from typing import Any, Iterable

from .base import Tokenizer


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
