"""``python -m fundamentallm train``: a training run that never loses work.

* ``--out`` is checked before any work (a file, a non-empty non-checkpoint directory, an
  unwritable parent), and a run already saved there is never replaced without ``--force``;
* a checkpoint is saved every ``--save-interval`` steps (atomically: see
  :mod:`fundamentallm.atomic`), at the end, and on Ctrl-C -- the first Ctrl-C stops at the end
  of the current step, so the saved state is complete, and exits with code 130;
* ``--resume`` rebuilds the run from the checkpoint (tokenizer, model, optimizer, RNG states,
  history) and continues it bit for bit as if it had never stopped;
* a non-finite loss or gradient stops the run with exit code 1, naming the last good checkpoint.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Optional

from .recipes import BUDGET, MODERN, RECIPES

# The flags that define a run: --resume refuses to change them, and a run with other values is
# "a different run" that --out never overwrites without --force.
RUN_FLAGS = ("corpus", "recipe", "preset", "tokenizer", "vocab_size", "block_size", "steps", "batch_size", "lr",
             "warmup_steps", "dropout", "eval_interval", "val_fraction", "seed", "optimizer", "mixed_precision",
             "no_compile")


class CommandError(Exception):
    """A failure with a message for the user and an exit code (no traceback)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _run_args(args: argparse.Namespace) -> dict:
    return {k: getattr(args, k) for k in RUN_FLAGS}


def _saved_run(out: str) -> Optional[dict]:
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


def _check_out(args: argparse.Namespace, defaults: dict) -> Optional[dict]:
    """Check --out before any work; return the saved run when resuming."""
    from .checkpoint import check_output_dir

    if args.resume and args.force:
        raise CommandError("--resume and --force contradict each other: continue the run in --out, "
                           "or replace it, not both")
    check_output_dir(args.out)
    saved = _saved_run(args.out)
    if args.resume:
        if saved is None:
            raise CommandError(f"--resume: {args.out} holds no checkpoint to continue; "
                               f"train without --resume to start a run")
        if "args" not in saved:
            raise CommandError(f"--resume: the checkpoint in {args.out} was not written by `train`")
        changed = {k: (v, saved["args"].get(k)) for k, v in _run_args(args).items()
                   if v != defaults[k] and v != saved["args"].get(k)}
        if changed:
            flags = ", ".join(f"--{k.replace('_', '-')}={v} (saved: {s})" for k, (v, s) in changed.items())
            raise CommandError(f"--resume continues the saved run with its own settings, but {flags}; "
                               f"drop those flags, or start a new run with another --out")
        return saved
    if saved is not None and not args.force:
        step = saved.get("step_done", "?")
        raise CommandError(f"--out {args.out} already holds a run (step {step}, corpus "
                           f"{saved.get('corpus')!r}); pass --resume to continue it, --force to "
                           f"replace it, or choose another --out")
    return None


def _apply_recipe(args: argparse.Namespace, defaults: dict) -> Optional[dict]:
    """With ``--recipe NAME``: the recipe's model and training settings and the CPU budget's
    terms (``recipes.BUDGET``) become the defaults of the flags the user left alone, so that
    ``train --recipe record`` trains the records page's run. Returns the recipe (or None)."""
    if args.recipe is None:
        return None
    recipe = RECIPES[args.recipe]
    terms = {"steps": BUDGET["steps"], "batch_size": BUDGET["batch_size"], "block_size": BUDGET["block_size"],
             "val_fraction": BUDGET["val_fraction"], "seed": BUDGET["seed"], "tokenizer": BUDGET["tokenizer"],
             "eval_interval": 0, "lr": recipe["train"]["lr"],
             "optimizer": recipe["train"].get("optimizer", "adamw"),
             "mixed_precision": recipe["train"].get("mixed_precision", "auto")}
    for key, value in terms.items():
        if getattr(args, key) == defaults[key]:
            setattr(args, key, value)
    if args.warmup_steps == defaults["warmup_steps"]:  # a trial shorter than the warmup warms up throughout
        args.warmup_steps = min(recipe["train"]["warmup_steps"], args.steps)
    return recipe


