"""``python -m fundamentallm train``, and the run-directory lifecycle every training command shares.

Every training command (``train`` here; ``sft``, ``dpo`` and ``grpo`` in ``posttrain_cli.py``)
runs inside the same lifecycle, :func:`check_out` and :class:`RunGuard`, so a run never loses work:

* ``--out`` is checked before any work (a file, a non-empty non-checkpoint directory, an
  unwritable parent), and a run already saved there is never replaced without ``--force``;
* a checkpoint is saved every ``--save-interval`` steps (atomically: see
  :mod:`fundamentallm.atomic`), at the end, and on Ctrl-C -- the first Ctrl-C stops at the end
  of the current step, so the saved state is complete, and exits with code 130;
* ``--resume`` rebuilds the run from the checkpoint (tokenizer, model, optimizer, RNG states,
  history) and continues it bit for bit as if it had never stopped; it refuses a flag the user
  gives (``args.given``) whose value differs from the saved run's;
* a non-finite loss or gradient stops the run with exit code 1, naming the last good checkpoint.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Callable, Optional

from .cli import CommandError  # noqa: F401  (its old import path)
from .recipes import BUDGET, MODERN, PRESETS, configs

# The flags that define a run: --resume refuses to change them, and a run with other values is
# "a different run" that --out never overwrites without --force.
RUN_FLAGS = ("corpus", "recipe", "preset", "tokenizer", "vocab_size", "block_size", "steps", "batch_size", "lr",
             "warmup_steps", "dropout", "eval_interval", "val_fraction", "seed", "optimizer", "mixed_precision",
             "no_compile")


def recipe_defaults(name: str) -> dict:
    """The ``train`` flags' defaults under ``--recipe NAME`` (``recipes.configs``' values, named as
    the flags): the command line sets them as the parser's defaults, so a flag the user gives
    always wins, even one equal to the built-in default."""
    model, train = configs(name, vocab_size=0)
    return {"steps": train["max_steps"], "batch_size": train["batch_size"], "block_size": model["max_seq_len"],
            "dropout": model["dropout"], "seed": train["seed"], "eval_interval": train["eval_interval"],
            "lr": train["lr"], "optimizer": train.get("optimizer", "adamw"),
            "mixed_precision": train.get("mixed_precision", "auto"), "val_fraction": BUDGET["val_fraction"],
            "tokenizer": BUDGET["tokenizer"]}


def train_configs(args: argparse.Namespace, vocab_size: int, device: str = "cpu",
                  progress: bool = False) -> tuple[dict, dict]:
    """A ``train`` run's (``TransformerConfig``, ``TrainConfig``) keyword arguments from its parsed
    flags. With ``--recipe``: :func:`recipes.configs` with every flag as an override; without:
    the ``--preset`` size with the course's architecture (``recipes.MODERN``)."""
    train = {"lr": args.lr, "optimizer": args.optimizer, "mixed_precision": args.mixed_precision,
             "max_steps": args.steps, "batch_size": args.batch_size, "seed": args.seed,
             "eval_interval": args.eval_interval if args.eval_interval is not None else max(1, args.steps // 5),
             "eval_batch_size": 128, "device": device, "progress": progress, "log_interval": 1}
    if args.warmup_steps is not None:
        train["warmup_steps"] = args.warmup_steps
    elif args.recipe is None:
        train["warmup_steps"] = min(100, args.steps // 10)
    if getattr(args, "no_compile", False):
        train["compile"] = False
    if args.recipe is not None:
        return configs(args.recipe, vocab_size, model={"max_seq_len": args.block_size, "dropout": args.dropout},
                       train=train)
    model = {**PRESETS[args.preset], "vocab_size": vocab_size, "dropout": args.dropout, **MODERN}
    if args.block_size is not None:
        model["max_seq_len"] = args.block_size
    return model, train


# --- the run-directory lifecycle (train, sft, dpo, grpo) ------------------------------------------

def saved_run(out: str) -> Optional[dict]:
    """The ``extra`` of the checkpoint in ``out`` (its metadata only: ``read_meta``), or None if
    none. A checkpoint a kill left aside (``.name.previous``) counts: ``load_checkpoint`` finds it
    too; one whose metadata is damaged counts as a run of unknown settings."""
    import warnings

    from .checkpoint import read_meta

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            extra = read_meta(out).get("extra", {})
    except FileNotFoundError:
        return None
    except ValueError:  # a CheckpointError: checkpoint.json is unreadable
        extra = {}
    return extra if isinstance(extra, dict) else {}


def check_out(args: argparse.Namespace, command: str, run_flags: tuple) -> Optional[dict]:
    """Check ``--out`` before any work (a bad one fails in a second, not after training); return
    the saved run when resuming. ``args.given`` names the flags the user gave: on ``--resume``,
    one of ``run_flags`` given with a value other than the saved run's is refused."""
    from .checkpoint import check_output_dir

    if args.resume and args.force:
        raise CommandError("--resume and --force contradict each other: continue the run in --out, "
                           "or replace it, not both")
    check_output_dir(args.out)
    saved = saved_run(args.out)
    if args.resume:
        if saved is None:
            raise CommandError(f"--resume: {args.out} holds no checkpoint to continue; "
                               f"run `{command}` without --resume to start a run")
        if "args" not in saved or saved.get("command", "train") != command:  # train's early runs had no "command"
            raise CommandError(f"--resume: the checkpoint in {args.out} was not written by `{command}`")
        given = getattr(args, "given", frozenset())
        changed = {k: (getattr(args, k), saved["args"].get(k)) for k in run_flags
                   if k in given and getattr(args, k) != saved["args"].get(k)}
        if changed:
            flags = ", ".join(f"--{k.replace('_', '-')}={v} (saved: {s})" for k, (v, s) in changed.items())
            raise CommandError(f"--resume continues the saved run with its own settings, but {flags}; "
                               f"drop those flags, or start a new run with another --out")
        return saved
    if saved is not None and not args.force:
        corpus = f", corpus {saved['corpus']!r}" if saved.get("corpus") is not None else ""
        raise CommandError(f"--out {args.out} already holds a run (step {saved.get('step_done', '?')}{corpus}); "
                           f"pass --resume to continue it, --force to replace it, or choose another --out")
    return None


def load_run(path: str, device: str):
    """The checkpoint in ``path`` on ``device`` (``auto``, ``cpu``, ...), with its tokenizer: a
    command's starting point (``generate``, ``evaluate``, ``sft``, ``dpo``, ``grpo``)."""
    from .checkpoint import load_checkpoint
    from .utils import get_device

    ckpt = load_checkpoint(path, map_location=get_device(device))
    if ckpt.tokenizer is None:
        raise CommandError(f"checkpoint {path} has no tokenizer.json; it was not written by `train`")
    if ckpt.tokenizer.vocab_size != ckpt.config.vocab_size:
        raise CommandError(f"checkpoint {path}: the tokenizer has {ckpt.tokenizer.vocab_size} tokens "
                           f"but the model {ckpt.config.vocab_size}; they do not belong together")
    return ckpt


class RunGuard:
    """The lifecycle around a command's training loop, as a context manager.

    Inside it, the first Ctrl-C asks to stop (a second aborts); :meth:`after_step`, called after
    every step, then saves and exits 130, and otherwise saves every ``--save-interval`` steps.
    On leaving, the previous Ctrl-C handler is back, and a divergence (``TrainingDiverged`` or
    ``FloatingPointError``) becomes exit code 1 naming the last good checkpoint.
    ``save(step, complete, metrics)`` writes the checkpoint; only the main process calls it.
    """

    def __init__(self, args: argparse.Namespace, command: str, total_steps: int,
                 save: Callable[[int, bool, Optional[dict]], None], last_step: Optional[int] = None,
                 main: bool = True) -> None:
        self.args, self.command, self.total_steps = args, command, total_steps
        self._save, self.last_step, self.main = save, last_step, main
        self.stop_requested = False

    def save(self, step: int, complete: bool, metrics: Optional[dict] = None) -> None:
        if self.main:
            self._save(step, complete, metrics)
        self.last_step = step

    def after_step(self, step: int, stop: Optional[bool] = None) -> None:
        """Call after each step (``stop``: whether to stop, where the ranks agreed on it; else
        whether Ctrl-C was pressed)."""
        if self.stop_requested if stop is None else stop:
            self.save(step, complete=False)
            out = self.args.out
            raise CommandError(f"interrupted: saved step {step}/{self.total_steps} to {out}; continue with: "
                               f"python -m fundamentallm {self.command} --resume --out {out}", code=130)
        interval = self.args.save_interval
        if interval and step % interval == 0 and step < self.total_steps:
            self.save(step, complete=False)

    def _on_sigint(self, signum, frame) -> None:  # the first Ctrl-C stops at the end of the step
        self.stop_requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if self.main:
            from tqdm import tqdm

            tqdm.write("Ctrl-C: stopping after this step and saving a checkpoint "
                       "(press Ctrl-C again to abort without saving)", file=sys.stderr)

    def __enter__(self) -> RunGuard:
        self._in_main_thread = threading.current_thread() is threading.main_thread()  # where signals can be set
        self._previous = signal.getsignal(signal.SIGINT)
        if self._in_main_thread:
            signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._in_main_thread:
            signal.signal(signal.SIGINT, self._previous)
        from .training import TrainingDiverged  # torch is loaded by now

        if isinstance(exc, (TrainingDiverged, FloatingPointError)):
            where = (f"the last good checkpoint is {self.args.out} (step {self.last_step})"
                     if self.last_step is not None else "no checkpoint was written before it")
            text = str(exc) if isinstance(exc, TrainingDiverged) else f"training diverged: {exc}"
            raise CommandError(f"{text}; {where}", code=1) from exc
        return False


def _estimate(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def cmd_train(args: argparse.Namespace) -> dict:
    """Run ``train`` with parsed ``args`` (``args.given``: the flags the user gave). Returns the
    final metrics."""
    import torch
    from tqdm import tqdm

    from .checkpoint import load_checkpoint, save_checkpoint
    from .config import TransformerConfig
    from .data import load_corpus, train_val_split
    from .distributed import cleanup, init_distributed, is_main_process, launched_by_torchrun
    from .model import Transformer
    from .tokenizers import ByteBPETokenizer, CharacterTokenizer
    from .training import TrainConfig, Trainer
    from .utils import set_seed

    saved = check_out(args, "train", RUN_FLAGS)
    if saved is not None:  # the saved run's settings, exactly (checked against the flags above)
        for k, v in saved["args"].items():
            setattr(args, k, v)
    if args.warmup_steps is not None and args.warmup_steps > args.steps:
        raise CommandError(f"--warmup-steps={args.warmup_steps} must not exceed --steps={args.steps}")
    device = args.device
    if args.ddp or launched_by_torchrun():
        _, _, dist_device = init_distributed()
        device = str(dist_device)
    main = is_main_process()
    set_seed(args.seed)
    data = getattr(args, "data", None)  # a folder written by `prepare`: memory-mapped token files
    if data is not None:
        from .data import load_prepared

        data_tokenizer, train_ids, val_ids, _ = load_prepared(data)
    text = load_corpus(args.corpus) if data is None else None
    if saved is not None:  # the checkpoint is read once, here (trainer.pt when the trainer exists)
        ckpt = load_checkpoint(args.out)
        tokenizer = ckpt.tokenizer
    else:
        tokenizer = (data_tokenizer if data is not None else CharacterTokenizer.from_text(text)
                     if args.tokenizer == "char" else ByteBPETokenizer.from_text(text, args.vocab_size))
    model_kwargs, train_kwargs = train_configs(args, tokenizer.vocab_size, device,
                                               progress=main and not args.no_progress)
    model = ckpt.model if saved is not None else Transformer(TransformerConfig.from_dict(model_kwargs))
    if data is None:
        ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
        train_ids, val_ids = train_val_split(ids, args.val_fraction)
    tc = TrainConfig(**train_kwargs)
    trainer = Trainer(model, train_ids, val_ids, tc)
    if saved is not None:
        if ckpt.trainer_state is None:
            raise CommandError(f"--resume: the checkpoint in {args.out} holds no training state")
        trainer.load_state_dict(ckpt.trainer_state)
    run_args = {k: getattr(args, k) for k in RUN_FLAGS}

    def save(step: int, complete: bool, metrics: Optional[dict] = None) -> None:
        save_checkpoint(args.out, model, tokenizer=tokenizer, trainer=trainer,
                        extra={"command": "train", "corpus": args.corpus if data is None else None, "data": data,
                               "val_fraction": args.val_fraction, "args": run_args, "step_done": step,
                               "complete": complete, "metrics": metrics or {}})

    guard = RunGuard(args, "train", tc.max_steps, save, last_step=saved.get("step_done") if saved else None,
                     main=main)
    start_step, start = trainer.step, time.perf_counter()

    def report(t: Trainer, m: dict) -> None:
        if main:
            tqdm.write(f"step {m['step']}/{tc.max_steps}  train_loss {m['train_loss']:.4f}  "
                       f"val_loss {m['val_loss']:.4f}  val_ppl {m['val_perplexity']:.2f}", file=sys.stdout)

    def on_step(t: Trainer, m: dict) -> None:
        done = t.step - start_step
        if main and done == min(5, tc.max_steps - start_step) and t.step < tc.max_steps:
            per_step = (time.perf_counter() - start) / done
            tqdm.write(f"about {_estimate(per_step * (tc.max_steps - t.step))} left for "
                       f"{tc.max_steps - t.step} steps ({per_step:.3f} s/step, from the first {done})",
                       file=sys.stdout)
        stop = guard.stop_requested
        if t.world_size > 1:  # every rank stops at the same step
            flag = torch.tensor(float(stop), device=t.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            stop = bool(flag.item())
        guard.after_step(t.step, stop)

    with guard:
        try:
            history = trainer.fit(callback=report, on_step=on_step)
        finally:
            cleanup()
    wall = time.perf_counter() - start
    metrics = {"command": "train", "corpus": args.corpus if data is None else None, "data": data,
               "preset": args.preset, "tokenizer": args.tokenizer if data is None else type(tokenizer).__name__,
               "parameters": model.num_parameters(), "steps": trainer.step,
               "train_loss": history["train_loss"][-1], "val_loss": history["val_loss"][-1],
               "val_perplexity": history["val_perplexity"][-1], "tokens_seen": trainer.tokens_seen,
               "tokens_per_s": round((trainer.tokens_seen / max(trainer.elapsed, 1e-9)), 1),
               "time_s": round(wall, 2), "world_size": trainer.world_size, "out": args.out,
               "resumed_from": saved.get("step_done") if saved else None}
    guard.save(trainer.step, complete=True, metrics=metrics)
    return metrics if main else {}
