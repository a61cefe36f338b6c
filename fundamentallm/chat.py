"""The chat template and supervised fine-tuning batches (chapter 15).

:class:`ChatTemplate`: ``<user> question <assistant> answer <end>`` with reserved symbols of the
tokenizer (:func:`add_reserved_tokens` adds them to a pretrained model), and :func:`sft_batch`:
padded batches whose targets are -100 except on the assistant's tokens (supervised fine-tuning,
SFT; Ouyang et al. 2022). ``fundamentallm.posttrain`` exports these names too.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from .tasks import Pair

USER, ASSISTANT, END = "\u25b7", "\u25c1", "\u25a0"  # ▷ ◁ ■: reserved, never in the web corpus


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


class ChatTemplate:
    """``user question assistant answer end``, each marker one reserved token of ``tokenizer``."""

    def __init__(self, tokenizer, user: str = USER, assistant: str = ASSISTANT, end: str = END) -> None:
        self.tokenizer = tokenizer
        ids = {}
        unk = getattr(tokenizer, "UNK", None)
        for name, symbol in (("user", user), ("assistant", assistant), ("end", end)):
            got = tokenizer.encode(symbol) if isinstance(symbol, str) else []
            if len(got) != 1 or got[0] == unk:
                raise ValueError(f"{name}={symbol!r} is not one token of the tokenizer: build it with "
                                 f"the template's reserved symbols, e.g. CharacterTokenizer(chars + "
                                 f"{(user + assistant + end)!r})")
            ids[name] = got[0]
        if len(set(ids.values())) != 3:
            raise ValueError(f"user, assistant and end must be three different tokens, got {ids}")
        self.symbols = (user, assistant, end)
        self.user_id, self.assistant_id, self.end_id = ids["user"], ids["assistant"], ids["end"]

    def _text(self, name: str, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"{name} must be a str, got {type(text).__name__}")
        bad = [s for s in self.symbols if s in text]
        if bad:  # a user who types the markers could end the turn and speak as the assistant
            raise ValueError(f"{name}={text!r} contains the reserved symbol(s) {bad} of the chat template")
        return self.tokenizer.encode(text)

    def prompt(self, question: str) -> list[int]:
        """The ids the model is given: ``user question assistant``."""
        return [self.user_id, *self._text("question", question), self.assistant_id]

    def example(self, question: str, answer: str) -> tuple[list[int], int]:
        """A full SFT example and the length of its prompt part."""
        p = self.prompt(question)
        return p + self._text("answer", answer) + [self.end_id], len(p)

    def answer(self, completion: Sequence[int]) -> Optional[str]:
        """The text before the end token, or None if the completion never ended."""
        completion = list(completion)
        if self.end_id not in completion:
            return None
        return self.tokenizer.decode(completion[:completion.index(self.end_id)])


def add_reserved_tokens(model: nn.Module, tokenizer, symbols: Sequence[str] = (USER, ASSISTANT, END)):
    """A copy of ``model`` and a :class:`~fundamentallm.tokenizers.CharacterTokenizer` that also
    hold ``symbols``: new embedding rows (initialised like the others), the old rows moved to their
    characters' new ids (the vocabulary is sorted, so ids shift). What adding special tokens to a
    pretrained model means: the new rows are untrained until fine-tuning."""
    from .config import TransformerConfig
    from .model import Transformer
    from .tokenizers import CharacterTokenizer

    if not isinstance(tokenizer, CharacterTokenizer):
        raise TypeError(f"tokenizer must be a CharacterTokenizer to add reserved symbols, got {type(tokenizer).__name__}")
    new_tok = CharacterTokenizer([*tokenizer.itos[2:], *symbols])
    config = TransformerConfig.from_dict({**model.config.to_dict(),
                                          "vocab_size": max(model.config.vocab_size, new_tok.vocab_size)})
    new = Transformer(config).to(_device(model))
    state = {k: v for k, v in model.state_dict().items() if k not in ("token_embedding.weight", "lm_head.weight")}
    new.load_state_dict(state, strict=False)
    with torch.no_grad():
        old_ids = list(range(len(tokenizer.itos)))
        new_ids = [i if i < 2 else new_tok.stoi[c] for i, c in enumerate(tokenizer.itos)]
        new.token_embedding.weight[new_ids] = model.token_embedding.weight[old_ids]
        if not config.tie_weights:
            new.lm_head.weight[new_ids] = model.lm_head.weight[old_ids]
    return new, new_tok


def pack(sequences: Sequence[Sequence[int]], prompt_lengths: Sequence[int], pad_id: int = 0,
         mask_prompt: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ``sequences`` to ``(B, L)`` ids and return ``(ids, loss_mask (B, L-1))`` where
    ``loss_mask[b, t]`` is 1 if the token ``ids[b, t+1]`` is trained on: the completion's tokens
    (after ``prompt_lengths[b]``), or every real token with ``mask_prompt=False``. Padding is
    always masked; it sits after the real tokens, so causal attention never lets it change them."""
    L = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), L), pad_id, dtype=torch.long)
    mask = torch.zeros(len(sequences), L - 1)
    for b, (s, p) in enumerate(zip(sequences, prompt_lengths)):
        ids[b, :len(s)] = torch.tensor(s)
        mask[b, (p - 1 if mask_prompt else 0):len(s) - 1] = 1.0
    return ids, mask


def sft_batch(template: ChatTemplate, pairs: Sequence[Pair], mask_prompt: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, targets)``, both ``(B, L)``: targets are the next tokens where they are
    trained on, -100 elsewhere, so ``model(input_ids, targets)`` returns the masked SFT loss."""
    examples = [template.example(q, a) for q, a in pairs]
    ids, mask = pack([e for e, _ in examples], [p for _, p in examples], mask_prompt=mask_prompt)
    targets = torch.full_like(ids, -100)
    targets[:, :-1] = torch.where(mask.bool(), ids[:, 1:], -100)
    return ids, targets


