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
      python benchmarks/train_budget.py --corpus tinyshakespeare --recipe record record+sampling=random \
          --compare --seeds 5   # a candidate against the recipe it changes: the rule for a new record
Prints progress, then one JSON line (the last line): per recipe, the loss of each seed, the mean
and the sample standard deviation, and the speedrun figure ``time_to_target_s``: the training
time (evaluation not counted) until the loss on the whole validation split, evaluated every
``--eval-every`` steps, first reaches ``--target`` (1.90 by default, about nanoGPT's final loss
under this budget). The number of threads is chosen by the benchmark (``--threads auto``): for
each recipe once before training (the faster of 1..cores in a short timed trial) and again at
the start of every chunk of 100 steps, since on a shared machine two threads can become many
times slower than one within a run (not for a compiled recipe, whose kernels keep the count
they were compiled at); the thread count changes no number of the run. A recipe with
``compile=True`` (the record) is compiled before the clock starts, as in the speedruns; the
seconds of each recipe's first compilation in the process (later models of the same recipe reuse
the compiled code) are reported as ``compile_s``, and ``train_time_ratio_with_compile`` adds them
to every seed's training time, as if each seed ran in a fresh process.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import time

import torch
from record import save_result  # benchmarks/record.py (the script's folder is on sys.path)

from fundamentallm import TransformerConfig
from fundamentallm.cli import nonneg_int, positive_int
from fundamentallm.data import load_corpus, train_val_split
from fundamentallm.recipes import BUDGET, configs
from fundamentallm.speedrun import (  # the rule's run, shared with `python -m fundamentallm record try`
    build_trainer,
    choose_threads,
    cpu_has_bf16,
    cpu_name,
    parse_overrides,
    recipe_variant,
    run_compare,
)
from fundamentallm.tokenizers import CharacterTokenizer
from fundamentallm.training import Trainer

# The budget and the recipes live in the package (fundamentallm/recipes.py), where the command
# line's `train --recipe NAME` reads them too.
STEPS, BATCH, BLOCK = BUDGET["steps"], BUDGET["batch_size"], BUDGET["block_size"]  # 1,536,000 tokens
MAX_PARAMS = BUDGET["max_params"]


def recipe_arg(name: str) -> str:
    """``--recipe``'s type: a recipe or a variant (``speedrun.recipe_variant``), checked before anything trains."""
    try:
        return recipe_variant(name)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def compiles(name: str, train_over: dict) -> bool:
    """Whether recipe (or variant) ``name`` trains with torch.compile, after ``--set``'s overrides."""
    base, *sets = name.split("+")
    return bool(configs(base, 2, train={**parse_overrides([x for x in sets if x])[1], **train_over})[1]
                .get("compile"))


