"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023): a small *draft* model guesses
``k`` tokens, the large *target* model checks them all in one forward, and a rejection rule keeps
the output distributed exactly as the target's own samples.

One round, for a sequence ``x``:

1. the draft samples ``x_1 .. x_k`` one by one from its distributions ``q_1 .. q_k``;
2. the target runs once on ``x, x_1 .. x_k`` and gives ``p_1 .. p_{k+1}`` (the distribution of
   each next token under the target);
3. for ``i = 1 .. k``: accept ``x_i`` with probability ``min(1, p_i(x_i) / q_i(x_i))``; at the first
   rejection, sample a replacement from the *residual* ``norm(max(0, p_i - q_i))`` and end the round;
4. if all ``k`` were accepted, sample one more token from ``p_{k+1}`` (free: the target computed it).

A round adds between 1 and ``k + 1`` tokens for one target forward. Every token is distributed as
the target's: accepting ``x`` has probability ``q(x) · min(1, p(x)/q(x)) = min(q(x), p(x))``, and the
residual supplies the missing ``p(x) - min(q(x), p(x))``. :func:`exact_distribution` checks this
by running this module's own code down every branch of its random choices (finite for a tiny
vocabulary and a short horizon) and summing the probabilities of the outputs. With
``greedy=True`` the draft proposes its argmax and a token is kept when it is the target's argmax:
the output is the target's greedy output.

