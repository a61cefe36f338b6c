"""Post-training: from a next-token predictor to an assistant (chapter 15).

* the task: two-digit addition, verifiable by a program (:func:`addition_splits`,
  :func:`digit_verifier`), optionally with fixed-width operands and the answer written
  least-significant digit first (:func:`format_addition`; Lee et al. 2024, arXiv:2307.03381), and
  a noisy "web" corpus of it to pretrain a base model on (:func:`web_corpus`);
* :class:`ChatTemplate`: ``<user> question <assistant> answer <end>`` with reserved symbols of the
  tokenizer, and :func:`sft_batch`: padded batches whose targets are -100 except on the
  assistant's tokens (supervised fine-tuning, SFT; Ouyang et al. 2022);
* :func:`sample_completions`: batched rollouts through :func:`fundamentallm.generation.generate`
  (the KV cache; each row stops at its own end token); :func:`token_logprobs`, :func:`pack`;
* :func:`dpo_loss` (Rafailov et al. 2023): preferences without a reward model;
* :func:`group_advantages` and :func:`grpo_loss` (Shao et al. 2024): RL with a verifier's reward,
  advantages relative to a group of answers to the same prompt, a clipped ratio and a KL term;
* :func:`train_sft`, :func:`train_dpo`, :func:`train_grpo`, :func:`evaluate`: the loops the book,
  the CLI and ``benchmarks/posttrain.py`` share. Each step draws its data from a generator seeded
  by ``(seed, step)``, so a run resumed from a checkpoint continues exactly.
"""

from __future__ import annotations

import math
import random
import warnings
from collections import defaultdict
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .generation import generate

USER, ASSISTANT, END = "\u25b7", "\u25c1", "\u25a0"  # ▷ ◁ ■: reserved, never in the web corpus
Pair = tuple[str, str]  # (question, answer)


# --- the task --------------------------------------------------------------------------------

def carries(a: int, b: int) -> int:
    """Number of columns of ``a + b`` that produce a carry: ``carries(58, 67) -> 2``."""
    count, carry = 0, 0
    while a or b:
        carry = int(a % 10 + b % 10 + carry >= 10)
        count += carry
        a, b = a // 10, b // 10
    return count


def _check_bool(**values) -> None:
    for name, value in values.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name}={value!r} must be True or False")


def format_addition(a: int, b: int, digits: tuple[int, int] = (2, 1), pad: bool = False,
                    reverse: bool = False) -> Pair:
    """One problem as ``(question, answer)``: ``(57, 8) -> ("57+8", "65")``. ``pad`` writes each
    operand at its fixed width (``7+8`` becomes ``07+8`` for ``digits=(2, 1)``), so every digit
    sits at the same position in every question; ``reverse`` writes the answer least-significant
    digit first (``"56"`` for 65), the order in which addition produces it: each digit then comes
    after the digits (and the carry) it depends on (Lee et al. 2024)."""
    _check_bool(pad=pad, reverse=reverse)
    x, y = (str(a).zfill(digits[0]), str(b).zfill(digits[1])) if pad else (str(a), str(b))
    total = str(a + b)
    return f"{x}+{y}", total[::-1] if reverse else total


def addition_splits(n_test: int = 200, n_hard: int = 200, digits: tuple[int, int] = (2, 1),
                    seed: int = 0, pad: bool = False, reverse: bool = False) -> dict[str, list[Pair]]:
    """All problems ``a+b`` with ``a < 10**digits[0]`` and ``b < 10**digits[1]``, split into
    ``hard`` (held out: a carry in every column where both numbers have a digit), ``test`` (held
    out, random) and ``train`` (the rest); disjoint. ``{"train": [("12+7", "19"), ...], ...}``.
    ``pad`` and ``reverse``: the format of :func:`format_addition` (judge reversed answers with
    ``digit_verifier(..., reverse=True)``); the same problems land in the same splits."""
    if (not isinstance(digits, (tuple, list)) or len(digits) != 2
            or any(isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= 3 for d in digits)):
        raise ValueError(f"digits={digits!r} must be two integers in 1..3 (digits of a and of b)")
    _check_bool(pad=pad, reverse=reverse)
    every = [(a, b) for a in range(10**digits[0]) for b in range(10**digits[1])]
    random.Random(seed).shuffle(every)
    hard = [p for p in every if carries(*p) >= min(digits)][:n_hard]
    taken = set(hard)
    test = [p for p in every if p not in taken][:n_test]
    taken |= set(test)
    if len(taken) > len(every) // 2:
        raise ValueError(f"n_test={n_test} and n_hard={n_hard} leave too few of the {len(every)} problems to train on")
    fmt = lambda ps: [format_addition(a, b, tuple(digits), pad, reverse) for a, b in ps]  # noqa: E731
    return {"train": fmt(p for p in every if p not in taken), "test": fmt(test), "hard": fmt(hard)}


