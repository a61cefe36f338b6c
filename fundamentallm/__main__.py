"""Command line: ``python -m fundamentallm train | generate | evaluate``.

    python -m fundamentallm train --steps 200     # the built-in corpus, a CPU-sized model
    python -m fundamentallm generate              # sample from runs/latest
    python -m fundamentallm evaluate              # full validation loss of runs/latest

Each command's last line on stdout is one JSON object (``generate`` prints the text before it).
Multi-process: ``torchrun --standalone --nproc_per_node 2 -m fundamentallm train --ddp``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Optional, Sequence

import torch

DEFAULT_OUT = "runs/latest"
# The architecture the course ends with: RoPE, RMSNorm, SwiGLU, no biases, the fused attention.
MODERN = dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False, attn_impl="sdpa")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fundamentallm", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a language model on a corpus")
    train.add_argument("--corpus", default="python-docs", help="'python-docs' (built in), "
                       "'tinyshakespeare' (downloaded once) or the path of a UTF-8 text file")
    train.add_argument("--preset", default="micro", help="model size: nano, micro, tiny, gpt2")
    train.add_argument("--tokenizer", default="char", choices=("char", "bpe"))
    train.add_argument("--vocab-size", type=int, default=512, help="BPE vocabulary size")
    train.add_argument("--block-size", type=int, default=None, help="context length (default: preset's)")
    train.add_argument("--steps", type=int, default=2000)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--lr", type=float, default=2e-3)
    train.add_argument("--warmup-steps", type=int, default=None, help="default: min(100, steps // 10)")
    train.add_argument("--dropout", type=float, default=0.0)
    train.add_argument("--eval-interval", type=int, default=None, help="default: steps // 5")
    train.add_argument("--val-fraction", type=float, default=0.1)
    train.add_argument("--out", default=DEFAULT_OUT, help="checkpoint directory")
    train.add_argument("--device", default="auto")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    train.add_argument("--ddp", action="store_true", help="data-parallel across torchrun's processes")

    gen = sub.add_parser("generate", help="sample text from a checkpoint")
    gen.add_argument("--checkpoint", default=DEFAULT_OUT)
    gen.add_argument("--prompt", default="\n")
    gen.add_argument("--max-new-tokens", type=int, default=200)
    gen.add_argument("--temperature", type=float, default=0.8)
    gen.add_argument("--top-k", type=int, default=None)
    gen.add_argument("--top-p", type=float, default=None)
    gen.add_argument("--greedy", action="store_true")
    gen.add_argument("--no-cache", action="store_true", help="recompute instead of the KV cache")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--device", default="auto")

    ev = sub.add_parser("evaluate", help="mean loss and perplexity on a corpus's validation split")
    ev.add_argument("--checkpoint", default=DEFAULT_OUT)
    ev.add_argument("--corpus", default=None, help="default: the corpus the checkpoint was trained on")
    ev.add_argument("--val-fraction", type=float, default=None)
    ev.add_argument("--batch-size", type=int, default=64)
    ev.add_argument("--device", default="auto")
    return parser


def _encode_corpus(tokenizer, corpus: str, val_fraction: float):
    from .data import load_corpus, train_val_split

    ids = torch.tensor(tokenizer.encode(load_corpus(corpus)), dtype=torch.long)
    return train_val_split(ids, val_fraction)


def cmd_train(args: argparse.Namespace) -> dict:
    from .checkpoint import save_checkpoint
    from .config import TransformerConfig
    from .data import load_corpus
    from .distributed import cleanup, init_distributed, is_main_process, launched_by_torchrun
    from .model import Transformer
    from .tokenizers import ByteBPETokenizer, CharacterTokenizer
    from .training import TrainConfig, Trainer
    from .utils import set_seed

    device = args.device
    if args.ddp or launched_by_torchrun():
        _, _, dist_device = init_distributed()
        device = str(dist_device)
    main = is_main_process()
    set_seed(args.seed)
    text = load_corpus(args.corpus)
    tokenizer = (CharacterTokenizer.from_text(text) if args.tokenizer == "char"
                 else ByteBPETokenizer.from_text(text, args.vocab_size))
    train_ids, val_ids = _encode_corpus(tokenizer, args.corpus, args.val_fraction)
    config = TransformerConfig.preset(args.preset, vocab_size=tokenizer.vocab_size,
                                      dropout=args.dropout, **MODERN)
    if args.block_size is not None:
        config = TransformerConfig.from_dict({**config.to_dict(), "max_seq_len": args.block_size})
    model = Transformer(config)
    warmup = args.warmup_steps if args.warmup_steps is not None else min(100, args.steps // 10)
    tc = TrainConfig(lr=args.lr, max_steps=args.steps, batch_size=args.batch_size, warmup_steps=warmup,
                     eval_interval=args.eval_interval or max(1, args.steps // 5), eval_batch_size=128,
                     device=device, seed=args.seed, progress=main and not args.no_progress,
                     log_interval=1)
    trainer = Trainer(model, train_ids, val_ids, tc)
    start = time.perf_counter()

    def report(t: Trainer, m: dict) -> None:
        if main:
            print(f"step {m['step']}/{tc.max_steps}  train_loss {m['train_loss']:.4f}  "
                  f"val_loss {m['val_loss']:.4f}  val_ppl {m['val_perplexity']:.2f}", flush=True)

    history = trainer.fit(callback=report)
    wall = time.perf_counter() - start
    metrics = {"command": "train", "corpus": args.corpus, "preset": args.preset,
               "tokenizer": args.tokenizer, "parameters": model.num_parameters(), "steps": trainer.step,
               "train_loss": history["train_loss"][-1], "val_loss": history["val_loss"][-1],
               "val_perplexity": history["val_perplexity"][-1], "tokens_seen": trainer.tokens_seen,
               "tokens_per_s": round(trainer.tokens_seen / wall, 1), "time_s": round(wall, 2),
               "world_size": trainer.world_size, "out": args.out}
    if main:
        save_checkpoint(args.out, model, tokenizer=tokenizer, trainer=trainer,
                        extra={"corpus": args.corpus, "val_fraction": args.val_fraction,
                               "metrics": metrics})
    cleanup()
    return metrics if main else {}


def _load(path: str, device: str):
    from .checkpoint import load_checkpoint
    from .utils import get_device

    ckpt = load_checkpoint(path, map_location=get_device(device))
    if ckpt.tokenizer is None:
        raise ValueError(f"checkpoint {path} has no tokenizer.json; it was not written by `train`")
    return ckpt


def cmd_generate(args: argparse.Namespace) -> dict:
    from .generation import generate, optimize_for_decoding

    ckpt = _load(args.checkpoint, args.device)
    if next(ckpt.model.parameters()).device.type == "cpu":
        optimize_for_decoding(ckpt.model)  # the CPU's faster weight layout for one-token steps
    prompt_ids = ckpt.tokenizer.encode(args.prompt)
    if not prompt_ids:
        raise ValueError("--prompt must not be empty (it gives the model a first token)")
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
    from .training import TrainConfig, Trainer

    ckpt = _load(args.checkpoint, args.device)
    corpus = args.corpus or ckpt.extra.get("corpus")
    if corpus is None:
        raise ValueError("the checkpoint does not record its corpus; pass --corpus")
    val_fraction = args.val_fraction or ckpt.extra.get("val_fraction", 0.1)
    _, val_ids = _encode_corpus(ckpt.tokenizer, corpus, val_fraction)
    tc = TrainConfig(batch_size=args.batch_size, device=str(next(ckpt.model.parameters()).device),
                     progress=False)
    result = Trainer(ckpt.model, val_ids, val_ids, tc).evaluate()
    T = ckpt.config.max_seq_len
    return {"command": "evaluate", "checkpoint": args.checkpoint, "corpus": corpus,
            "val_tokens": len(val_ids), "windows": (len(val_ids) - 1) // T, "block_size": T,
            **result, "bits_per_token": result["val_loss"] / math.log(2)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        result = {"train": cmd_train, "generate": cmd_generate, "evaluate": cmd_evaluate}[args.command](args)
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if result:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
