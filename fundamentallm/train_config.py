"""What a training run is told: the validated hyperparameters ``TrainConfig`` and the
learning-rate schedule ``lr_at`` they define. Torch-free values: a config checks its own fields,
not the machine it runs on (the :class:`~fundamentallm.training.Trainer` checks the device).

The schedules: linear warmup then cosine decay (Loshchilov & Hutter 2017, SGDR), the original
Transformer's inverse-square-root schedule (Vaswani et al. 2017), constant, and
warmup-stable-decay.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Optional

from .recipes import DEVICES, OPTIMIZERS, PRECISIONS, SAMPLINGS, SCHEDULES


@dataclass
class TrainConfig:
    """Hyperparameters of :class:`Trainer`. ``batch_size`` is the global batch of one micro-step;
    an optimizer step sees ``batch_size * grad_accum_steps`` sequences. ``min_lr=None`` means
    ``lr / 10``. ``block_size=None`` uses the model's ``config.max_seq_len`` for token streams.
    ``eval_interval=0`` evaluates only at the end; ``eval_batches=None`` evaluates the whole
    validation split. ``grad_clip=0`` disables clipping (the norm is still recorded).

    ``optimizer="muon"`` trains the hidden matrices with :class:`~fundamentallm.muon.Muon`
    (peak rate ``muon_lr``, momentum ``muon_momentum``, decoupled weight decay
    ``muon_weight_decay``: ``W <- W·(1 - rate·muon_weight_decay)``, ``muon_ns_steps``
    Newton-Schulz iterations) and everything else with
    AdamW as above; the schedule scales both rates by the same factor. ``schedule="wsd"``
    (warmup-stable-decay) holds ``lr`` after the warmup and decays linearly to ``min_lr`` over the
    last ``cooldown_fraction`` of the steps. ``compile=True`` runs the model's forward and
    backward passes through ``torch.compile`` (on the CPU it needs a C++ compiler), with
    deterministic algorithms so that the same seed still gives the same weights;
    :meth:`Trainer.warm_up` compiles before the first step.

    ``sampling="random"`` draws every training window at a random position, with replacement
    (nanoGPT's ``get_batch``): after ``k`` passes' worth of tokens a share of about ``e^-k`` of
    the text has never been a target. ``"epoch"`` draws without replacement
    (:meth:`~fundamentallm.data.DataSource.sample_at`): each epoch visits non-overlapping windows
    at a random offset in a random order, so every token (but at most ``2·block_size`` at the
    stream's ends) is a target once per epoch."""

    lr: float = 1e-3
    min_lr: Optional[float] = None
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 100
    max_steps: int = 1000
    schedule: str = "cosine"
    grad_clip: float = 1.0
    grad_accum_steps: int = 1
    label_smoothing: float = 0.0
    batch_size: int = 32
    block_size: Optional[int] = None
    eval_interval: int = 0
    eval_batches: Optional[int] = None
    eval_batch_size: Optional[int] = None
    log_interval: int = 1
    device: str = "auto"
    mixed_precision: str = "auto"
    seed: int = 0
    progress: bool = True
    compile: bool = False
    optimizer: str = "adamw"
    muon_lr: float = 0.02
    muon_momentum: float = 0.95
    muon_weight_decay: float = 0.0
    muon_ns_steps: int = 5
    cooldown_fraction: float = 0.2
    sampling: str = "random"

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)

        def positive(name, value, integer=False, zero_ok=False, optional=False):
            if optional and value is None:
                return
            ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
            # subtle: inf passes "> 0"; an infinite rate or decay trains on NaN from the first step
            if not ok_type or isinstance(value, bool) or not math.isfinite(value) or not (
                    value >= 0 if zero_ok else value > 0):
                kind = "an integer" if integer else "a finite number"
                raise ValueError(f"{name}={value!r} must be {kind} {'>= 0' if zero_ok else '> 0'}")

        positive("lr", self.lr)
        positive("min_lr", self.min_lr, zero_ok=True, optional=True)
        if self.min_lr is not None and self.min_lr > self.lr:
            raise ValueError(f"min_lr={self.min_lr} must not exceed lr={self.lr}")
        positive("weight_decay", self.weight_decay, zero_ok=True)
        positive("eps", self.eps)
        if len(self.betas) != 2 or not all(isinstance(b, float) and 0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas={self.betas!r} must be two floats in [0, 1)")
        positive("warmup_steps", self.warmup_steps, integer=True, zero_ok=True)
        for name in ("max_steps", "grad_accum_steps", "batch_size", "log_interval"):
            positive(name, getattr(self, name), integer=True)
        if self.warmup_steps > self.max_steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} must not exceed max_steps={self.max_steps} "
                             f"(the learning rate would never reach lr); for a short run pass e.g. "
                             f"warmup_steps={self.max_steps // 10}")
        for name in ("block_size", "eval_batches", "eval_batch_size"):
            positive(name, getattr(self, name), integer=True, optional=True)
        positive("eval_interval", self.eval_interval, integer=True, zero_ok=True)
        positive("grad_clip", self.grad_clip, zero_ok=True)
        positive("seed", self.seed, integer=True, zero_ok=True)
        if not isinstance(self.label_smoothing, float) or not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing={self.label_smoothing!r} must be a float in [0, 1)")
        positive("muon_lr", self.muon_lr)
        positive("muon_weight_decay", self.muon_weight_decay, zero_ok=True)
        positive("muon_ns_steps", self.muon_ns_steps, integer=True)
        for name in ("muon_momentum", "cooldown_fraction"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
                raise ValueError(f"{name}={value!r} must be a number in [0, 1)")
        for name, allowed in (("schedule", SCHEDULES), ("mixed_precision", PRECISIONS),
                              ("optimizer", OPTIMIZERS), ("sampling", SAMPLINGS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r} is not supported; allowed values: "
                                 f"{', '.join(map(repr, allowed))}")
        for name in ("progress", "compile"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        # the name only: whether this machine has the device is the Trainer's question (a config
        # saved on a GPU machine still loads on a laptop)
        if not isinstance(self.device, str) or self.device.split(":")[0] not in DEVICES:
            raise ValueError(f"device={self.device!r} is not supported; allowed values: "
                             f"{', '.join(DEVICES)} (e.g. 'cuda:1')")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**values)


def lr_at(step: int, config: TrainConfig) -> float:
    """The learning rate of optimizer step ``step`` (0-based).

    cosine:       linear warmup to ``lr`` over ``warmup_steps``, then a half cosine down to
                  ``min_lr`` at ``max_steps`` (SGDR without restarts, Loshchilov & Hutter 2017).
    inverse_sqrt: Vaswani et al.'s ``d_model^-0.5 · min(s^-0.5, s · warmup^-1.5)`` rescaled so its
                  peak (at ``s = warmup``) is ``lr``: ``lr · min(s / w, sqrt(w / s))``, s = step + 1.
    constant:     linear warmup, then ``lr``.
    wsd:          linear warmup, ``lr`` held, then a linear decay to ``min_lr`` over the last
                  ``cooldown_fraction · max_steps`` steps (at least one; none when the fraction
                  is 0) (warmup-stable-decay: Zhai et al. 2022, Hu et al. 2024, Hägele et al. 2024).
    """
    s, w = step + 1, config.warmup_steps
    if config.schedule == "inverse_sqrt":
        w = max(w, 1)
        return config.lr * min(s / w, math.sqrt(w / s))
    if s <= w:
        return config.lr * s / w
    if config.schedule == "constant":
        return config.lr
    min_lr = config.lr / 10 if config.min_lr is None else config.min_lr
    if config.schedule == "wsd":
        if config.cooldown_fraction == 0:  # no cooldown: the rate stays at its peak
            return config.lr
        cooldown = max(1, round(config.cooldown_fraction * config.max_steps))  # a positive fraction: >= 1 step
        start = max(w, config.max_steps - cooldown)
        progress = min(1.0, max(0, s - start) / max(1, config.max_steps - start))
        return (1.0 - progress) * config.lr + progress * min_lr  # exactly lr, then exactly min_lr
    progress = min(1.0, (s - w) / max(1, config.max_steps - w))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (config.lr - min_lr)