def web_corpus(problems: Sequence[Pair], wrong: float = 0.25, other_formats: float = 0.25, seed: int = 0) -> str:
    """Text that looks like the web: mostly ``12+34=46`` lines, a share of wrong answers, other
    phrasings (``12 plus 34 is 46``, ``46=12+34``). A model trained on it continues text; nothing
    in it is a question followed by an answer."""
    rng = random.Random(seed)
    lines = []
    for q, ans in problems:
        a, b = q.split("+")
        if rng.random() < wrong:
            ans = str(max(0, int(ans) + rng.choice((-10, -1, 1, 10))))
        r = rng.random()
        lines.append(f"{a} plus {b} is {ans}" if r < other_formats / 2 else
                     f"{ans}={q}" if r < other_formats else f"{q}={ans}")
    return "\n".join(lines) + "\n"


def digit_verifier(question: str, answer: Optional[str], reverse: bool = False) -> float:
    """1.0 if ``answer`` is exactly the sum asked by ``question`` (``"12+34"``, operands may be
    zero-padded: ``"07+8"``), written least-significant digit first if ``reverse`` (``"56"`` for
    ``"57+8"``), else 0.0. Pass it as a reward function with ``functools.partial(digit_verifier,
    reverse=True)``."""
    _check_bool(reverse=reverse)
    a, b = question.split("+")
    total = str(int(a) + int(b))
    return float(answer is not None and answer == (total[::-1] if reverse else total))


# --- the chat template and SFT batches ----------------------------------------------------------

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


# --- sampling and log-probabilities ---------------------------------------------------------------