def _estimate(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def cmd_train(args: argparse.Namespace, defaults: dict) -> dict:
    """Run ``train`` with parsed ``args``; ``defaults`` are the flags' defaults (to tell a flag the
    user gave from one left alone when resuming). Returns the final metrics."""
    import torch
    from tqdm import tqdm

    from .checkpoint import load_checkpoint, save_checkpoint
    from .config import TransformerConfig
    from .data import load_corpus, train_val_split
    from .distributed import cleanup, init_distributed, is_main_process, launched_by_torchrun
    from .model import Transformer
    from .tokenizers import ByteBPETokenizer, CharacterTokenizer
    from .training import TrainConfig, Trainer, TrainingDiverged
    from .utils import set_seed

    saved = _check_out(args, defaults)  # before any work: a bad --out fails in a second, not after training
    if saved is not None:  # the saved run's settings, exactly (checked against the flags above)
        for k, v in saved["args"].items():
            setattr(args, k, v)
    recipe = _apply_recipe(args, defaults)
    warmup = args.warmup_steps if args.warmup_steps is not None else min(100, args.steps // 10)
    if warmup > args.steps:
        raise CommandError(f"--warmup-steps={warmup} must not exceed --steps={args.steps}")
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
        tokenizer, config, model = ckpt.tokenizer, ckpt.config, ckpt.model
    else:
        tokenizer = (data_tokenizer if data is not None else CharacterTokenizer.from_text(text)
                     if args.tokenizer == "char" else ByteBPETokenizer.from_text(text, args.vocab_size))
        if recipe is not None:
            config = TransformerConfig(vocab_size=tokenizer.vocab_size, max_seq_len=args.block_size,
                                       dropout=args.dropout, **recipe["model"])
        else:
            config = TransformerConfig.preset(args.preset, vocab_size=tokenizer.vocab_size,
                                              dropout=args.dropout, **MODERN)
            if args.block_size is not None:
                config = TransformerConfig.from_dict({**config.to_dict(), "max_seq_len": args.block_size})
        model = Transformer(config)
    if data is None:
        ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
        train_ids, val_ids = train_val_split(ids, args.val_fraction)
    eval_interval = args.eval_interval if args.eval_interval is not None else max(1, args.steps // 5)
    recipe_train = {k: v for k, v in (recipe or {}).get("train", {}).items()
                    if k not in ("lr", "optimizer", "mixed_precision", "warmup_steps")}  # the flags carry those
    if getattr(args, "no_compile", False):
        recipe_train["compile"] = False
    tc = TrainConfig(**recipe_train, lr=args.lr, optimizer=args.optimizer, mixed_precision=args.mixed_precision,
                     max_steps=args.steps, batch_size=args.batch_size, warmup_steps=warmup,
                     eval_interval=eval_interval, eval_batch_size=128, device=device, seed=args.seed,
                     progress=main and not args.no_progress, log_interval=1)
    trainer = Trainer(model, train_ids, val_ids, tc)
    if saved is not None:
        if ckpt.trainer_state is None:
            raise CommandError(f"--resume: the checkpoint in {args.out} holds no training state")
        trainer.load_state_dict(ckpt.trainer_state)
    run_args = _run_args(args)
    last_saved = {"step": saved.get("step_done") if saved else None}

    def save(complete: bool, metrics: Optional[dict] = None) -> None:
        if main:
            save_checkpoint(args.out, model, tokenizer=tokenizer, trainer=trainer,
                            extra={"corpus": args.corpus if data is None else None, "data": data,
                                   "val_fraction": args.val_fraction,
                                   "args": run_args, "step_done": trainer.step, "complete": complete,
                                   "metrics": metrics or {}})
            last_saved["step"] = trainer.step

    stop = {"requested": False}

    def on_sigint(signum, frame):  # the first Ctrl-C stops at the end of the step; a second aborts
        stop["requested"] = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if main:
            tqdm.write("Ctrl-C: stopping after this step and saving a checkpoint "
                       "(press Ctrl-C again to abort without saving)", file=sys.stderr)

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
        requested = stop["requested"]
        if t.world_size > 1:  # every rank stops at the same step
            flag = torch.tensor(float(requested), device=t.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            requested = bool(flag.item())
        if requested:
            save(complete=False)
            raise CommandError(f"interrupted: saved step {t.step}/{tc.max_steps} to {args.out}; "
                               f"continue with: python -m fundamentallm train --resume --out {args.out}",
                               code=130)
        if args.save_interval and t.step % args.save_interval == 0 and t.step < tc.max_steps:
            save(complete=False)

    in_main_thread = threading.current_thread() is threading.main_thread()  # where signals can be set
    previous = signal.getsignal(signal.SIGINT)
    if in_main_thread:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        history = trainer.fit(callback=report, on_step=on_step)
    except TrainingDiverged as err:
        where = (f"the last good checkpoint is {args.out} (step {last_saved['step']})"
                 if last_saved["step"] is not None else "no checkpoint was written before it")
        raise CommandError(f"{err}; {where}", code=1) from err
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous)
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
    save(complete=True, metrics=metrics)
    return metrics if main else {}
