"""Command line of FundamentaLLM: train, sample from and evaluate a small language model.

Each command's last line on stdout is one JSON object (``generate`` prints the text before it,
``evaluate`` a sentence). PyTorch is imported inside the commands, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
import time
from typing import Optional, Sequence

DEFAULT_OUT = "runs/latest"
# The architecture the course ends with: RoPE, RMSNorm, SwiGLU, no biases, the fused attention.
MODERN = dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False, attn_impl="sdpa")
PRESETS = ("nano", "micro", "tiny", "gpt2")  # fundamentallm.config.PRESETS, without importing torch
# The flags that define a run: --resume refuses to change them, and a run with other values is
# "a different run" that --out never overwrites without --force.
RUN_FLAGS = ("corpus", "preset", "tokenizer", "vocab_size", "block_size", "steps", "batch_size", "lr",
             "warmup_steps", "dropout", "eval_interval", "val_fraction", "seed")
EPILOG = """examples:
  python -m fundamentallm train --steps 200          # the built-in corpus, a CPU-sized model
  python -m fundamentallm train --resume             # continue runs/latest after Ctrl-C
  python -m fundamentallm generate --prompt "def "   # sample from runs/latest
  python -m fundamentallm evaluate                   # full validation loss of runs/latest
  python -m fundamentallm doctor                     # versions, device, chapter imports
  torchrun --standalone --nproc_per_node 2 -m fundamentallm train --ddp

exit codes: 0 done, 1 training diverged, 2 bad input or unreadable file, 130 interrupted (Ctrl-C)"""


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows every option's default and keeps the epilog's line breaks."""