@torch.no_grad()
def sample_completions(model: nn.Module, prompts: Sequence[Sequence[int]], num_samples: int = 1,
                       max_new_tokens: int = 8, end_id: Optional[int] = None, temperature: float = 1.0,
                       greedy: bool = False, generator: Optional[torch.Generator] = None) -> list[list[int]]:
    """``num_samples`` completions of every prompt (``result[i * num_samples + s]``), sampled
    with :func:`fundamentallm.generation.generate` (the package's one decoder: KV cache, the
    generator on any device) in one batch per prompt length. A row stops at its own ``end_id``
    (kept in its completion); the batch stops when every row has."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples={num_samples!r} must be an integer >= 1")
    if not greedy and not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature={temperature!r} must be a finite number > 0 (or greedy=True)")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token id lists")
    out: list[list[int]] = [[] for _ in range(len(prompts) * num_samples)]
    by_length = defaultdict(list)
    for i, p in enumerate(prompts):
        by_length[len(p)].append(i)
    # subtle: one batch per length, not one left-padded batch: the rows and draws stay those of
    # earlier versions (the chapter's numbers), and canon layers would see the padding.
    for T, idx in by_length.items():
        steps = min(max_new_tokens, model.config.max_seq_len - T)
        if steps < 1:
            raise ValueError(f"a prompt of {T} tokens leaves no room in max_seq_len={model.config.max_seq_len}")
        rows = [i * num_samples + s for i in idx for s in range(num_samples)]
        ids = torch.tensor([list(prompts[i]) for i in idx for _ in range(num_samples)])  # (B, T)
        new = generate(model, ids, steps, temperature=1.0 if greedy else temperature, greedy=greedy,
                       stop=end_id, generator=generator)[:, T:]
        for r, row in zip(rows, new.tolist()):
            out[r] = row[:row.index(end_id) + 1] if end_id in row else row
    return out


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def token_logprobs(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """``(B, L)`` ids -> ``(B, L-1)``: ``log p(ids[:, t+1] | ids[:, :t+1])`` (on the model's device)."""
    ids = ids.to(_device(model))
    logits = model(ids)[0][:, :-1].float()  # (B, L-1, V)
    return logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


# --- the objectives -----------------------------------------------------------------------------

def _check_beta(beta: float, name: str = "beta") -> None:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"{name}={beta!r} must be a finite number > 0")


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float = 0.1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rafailov et al. 2023, eq. 7. Inputs ``(B,)``: summed log-probs of the chosen and the
    rejected answer under the policy and the frozen reference. Returns ``(loss, chosen_reward,
    rejected_reward)``; the implicit reward of an answer is ``beta * (log pi - log pi_ref)``."""
    _check_beta(beta)
    chosen_reward = beta * (policy_chosen - ref_chosen)
    rejected_reward = beta * (policy_rejected - ref_rejected)
    loss = -F.logsigmoid(chosen_reward - rejected_reward).mean()
    return loss, chosen_reward.detach(), rejected_reward.detach()


def group_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """``(N, G)`` rewards, G answers to each of N prompts -> ``(r - mean) / (std + eps)`` within
    each group (Shao et al. 2024, outcome supervision; std with Bessel's correction, as trl)."""
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be (N, group_size) with group_size >= 2 (one answer has no "
                         f"group to be compared with), got shape {tuple(rewards.shape)}")
    return (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + eps)


def grpo_loss(logps: torch.Tensor, old_logps: torch.Tensor, ref_logps: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, clip_eps: float = 0.2, kl_coef: float = 0.04) -> tuple[torch.Tensor, dict]:
    """GRPO's objective (Shao et al. 2024, eq. 3), negated to a loss. ``logps``, ``old_logps``
    (the sampling policy), ``ref_logps`` and ``mask`` are ``(B, L)`` per completion token;
    ``advantages`` is ``(B,)``, one per completion. Per token: ``-min(ratio A, clip(ratio) A) +
    kl_coef * KL``, with the unbiased estimator ``KL = exp(ref - logp) - (ref - logp) - 1``;
    averaged over each completion's tokens, then over completions."""
    _check_beta(clip_eps, "clip_eps")
    if not (math.isfinite(kl_coef) and kl_coef >= 0):
        raise ValueError(f"kl_coef={kl_coef!r} must be a finite number >= 0")
    ratio = torch.exp(logps - old_logps)
    adv = advantages[:, None]
    surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
    per_token = -(surrogate - kl_coef * kl)
    lengths = mask.sum(1).clamp(min=1)
    loss = ((per_token * mask).sum(1) / lengths).mean()
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        clipped = ((ratio - 1).abs() > clip_eps).float()
        stats = {"kl": float((kl * mask).sum() / n), "clip_fraction": float((clipped * mask).sum() / n)}
    return loss, stats


# --- scoring, evaluation --------------------------------------------------------------------------

def score(reward_fn: Callable[[str, Optional[str]], float], questions: Sequence[str],
          answers: Sequence[Optional[str]]) -> tuple[torch.Tensor, int]:
    """Rewards ``(len(answers),)``; a reward function that raises (or returns a non-number) costs
    that answer, which gets 0, not the run. Returns the rewards and the number of failures."""
    rewards, failures = [], 0
    for q, a in zip(questions, answers):
        try:
            r = float(reward_fn(q, a))
            if not math.isfinite(r):
                raise ValueError(f"reward {r}")
        except Exception as err:  # noqa: BLE001 -- any failure of user code costs one sample
            failures += 1
            if failures == 1:
                warnings.warn(f"reward_fn raised {type(err).__name__}: {err} on {q!r} -> {a!r}; "
                              f"that answer gets reward 0", RuntimeWarning, stacklevel=2)
            r = 0.0
        rewards.append(r)
    return torch.tensor(rewards), failures


def evaluate(model: nn.Module, template: ChatTemplate, problems: Sequence[Pair], max_new_tokens: int = 6,
             verifier: Callable = digit_verifier) -> dict:
    """Greedy answers to ``problems``: exact-match accuracy and mean answer length (tokens)."""
    answers = answer(model, template, [q for q, _ in problems], max_new_tokens)
    rewards, _ = score(verifier, [q for q, _ in problems], answers)
    return {"accuracy": float(rewards.mean()),
            "length": sum(len(a) if a is not None else max_new_tokens for a in answers) / len(answers)}


def answer(model: nn.Module, template: ChatTemplate, questions: Sequence[str], max_new_tokens: int = 6,
           greedy: bool = True, **kwargs) -> list[Optional[str]]:
    """The model's answers (text before the end token, None if it never ended)."""
    out = sample_completions(model, [template.prompt(q) for q in questions], 1, max_new_tokens,
                             template.end_id, greedy=greedy, **kwargs)
    return [template.answer(c) for c in out]


# --- the three training loops ---------------------------------------------------------------------

def _step_generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (betas 0.9, 0.95 as the course's Trainer)."""
    _check_beta(lr, "lr")
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, betas=(0.9, 0.95),
                             weight_decay=weight_decay)


def _update(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, step: int) -> None:
    if not torch.isfinite(loss):
        raise FloatingPointError(f"step {step}: the loss is {float(loss)}; try a smaller lr")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()


def _check_steps(**values) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be an integer >= 1")


def train_sft(model: nn.Module, template: ChatTemplate, pairs: Sequence[Pair], steps: int, batch_size: int = 64,
              lr: float = 3e-3, seed: int = 0, mask_prompt: bool = True, optimizer=None, start_step: int = 0,
              on_step: Optional[Callable[[int, dict], None]] = None, decay_steps: Optional[int] = None) -> dict:
    """Supervised fine-tuning on ``(question, answer)`` pairs; returns the history (``loss``).
    ``decay_steps``: the learning rate falls linearly from the optimizer's to 0 at that step
    (``None``: constant). It counts from step 0, not ``start_step``, so a run split into pieces
    (or resumed) follows the same schedule."""
    _check_steps(steps=steps, batch_size=batch_size)
    if decay_steps is not None:
        _check_steps(decay_steps=decay_steps)
    optimizer = optimizer or make_optimizer(model, lr)
    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])  # the peak, as torch's schedulers keep it
    model.train()
    history = defaultdict(list)
    for step in range(start_step, steps):
        if decay_steps is not None:
            for group in optimizer.param_groups:
                group["lr"] = group["initial_lr"] * max(0.0, 1 - step / decay_steps)
        pick = torch.randint(len(pairs), (batch_size,), generator=_step_generator(seed, step)).tolist()
        ids, targets = sft_batch(template, [pairs[i] for i in pick], mask_prompt=mask_prompt)
        loss = model(ids.to(_device(model)), targets.to(_device(model)))[1]
        _update(model, optimizer, loss, step)
        history["loss"].append(loss.item())
        history["tokens"].append(ids.numel())
        if on_step:
            on_step(step + 1, {"loss": history["loss"][-1], "tokens": ids.numel()})
    return dict(history)


