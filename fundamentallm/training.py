"""Training: a validated ``TrainConfig``, the learning-rate schedule ``lr_at``, and ``Trainer``.

The recipe is the one modern language models use: AdamW (Loshchilov & Hutter 2019) with weight
decay on matrices only, linear warmup then cosine decay (Loshchilov & Hutter 2017, SGDR) -- or
the original Transformer's inverse-square-root schedule (Vaswani et al. 2017) --, gradient
clipping (Pascanu et al. 2013), gradient accumulation, and label smoothing (Szegedy et al. 2016).

The trainer knows nothing of transformers (as in minGPT): any ``model(x, y)`` that returns
``(logits, loss)`` trains. Data may be
  * a 1-D tensor/list of token ids (a language-model stream): random ``block_size`` windows for
    training, and ALL non-overlapping windows for evaluation;
  * a ``torch.utils.data.Dataset`` of ``(x, y)`` or ``(x, y, attention_mask)`` tuples (e.g.
    :class:`~fundamentallm.data.TextDataset`, a ``TensorDataset``): random items for training,
    every item in order for evaluation;
  * a tuple ``(inputs, targets[, attention_mask])`` of tensors with the same first dimension.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from .data import DataSource
from .recipes import OPTIMIZERS, PRECISIONS, SAMPLINGS, SCHEDULES
from .utils import get_device, inputs_checked, rng_state, set_rng_state


class TrainingDiverged(RuntimeError):
    """A non-finite loss or gradient norm: training stopped before the optimizer step, so the
    weights are those of the last good step."""


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
        get_device(self.device)  # validates the name and availability

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


def muon_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The hidden matrices Muon trains: the weights of the ``nn.Linear`` layers, except the output
    layer (a module named ``lm_head`` or ``head``) and any weight shared with an embedding."""
    embedded = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    out = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] not in ("lm_head", "head") \
                and id(module.weight) not in embedded and module.weight.requires_grad:
            out.append(module.weight)
    return out


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW with two groups: weight decay on every parameter with >= 2 dimensions (the linear
    maps and, as in nanoGPT, the embeddings), none on biases and norm gains, whose decay toward
    zero would only fight their role. A tied matrix appears once.

    With ``config.optimizer == "muon"``: one :class:`~fundamentallm.muon.Muon` whose first group
    holds the hidden matrices (:func:`muon_parameters`) and whose other two groups are the AdamW
    groups above without them. Each group keeps its peak rate in ``"peak_lr"``."""
    params = [p for p in model.parameters() if p.requires_grad]

    def adamw_groups(params: list, **extra) -> list[dict]:
        return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay,
                 "peak_lr": config.lr, **extra},
                {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0, "peak_lr": config.lr, **extra}]

    if config.optimizer == "muon":
        from .muon import Muon

        hidden = {id(p) for p in muon_parameters(model)}
        groups = [{"params": [p for p in params if id(p) in hidden], "use_muon": True,
                   "lr": config.muon_lr, "peak_lr": config.muon_lr, "momentum": config.muon_momentum,
                   "weight_decay": config.muon_weight_decay, "ns_steps": config.muon_ns_steps},
                  *adamw_groups([p for p in params if id(p) not in hidden], use_muon=False)]
        return Muon([g for g in groups if g["params"]], lr=config.lr, betas=config.betas, eps=config.eps)
    groups = adamw_groups(params)
    kwargs = dict(lr=config.lr, betas=config.betas, eps=config.eps)
    try:  # the fused kernel (one pass over all parameters) is several times faster, CPU included
        return torch.optim.AdamW(groups, fused=True, **kwargs)
    except (RuntimeError, TypeError):  # older torch or a device without a fused kernel
        return torch.optim.AdamW(groups, **kwargs)


def check_batch(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> None:
    """Check a batch ``(x, y[, attention_mask])`` with the model's own door check
    (``model.check_values``: ids in the vocabulary, targets valid, a 0/1 mask), if it has one."""
    check = getattr(model, "check_values", None)
    if callable(check):
        check(batch[0], batch[1], batch[2] if len(batch) > 2 else None, all_ignored_ok=True)


def check_data(model: nn.Module, source: DataSource) -> bool:
    """Check a whole split once, when the Trainer receives it: a token stream by its smallest
    and largest id, a ``TensorDataset`` (or tuple of tensors) tensor by tensor. Returns False for
    a lazily built ``Dataset``, whose items are then checked batch by batch as they are drawn."""
    if not callable(getattr(model, "check_values", None)):
        return True
    if source.stream is not None:
        stream = source.stream
        lo, hi = stream.min(), stream.max()  # a tensor, or a NumPy array (memory map)
        ends = torch.tensor([[int(lo), int(hi)]])
        check_batch(model, (ends, ends))
        return True
    if isinstance(source.dataset, torch.utils.data.TensorDataset):
        check_batch(model, source.dataset.tensors)
        return True
    return False


@torch.no_grad()
def evaluate(model: nn.Module, data, batch_size: int = 64, max_batches: Optional[int] = None,
             block_size: Optional[int] = None, autocast: Optional[Callable] = None, rank: int = 0,
             world_size: int = 1, check_batches: bool = False) -> dict[str, float]:
    """Mean loss per target token (targets of -100 excluded) and perplexity ``exp(loss)`` of
    ``model`` over the whole of ``data`` (any format the Trainer takes, or a ``DataSource``; a
    token stream is cut into every non-overlapping ``block_size`` window, by default the model's
    ``max_seq_len``), ``batch_size`` windows per forward pass, on the model's device. A plain
    function: no optimizer, no trainer. ``max_batches`` caps the work; ``autocast`` is a
    context-manager factory (mixed precision); ``rank``/``world_size`` split the batches across
    processes (the sums are all-reduced). The data is checked once first (``check_batches``:
    each batch as it is drawn instead, for a lazily built ``Dataset``)."""
    if isinstance(data, DataSource):
        source = data
    else:
        source = DataSource(data, block_size or getattr(getattr(model, "config", None), "max_seq_len", None))
        check_batches = not check_data(model, source)
    device = next(iter(model.parameters())).device
    was_training = model.training
    model.eval()
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # (loss · count, count)
    try:
        for i, batch in enumerate(source.batches(batch_size)):
            if max_batches is not None and i >= max_batches:
                break
            if i % world_size != rank:
                continue
            if check_batches:
                check_batch(model, batch)
            batch = tuple(t.to(device) for t in batch)
            count = (batch[1] != -100).sum()
            with (autocast() if autocast is not None else contextlib.nullcontext()), inputs_checked(model):
                loss = model(batch[0], batch[1], **Trainer._mask_kwargs(batch))[1]
            # a batch with no real target has a 0/0 mean: it adds nothing (chosen on the device)
            sums += torch.stack([torch.where(count > 0, loss.double() * count, 0.0),
                                 count.double()])
    finally:
        model.train(was_training)
    if world_size > 1:
        torch.distributed.all_reduce(sums)
    total, count = sums.tolist()
    if count == 0:
        raise ValueError("the validation data has no target other than -100: nothing to evaluate")
    val_loss = total / count
    return {"val_loss": val_loss, "val_perplexity": math.exp(min(val_loss, 700.0))}


def cpp_compiler() -> Optional[str]:
    """The C++ compiler torch.compile would use on the CPU ($CXX, else g++ or clang++ on the
    PATH), or None."""
    found = (shutil.which(name) for name in (os.environ.get("CXX"), "g++", "clang++") if name)
    return next((path for path in found if path), None)


@contextlib.contextmanager
def deterministic_algorithms():
    """``torch.use_deterministic_algorithms(True)`` inside the block, the previous setting after."""
    before, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


class Trainer:
    """Trains ``model`` on ``train_data`` (see the module docstring for the formats).

    ``fit()`` runs to ``max_steps``; ``train_step()`` does one optimizer step; ``evaluate()``
    returns the mean token loss and perplexity over the whole validation split. ``history`` holds
    lists (``step, lr, train_loss, grad_norm, tokens_seen, time``; ``val_loss``, ``val_perplexity``
    at the steps in ``val_loss_step``), ready for :func:`fundamentallm.viz.plot_loss_curves`.

    Reproducibility: the constructor seeds torch's global generator (dropout) with
    ``config.seed`` and keeps a private generator for batches, so on the CPU the same seed gives a
    bitwise-identical history; ``state_dict()`` captures both for exact resumption.
    Under ``torch.distributed`` (see :mod:`fundamentallm.distributed`) every rank draws the same
    global batch and trains on its slice; DDP averages the gradients.
    """

    def __init__(self, model: nn.Module, train_data, val_data=None,
                 config: Optional[TrainConfig] = None) -> None:
        self.config = c = config if config is not None else TrainConfig()
        if not isinstance(c, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(c).__name__}")
        self.device = get_device(c.device)
        torch.manual_seed(c.seed)
        self.generator = torch.Generator().manual_seed(c.seed)
        self.model = model.to(self.device)
        block_size = c.block_size or getattr(getattr(model, "config", None), "max_seq_len", None)
        self.train_source = DataSource(train_data, block_size)
        self.val_source = DataSource(val_data, block_size) if val_data is not None else None
        if c.sampling == "epoch":
            self.train_source.sample_at(1, 0, c.seed)  # at the door: a stream too short for one epoch
        # Checks at the door: the data's values are checked here, once, with the model's own
        # messages; the steps then run the model inside inputs_checked (no host read per step).
        self._lazy_data = [s for s in (self.train_source, self.val_source) if s is not None
                           and not check_data(self.model, s)]
        self.amp_dtype = self._resolve_precision()
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None
        self.optimizer = make_optimizer(self.model, c)
        self.rank, self.world_size = 0, 1
        self.forward_model = self.model
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            self.rank, self.world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
            if c.batch_size % self.world_size:
                raise ValueError(f"batch_size={c.batch_size} must be divisible by the world size {self.world_size}")
            ids = [self.device.index or 0] if self.device.type == "cuda" else None
            self.forward_model = nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        if c.compile:
            if self.device.type == "cpu" and not cpp_compiler():
                raise ValueError("compile=True on the CPU needs a C++ compiler for torch.compile's "
                                 "kernels (g++ or clang++ on the PATH, or $CXX), and none was found: "
                                 "install one (Debian: apt install g++) or set compile=False "
                                 "(the command line: --no-compile)")
            self.forward_model = torch.compile(self.forward_model)
        self.step, self.tokens_seen, self.elapsed = 0, 0, 0.0
        self.history: dict[str, list] = {k: [] for k in (
            "step", "lr", "train_loss", "grad_norm", "tokens_seen", "time",
            "val_loss", "val_perplexity", "val_loss_step")}

    def _resolve_precision(self) -> Optional[torch.dtype]:
        """``auto``: mixed precision on CUDA (bf16 where supported, else fp16), float32 elsewhere.
        ``bf16`` also works on the CPU, where it is opt-in: its matrix products are ~4x faster than
        float32's on CPUs with bf16 instructions (AVX512-BF16, AMX) and slower on CPUs without them
        (see benchmarks/README.md). The weights, the optimizer and the loss stay float32."""
        mode = self.config.mixed_precision
        if mode == "off" or (mode == "auto" and self.device.type != "cuda"):
            return None
        if mode == "auto":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if mode == "fp16" and self.device.type != "cuda":
            raise ValueError(f"mixed_precision='fp16' needs a CUDA device (it relies on loss scaling "
                             f"there), got device {self.device.type!r}; use 'bf16' or 'off'")
        if mode == "bf16" and self.device.type not in ("cuda", "cpu"):
            raise ValueError(f"mixed_precision='bf16' is supported on 'cuda' and 'cpu', got device "
                             f"{self.device.type!r}; use 'off'")
        return torch.bfloat16 if mode == "bf16" else torch.float16

    def _autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def warm_up(self) -> float:
        """With ``compile=True``: compile now, so that the steps' time is training's (the
        speedrun's rule: the clock starts after compiling). One forward and backward pass on a
        batch drawn with a generator of its own, the gradients then dropped: the weights, the
        optimizer, the step count and the run's random streams are as they were
        (``tests/test_training.py``). Returns the seconds spent (0.0 without ``compile``)."""
        if not self.config.compile:
            return 0.0
        t0 = time.perf_counter()
        c = self.config
        self.model.train()
        batch = self.train_source.sample(c.batch_size // self.world_size, torch.Generator().manual_seed(0))
        batch = tuple(t.to(self.device) for t in batch)
        with inputs_checked(self.model), self._kernels():
            self._loss(self.forward_model, batch, c.label_smoothing).backward()
        self.model.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    def _kernels(self):
        """Around the compiled forward and backward passes: deterministic algorithms, without
        which Inductor's CPU kernels accumulate some gradients (the embeddings') with atomic adds
        whose order varies from run to run -- with them, the same seed gives the same weights,
        at any number of threads (``tests/test_training.py``). Eager training needs nothing."""
        if not self.config.compile:
            return contextlib.nullcontext()
        return deterministic_algorithms()

    def _loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...], smoothing: float) -> torch.Tensor:
        x, y = batch[0], batch[1]
        kwargs = self._mask_kwargs(batch)
        with self._autocast():
            if smoothing == 0.0:
                return model(x, y, **kwargs)[1]
            logits = model(x, **kwargs)[0]
        # Label smoothing (Szegedy et al. 2016): the target puts 1 - eps on the true class and
        # spreads eps uniformly, which stops the logits from growing without bound.
        return F.cross_entropy(logits.flatten(0, -2).float(), y.flatten().long(),
                               ignore_index=-100, label_smoothing=smoothing)

    def train_step(self) -> dict[str, float]:
        """One optimizer step over ``grad_accum_steps`` micro-batches; returns loss, lr, grad norm.

        The loss is the mean over every real target of the step (targets of -100 excluded): each
        micro-batch's mean is weighted by its number of real targets, on every rank, so batch 8
        equals batch 4 x accumulation 2 and 2 ranks x 4 even when the batches hold padding.
        A non-finite loss or gradient norm raises :class:`TrainingDiverged` before the weights
        change."""
        c = self.config
        self.model.train()
        t0 = time.perf_counter()
        lr = lr_at(self.step, c)
        for group in self.optimizer.param_groups:  # every group follows the schedule's shape
            peak = group.get("peak_lr", c.lr)
            # subtle: c.lr * lr / c.lr is not always lr in floating point; a group at the base
            # rate gets lr itself (the rate logged in history, and AdamW runs as before Muon)
            group["lr"] = lr if peak == c.lr else peak * lr / c.lr
        # Every micro-batch is drawn first (the same draws, in the same order, as one at a time),
        # so the step's total number of real targets is known before the first backward pass.
        # subtle: every rank draws the same global batches, so each knows the global count.
        if c.sampling == "epoch":  # window numbers follow from the step: nothing to save for a resume
            first = self.step * c.grad_accum_steps * c.batch_size
            batches = [self.train_source.sample_at(c.batch_size, first + micro * c.batch_size, c.seed)
                       for micro in range(c.grad_accum_steps)]
        else:
            batches = [self.train_source.sample(c.batch_size, self.generator) for _ in range(c.grad_accum_steps)]
        if self.train_source in self._lazy_data:
            for batch in batches:
                check_batch(self.model, batch)
        # Counted on the device, not read: the step reads one thing on the host, at its end.
        total_count = torch.stack([(b[1] != -100).sum() for b in batches]).sum().to(self.device)
        total = torch.zeros((), device=self.device)
        per_rank = c.batch_size // self.world_size
        for micro, batch in enumerate(batches):
            self.tokens_seen += batch[0].numel()
            batch = tuple(t[self.rank * per_rank:(self.rank + 1) * per_rank].to(self.device) for t in batch)
            local = (batch[1] != -100).sum()
            last = micro == c.grad_accum_steps - 1
            sync = contextlib.nullcontext() if last or self.world_size == 1 else self.forward_model.no_sync()
            with sync, inputs_checked(self.model), self._kernels():
                mean = self._loss(self.forward_model, batch, c.label_smoothing)
                # A micro-batch with every target ignored has a 0/0 mean: it counts 0 and still
                # runs backward (DDP expects every rank to). DDP averages the ranks' gradients,
                # hence the world_size.
                weight = (local.double() * self.world_size / total_count.double()).float()
                loss = torch.where(local > 0, mean, 0.0) * weight
                (self.scaler.scale(loss) if self.scaler else loss).backward()
            total += loss.detach() / self.world_size
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), c.grad_clip or float("inf"))
        if self.world_size > 1:  # log the global mean loss, as one process would
            torch.distributed.all_reduce(total)
        # The step's one host read: the logged loss, with what the checks below need.
        loss_value, norm_value, count = torch.stack(
            [total.double(), grad_norm.double(), total_count.double()]).tolist()
        if count == 0:
            self.optimizer.zero_grad(set_to_none=True)
            raise ValueError(f"step {self.step + 1}: every target of the batch is -100 (ignored), so "
                             f"there is no loss to train on; check the data's targets")
        self._check_finite(loss_value, norm_value, lr)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.elapsed += time.perf_counter() - t0
        return {"loss": loss_value, "lr": lr, "grad_norm": norm_value}

    @staticmethod
    def _mask_kwargs(batch: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
        return {"attention_mask": batch[2]} if len(batch) > 2 else {}

    def _check_finite(self, loss: float, grad_norm: float, lr: float) -> None:
        """Raise :class:`TrainingDiverged` (weights untouched) on a NaN/inf loss or gradient norm.
        With fp16 loss scaling an inf gradient is routine (the scaler skips that step)."""
        bad = [(name, v) for name, v in (("loss", loss), ("gradient norm", grad_norm))
               if not math.isfinite(v) and not (self.scaler and name == "gradient norm")]
        if not bad:
            return
        self.optimizer.zero_grad(set_to_none=True)
        name, value = bad[0]
        raise TrainingDiverged(
            f"training diverged at step {self.step + 1}: the {name} is {value} (lr={lr:.3g}). The "
            f"weights were not updated; they are those after step {self.step}. Try a smaller lr "
            f"(e.g. lr={lr / 10:.3g}), a longer warmup"
            f"{'' if self.config.grad_clip else ', gradient clipping (grad_clip=1.0)'}"
            f"{', mixed_precision=' + repr('off') if self.amp_dtype is not None else ''}, or look for "
            f"bad values in the data")

    def evaluate(self, data=None, max_batches: Optional[int] = None) -> dict[str, float]:
        """:func:`evaluate` on the validation split (or ``data``), with this trainer's model,
        batch size, precision and ranks; ``max_batches`` defaults to ``config.eval_batches``."""
        source = self.val_source if data is None else DataSource(data, self.train_source.block_size)
        if source is None:
            raise ValueError("no validation data: pass val_data to Trainer or data to evaluate()")
        if data is not None and not check_data(self.model, source):
            self._lazy_data.append(source)
        c = self.config
        return evaluate(self.model, source, c.eval_batch_size or c.batch_size,
                        max_batches=max_batches if max_batches is not None else c.eval_batches,
                        autocast=self._autocast, rank=self.rank, world_size=self.world_size,
                        check_batches=source in self._lazy_data)

    def _log(self, metrics: dict[str, float]) -> None:
        h = self.history
        for key, value in (("step", self.step), ("lr", metrics["lr"]), ("train_loss", metrics["loss"]),
                           ("grad_norm", metrics["grad_norm"]), ("tokens_seen", self.tokens_seen),
                           ("time", self.elapsed)):
            h[key].append(value)

    def fit(self, steps: Optional[int] = None,
            callback: Optional[Callable[[Trainer, dict[str, float]], None]] = None,
            on_step: Optional[Callable[[Trainer, dict[str, float]], None]] = None) -> dict[str, list]:
        """Train ``steps`` more optimizer steps (default: up to ``max_steps``), evaluating every
        ``eval_interval`` steps and at ``max_steps``; ``callback(trainer, metrics)`` runs after
        each evaluation and ``on_step(trainer, metrics)`` after every step (and its evaluation):
        the place to save checkpoints or stop cleanly, as the state is then complete. Returns
        ``history``."""
        c = self.config
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 0):
            raise ValueError(f"steps={steps!r} must be None (train up to max_steps) or an integer >= 0")
        for name, fn in (("callback", callback), ("on_step", on_step)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
        end = c.max_steps if steps is None else min(c.max_steps, self.step + steps)
        bar = tqdm(total=c.max_steps, initial=self.step, disable=not c.progress or self.rank != 0,
                   dynamic_ncols=True, desc="train")
        try:
            self._fit_loop(bar, end, callback, on_step)
        finally:
            bar.close()
        return self.history

    def _fit_loop(self, bar, end: int, callback, on_step) -> None:
        c = self.config
        while self.step < end:
            metrics = self.train_step()
            if self.step % c.log_interval == 0 or self.step == end:
                self._log(metrics)
                bar.set_postfix(loss=f"{metrics['loss']:.4f}", lr=f"{metrics['lr']:.2e}", refresh=False)
            bar.update(1)
            at_interval = c.eval_interval and self.step % c.eval_interval == 0
            if self.val_source is not None and (at_interval or self.step == c.max_steps):
                result = self.evaluate()
                self.history["val_loss"].append(result["val_loss"])
                self.history["val_perplexity"].append(result["val_perplexity"])
                self.history["val_loss_step"].append(self.step)
                bar.set_postfix(loss=f"{metrics['loss']:.4f}", val_loss=f"{result['val_loss']:.4f}")
                if callback is not None:
                    callback(self, {"step": self.step, "train_loss": metrics["loss"], **result})
            if on_step is not None:
                on_step(self, {"step": self.step, **metrics})

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: step, optimizer, RNG states, history."""
        state = {"step": self.step, "tokens_seen": self.tokens_seen, "elapsed": self.elapsed,
                 "optimizer": self.optimizer.state_dict(), "generator": self.generator.get_state(),
                 "rng": rng_state(), "history": self.history, "config": self.config.to_dict()}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.tokens_seen, self.elapsed = state["step"], state["tokens_seen"], state["elapsed"]
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        if "rng" in state:
            set_rng_state(state["rng"])
        else:  # a state saved before the RNG states had one owner (utils.rng_state)
            torch.set_rng_state(state["torch_rng"])
            if "cuda_rng" in state and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(state["cuda_rng"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        self.history = {k: list(v) for k, v in state["history"].items()}
