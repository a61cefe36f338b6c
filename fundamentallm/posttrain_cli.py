"""``python -m fundamentallm sft | dpo | grpo``: post-training from a checkpoint (chapter 15).

The task is the chapter's: two-digit plus one-digit additions in the chat template, checked by
:func:`fundamentallm.posttrain.digit_verifier`; ``--reversed-answers`` writes them as the chapter
does (``07+8`` answered ``51``: zero-padded, least-significant digit first), the format a small
model learns. ``sft`` starts from any checkpoint with a
character tokenizer (the template's reserved symbols are added to it when missing; their
embedding rows are new); ``dpo`` and ``grpo`` start from an ``sft`` checkpoint, which is also
their frozen reference. Like ``train``: ``--out`` is checked before any work and never replaced
without ``--force``; a checkpoint every ``--save-interval`` steps and at the end; the first Ctrl-C
stops at the end of the step, saves and exits 130; ``--resume`` continues bit for bit (not for
LoRA runs, whose checkpoint holds the merged model); a non-finite loss exits 1.
"""

from __future__ import annotations

import argparse
import sys
import time

from . import cli
from .cli import CommandError
from .run import RunGuard, check_out, load_run, saved_run

COMMANDS = ("sft", "dpo", "grpo")
# The flags that define a run: --resume refuses to change them.
RUN_FLAGS = {"sft": ("checkpoint", "steps", "batch_size", "lr", "seed", "lora_rank", "lora_alpha", "no_mask",
                     "reversed_answers"),
             "dpo": ("checkpoint", "steps", "batch_size", "lr", "seed", "beta", "questions", "samples",
                     "reversed_answers"),
             "grpo": ("checkpoint", "steps", "batch_size", "lr", "seed", "group_size", "kl_coef", "clip_eps",
                      "inner_steps", "temperature", "reversed_answers")}
LORA_TARGETS = ["attn.qkv", "attn.out_proj", "ff.up", "ff.gate", "ff.down"]  # those the model has