def preference_pairs(model: nn.Module, template: ChatTemplate, questions: Sequence[str], num_samples: int = 4,
                     verifier: Callable = digit_verifier, max_new_tokens: int = 6, seed: int = 0) -> list[tuple[str, str, str]]:
    """``(question, chosen, rejected)`` from the model's own samples: a verified answer preferred
    to a wrong one, for each question where the samples hold both."""
    gen = torch.Generator().manual_seed(seed)
    out = sample_completions(model, [template.prompt(q) for q in questions], num_samples, max_new_tokens,
                             template.end_id, generator=gen)
    pairs = []
    for i, q in enumerate(questions):
        texts = [template.answer(c) for c in out[i * num_samples:(i + 1) * num_samples]]
        texts = [t for t in texts if t is not None and not any(s in t for s in template.symbols)]
        rewards, _ = score(verifier, [q] * len(texts), texts)
        good = [t for t, r in zip(texts, rewards) if r > 0]
        bad = [t for t, r in zip(texts, rewards) if r <= 0]
        if good and bad:
            pairs.append((q, good[0], bad[0]))
    return pairs


def _answer_logps(model: nn.Module, template: ChatTemplate, items: Sequence[tuple[str, str]]) -> torch.Tensor:
    """Summed log-prob of each answer (and its end token) given its prompt: ``(B,)``."""
    examples = [template.example(q, a) for q, a in items]
    ids, mask = pack([e for e, _ in examples], [p for _, p in examples])
    return (token_logprobs(model, ids) * mask.to(_device(model))).sum(1)


