"""Training quality at a fixed budget: nanoGPT's CPU recipe, beaten with what the course teaches.

The budget is the well-known minimal GPT's CPU recipe: 2000 optimizer steps x batch 12 x 64
tokens = 1,536,000 training tokens, a model of at most 0.81M parameters, character-level
tokens, validation = the last 10% of the text. We report the loss over the WHOLE validation split
(the mean over every non-overlapping 64-token window), the parameter count, wall time and
training tokens/s, and the machine load (``os.getloadavg``) next to the speed, since other
processes sharing the cores deflate it.

``--recipe baseline`` (or ``--baseline``) trains the baseline-like configuration in this package (nanoGPT's
``train_shakespeare_char`` CPU settings: 4 layers, 4 heads, d_model 128, block 64, LayerNorm
without bias, learned positions, GELU, lr 1e-3 -> 1e-4 with 100 warmup steps, AdamW betas
(0.9, 0.99), weight decay 0.1, clipping 1.0, no dropout). The default recipe changes only what
the course teaches: RoPE, RMSNorm, SwiGLU, no bias, a higher peak learning rate with warmup and
cosine decay to ~0, with bf16 matrix products. ``--recipe record`` adds Muon, QK-norm, value
embeddings, an untied output layer and canon layers (the records page of the book). See benchmarks/README.md
for the choices and the measured numbers.

Run:  python benchmarks/train_budget.py --corpus /work/shared/data/tinyshakespeare.txt [--recipe baseline]
      python benchmarks/train_budget.py --corpus python-docs --compare   # ours and the baseline, interleaved
      python benchmarks/train_budget.py --corpus tinyshakespeare --recipe record --compare --seeds 3
Prints progress, then one JSON line (the last line): per recipe, the loss of each seed, the mean
and the sample standard deviation.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import time

import torch
from record import save_result  # benchmarks/record.py (the script's folder is on sys.path)

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.__main__ import nonneg_int, positive_int
from fundamentallm.data import load_corpus, train_val_split
from fundamentallm.recipes import BUDGET, RECIPES
from fundamentallm.tokenizers import CharacterTokenizer
from fundamentallm.training import TrainConfig, Trainer

# The budget and the recipes live in the package (fundamentallm/recipes.py), where the command
# line's `train --recipe NAME` reads them too.
STEPS, BATCH, BLOCK = BUDGET["steps"], BUDGET["batch_size"], BUDGET["block_size"]  # 1,536,000 tokens
MAX_PARAMS = BUDGET["max_params"]


def parse_overrides(items: list[str]) -> tuple[dict, dict]:
    """``key=value`` pairs -> (model overrides, train overrides), by field name."""
    model_fields = set(TransformerConfig.__dataclass_fields__)
    train_fields = set(TrainConfig.__dataclass_fields__)
    model, train = {}, {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key or not raw:
            raise SystemExit(f"--set {item!r}: expected FIELD=VALUE, e.g. --set lr=1e-3")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        if key in model_fields:
            model[key] = value
        elif key in train_fields:
            train[key] = value
        else:
            raise SystemExit(f"--set {item!r}: unknown field {key!r}")
    return model, train


def build_trainer(recipe_name: str, seed: int, vocab_size: int, train_ids, val_ids, args,
                  model_over: dict, train_over: dict) -> Trainer:
    recipe = RECIPES[recipe_name]
    torch.manual_seed(seed)
    try:
        config = TransformerConfig(**{"vocab_size": vocab_size, "max_seq_len": BLOCK, "dropout": 0.0,
                                      **recipe["model"], **model_over})
    except (TypeError, ValueError) as err:
        raise SystemExit(f"--set: {err}") from None
    model = Transformer(config)
    params = model.num_parameters()
    if params > MAX_PARAMS:
        raise SystemExit(f"{recipe_name}: {params} parameters exceed the budget's {MAX_PARAMS}")
    train = {**recipe["train"], **train_over}
    if "warmup_steps" not in train_over:  # a quick trial shorter than the warmup warms up throughout
        train["warmup_steps"] = min(train["warmup_steps"], args.steps)
    try:
        train_config = TrainConfig(**{**dict(max_steps=args.steps, batch_size=BATCH, block_size=BLOCK,
                                             eval_interval=0, eval_batch_size=256, progress=False,
                                             device="cpu", seed=seed, log_interval=1), **train})
    except (TypeError, ValueError) as err:
        raise SystemExit(f"--set or --steps: {err}") from None
    print(f"{recipe_name}: params={params}\n  model: {config}\n  train: {train_config}", flush=True)
    return Trainer(model, train_ids, val_ids, config=train_config)


def cpu_has_bf16() -> bool:
    """Whether the CPU multiplies bf16 matrices natively (AVX512-BF16 or AMX); without it, the
    bf16 recipes still run, but slower than in float32 (Linux only; False where unknown)."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def train_seed(names: list[str], seed: int, vocab_size: int, train_ids, val_ids, args,
               model_over: dict, train_over: dict) -> dict:
    """Train the recipes ``names`` with one seed, interleaved in chunks of 100 steps (so that
    their speeds are measured under the same machine load); return each one's result."""
    # --set applies to the first recipe named.
    trainers = {name: build_trainer(name, seed, vocab_size, train_ids, val_ids, args,
                                    model_over if name == names[0] else {},
                                    train_over if name == names[0] else {})
                for name in names}
    chunk = 100 if len(names) > 1 else 250
    while any(t.step < args.steps for t in trainers.values()):
        for name, trainer in trainers.items():
            trainer.fit(steps=min(chunk, args.steps - trainer.step))
            recent = trainer.history["train_loss"][-chunk:]
            print(f"seed {seed} {name:8s} step {trainer.step:5d}  train_loss {sum(recent) / len(recent):.4f}  "
                  f"lr {trainer.history['lr'][-1]:.2e}  "
                  f"{trainer.tokens_seen / trainer.elapsed:,.0f} tok/s  load {os.getloadavg()[0]:.2f}",
                  flush=True)
    runs = {}
    for name, trainer in trainers.items():
        t_eval = time.perf_counter()
        val = trainer.evaluate()
        eval_s = time.perf_counter() - t_eval
        runs[name] = {"val_loss": round(val["val_loss"], 4), "params": trainer.model.num_parameters(),
                      "train_tokens": trainer.tokens_seen, "steps": trainer.step,
                      "tokens_per_s": round(trainer.tokens_seen / trainer.elapsed),
                      "train_s": round(trainer.elapsed, 1), "eval_s": round(eval_s, 1),
                      "time_s": round(trainer.elapsed + eval_s, 1)}
        print(f"seed {seed} {name:8s} val_loss {runs[name]['val_loss']:.4f}", flush=True)
    return runs


