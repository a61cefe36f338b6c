"""Training: the ``Trainer``. Its pieces live one idea to a module, and are importable from here:
the validated ``TrainConfig`` and the schedule ``lr_at`` in :mod:`fundamentallm.train_config`,
the optimizer in :mod:`fundamentallm.optimizers`, ``evaluate`` in :mod:`fundamentallm.evaluation`.

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
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

# the pieces a Trainer is built from, importable from here as before the split (issue 39)
from .data import DataSource
from .evaluation import check_batch, check_data, evaluate, mask_kwargs
from .optimizers import make_optimizer, muon_parameters
from .recipes import OPTIMIZERS, PRECISIONS, SAMPLINGS, SCHEDULES  # noqa: F401  (the choices, as before)
from .train_config import TrainConfig, lr_at
from .utils import get_device, inputs_checked, native_bf16, rng_state, set_rng_state

__all__ = ["TrainConfig", "Trainer", "TrainingDiverged", "check_batch", "check_data", "cpp_compiler",
           "deterministic_algorithms", "evaluate", "lr_at", "make_optimizer", "muon_parameters"]


class TrainingDiverged(RuntimeError):
    """A non-finite loss or gradient norm: training stopped before the optimizer step, so the
    weights are those of the last good step."""


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
        self.device = get_device(c.device)  # the name, and whether this machine has it
        torch.manual_seed(c.seed)
        self.generator = torch.Generator().manual_seed(c.seed)
        self.model = model.to(self.device)
        # the concrete device a tensor sent to self.device lands on ("cuda" -> "cuda:0")
        self._placed = torch.empty(0, device=self.device).device
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
        float32's on CPUs with bf16 instructions (AVX512-BF16, AMX) and much slower on CPUs without
        them (see benchmarks/README.md). ``bf16-native``: bf16 where the device multiplies it
        natively (``utils.native_bf16``), float32 elsewhere -- the recipes' choice, fast on every
        machine. The weights, the optimizer and the loss stay float32."""
        mode = self.config.mixed_precision
        if mode == "bf16-native":
            return torch.bfloat16 if native_bf16(self.device) else None
        if mode == "off" or (mode == "auto" and self.device.type != "cuda"):
            return None
        if mode == "auto":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if mode == "fp16" and self.device.type != "cuda":
            raise ValueError(f"mixed_precision='fp16' needs a CUDA device (it relies on loss scaling "
                             f"there), got device {self.device.type!r}; use 'bf16' or 'off'")
        if mode == "bf16" and self.device.type not in ("cuda", "cpu"):
            raise ValueError(f"mixed_precision='bf16' is supported on 'cuda' and 'cpu', got device "
                             f"{self.device.type!r}; use 'bf16-native' or 'off'")
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
        kwargs = mask_kwargs(batch)
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
        self._check_device()
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

    def _check_device(self) -> None:
        """The batches go to ``self.device``: a model moved elsewhere after the Trainer was built
        (``model.cuda()``, ``model.to("cpu")``) gets a clear error naming the parameter here,
        instead of a deep trace from the first layer that mixes devices. No host read."""
        for name, p in self.model.named_parameters():
            if p.device != self._placed:
                raise ValueError(f"the model's parameter {name!r} is on {p.device}, but this Trainer "
                                 f"puts its batches on {self.device} (TrainConfig.device="
                                 f"{self.config.device!r}); the model was moved after the Trainer was "
                                 f"built: move it back (model.to({str(self.device)!r})) or build the "
                                 f"Trainer with device={str(p.device)!r}")

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
        self._check_device()
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

    # the configuration fields the saved state depends on: the optimizer's state has its groups,
    # and with epoch sampling the windows follow from the seed, the step and the batch shape
    _STATE_FIELDS = ("optimizer", "sampling")
    _EPOCH_FIELDS = ("seed", "batch_size", "grad_accum_steps")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`. The saved ``config`` is read back: a state saved with
        another optimizer or sampling (or, with epoch sampling, another seed or batch shape) is
        refused with the fields named, as it would not continue the same run."""
        saved = state.get("config")  # absent from states written before it was saved
        if saved is not None:
            names = self._STATE_FIELDS + (self._EPOCH_FIELDS if self.config.sampling == "epoch" else ())
            changed = [f"{k}={getattr(self.config, k)!r} (saved: {saved[k]!r})" for k in names
                       if k in saved and saved[k] != getattr(self.config, k)]
            if changed:
                raise ValueError(f"this Trainer's config differs from the saved state's in "
                                 f"{', '.join(changed)}: the state would not continue the same run; "
                                 f"build the Trainer with the saved values")
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
