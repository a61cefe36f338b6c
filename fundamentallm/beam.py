"""Beam search, with Hugging Face's semantics (``generate(num_beams=...)``, transformers 5.x).

Greedy decoding keeps one sequence and takes the best next token; beam search keeps the
``num_beams`` best *partial sequences* by total log-probability and extends each by every token,
so a token that looks worse now can win through what follows it (Graves 2012; Sutskever et al.
2014). A finished hypothesis (it produced an end-of-sequence token, or reached the length limit)
is scored by its summed log-probability divided by ``length ** length_penalty`` (Wu et al. 2016
use a related penalty; this is Hugging Face's), where ``length`` counts the *generated* tokens,
the end token included and the prompt not.

One step, for each prompt of the batch (as in ``transformers.GenerationMixin._beam_search``):

1. the log-softmax of the next-token logits of every running beam, plus the beam's score;
2. the best ``K = max(2, 1 + n_eos) * num_beams`` of those ``num_beams * V`` continuations;
3. a continuation *finishes* when its token is an end token or the sequence reaches
   ``prompt + max_new_tokens`` tokens; among the best ``num_beams`` of the ``K``, finished ones
   enter the pool of ``num_beams`` finished hypotheses (ranked by the length-normalised score);
4. the best ``num_beams`` unfinished continuations become the running beams.

It stops when every running continuation hits the length limit; with ``early_stopping=True``
as soon as ``num_beams`` hypotheses have finished; with ``False`` when the pool is full and the
best running beam, scored at its current length, cannot beat the pool's worst; with ``"never"``
(and ``length_penalty > 0``) the running beam is scored at the maximum length instead.

The model is called as in :mod:`fundamentallm.generation` (``model.next_token_logits`` when it has
it, else ``model(ids)[..., -1, :]``), on the whole sequence at every step (no KV cache): a step
costs ``num_beams`` forward passes of greedy decoding's one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Optional, Union

import torch
from torch import nn

_NEG = -1.0e9  # Hugging Face's "impossible" score, added in float32 as it does


def _last_logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    from .generation import _last_logits as last

    return last(model, ids)


def _validate(model, input_ids, num_beams, max_new_tokens, length_penalty, early_stopping,
              eos_token_id, pad_token_id, num_return_sequences) -> tuple[torch.Tensor, list[int]]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point() or input_ids.dtype == torch.bool:
        raise TypeError("input_ids must be an integer torch.Tensor of token ids, shape (T,) or (B, T)")
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must have shape (T,) or (B, T) with T >= 1, got {tuple(input_ids.shape)}")
    for name, value, low in (("num_beams", num_beams, 1), ("max_new_tokens", max_new_tokens, 1),
                             ("num_return_sequences", num_return_sequences, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r} must be an int >= {low}")
    if num_return_sequences > num_beams:
        raise ValueError(f"num_return_sequences={num_return_sequences} must be <= num_beams={num_beams}")
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)) \
            or not math.isfinite(length_penalty):
        raise ValueError(f"length_penalty={length_penalty!r} must be a finite number "
                         f"(> 0 favours longer sequences, < 0 shorter ones, 0 none)")
    if early_stopping not in (True, False, "never") or isinstance(early_stopping, int) and \
            not isinstance(early_stopping, bool):
        raise ValueError(f"early_stopping={early_stopping!r} must be True, False or 'never'")
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if eos_token_id is None:
        eos: list[int] = []
    elif isinstance(eos_token_id, int) and not isinstance(eos_token_id, bool):
        eos = [eos_token_id]
    elif isinstance(eos_token_id, Iterable) and not isinstance(eos_token_id, (str, bytes)):
        eos = list(eos_token_id)
    else:
        raise ValueError(f"eos_token_id={eos_token_id!r} must be None, a token id or a list of token ids")
    for t in eos + ([] if pad_token_id is None else [pad_token_id]):
        if isinstance(t, bool) or not isinstance(t, int) or t < 0 or (vocab is not None and t >= vocab):
            which = "pad_token_id" if t is pad_token_id and t not in eos else "eos_token_id"
            raise ValueError(f"{which}: {t!r} is not a token id in [0, {vocab})")
    limit = getattr(config, "max_seq_len", None)
    if limit is not None and input_ids.shape[1] + max_new_tokens > limit:
        raise ValueError(f"prompt ({input_ids.shape[1]}) + max_new_tokens ({max_new_tokens}) exceeds the "
                         f"model's max_seq_len={limit}")
    return input_ids, eos


@torch.no_grad()
def beam_search(model: nn.Module, input_ids: torch.Tensor, num_beams: int, max_new_tokens: int,
                length_penalty: float = 1.0, early_stopping: Union[bool, str] = False,
                eos_token_id: Union[int, list[int], None] = None, pad_token_id: Optional[int] = None,
                num_return_sequences: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Beam search: the same tokens and scores as Hugging Face's ``generate(num_beams=...)``.

    ``input_ids``: ``(T,)`` or ``(B, T)`` prompts (no padding). Returns ``(sequences, scores)``:
    ``sequences`` of shape ``(B * num_return_sequences, T + L)``, the best hypotheses of each
    prompt, best first, where ``L`` is the longest generated part among them (shorter ones are
    filled with ``pad_token_id``, else the first end token); ``scores`` their summed
    log-probabilities divided by ``(generated length) ** length_penalty`` (float32), HF's
    ``sequences_scores``. See the module docstring for the algorithm and when it stops.
    """
    input_ids, eos = _validate(model, input_ids, num_beams, max_new_tokens, length_penalty, early_stopping,
                               eos_token_id, pad_token_id, num_return_sequences)
    fill = pad_token_id if (pad_token_id is not None and eos) else (eos[0] if eos else -1)
    results = [_one_prompt(model, row, num_beams, max_new_tokens, float(length_penalty), early_stopping, eos)
               for row in input_ids]
    prompt_len = input_ids.shape[1]
    chosen = [(seq, score) for seqs, scores in results
              for seq, score in zip(seqs[:num_return_sequences], scores[:num_return_sequences])]
    width = prompt_len + max(len(seq) - prompt_len for seq, _ in chosen)
    out = torch.full((len(chosen), width), fill, dtype=torch.long, device=input_ids.device)
    for i, (seq, _) in enumerate(chosen):
        out[i, :len(seq)] = seq
    return out, torch.stack([score for _, score in chosen])