def profile(names: list[str], steps: int, vocab_size: int, train_ids, val_ids, args,
            model_over: dict, train_over: dict) -> dict:
    """Where a step's time goes: ``torch.profiler``'s table of ``steps`` steps of each recipe
    (after 10 warm-up steps), sorted by the time spent in each operator itself."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    ms_per_step = {}
    for name in names:
        trainer = build_trainer(name, args.seed, vocab_size, train_ids, val_ids, args,
                                model_over if name == names[0] else {}, train_over if name == names[0] else {})
        trainer.fit(steps=10)
        start = trainer.elapsed
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.fit(steps=steps)
        ms_per_step[name] = round((trainer.elapsed - start) / steps * 1000, 2)
        print(f"{name}: {ms_per_step[name]} ms per step under the profiler")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15), flush=True)
    return ms_per_step


def summarise(per_seed: list[dict], name: str) -> dict:
    """One recipe over the seeds: lists per seed, and the mean and sample sd of the loss."""
    runs = [r[name] for r in per_seed]
    losses = [r["val_loss"] for r in runs]
    out = {key: [r[key] for r in runs] for key in ("val_loss", "tokens_per_s", "train_s", "eval_s", "time_s")}
    out.update(mean=round(statistics.fmean(losses), 4),
               sd=round(statistics.stdev(losses), 4) if len(losses) > 1 else None,
               params=runs[0]["params"], train_tokens=runs[0]["train_tokens"], steps=runs[0]["steps"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="python-docs", help="'python-docs', 'tinyshakespeare' or a path")
    parser.add_argument("--recipe", nargs="+", default=["ours"], choices=list(RECIPES),
                        help="the recipe(s) to train: 'ours' (the course's, AdamW), 'record' (Muon and "
                             "the speedrun's ingredients) or 'baseline' (nanoGPT's CPU recipe)")
    parser.add_argument("--baseline", action="store_true", help="the same as --recipe baseline")
    parser.add_argument("--compare", action="store_true",
                        help="also train the baseline, alternating every 100 steps with the other "
                             "recipe(s), so that all speeds are measured under the same machine load")
    parser.add_argument("--seeds", type=positive_int, default=1,
                        help="train with seeds SEED, SEED+1, ... and report each, the mean and the sd")
    parser.add_argument("--profile", type=positive_int, default=None, metavar="STEPS",
                        help="instead of training to the budget, profile STEPS steps of each recipe and "
                             "print where the time goes")
    parser.add_argument("--steps", type=positive_int, default=STEPS, help="change only for quick trials")
    parser.add_argument("--seed", type=nonneg_int, default=BUDGET["seed"])
    parser.add_argument("--threads", type=positive_int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--save", default=None, metavar="PATH",
                        help="also write the JSON result to PATH (e.g. benchmarks/results/NAME.json)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="override a TransformerConfig or TrainConfig field of the (first) recipe, "
                             "for sweeps and ablations")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    names = list(dict.fromkeys(["baseline"] if args.baseline else args.recipe))
    if args.baseline and args.compare:
        raise SystemExit("--compare already trains the baseline; drop --baseline")
    if args.compare and "baseline" not in names:
        names.append("baseline")
    if args.compare and len(names) < 2:
        raise SystemExit("--compare trains the baseline next to another recipe; name one with --recipe")
    model_over, train_over = parse_overrides(args.set)

    load_start = os.getloadavg()
    t_start = time.perf_counter()
    text = load_corpus(args.corpus)
    tokenizer = CharacterTokenizer.from_text(text)
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    train_ids, val_ids = train_val_split(ids, BUDGET["val_fraction"])
    print(f"corpus={args.corpus} chars={len(text)} vocab={tokenizer.vocab_size} "
          f"train_tokens={len(train_ids)} val_tokens={len(val_ids)} "
          f"threads={torch.get_num_threads()} load={load_start}", flush=True)
    if args.profile:
        ms = profile(names, args.profile, tokenizer.vocab_size, train_ids, val_ids, args, model_over, train_over)
        print(json.dumps({"benchmark": "train_budget_profile", "corpus": args.corpus, "ms_per_step": ms,
                          "threads": torch.get_num_threads(), "cpu_bf16": cpu_has_bf16(),
                          "overrides": {**model_over, **train_over}, "torch": torch.__version__}))
        return
    seeds = [args.seed + i for i in range(args.seeds)]
    per_seed = [train_seed(names, seed, tokenizer.vocab_size, train_ids, val_ids, args, model_over, train_over)
                for seed in seeds]
    out = {"benchmark": "train_budget", "corpus": args.corpus, "val_windows": (len(val_ids) - 1) // BLOCK,
           "recipes": names, "seeds": seeds}
    for name in names:
        out[name] = summarise(per_seed, name)
    if "baseline" in names:
        out["speed_ratio"] = {name: [round(r[name]["tokens_per_s"] / r["baseline"]["tokens_per_s"], 3)
                                     for r in per_seed] for name in names if name != "baseline"}
    out.update({"wall_s": round(time.perf_counter() - t_start, 1), "threads": torch.get_num_threads(),
                "cpu_bf16": cpu_has_bf16(),
                "loadavg_start": [round(x, 2) for x in load_start],
                "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                "overrides": {**model_over, **train_over}, "torch": torch.__version__})
    print(json.dumps(out))
    if args.save:
        save_result(out, args.save)


if __name__ == "__main__":
    main()