def train_dpo(policy: nn.Module, reference: nn.Module, template: ChatTemplate, pairs: Sequence[tuple[str, str, str]],
              steps: int, batch_size: int = 32, lr: float = 1e-3, beta: float = 0.1, seed: int = 0,
              optimizer=None, start_step: int = 0, on_step: Optional[Callable[[int, dict], None]] = None) -> dict:
    """Direct preference optimisation on ``(question, chosen, rejected)``; the history holds the
    loss, the implicit reward margin and the share of pairs whose margin is positive."""
    _check_steps(steps=steps, batch_size=batch_size)
    _check_beta(beta)
    if not pairs:
        raise ValueError("pairs is empty: no question had both a right and a wrong sample")
    for i, (q, chosen, rejected) in enumerate(pairs):
        if chosen == rejected:
            raise ValueError(f"pairs[{i}] for {q!r}: chosen and rejected are the same answer {chosen!r}; "
                             f"a preference needs two different answers")
    optimizer = optimizer or make_optimizer(policy, lr)
    reference.eval()
    policy.train()
    history = defaultdict(list)
    for step in range(start_step, steps):
        pick = torch.randint(len(pairs), (batch_size,), generator=_step_generator(seed, step)).tolist()
        batch = [pairs[i] for i in pick]
        chosen = [(q, c) for q, c, _ in batch]
        rejected = [(q, r) for q, _, r in batch]
        with torch.no_grad():
            ref_c, ref_r = _answer_logps(reference, template, chosen), _answer_logps(reference, template, rejected)
        loss, rc, rr = dpo_loss(_answer_logps(policy, template, chosen), _answer_logps(policy, template, rejected),
                                ref_c, ref_r, beta)
        _update(policy, optimizer, loss, step)
        metrics = {"loss": loss.item(), "margin": float((rc - rr).mean()),
                   "pair_accuracy": float((rc > rr).float().mean()), "tokens": 2 * (len(chosen) + len(rejected))
                   * max(len(template.example(q, a)[0]) for q, a in chosen + rejected)}
        for k, v in metrics.items():
            history[k].append(v)
        if on_step:
            on_step(step + 1, metrics)
    return dict(history)


def train_grpo(policy: nn.Module, reference: nn.Module, template: ChatTemplate, questions: Sequence[str], steps: int,
               batch_size: int = 16, group_size: int = 8, lr: float = 1e-3, clip_eps: float = 0.2,
               kl_coef: float = 0.04, inner_steps: int = 2, temperature: float = 1.0, max_new_tokens: int = 6,
               reward_fn: Callable = digit_verifier, seed: int = 0, optimizer=None, start_step: int = 0,
               on_step: Optional[Callable[[int, dict], None]] = None) -> dict:
    """GRPO: per step, ``group_size`` sampled answers to each of ``batch_size`` questions, scored
    by ``reward_fn``; ``inner_steps`` updates on them (the first has ratio 1; later ones are
    clipped). History: reward (mean), kl, clip fraction, answer length, reward failures."""
    _check_steps(steps=steps, batch_size=batch_size, inner_steps=inner_steps)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size={group_size!r} must be an integer >= 2: the advantage compares "
                         f"each answer with the others to the same prompt")
    optimizer = optimizer or make_optimizer(policy, lr)
    reference.eval()
    history = defaultdict(list)
    for step in range(start_step, steps):
        gen = _step_generator(seed, step)
        qs = [questions[i] for i in torch.randint(len(questions), (batch_size,), generator=gen).tolist()]
        prompts = [template.prompt(q) for q in qs]
        completions = sample_completions(policy, prompts, group_size, max_new_tokens, template.end_id,
                                         temperature=temperature, generator=gen)
        answers = [template.answer(c) for c in completions]
        rewards, failures = score(reward_fn, [q for q in qs for _ in range(group_size)], answers)
        advantages = group_advantages(rewards.view(batch_size, group_size)).flatten().to(_device(policy))
        ids, mask = pack([prompts[i // group_size] + c for i, c in enumerate(completions)],
                         [len(prompts[i // group_size]) for i in range(len(completions))])
        mask = mask.to(_device(policy))
        with torch.no_grad():
            old, ref = token_logprobs(policy, ids), token_logprobs(reference, ids)
        policy.train()
        for _ in range(inner_steps):
            loss, stats = grpo_loss(token_logprobs(policy, ids), old, ref, advantages, mask, clip_eps, kl_coef)
            _update(policy, optimizer, loss, step)
        metrics = {"reward": float(rewards.mean()), "loss": loss.item(), **stats,
                   "length": sum(len(c) for c in completions) / len(completions), "reward_failures": failures,
                   "tokens": ids.numel() * (inner_steps + 2)}
        for k, v in metrics.items():
            history[k].append(v)
        if on_step:
            on_step(step + 1, metrics)
    return dict(history)