def threads_arg(text: str):
    """``--threads``: ``auto`` or an integer >= 1."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is neither 'auto' nor an integer >= 1")
    return value


# What each ingredient of the record costs: the recipe with that one ingredient taken out.
INGREDIENTS = {
    "canon layers": {"canon": None},
    "value embeddings": {"value_embeddings": False},
    "QK-norm": {"qk_norm": False},
    "untied output layer": {"tie_weights": True},
    "Muon (vs AdamW)": {"optimizer": "adamw"},
    "bf16 matrix products": {"mixed_precision": "off"},
    "torch.compile": {"compile": False},
}


def timed_phases(trainer: Trainer, steps: int) -> dict[str, float]:
    """Milliseconds per step spent in each phase of ``steps`` training steps (the trainer's own
    step, taken apart: the batch, forward, backward, clipping, the optimizer). The CPU runs each
    operation before the next begins, so a wall clock around each phase measures it."""
    model, c = trainer.model, trainer.config
    spent = dict.fromkeys(("batch", "forward", "backward", "clip", "optimizer"), 0.0)
    model.train()
    for _ in range(steps):
        t0 = time.perf_counter()
        x, y = trainer.train_source.sample(c.batch_size, trainer.generator)[:2]
        t1 = time.perf_counter()
        with trainer._kernels():
            with trainer._autocast():
                loss = trainer.forward_model(x, y)[1]
            t2 = time.perf_counter()
            loss.backward()
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c.grad_clip or float("inf"))
        t4 = time.perf_counter()
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        t5 = time.perf_counter()
        for key, dt in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            spent[key] += dt
    return {key: round(v / steps * 1000, 2) for key, v in spent.items()}


def profile(names: list[str], steps: int, vocab_size: int, train_ids, val_ids, args,
            model_over: dict, train_over: dict, threads: dict[str, int]) -> dict:
    """Where a step's time goes, for each recipe: ms per step by phase (forward, backward,
    optimizer...), ``torch.profiler``'s operator table of ``steps`` steps (after 10 warm-up steps;
    printed, and its top rows in the JSON), and for the record, what each ingredient costs: the
    time per step with that ingredient taken out (``INGREDIENTS``), timed in turn with the full
    recipe so that all see the same load."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    # the trainers run past --steps here (warm-up, phases, profile, ingredients): give them room
    args = argparse.Namespace(**{**vars(args), "steps": max(args.steps, 10 + 5 * steps)})
    model_fields = set(TransformerConfig.__dataclass_fields__)

    def trainer_for(name, extra=None):
        # --set applies to the first recipe named; an ingredient's removal (extra) on top of it
        first = name == names[0]
        extra = extra or {}
        m_over = {**(model_over if first else {}), **{k: v for k, v in extra.items() if k in model_fields}}
        t_over = {**(train_over if first else {}), **{k: v for k, v in extra.items() if k not in model_fields}}
        with contextlib.redirect_stdout(io.StringIO()):
            trainer = build_trainer(name, args.seed, vocab_size, train_ids, val_ids, args, m_over, t_over)
        trainer.fit(steps=10)
        return trainer

    out = {}
    for name in names:
        torch.set_num_threads(threads[name])
        trainer = trainer_for(name)
        phases = timed_phases(trainer, steps)
        start = trainer.elapsed
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            trainer.fit(steps=steps)
        events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        total = sum(e.self_cpu_time_total for e in events)
        table = [{"op": e.key, "self_ms_per_step": round(e.self_cpu_time_total / 1000 / steps, 3),
                  "share": round(e.self_cpu_time_total / total, 4), "calls_per_step": e.count / steps}
                 for e in events[:20]]
        out[name] = {"threads": threads[name], "ms_per_step": round(sum(phases.values()), 2),
                     "ms_per_step_profiled": round((trainer.elapsed - start) / steps * 1000, 2),
                     "phases_ms": phases, "ops": table,
                     "ops_per_step": sum(e.count for e in events if e.key.startswith("aten::")) / steps}
        print(f"{name}: {out[name]['ms_per_step']} ms per step ({threads[name]} thread(s)): {phases}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15), flush=True)
    if "record" in names:
        torch.set_num_threads(threads["record"])
        variants = {"full recipe": trainer_for("record")}
        variants.update({f"without {k}": trainer_for("record", v) for k, v in INGREDIENTS.items()})
        spent = dict.fromkeys(variants, 0.0)
        for _ in range(3):  # in turn, so that a change of load hits every variant alike
            for key, trainer in variants.items():
                start = trainer.elapsed
                trainer.fit(steps=steps)
                spent[key] += trainer.elapsed - start
        ms = {key: round(v / (3 * steps) * 1000, 2) for key, v in spent.items()}
        full = ms["full recipe"]
        out["record"]["ingredients_ms"] = {k: {"ms_per_step_without": ms[f"without {k}"],
                                               "cost_ms": round(full - ms[f"without {k}"], 2),
                                               "share": round((full - ms[f"without {k}"]) / full, 3)}
                                           for k in INGREDIENTS}
        print("record, ms per step:", ms, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="python-docs", help="'python-docs', 'tinyshakespeare' or a path")
    parser.add_argument("--recipe", nargs="+", action="extend", default=None, type=recipe_arg,
                        help="the recipe(s) to train: 'ours' (the course's, AdamW), 'record' (Muon and "
                             "the speedrun's ingredients) or 'baseline' (nanoGPT's CPU recipe), or a variant "
                             "NAME+FIELD=VALUE[+...] (e.g. record+sampling=random); default: ours")
    parser.add_argument("--baseline", action="store_true", help="the same as --recipe baseline")
    parser.add_argument("--compare", action="store_true",
                        help="also train the baseline, alternating every 100 steps with the other "
                             "recipe(s), so that all speeds are measured under the same machine load")
    parser.add_argument("--no-compile", action="store_true",
                        help="also train every recipe that uses torch.compile without it (NAME+compile=False), "
                             "in the same interleaved run: the row for a machine without a C++ compiler")
    parser.add_argument("--seeds", type=positive_int, default=1,
                        help="train with seeds SEED, SEED+1, ... and report each, the mean and the sd")
    parser.add_argument("--profile", type=positive_int, default=None, metavar="STEPS",
                        help="instead of training to the budget, profile STEPS steps of each recipe and "
                             "print where the time goes")
    parser.add_argument("--steps", type=positive_int, default=STEPS, help="change only for quick trials")
    parser.add_argument("--seed", type=nonneg_int, default=BUDGET["seed"])
    parser.add_argument("--threads", type=threads_arg, default="auto",
                        help="torch.set_num_threads for every recipe, or 'auto' (default): for each recipe "
                             "the fastest of 1..cores, timed before training")
    parser.add_argument("--target", type=float, default=1.90,
                        help="the speedrun's target: report the training time until the full validation "
                             "loss first reaches it (default 1.90, nanoGPT's loss under this budget)")
    parser.add_argument("--eval-every", type=nonneg_int, default=100, metavar="STEPS",
                        help="evaluate on the whole validation split every STEPS steps until the target "
                             "is reached (not timed; 0: only at the end)")
    parser.add_argument("--save", default=None, metavar="PATH",
                        help="also write the JSON result to PATH (e.g. fundamentallm/results/NAME.json)")
    parser.add_argument("--set", nargs="+", action="extend", default=[], metavar="FIELD=VALUE",
                        help="override a TransformerConfig or TrainConfig field of the (first) recipe, "
                             "for sweeps and ablations; several at once or the flag repeated")
    args = parser.parse_args()
    if not args.target > 0:
        raise SystemExit(f"--target {args.target}: must be a loss > 0")
    names = list(dict.fromkeys(["baseline"] if args.baseline else args.recipe or ["ours"]))
    if args.baseline and args.compare:
        raise SystemExit("--compare already trains the baseline; drop --baseline")
    if args.compare and "baseline" not in names:
        names.append("baseline")
    if args.compare and len(names) < 2:
        raise SystemExit("--compare trains the baseline next to another recipe; name one with --recipe")
    try:
        model_over, train_over = parse_overrides(args.set)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    if args.no_compile:
        compiled = [n for n in names if compiles(n, train_over)]
        if not compiled:
            raise SystemExit(f"--no-compile: none of {names} uses torch.compile")
        names += [f"{n}+compile=False" for n in compiled]
    if not args.profile:
        seeds = [args.seed + i for i in range(args.seeds)]
        try:
            out = run_compare(names, args.corpus, seeds, args, model_over, train_over)
        except ValueError as err:  # a --set that the model or the budget refuses
            raise SystemExit(str(err)) from None
        print(json.dumps(out))
        if args.save:
            save_result(out, args.save)
        return
    load_start = os.getloadavg()
    text = load_corpus(args.corpus)
    tokenizer = CharacterTokenizer.from_text(text)
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    train_ids, val_ids = train_val_split(ids, BUDGET["val_fraction"])
    print(f"corpus={args.corpus} chars={len(text)} vocab={tokenizer.vocab_size} "
          f"train_tokens={len(train_ids)} val_tokens={len(val_ids)} "
          f"load={load_start}", flush=True)
    if args.threads == "auto":
        threads = choose_threads(names, tokenizer.vocab_size, train_ids, val_ids, args, model_over, train_over)
    else:
        threads = dict.fromkeys(names, args.threads)
    prof = profile(names, args.profile, tokenizer.vocab_size, train_ids, val_ids, args, model_over,
                   train_over, threads)
    out = {"benchmark": "train_budget_profile", "corpus": args.corpus, "steps": args.profile,
           "ms_per_step": {name: prof[name]["ms_per_step"] for name in names}, "recipes": prof,
           "threads": threads, "cpu_bf16": cpu_has_bf16(), "cpu": cpu_name(),
           "loadavg": [round(x, 2) for x in os.getloadavg()],
           "overrides": {**model_over, **train_over}, "torch": torch.__version__}
    print(json.dumps(out))
    if args.save:
        save_result(out, args.save)


if __name__ == "__main__":
    main()
