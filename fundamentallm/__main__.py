"""Command line of FundamentaLLM: train, sample from and evaluate a small language model.

Each command's last line on stdout is one JSON object (``generate`` prints the text before it,
``evaluate`` a sentence). PyTorch is imported inside the commands, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Optional, Sequence

from .cli import (  # torch-free: --help stays instant
    CommandError,
    Formatter,
    dropout_rate,
    fraction,
    nonneg_int,
    positive_float,
    positive_int,
    probability,
)
from .recipes import OPTIMIZERS, PRECISIONS, PRESETS, RECIPES
from .run import load_run, recipe_defaults

DEFAULT_OUT = "runs/latest"
EPILOG = """examples:
  python -m fundamentallm train --steps 200          # the built-in corpus, a CPU-sized model
  python -m fundamentallm train --resume             # continue runs/latest after Ctrl-C
  python -m fundamentallm train --recipe record      # the records page's run (CPU budget)
  python -m fundamentallm generate --prompt "def "   # sample from runs/latest
  python -m fundamentallm evaluate                   # full validation loss of runs/latest
  python -m fundamentallm doctor                     # versions, device, chapter imports
  python -m fundamentallm record try record+lr=4e-3  # your recipe against the record, by the rule
  torchrun --standalone --nproc_per_node 2 -m fundamentallm train --ddp

