"""Post-training: from a next-token predictor to an assistant (chapter 15).

* the task (two-digit addition and its verifier) is in :mod:`fundamentallm.tasks`, the chat
  template and the SFT batches in :mod:`fundamentallm.chat`; both are exported here too;
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
import warnings
from collections import defaultdict
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .chat import (  # noqa: F401  (exported here: the chapter and older code import them from posttrain)
    ASSISTANT,
    END,
    USER,
    ChatTemplate,
    _device,
    add_reserved_tokens,
    pack,
    sft_batch,
)
from .generation import generate
from .tasks import (  # noqa: F401
    Pair,
    _check_bool,
    addition_splits,
    carries,
    digit_verifier,
    format_addition,
    web_corpus,
)

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