class CommandError(Exception):
    """A failure with a message for the user and an exit code (no traceback)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


# --- argument types: a bad value is reported by argparse, before anything runs ------------------

def _number(text: str, kind, low, low_ok: bool, high=None, high_ok: bool = False):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    bounds = f"{'>=' if low_ok else '>'} {low}" + (f" and {'<=' if high_ok else '<'} {high}" if high is not None else "")
    if not math.isfinite(value) or not (value >= low if low_ok else value > low) or (
            high is not None and not (value <= high if high_ok else value < high)):
        raise argparse.ArgumentTypeError(f"{text} must be {'an integer' if kind is int else 'a finite number'} {bounds}")
    return value


def positive_int(text: str) -> int:
    return _number(text, int, 1, True)


def nonneg_int(text: str) -> int:
    return _number(text, int, 0, True)


def positive_float(text: str) -> float:
    return _number(text, float, 0, False)


def fraction(text: str) -> float:
    return _number(text, float, 0, False, 1, False)


def probability(text: str) -> float:
    return _number(text, float, 0, False, 1, True)


def dropout_rate(text: str) -> float:
    return _number(text, float, 0, True, 1, False)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fundamentallm", description=__doc__.split("\n\n")[0],
                                     epilog=EPILOG, formatter_class=_Formatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,generate,evaluate,doctor}")

    train = sub.add_parser("train", help="train a language model on a corpus", formatter_class=_Formatter,
                           description="Train a language model; checkpoints go to --out every "
                           "--save-interval steps, at the end, and on Ctrl-C.")
    train.add_argument("--corpus", default="python-docs", help="'python-docs' (built in), "
                       "'tinyshakespeare' (downloaded once) or the path of a UTF-8 text file")
    train.add_argument("--preset", default="micro", choices=PRESETS, help="model size")
    train.add_argument("--tokenizer", default="char", choices=("char", "bpe"), help="tokenizer kind")
    train.add_argument("--vocab-size", type=positive_int, default=512, help="BPE vocabulary size (>= 256)")
    train.add_argument("--block-size", type=positive_int, default=None, help="context length (None: the preset's)")
    train.add_argument("--steps", type=positive_int, default=2000, help="optimizer steps")
    train.add_argument("--batch-size", type=positive_int, default=32, help="sequences per step")
    train.add_argument("--lr", type=positive_float, default=2e-3, help="peak learning rate")
    train.add_argument("--warmup-steps", type=nonneg_int, default=None, help="None: min(100, steps // 10)")
    train.add_argument("--dropout", type=dropout_rate, default=0.0, help="dropout rate in [0, 1)")
    train.add_argument("--eval-interval", type=nonneg_int, default=None,
                       help="evaluate every N steps (0: only at the end; None: steps // 5)")
    train.add_argument("--val-fraction", type=fraction, default=0.1, help="last fraction of the corpus held out")
    train.add_argument("--out", default=DEFAULT_OUT, help="checkpoint directory")
    train.add_argument("--save-interval", type=nonneg_int, default=100,
                       help="save a checkpoint every N steps (0: only at the end and on Ctrl-C)")
    train.add_argument("--resume", action="store_true", help="continue the run saved in --out, bit for bit")
    train.add_argument("--force", action="store_true", help="replace a different run saved in --out")
    train.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    train.add_argument("--seed", type=nonneg_int, default=0, help="random seed")
    train.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    train.add_argument("--ddp", action="store_true", help="data-parallel across torchrun's processes")

    gen = sub.add_parser("generate", help="sample text from a checkpoint", formatter_class=_Formatter)
    gen.add_argument("--checkpoint", default=DEFAULT_OUT, help="checkpoint directory")
    gen.add_argument("--prompt", default="\n", help="text to continue (default: a newline)%(default).0s")
    gen.add_argument("--max-new-tokens", type=nonneg_int, default=200, help="tokens to generate")
    gen.add_argument("--temperature", type=positive_float, default=0.8, help="> 0; lower is more conservative")
    gen.add_argument("--top-k", type=positive_int, default=None, help="sample among the k most likely tokens")
    gen.add_argument("--top-p", type=probability, default=None, help="nucleus sampling mass in (0, 1]")
    gen.add_argument("--greedy", action="store_true", help="always take the most likely token")
    gen.add_argument("--no-cache", action="store_true", help="recompute instead of the KV cache")
    gen.add_argument("--seed", type=nonneg_int, default=0, help="random seed")
    gen.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")

    ev = sub.add_parser("evaluate", help="mean loss and perplexity on a corpus's validation split",
                        formatter_class=_Formatter)
    ev.add_argument("--checkpoint", default=DEFAULT_OUT, help="checkpoint directory")
    ev.add_argument("--corpus", default=None, help="None: the corpus the checkpoint was trained on")
    ev.add_argument("--val-fraction", type=fraction, default=None, help="None: the training run's")
    ev.add_argument("--batch-size", type=positive_int, default=64, help="windows per forward pass")
    ev.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")

    doc = sub.add_parser("doctor", help="print versions, the device and whether each chapter's "
                         "imports resolve", formatter_class=_Formatter)
    doc.add_argument("--book", default=None, help="folder of chapter notebooks (None: the repository's book/)")
    return parser


# --- train ---------------------------------------------------------------------------------------

def _run_args(args: argparse.Namespace) -> dict:
    return {k: getattr(args, k) for k in RUN_FLAGS}


def _saved_run(out: str) -> Optional[dict]:
    """The ``extra`` of the checkpoint in ``out`` (read without loading it), or None if none."""
    from pathlib import Path

    meta = Path(out) / "checkpoint.json"
    if not meta.is_file():
        return None
    try:
        extra = json.loads(meta.read_text(encoding="utf-8")).get("extra", {})
    except (ValueError, AttributeError):
        extra = {}
    return extra if isinstance(extra, dict) else {}


def _check_out(args: argparse.Namespace) -> Optional[dict]:
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
        defaults = vars(_build_parser().parse_args(["train"]))
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


def _estimate(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def cmd_train(args: argparse.Namespace) -> dict:
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

    saved = _check_out(args)  # before any work: a bad --out fails in a second, not after training
    if saved is not None:  # the saved run's settings, exactly (checked against the flags above)
        for k, v in saved["args"].items():
            setattr(args, k, v)
    warmup = args.warmup_steps if args.warmup_steps is not None else min(100, args.steps // 10)
    if warmup > args.steps:
        raise CommandError(f"--warmup-steps={warmup} must not exceed --steps={args.steps}")
    device = args.device
    if args.ddp or launched_by_torchrun():
        _, _, dist_device = init_distributed()
        device = str(dist_device)
    main = is_main_process()
    set_seed(args.seed)
    text = load_corpus(args.corpus)
    if saved is not None:
        ckpt = load_checkpoint(args.out)
        tokenizer, config, model = ckpt.tokenizer, ckpt.config, ckpt.model
    else:
        tokenizer = (CharacterTokenizer.from_text(text) if args.tokenizer == "char"
                     else ByteBPETokenizer.from_text(text, args.vocab_size))
        config = TransformerConfig.preset(args.preset, vocab_size=tokenizer.vocab_size,
                                          dropout=args.dropout, **MODERN)
        if args.block_size is not None:
            config = TransformerConfig.from_dict({**config.to_dict(), "max_seq_len": args.block_size})
        model = Transformer(config)
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    train_ids, val_ids = train_val_split(ids, args.val_fraction)
    eval_interval = args.eval_interval if args.eval_interval is not None else max(1, args.steps // 5)
    tc = TrainConfig(lr=args.lr, max_steps=args.steps, batch_size=args.batch_size, warmup_steps=warmup,
                     eval_interval=eval_interval, eval_batch_size=128, device=device, seed=args.seed,
                     progress=main and not args.no_progress, log_interval=1)
    trainer = Trainer(model, train_ids, val_ids, tc)
    if saved is not None:
        load_checkpoint(args.out, model=trainer.model, trainer=trainer)
    run_args = _run_args(args)
    last_saved = {"step": saved.get("step_done") if saved else None}

    def save(complete: bool, metrics: Optional[dict] = None) -> None:
        if main:
            save_checkpoint(args.out, model, tokenizer=tokenizer, trainer=trainer,
                            extra={"corpus": args.corpus, "val_fraction": args.val_fraction,
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
    metrics = {"command": "train", "corpus": args.corpus, "preset": args.preset,
               "tokenizer": args.tokenizer, "parameters": model.num_parameters(), "steps": trainer.step,
               "train_loss": history["train_loss"][-1], "val_loss": history["val_loss"][-1],
               "val_perplexity": history["val_perplexity"][-1], "tokens_seen": trainer.tokens_seen,
               "tokens_per_s": round((trainer.tokens_seen / max(trainer.elapsed, 1e-9)), 1),
               "time_s": round(wall, 2), "world_size": trainer.world_size, "out": args.out,
               "resumed_from": saved.get("step_done") if saved else None}
    save(complete=True, metrics=metrics)
    return metrics if main else {}


# --- generate / evaluate -------------------------------------------------------------------------

def _load(path: str, device: str):
    from .checkpoint import load_checkpoint
    from .utils import get_device

    ckpt = load_checkpoint(path, map_location=get_device(device))
    if ckpt.tokenizer is None:
        raise CommandError(f"checkpoint {path} has no tokenizer.json; it was not written by `train`")
    if ckpt.tokenizer.vocab_size != ckpt.config.vocab_size:
        raise CommandError(f"checkpoint {path}: the tokenizer has {ckpt.tokenizer.vocab_size} tokens "
                           f"but the model {ckpt.config.vocab_size}; they do not belong together")
    return ckpt


def cmd_generate(args: argparse.Namespace) -> dict:
    import torch

    from .generation import generate, optimize_for_decoding

    ckpt = _load(args.checkpoint, args.device)
    if next(ckpt.model.parameters()).device.type == "cpu":
        optimize_for_decoding(ckpt.model)  # the CPU's faster weight layout for one-token steps
    prompt_ids = ckpt.tokenizer.encode(args.prompt)
    if not prompt_ids:
        raise CommandError("--prompt must not be empty (it gives the model a first token)")
    unknown = sorted({c for c in args.prompt if getattr(ckpt.tokenizer, "stoi", None) is not None
                      and c not in ckpt.tokenizer.stoi})
    if unknown:
        print(f"warning: --prompt has characters the tokenizer never saw, read as <unk>: {unknown}",
              file=sys.stderr)
    device = next(ckpt.model.parameters()).device
    x = torch.tensor([prompt_ids], dtype=torch.long, device=device)  # (1, T)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    start = time.perf_counter()
    out = generate(ckpt.model, x, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                   top_p=args.top_p, greedy=args.greedy, use_cache=not args.no_cache, generator=gen,
                   truncate=True)
    wall = time.perf_counter() - start
    new = out[0, len(prompt_ids):].tolist()
    print(args.prompt + ckpt.tokenizer.decode(new))
    return {"command": "generate", "checkpoint": args.checkpoint, "new_tokens": len(new),
            "time_s": round(wall, 3), "tokens_per_s": round(len(new) / max(wall, 1e-9), 1)}


def cmd_evaluate(args: argparse.Namespace) -> dict:
    import torch

    from .data import load_corpus, train_val_split
    from .training import TrainConfig, Trainer

    ckpt = _load(args.checkpoint, args.device)
    corpus = args.corpus if args.corpus is not None else ckpt.extra.get("corpus")
    if corpus is None:
        raise CommandError("the checkpoint does not record its corpus; pass --corpus")
    val_fraction = args.val_fraction if args.val_fraction is not None else ckpt.extra.get("val_fraction", 0.1)
    ids = torch.tensor(ckpt.tokenizer.encode(load_corpus(corpus)), dtype=torch.long)
    _, val_ids = train_val_split(ids, val_fraction)
    T = ckpt.config.max_seq_len
    if len(val_ids) < T + 1:
        raise CommandError(f"the validation split of {corpus!r} has {len(val_ids)} tokens, fewer than one "
                           f"window of {T + 1}; pass a larger --val-fraction or a longer corpus")
    tc = TrainConfig(batch_size=args.batch_size, device=str(next(ckpt.model.parameters()).device),
                     progress=False)
    result = Trainer(ckpt.model, val_ids, val_ids, tc).evaluate()
    bits = result["val_loss"] / math.log(2)
    print(f"{args.checkpoint}: validation loss {result['val_loss']:.4f} nats/token "
          f"(perplexity {result['val_perplexity']:.2f}, {bits:.3f} bits/token) over "
          f"{(len(val_ids) - 1) // T} windows of {T} tokens of {corpus!r}")
    return {"command": "evaluate", "checkpoint": args.checkpoint, "corpus": corpus,
            "val_tokens": len(val_ids), "windows": (len(val_ids) - 1) // T, "block_size": T,
            **result, "bits_per_token": bits}


def cmd_doctor(args: argparse.Namespace) -> dict:
    from .doctor import format_report, report

    result = report(args.book)
    print("\n".join(format_report(result)))
    return {"command": "doctor", **result}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _build_parser().parse_args(argv)
    commands = {"train": cmd_train, "generate": cmd_generate, "evaluate": cmd_evaluate, "doctor": cmd_doctor}
    try:
        result = commands[args.command](args)
    except CommandError as err:
        print(f"error: {err}" if err.code != 130 else str(err), file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        print("interrupted (nothing was saved)", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError, RuntimeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if result:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