def add_parsers(sub) -> None:
    """Add the three subcommands to ``sub`` (the command line's subparsers)."""
    types, formatter = cli, cli.Formatter
    defaults = {"sft": (300, 128, 3e-3), "dpo": (60, 32, 3e-4), "grpo": (60, 16, 1e-3)}
    helps = {"sft": "supervised fine-tuning in the chat template (full or LoRA)",
             "dpo": "direct preference optimisation on the SFT model's own answers",
             "grpo": "RL with the digit verifier (group-relative advantages, clip, KL)"}
    for name in COMMANDS:
        steps, batch, lr = defaults[name]
        p = sub.add_parser(name, help=helps[name], formatter_class=formatter, description=__doc__.split("\n\n")[1])
        p.add_argument("--checkpoint", default="runs/latest" if name == "sft" else "runs/sft",
                       help="the model to start from" + ("" if name == "sft" else " (and the frozen reference)"))
        p.add_argument("--out", default=f"runs/{name}", help="checkpoint directory")
        p.add_argument("--steps", type=types.positive_int, default=steps, help="optimizer steps")
        p.add_argument("--batch-size", type=types.positive_int, default=batch,
                       help="questions per step" + (" (each answered --group-size times)" if name == "grpo" else ""))
        p.add_argument("--lr", type=types.positive_float, default=lr, help="learning rate (AdamW)")
        if name == "sft":
            p.add_argument("--lora-rank", type=types.nonneg_int, default=0, help="0: full fine-tuning; r: LoRA adapters of rank r")
            p.add_argument("--lora-alpha", type=types.positive_float, default=8.0, help="LoRA scale alpha (the update is alpha/r B A)")
            p.add_argument("--no-mask", action="store_true", help="train on the question's tokens too")
        if name == "dpo":
            p.add_argument("--beta", type=types.positive_float, default=0.1, help="DPO's beta (> 0)")
            p.add_argument("--questions", type=types.positive_int, default=300, help="training questions to sample pairs from")
            p.add_argument("--samples", type=types.positive_int, default=4, help="sampled answers per question")
        if name == "grpo":
            p.add_argument("--group-size", type=types.positive_int, default=8, help="answers per question (>= 2)")
            p.add_argument("--kl-coef", type=types.nonneg_float,
                           default=0.04, help="weight of the KL term (0: none)")
            p.add_argument("--clip-eps", type=types.positive_float, default=0.2, help="ratio clip epsilon")
            p.add_argument("--inner-steps", type=types.positive_int, default=2, help="updates per sampled batch")
            p.add_argument("--temperature", type=types.positive_float, default=1.0, help="sampling temperature")
        p.add_argument("--reversed-answers", action="store_true",
                       help="chapter 15's format: the first number zero-padded (07+8), the answer least-significant "
                            "digit first (51); dpo and grpo need the same choice as the sft run they start from")
        p.add_argument("--save-interval", type=types.nonneg_int, default=50, help="save every N steps (0: only at the end)")
        p.add_argument("--resume", action="store_true", help="continue the run saved in --out")
        p.add_argument("--force", action="store_true", help="replace a different run saved in --out")
        p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
        p.add_argument("--seed", type=types.nonneg_int, default=0, help="random seed")
        p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def cmd_post(args: argparse.Namespace) -> dict:
    """Run ``sft``, ``dpo`` or ``grpo`` with parsed ``args`` (``args.given``: the flags the user
    gave); returns the final metrics."""
    import copy
    import functools

    from tqdm import tqdm

    from . import lora, posttrain
    from .checkpoint import load_checkpoint, save_checkpoint
    from .utils import set_seed

    saved = check_out(args, args.command, RUN_FLAGS[args.command])
    if saved is not None and saved["args"].get("lora_rank"):
        raise CommandError(f"--resume: {args.out} holds a LoRA run's merged model, which cannot continue "
                           f"training its adapters; start again with --force")
    if saved is not None:
        for k, v in saved["args"].items():
            setattr(args, k, v)
    set_seed(args.seed)
    ckpt = load_run(args.checkpoint, args.device)
    model, tokenizer = ckpt.model, ckpt.tokenizer
    try:
        template = posttrain.ChatTemplate(tokenizer)
    except ValueError:
        if args.command != "sft":
            raise CommandError(f"{args.checkpoint}: its tokenizer lacks the chat template's reserved symbols "
                               f"{posttrain.USER + posttrain.ASSISTANT + posttrain.END!r}; run `sft` on it first") from None
        model, tokenizer = posttrain.add_reserved_tokens(model, tokenizer)
        template = posttrain.ChatTemplate(tokenizer)
        print(f"note: added the reserved symbols {template.symbols} to the tokenizer (new, untrained embedding rows)",
              file=sys.stderr)
    if args.command != "sft":
        sft_run = saved_run(args.checkpoint) or {}
        was = sft_run.get("args", {}).get("reversed_answers")
        if was is not None and was != args.reversed_answers:
            raise CommandError(f"{args.checkpoint} was trained with --reversed-answers={was}: pass "
                               f"{'--reversed-answers' if was else 'no --reversed-answers'} to {args.command} too")
    rev = args.reversed_answers
    splits = posttrain.addition_splits(pad=rev, reverse=rev)
    verifier = functools.partial(posttrain.digit_verifier, reverse=rev)
    missing = sorted({c for q, a in splits["train"] for c in q + a if c not in tokenizer.stoi})
    if missing:
        raise CommandError(f"{args.checkpoint}: its tokenizer cannot write the task's characters {missing}")
    if model.config.max_seq_len < 12:
        raise CommandError(f"{args.checkpoint}: max_seq_len={model.config.max_seq_len} is too short for a question "
                           f"and its answer in the chat template (12 tokens)")
    reference = None
    if args.command in ("dpo", "grpo"):
        reference = copy.deepcopy(model).eval()
        for p in reference.parameters():
            p.requires_grad_(False)
    if args.command == "sft" and args.lora_rank:
        names = [n for n, _ in model.named_modules()]
        targets = [t for t in LORA_TARGETS if any(n.endswith("." + t) for n in names)]  # e.g. no gate without SwiGLU
        lora.apply_lora(model, targets, rank=args.lora_rank, alpha=args.lora_alpha)
    optimizer = posttrain.make_optimizer(model, args.lr)
    start_step = 0
    if saved is not None:
        resumed = load_checkpoint(args.out, model=model, optimizer=optimizer)
        start_step = resumed.step or saved.get("step_done", 0)
    before = {s: posttrain.evaluate(model, template, splits[s], verifier=verifier)["accuracy"] for s in ("test", "hard")}
    run_args = {k: getattr(args, k) for k in RUN_FLAGS[args.command]}
    tokens = {"seen": 0}

    def save(step: int, complete: bool, metrics: dict | None = None) -> None:
        out_model = lora.merged_copy(model) if args.command == "sft" and args.lora_rank else model
        save_checkpoint(args.out, out_model, tokenizer=tokenizer, step=step,
                        optimizer=None if args.command == "sft" and args.lora_rank else optimizer,
                        extra={"command": args.command, "args": run_args, "step_done": step, "complete": complete,
                               "metrics": metrics or {}})

    guard = RunGuard(args, args.command, args.steps, save, last_step=start_step if saved else None)
    bar = tqdm(total=args.steps, initial=start_step, disable=args.no_progress, desc=args.command, file=sys.stderr)

    def on_step(step: int, metrics: dict) -> None:
        tokens["seen"] += metrics.get("tokens", 0)
        bar.update(1)
        bar.set_postfix({k: round(v, 4) for k, v in metrics.items() if k in ("loss", "margin", "reward", "kl")})
        guard.after_step(step)

    common = dict(steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed, optimizer=optimizer,
                  start_step=start_step, on_step=on_step)
    start = time.perf_counter()
    with guard:
        try:
            if args.command == "sft":
                posttrain.train_sft(model, template, splits["train"], mask_prompt=not args.no_mask, **common)
            elif args.command == "dpo":
                questions = [q for q, _ in splits["train"]][:args.questions]
                pairs = posttrain.preference_pairs(reference, template, questions, args.samples, seed=args.seed,
                                                   verifier=verifier)
                if not pairs:
                    raise CommandError("no question had both a right and a wrong sampled answer: nothing to prefer "
                                       "(pass more --questions or --samples)")
                posttrain.train_dpo(model, reference, template, pairs, beta=args.beta, **common)
            else:
                posttrain.train_grpo(model, reference, template, [q for q, _ in splits["train"]],
                                     group_size=args.group_size, kl_coef=args.kl_coef, clip_eps=args.clip_eps,
                                     inner_steps=args.inner_steps, temperature=args.temperature, reward_fn=verifier,
                                     **common)
        finally:
            bar.close()
    wall = time.perf_counter() - start
    after = {s: posttrain.evaluate(model, template, splits[s], verifier=verifier)["accuracy"] for s in ("test", "hard")}
    metrics = {"command": args.command, "checkpoint": args.checkpoint, "out": args.out, "steps": args.steps,
               "test_accuracy_before": before["test"], "hard_accuracy_before": before["hard"],
               "test_accuracy": after["test"], "hard_accuracy": after["hard"],
               "trainable_parameters": model.num_parameters(trainable_only=True),
               "tokens_per_s": round(tokens["seen"] / max(wall, 1e-9), 1), "time_s": round(wall, 2),
               "resumed_from": saved.get("step_done") if saved else None}
    guard.save(args.steps, complete=True, metrics=metrics)
    return metrics