exit codes: 0 done, 1 training diverged, 2 bad input or unreadable file, 130 interrupted (Ctrl-C)"""


def _recipe_in(argv: Sequence[str]) -> Optional[str]:
    """The ``--recipe`` of a ``train`` command line, read before the full parse (None if none or
    not a recipe: the full parse reports a bad one)."""
    if list(argv[:1]) != ["train"]:
        return None
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--recipe", default=None)
    try:
        known, _ = pre.parse_known_args(argv[1:])
    except SystemExit:
        return None
    return known.recipe if known.recipe in RECIPES else None


def _build_parser(recipe: Optional[str] = None, given_only: bool = False) -> argparse.ArgumentParser:
    """The command line's parser. ``recipe``: ``train``'s flags default to that recipe's values
    (``run.recipe_defaults``). ``given_only``: no defaults at all, so that a parse holds exactly
    the flags the user gave."""
    parser = argparse.ArgumentParser(prog="python -m fundamentallm", description=__doc__.split("\n\n")[0],
                                     epilog=EPILOG, formatter_class=Formatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,generate,evaluate,doctor,prepare,sft,dpo,grpo,record}")

    train = sub.add_parser("train", help="train a language model on a corpus", formatter_class=Formatter,
                           description="Train a language model; checkpoints go to --out every "
                           "--save-interval steps, at the end, and on Ctrl-C.")
    train.add_argument("--corpus", default="python-docs", help="'python-docs' (built in), "
                       "'tinyshakespeare' (downloaded once) or the path of a UTF-8 text file")
    train.add_argument("--preset", default="micro", choices=list(PRESETS), help="model size")
    train.add_argument("--recipe", default=None, choices=list(RECIPES),
                       help="train a recipe of fundamentallm/recipes.py on the CPU budget's terms (the "
                       "records page's runs: its model and training settings, 2000 steps x 12 x 64 "
                       "characters, seed 1337): they become the other flags' defaults (shown by `train "
                       "--recipe NAME --help`), and every flag you give overrides them")
    train.add_argument("--data", default=None, help="a folder written by `prepare` (train.bin/val.bin, "
                       "read by memory map; its tokenizer replaces --corpus/--tokenizer)")
    train.add_argument("--tokenizer", default="char", choices=("char", "bpe"), help="tokenizer kind")
    train.add_argument("--vocab-size", type=positive_int, default=512, help="BPE vocabulary size (>= 256)")
    train.add_argument("--block-size", type=positive_int, default=None, help="context length (None: the preset's)")
    train.add_argument("--steps", type=positive_int, default=2000, help="optimizer steps")
    train.add_argument("--batch-size", type=positive_int, default=32, help="sequences per step")
    train.add_argument("--lr", type=positive_float, default=2e-3, help="peak learning rate")
    train.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS,
                       help="'muon': Muon for the hidden matrices (at its own rate, 0.02), AdamW at --lr "
                       "for the rest (see the book's appendix)")
    train.add_argument("--mixed-precision", default="auto", choices=PRECISIONS,
                       help="'auto': bf16 or fp16 on CUDA, float32 elsewhere; 'bf16' also on the CPU "
                       "(faster on CPUs with bf16 instructions, much slower without); 'bf16-native': bf16 "
                       "where the device has bf16 instructions, float32 elsewhere (the recipes' choice)")
    train.add_argument("--no-compile", action="store_true",
                       help="train without torch.compile where the --recipe uses it (on the CPU it needs "
                       "a C++ compiler; the numbers differ slightly)")
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

    gen = sub.add_parser("generate", help="sample text from a checkpoint", formatter_class=Formatter)
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
                        formatter_class=Formatter)
    ev.add_argument("--checkpoint", default=DEFAULT_OUT, help="checkpoint directory")
    ev.add_argument("--corpus", default=None, help="None: the corpus the checkpoint was trained on")
    ev.add_argument("--val-fraction", type=fraction, default=None, help="None: the training run's")
    ev.add_argument("--batch-size", type=positive_int, default=64, help="windows per forward pass")
    ev.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")

    doc = sub.add_parser("doctor", help="print versions, the device and whether each chapter's "
                         "imports resolve", formatter_class=Formatter)
    doc.add_argument("--book", default=None, help="folder of chapter notebooks (None: the repository's book/)")
    prep = sub.add_parser("prepare", help="tokenize a text file once into train.bin/val.bin for "
                          "`train --data`", formatter_class=Formatter)
    prep.add_argument("text", help="a UTF-8 text file (streamed: any size)")
    prep.add_argument("--tokenizer", default="char", help="'char', 'bpe' (trained on the first 10 MB), "
                      "a tokenizer .json file, or a folder with GPT-2's vocab.json + merges.txt")
    prep.add_argument("--vocab-size", type=positive_int, default=512, help="BPE vocabulary size (>= 256)")
    prep.add_argument("--val-fraction", type=fraction, default=0.1, help="last fraction of the tokens held out")
    prep.add_argument("--out", required=True, help="output folder")

    from .posttrain_cli import add_parsers  # sft, dpo, grpo (chapter 15)
    add_parsers(sub)
    from .record_cli import add_parsers as add_record  # record try (the records page)
    add_record(sub)
    if recipe is not None:
        train.set_defaults(**recipe_defaults(recipe))
    if given_only:
        for p in (parser, *sub.choices.values()):
            p._defaults.clear()
            for action in p._actions:
                if action.dest not in ("help", "command"):
                    action.default = argparse.SUPPRESS
    return parser


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse a command line; ``args.given`` holds the names of the flags the user gave (a flag
    given with its default's value counts: it wins over a recipe, and ``--resume`` checks it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    recipe = _recipe_in(argv)
    args = _build_parser(recipe).parse_args(argv)
    args.given = frozenset(vars(_build_parser(recipe, given_only=True).parse_args(argv))) - {"command"}
    return args


def cmd_prepare(args: argparse.Namespace) -> dict:
    from .data import prepare, tokenizer_for_text

    meta = prepare(args.text, tokenizer_for_text(args.text, args.tokenizer, args.vocab_size), args.out,
                   args.val_fraction)
    print(f"{args.out}: {meta['train_tokens']} + {meta['val_tokens']} tokens ({meta['dtype']})")
    return {"command": "prepare", "out": args.out, **meta}


def cmd_train(args: argparse.Namespace) -> dict:
    from .run import cmd_train as run_train

    return run_train(args)


# --- generate / evaluate -------------------------------------------------------------------------

def cmd_generate(args: argparse.Namespace) -> dict:
    import torch

    from .generation import generate, optimize_for_decoding

    ckpt = load_run(args.checkpoint, args.device)
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
    from .training import evaluate

    ckpt = load_run(args.checkpoint, args.device)
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
    result = evaluate(ckpt.model, val_ids, batch_size=args.batch_size)
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
    args = parse_args(argv)
    commands = {"train": cmd_train, "generate": cmd_generate, "evaluate": cmd_evaluate, "doctor": cmd_doctor,
                "prepare": cmd_prepare}
    from .posttrain_cli import COMMANDS, cmd_post
    commands.update(dict.fromkeys(COMMANDS, cmd_post))
    from .record_cli import cmd_record
    commands["record"] = cmd_record
    try:
        result = commands[args.command](args)
    except CommandError as err:
        print(f"error: {err}" if err.code != 130 else str(err), file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C); checkpoints saved before it are intact", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError, RuntimeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if result:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
