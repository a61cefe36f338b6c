"""What a reader types into an explorer: checked before it reaches a model or a tokenizer, and
shown readably in a figure (the helpers the chapters' explorers share)."""

from __future__ import annotations

MAX_WORDS = 24   # attention maps beyond this many words are unreadable
MAX_CHARS = 120  # typed text longer than this is cut (tokens), or refused (prompts)


def _plt():
    import matplotlib.pyplot as plt
    return plt


def unknown_characters(tokenizer, text_: str) -> list[str]:
    """The distinct characters of ``text_`` that ``tokenizer`` cannot encode and decode back."""
    return [c for c in dict.fromkeys(text_) if tokenizer.decode(tokenizer.encode(c)) != c]


def _check_prompt(tokenizer, prompt: str, what: str = "prompt") -> str | None:
    """A message if ``prompt`` cannot be fed to the model, else None."""
    if not prompt:
        return f"The {what} is empty: type a few characters."
    if len(prompt) > MAX_CHARS:
        return f"The {what} has {len(prompt)} characters: type at most {MAX_CHARS}."
    bad = unknown_characters(tokenizer, prompt)
    if bad:
        return (f"The {what} has characters the tokenizer never saw: {' '.join(map(repr, bad))}. "
                "Remove them or use characters of the training text.")
    return None


def _label(token: str) -> str:
    return {" ": "␣", "\n": "\\n", "\t": "\\t"}.get(token, token)
