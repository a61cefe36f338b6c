r"""Tokenizers: text <-> lists of integer ids.

A ladder in the style of minbpe: ``Tokenizer`` (the shared interface and JSON save/load) ->
``CharacterTokenizer`` (one id per character seen in training) -> ``ByteBPETokenizer``
(byte-level byte-pair encoding, Sennrich et al. 2016 as used by GPT-2, Radford et al. 2019:
start from the 256 byte values, repeatedly merge the most frequent adjacent pair into a new id).

``ByteBPETokenizer`` follows the conventions a user comparing with the references expects:
GPT-2's pre-tokenizer regex exactly (via the ``regex`` package, which knows ``\p{L}``), merges
applied in the order they were learned (GPT-2, Hugging Face), special tokens never split and
never merged across, with ``allowed_special``/``disallowed_special`` as in ``tiktoken``, and
GPT-2's ``vocab.json`` + ``merges.txt`` read and written with the ids they hold.
"""

from __future__ import annotations

# one idea a module: the interface and split patterns (base), characters (char), byte-level BPE
# (bpe), BPE's other file formats (vocab_files); every name importable from here as before
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
from .bpe import ByteBPETokenizer, _merge
from .char import CharacterTokenizer
from .vocab_files import _bytes_to_unicode

__all__ = ["GPT2_SPLIT_PATTERN", "KNOWN_PATTERNS", "LEGACY_SPLIT_PATTERN", "TIE_RULES", "ByteBPETokenizer",
           "CharacterTokenizer", "PathLike", "Tokenizer", "_bytes_to_unicode", "_check_specials", "_is_id",
           "_merge"]