The models are the course's :class:`~fundamentallm.generation.DecodingModel` s (``Transformer``):
each keeps a KV cache, and rejected positions are dropped by moving the cache's ``length`` back
(the next write overwrites them). Models with canon layers are refused (their convolution state
cannot be moved back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import nn

from .generation import DecodingModel
from .sampling import SamplingConfig, top_k_filter, top_p_filter


@dataclass
class SpeculativeStats:
    """What happened: ``rounds`` (target forwards), ``drafted`` (tokens proposed), ``accepted``
    (proposals kept), ``generated`` (tokens returned) and ``accepted_per_round``."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    accepted_per_round: list = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.generated / self.rounds if self.rounds else 0.0


class _Random:
    """The random choices of a round, drawn from a ``torch.Generator``."""

    def __init__(self, generator: Optional[torch.Generator]) -> None:
        self.generator = generator

    def categorical(self, probs: torch.Tensor) -> int:  # probs (V,) float64
        return int(torch.multinomial(probs.float(), 1, generator=self.generator))

    def accept(self, prob: float) -> bool:
        return bool(torch.rand((), generator=self.generator, dtype=torch.float64) < prob)


class _Runner:
    """A model, its KV cache and how many tokens of the sequence the cache holds."""

    def __init__(self, model: nn.Module) -> None:
        self.model, self.cache, self.fed = model, model.make_kv_cache(1), 0

    def logits(self, seq: list[int]) -> torch.Tensor:
        """Logits ``(n, V)`` predicting the tokens after positions ``fed .. len(seq)-1``."""
        self.cache.length = self.fed  # drop whatever the cache holds past the kept prefix
        new = torch.tensor([seq[self.fed:]], device=self.cache.k.device)  # (1, n)
        out = self.model(new, kv_cache=self.cache)
        self.fed = len(seq)
        return (out[0] if isinstance(out, tuple) else out)[0].double()  # (n, V)

    def keep(self, n: int) -> None:
        self.fed = min(self.fed, n)


class _Memo(_Runner):
    """A runner that remembers every prefix's next-token logits (full forwards, no cache): the
    enumeration visits the same sequences along many branches."""

    def __init__(self, model: nn.Module, memo: dict) -> None:
        self.model, self.memo, self.fed = model, memo, 0

    def logits(self, seq: list[int]) -> torch.Tensor:
        if tuple(seq) not in self.memo:
            out = self.model(torch.tensor([seq]))
            rows = (out[0] if isinstance(out, tuple) else out)[0].double()  # (len(seq), V)
            for i in range(len(seq)):
                self.memo[tuple(seq[:i + 1])] = rows[i]
        start, self.fed = self.fed, len(seq)
        return torch.stack([self.memo[tuple(seq[:i + 1])] for i in range(start, len(seq))])


def _probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """The distribution a token is sampled from: temperature, then top-k, then top-p, as in
    :func:`~fundamentallm.sampling.sample_next`; applied alike to the draft's ``q`` and the target's
    ``p``, so the output is distributed as the target's filtered samples. ``(V,)`` float64."""
    logits = logits / sampling.temperature
    if sampling.top_k is not None:
        logits = top_k_filter(logits, sampling.top_k)
    if sampling.top_p is not None:
        logits = top_p_filter(logits, sampling.top_p)
    return torch.softmax(logits, dim=-1)  # float64


def _round(target: _Runner, draft: _Runner, seq: list[int], k: int, sampling: SamplingConfig,
           choose) -> tuple[list[int], int]:
    """One round: the new tokens (1 .. k+1) and how many of the k proposals were accepted."""
    greedy = sampling.greedy
    proposals, q = [], []
    for _ in range(k):
        logits = draft.logits(seq + proposals)[-1]
        if greedy:
            proposals.append(int(logits.argmax()))
        else:
            q.append(_probs(logits, sampling))
            proposals.append(choose.categorical(q[-1]))
    target_logits = target.logits(seq + proposals)[-(k + 1):]  # (k+1, V): p_1 .. p_{k+1}
    new = []
    for i, x in enumerate(proposals):
        if greedy:
            best = int(target_logits[i].argmax())
            if best != x:
                return new + [best], i
        else:
            p = _probs(target_logits[i], sampling)
            if not choose.accept(min(1.0, float(p[x] / q[i][x]))):
                residual = (p - q[i]).clamp(min=0)
                return new + [choose.categorical(residual / residual.sum())], i
        new.append(x)
    last = target_logits[k]
    return new + [int(last.argmax()) if greedy else choose.categorical(_probs(last, sampling))], k


def _check(target, draft, prompt, max_new_tokens, k, temperature) -> list[int]:
    for name, model in (("target", target), ("draft", draft)):
        if not isinstance(model, DecodingModel):
            raise TypeError(f"{name} must be a model with a KV cache (a DecodingModel such as Transformer)")
        if getattr(model.config, "canon", None):
            raise ValueError(f"{name} has canon layers, whose state cannot be rolled back; speculative "
                             f"decoding needs models without them")
    if target.config.vocab_size != draft.config.vocab_size:
        raise ValueError(f"the draft's vocab_size={draft.config.vocab_size} must equal the target's "
                         f"{target.config.vocab_size}: the draft proposes the target's tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k={k!r} must be an integer >= 1 (tokens the draft proposes per round)")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 1")
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature={temperature!r} must be a number > 0 (greedy=True for the argmax)")
    ids = prompt.tolist() if isinstance(prompt, torch.Tensor) else list(prompt)
    if ids and isinstance(ids[0], list):
        if len(ids) != 1:
            raise ValueError(f"input_ids holds {len(ids)} prompts; speculative decoding takes one")
        ids = ids[0]
    if not ids:
        raise ValueError("input_ids is empty: give at least one prompt token")
    need = len(ids) + max_new_tokens + k
    for name, model in (("target", target), ("draft", draft)):
        if need > model.config.max_seq_len:
            raise ValueError(f"len(prompt) + max_new_tokens + k = {need} must be <= the {name}'s "
                             f"max_seq_len={model.config.max_seq_len}")
        model.check_values(torch.tensor([ids]))
    return ids


def _run(t: _Runner, d: _Runner, ids, max_new_tokens, k, sampling: SamplingConfig, choose,
         stop: tuple = ()) -> tuple[list[int], SpeculativeStats]:
    """Rounds until ``max_new_tokens`` new tokens or a ``stop`` id (kept, as generate keeps it)."""
    stats = SpeculativeStats()
    seq = list(ids)
    end = len(ids) + max_new_tokens
    while len(seq) < end:
        new, accepted = _round(t, d, seq, k, sampling, choose)
        t.keep(len(seq) + accepted)
        d.keep(len(seq) + accepted)
        seq += new
        stats.rounds += 1
        stats.drafted += k
        stats.accepted += accepted
        stats.accepted_per_round.append(accepted)
        hit = [i for i in range(len(seq) - len(new), min(len(seq), end)) if seq[i] in stop]
        if hit:
            end = hit[0] + 1
    out = seq[:end]  # a round may overshoot; the prefix keeps its distribution
    stats.generated = len(out) - len(ids)
    return out, stats


def speculative_generate(target: nn.Module, draft: nn.Module, input_ids, max_new_tokens: int, k: int = 4,
                         temperature: float = 1.0, greedy: bool = False,
                         generator: Optional[torch.Generator] = None, top_k: Optional[int] = None,
                         top_p: Optional[float] = None, stop=()) -> tuple[torch.Tensor, SpeculativeStats]:
    """Extend one prompt (``(T,)`` or ``(1, T)`` ids) by ``max_new_tokens`` tokens, ``k`` drafted per
    round. Returns ``(ids, stats)``: ``ids`` shaped like the prompt plus the new tokens, and a
    :class:`SpeculativeStats`. Sampling is from the target's distribution after temperature, top-k
    and top-p (as :func:`~fundamentallm.generation.generate` samples); ``greedy=True`` gives exactly
    ``generate(target, ..., greedy=True)``. ``stop``: token ids that end the output (kept).
    ``generate(target, ids, n, draft=draft, lookahead=k)`` runs this and returns the ids alone."""
    ids = _check(target, draft, input_ids, max_new_tokens, k, temperature)
    sampling = SamplingConfig(temperature, top_k, top_p, greedy)
    modes = (target.training, draft.training)
    target.eval(), draft.eval()
    try:
        with torch.inference_mode():
            out, stats = _run(_Runner(target), _Runner(draft), ids, max_new_tokens, k, sampling,
                              _Random(generator), tuple(stop))
    finally:
        target.train(modes[0]), draft.train(modes[1])
    result = torch.tensor(out, dtype=torch.long)
    if isinstance(input_ids, torch.Tensor):
        result = result.to(input_ids.device)
        if input_ids.dim() == 2:
            result = result[None]
    return result, stats


class _Script:
    """Choices read from a script (a list of option indices), extended with the first option of
    positive probability at every new choice; records the options of every choice point."""

    def __init__(self, script: list[int]) -> None:
        self.script, self.i, self.prob, self.options = script, 0, 1.0, []

    def _choose(self, weights: list[float]) -> int:
        if self.i == len(self.script):
            self.script.append(next(j for j, w in enumerate(weights) if w > 0))
        c = self.script[self.i]
        self.options.append([j for j, w in enumerate(weights) if w > 0])
        self.prob *= weights[c]
        self.i += 1
        return c

    def categorical(self, probs: torch.Tensor) -> int:
        return self._choose(probs.tolist())

    def accept(self, prob: float) -> bool:
        return self._choose([prob, 1.0 - prob]) == 0


def exact_distribution(target: nn.Module, draft: nn.Module, input_ids, max_new_tokens: int, k: int = 2,
                       temperature: float = 1.0, top_k: Optional[int] = None,
                       top_p: Optional[float] = None) -> dict[tuple[int, ...], float]:
    """The exact probability of every output of :func:`speculative_generate` (sampling): this
    module's own rounds run down every branch of their random choices -- each draft sample, each
    accept/reject, each replacement -- and the probabilities of the branches that give the same new
    tokens are summed. Returns ``{new tokens: probability}``. (The models run without a cache here,
    each prefix once; the tests check that the cached runs sample the same tokens.) The number of branches grows like
    ``V^(max_new_tokens + k)``: for a vocabulary of a few tokens and a few steps only."""
    ids = _check(target, draft, input_ids, max_new_tokens, k, temperature)
    dist: dict[tuple[int, ...], float] = {}
    script: list[int] = []
    memo_t, memo_d = {}, {}
    target.eval(), draft.eval()
    with torch.inference_mode():
        while True:
            chooser = _Script(script)
            out, _ = _run(_Memo(target, memo_t), _Memo(draft, memo_d), ids, max_new_tokens, k,
                          SamplingConfig(temperature, top_k, top_p), chooser)
            key = tuple(out[len(ids):])
            dist[key] = dist.get(key, 0.0) + chooser.prob
            # the next branch: the deepest choice with an untried option (an odometer)
            while script:
                i = len(script) - 1
                later = [j for j in chooser.options[i] if j > script[i]]
                if later:
                    script[i] = later[0]
                    break
                script.pop()
            if not script:
                return dist