def _one_prompt(model, prompt, num_beams, max_new_tokens, length_penalty, early_stopping, eos):
    """Beam search for one prompt ``(T,)``: the finished hypotheses, best first, and their scores."""
    device, prompt_len = prompt.device, prompt.shape[0]
    max_len = prompt_len + max_new_tokens
    keep = max(2, 1 + len(eos)) * num_beams  # candidates per step: enough to refill the beams
    eos_t = torch.tensor(eos, dtype=torch.long, device=device)
    running = prompt.repeat(num_beams, 1)  # (num_beams, T)
    running_scores = torch.zeros(num_beams, device=device)
    running_scores[1:] = _NEG  # identical beams at first: expand only the first
    finished = [prompt] * num_beams  # the pool of finished hypotheses
    finished_scores = torch.full((num_beams,), _NEG, device=device)
    is_finished = torch.zeros(num_beams, dtype=torch.bool, device=device)
    may_improve = True
    cur_len = prompt_len
    while True:
        log_probs = torch.log_softmax(_last_logits(model, running).float(), dim=-1)  # (num_beams, V)
        vocab = log_probs.shape[-1]
        total = (log_probs + running_scores[:, None]).reshape(-1)  # (num_beams * V,)
        top_scores, top_index = torch.topk(total, k=keep)  # best first
        beam, token = top_index // vocab, top_index % vocab
        candidates = torch.cat([running[beam], token[:, None]], dim=1)  # (keep, cur_len + 1)
        ends = torch.isin(token, eos_t) if eos else torch.zeros(keep, dtype=torch.bool, device=device)
        done = ends | (cur_len + 1 >= max_len)  # this continuation stops here
        # the running beams: the best unfinished continuations
        open_scores = top_scores + done.float() * _NEG
        best_open = torch.topk(open_scores, k=num_beams).indices
        running, running_scores = candidates[best_open], open_scores[best_open]
        # the pool: the finished ones among the best num_beams, scored per generated token
        new_scores = top_scores / ((cur_len + 1 - prompt_len) ** length_penalty)
        if bool(is_finished.all()) and early_stopping is True:
            new_scores = new_scores + _NEG
        if not may_improve:
            new_scores = new_scores + _NEG
        just_finished = done & (torch.arange(keep, device=device) < num_beams)
        new_scores = new_scores + (~just_finished).float() * _NEG
        merged_scores = torch.cat([finished_scores, new_scores])
        merged_finished = torch.cat([is_finished, just_finished])
        pool = finished + [c for c in candidates]
        best = torch.topk(merged_scores, k=num_beams).indices
        finished = [pool[i] for i in best.tolist()]
        finished_scores, is_finished = merged_scores[best], merged_finished[best]
        cur_len += 1
        # can a running beam still beat the worst finished one?
        length = (max_len if early_stopping == "never" and length_penalty > 0 else cur_len) - prompt_len
        best_possible = running_scores[0] / (length ** length_penalty)
        worst = torch.where(is_finished, finished_scores.min(), torch.tensor(_NEG, device=device))
        may_improve = may_improve and bool((best_possible > worst).any())
        full = bool(is_finished.all()) and early_stopping is True
        if not may_improve or full or bool(done.all()):
            return finished, finished_scores
