"""Post-training, measured: base -> SFT, LoRA, and DPO / GRPO from an under-trained SFT model.

The recipe of chapter 15, longer, with several seeds. The task is written the way small
transformers learn addition (Lee et al. 2024): the first operand zero-padded to two digits and
the answer least-significant digit first (``07+8`` -> ``51``). Per seed: pretrain a two-layer
decoder with untied embeddings on the noisy "web" corpus of additions (``--pretrain-steps``);
SFT for ``--sft-steps`` (full fine-tuning, the learning rate decaying linearly to 0) and the same
with LoRA (rank ``--lora-rank`` on every linear layer of the blocks, plus the output layer, which
must learn to write the new end token). The deliberately under-trained starting point of DPO and
GRPO is the SFT run's first snapshot (every 10 steps) that answers ``--short-accuracy`` of 200
training questions right (chosen on training questions, never on the held-out ones); GRPO draws
training questions with a carry ``--grpo-carry-weight`` times as often as the others. Every stage
is evaluated greedily on the held-out ``test`` (random) and ``hard`` (a carry in the units
column) problems.

Run:  OMP_NUM_THREADS=1 python benchmarks/posttrain.py [--seeds 3] [--jobs 1] [--save PATH]
Prints a table (accuracy mean ± sd over seeds, tokens/s, seconds per stage) and one JSON line
last. Seeds run in ``--jobs`` processes at once (one torch thread each).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time

STAGES = ("base", "SFT", "LoRA", "SFT (short)", "DPO", "GRPO")
# The recipe's numbers that are not command-line options, defined once here, used below and
# stored in the result ("fixed"), so that a chapter can print what it states about the run.
FIXED = {"d_model": 128, "num_heads": 4, "pretrain_lr": 3e-3, "sft_lr": 3e-3, "sft_batch": 128,
         "short_questions": 200, "snapshot_every": 10, "lora_lr": 1e-2, "dpo_questions": 300,
         "dpo_samples": 4, "dpo_batch": 32, "dpo_lr": 3e-5, "dpo_beta": 0.5, "grpo_questions": 32,
         "grpo_group": 8, "grpo_lr": 1e-4, "grpo_kl": 0.04}


def run_seed(seed: int, args: argparse.Namespace) -> dict:
    import torch

    from fundamentallm import CharacterTokenizer, Transformer, TransformerConfig, lora, posttrain
    from fundamentallm.training import TrainConfig, Trainer
    from fundamentallm.utils import set_seed

    torch.set_num_threads(1)
    set_seed(seed)
    splits = posttrain.addition_splits(seed=0, pad=True, reverse=True)
    verifier = functools.partial(posttrain.digit_verifier, reverse=True)
    web = posttrain.web_corpus(splits["train"] * 4, seed=seed)
    tokenizer = CharacterTokenizer(set(web) | {posttrain.USER, posttrain.ASSISTANT, posttrain.END})
    template = posttrain.ChatTemplate(tokenizer)
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=FIXED["d_model"], num_heads=FIXED["num_heads"],
                               num_layers=args.layers,
                               max_seq_len=16, pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False,
                               tie_weights=False)
    out: dict = {}

    def record(name, model, seconds, tokens):
        out[name] = {split: posttrain.evaluate(model, template, splits[split], verifier=verifier)["accuracy"]
                     for split in ("test", "hard")}
        out[name].update(seconds=seconds, tokens_per_s=tokens / max(seconds, 1e-9))

    base = Transformer(config)
    start = time.perf_counter()
    trainer = Trainer(base, torch.tensor(tokenizer.encode(web)), None,
                      TrainConfig(lr=FIXED["pretrain_lr"], max_steps=args.pretrain_steps, warmup_steps=min(20, args.pretrain_steps // 5), batch_size=32, block_size=16,
                                  weight_decay=0.0, device="cpu", progress=False, seed=seed))
    trainer.fit()
    record("base", base, time.perf_counter() - start, trainer.tokens_seen)

    sft = copy.deepcopy(base)
    optimizer = posttrain.make_optimizer(sft, FIXED["sft_lr"])
    every = FIXED["snapshot_every"]
    start = time.perf_counter()
    tokens, short, short_seconds, short_tokens = 0, None, 0.0, 0
    for first in range(0, args.sft_steps, every):  # a snapshot every `every` steps until one is "short"
        h = posttrain.train_sft(sft, template, splits["train"], min(first + every, args.sft_steps),
                                FIXED["sft_batch"], seed=seed,
                                optimizer=optimizer, start_step=first, decay_steps=args.sft_steps)
        tokens += sum(h["tokens"])
        if short is None and posttrain.evaluate(sft, template, splits["train"][:FIXED["short_questions"]],
                                                verifier=verifier)["accuracy"] >= args.short_accuracy:
            short, short_seconds, short_tokens = copy.deepcopy(sft), time.perf_counter() - start, tokens
            out["short_steps"] = min(first + every, args.sft_steps)
    record("SFT", sft, time.perf_counter() - start, tokens)
    if short is None:
        raise SystemExit(f"seed {seed}: SFT never answered {args.short_accuracy:.0%} of the training questions")
    record("SFT (short)", short, short_seconds, short_tokens)

    adapted = copy.deepcopy(base)
    lora.apply_lora(adapted, ["attn.qkv", "attn.out_proj", "ff.up", "ff.gate", "ff.down"], rank=args.lora_rank,
                    alpha=2 * args.lora_rank)
    adapted.lm_head.weight.requires_grad_(True)  # the new end token's output row must be learned
    out["lora_trainable_fraction"] = adapted.num_parameters(trainable_only=True) / base.num_parameters()
    start = time.perf_counter()
    h = posttrain.train_sft(adapted, template, splits["train"], args.sft_steps, FIXED["sft_batch"],
                            lr=FIXED["lora_lr"], seed=seed,
                            decay_steps=args.sft_steps)
    record("LoRA", lora.merge_lora(adapted), time.perf_counter() - start, sum(h["tokens"]))

    questions = [q for q, _ in splits["train"]]
    policy = copy.deepcopy(short)
    start = time.perf_counter()
    pairs = posttrain.preference_pairs(short, template, questions[:FIXED["dpo_questions"]],
                                       num_samples=FIXED["dpo_samples"], seed=seed, verifier=verifier)
    h = posttrain.train_dpo(policy, short, template, pairs, args.dpo_steps, FIXED["dpo_batch"], lr=FIXED["dpo_lr"],
                            beta=FIXED["dpo_beta"], seed=seed)
    record("DPO", policy, time.perf_counter() - start, sum(h["tokens"]))
    out["dpo_pairs"] = len(pairs)

    policy = copy.deepcopy(short)
    start = time.perf_counter()
    # questions with a carry, the part of the skill the under-trained model lacks most, drawn more often
    questions = questions + [q for q in questions if posttrain.carries(*map(int, q.split("+")))] * (args.grpo_carry_weight - 1)
    h = posttrain.train_grpo(policy, short, template, questions, args.grpo_steps, FIXED["grpo_questions"],
                             FIXED["grpo_group"], lr=FIXED["grpo_lr"], kl_coef=FIXED["grpo_kl"],
                             seed=seed, reward_fn=verifier)
    record("GRPO", policy, time.perf_counter() - start, sum(h["tokens"]))
    out["grpo_reward_first_last"] = [h["reward"][0], h["reward"][-1]]
    return out


def _mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at once, one process each")
    parser.add_argument("--layers", type=int, default=2, help="decoder blocks")
    parser.add_argument("--pretrain-steps", type=int, default=1200)
    parser.add_argument("--short-accuracy", type=float, default=0.3,
                        help="the under-trained model: the first SFT snapshot (every 10 steps) that answers this "
                             "share of 200 training questions right")
    parser.add_argument("--sft-steps", type=int, default=500)
    parser.add_argument("--lora-rank", type=int, default=3)
    parser.add_argument("--dpo-steps", type=int, default=30)
    parser.add_argument("--grpo-steps", type=int, default=150)
    parser.add_argument("--grpo-carry-weight", type=int, default=2,
                        help="GRPO draws training questions with a carry this many times as often (1: uniform)")
    parser.add_argument("--save", default=None, help="also write the JSON to this file")
    parser.add_argument("--note", default="", help="what else ran on the machine")
    args = parser.parse_args(argv)
    for name in ("seeds", "jobs", "layers", "pretrain_steps", "sft_steps", "lora_rank", "dpo_steps",
                 "grpo_steps", "grpo_carry_weight"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1")
    if not 0 < args.short_accuracy < 1:
        parser.error(f"--short-accuracy={args.short_accuracy} must be in (0, 1)")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    load_start = os.getloadavg()
    start = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            runs = pool.starmap(run_seed, [(seed, args) for seed in range(args.seeds)])
    else:
        runs = [run_seed(seed, args) for seed in range(args.seeds)]
    stages = {}
    for name in STAGES:
        test, hard = _mean_sd([r[name]["test"] for r in runs]), _mean_sd([r[name]["hard"] for r in runs])
        stages[name] = {"test_mean": test[0], "test_sd": test[1], "hard_mean": hard[0], "hard_sd": hard[1],
                        "test": [r[name]["test"] for r in runs], "hard": [r[name]["hard"] for r in runs],
                        "tokens_per_s": statistics.mean(r[name]["tokens_per_s"] for r in runs),
                        "seconds": statistics.mean(r[name]["seconds"] for r in runs)}
    verdicts = []
    for name, ref in (("SFT", "base"), ("LoRA", "SFT"), ("DPO", "SFT (short)"), ("GRPO", "SFT (short)")):
        for split in ("test", "hard"):
            diffs = [r[name][split] - r[ref][split] for r in runs]
            d, sd = _mean_sd(diffs)
            verdict = ("helped" if d > 2 * sd and d > 0 else "hurt" if d < -2 * sd and d < 0 else
                       "no change beyond twice the spread")
            verdicts.append(f"{name} vs {ref}, {split}: {100 * d:+.1f} points (sd {100 * sd:.1f} over "
                            f"{len(runs)} seeds): {verdict}")
    lora_fraction = statistics.mean(r["lora_trainable_fraction"] for r in runs)
    verdicts.append(f"LoRA trains {lora_fraction:.1%} of the parameters")
    print(f"{'stage':13} {'test accuracy':>18} {'hard accuracy':>18} {'tokens/s':>10} {'seconds':>8}")
    for name, row in stages.items():
        print(f"{name:13} {row['test_mean']:8.1%} ± {row['test_sd']:5.1%}  {row['hard_mean']:8.1%} ± "
              f"{row['hard_sd']:5.1%} {row['tokens_per_s']:10.0f} {row['seconds']:8.1f}")
    for line in verdicts:
        print("-", line)
    import torch

    machine = (f"{platform.machine()} {os.cpu_count()} cores, load average {load_start[0]:.1f} at the start and "
               f"{os.getloadavg()[0]:.1f} at the end; {args.jobs} seed(s) at once, one torch thread each. "
               + (args.note or ""))
    result = {"benchmark": "posttrain", "stages": stages, "verdicts": verdicts, "seeds": args.seeds,
              "settings": {k: v for k, v in vars(args).items() if k not in ("save", "note")}, "fixed": FIXED,
              "per_seed": runs, "total_s": time.perf_counter() - start, "loadavg_start": load_start,
              "loadavg_end": os.getloadavg(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
              "machine": machine}
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
