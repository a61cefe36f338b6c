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
import ast
import contextlib
import io
import json
import os
import statistics
import time

import torch
from record import (  # benchmarks/record.py (the script's folder is on sys.path)
    permutation_p_value,
    save_result,
)

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.cli import nonneg_int, positive_int
from fundamentallm.data import load_corpus, train_val_split
from fundamentallm.recipes import BUDGET, RECIPES, configs
from fundamentallm.tokenizers import CharacterTokenizer
from fundamentallm.training import TrainConfig, Trainer

# The budget and the recipes live in the package (fundamentallm/recipes.py), where the command
# line's `train --recipe NAME` reads them too.
STEPS, BATCH, BLOCK = BUDGET["steps"], BUDGET["batch_size"], BUDGET["block_size"]  # 1,536,000 tokens
MAX_PARAMS = BUDGET["max_params"]


def parse_overrides(items: list[str], flag: str = "--set") -> tuple[dict, dict]:
    """``key=value`` pairs -> (model overrides, train overrides), by field name; an error names
    ``flag``, where they came from."""
    model_fields = set(TransformerConfig.__dataclass_fields__)
    train_fields = set(TrainConfig.__dataclass_fields__)
    model, train = {}, {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key or not raw:
            raise SystemExit(f"{flag} {item!r}: expected FIELD=VALUE, e.g. --set lr=1e-3")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        if key in model_fields:
            model[key] = value
        elif key in train_fields:
            train[key] = value
        else:
            raise SystemExit(f"{flag} {item!r}: unknown field {key!r}")
    return model, train


def recipe_variant(name: str) -> str:
    """``--recipe``'s type: a recipe's name, or a variant of one, ``NAME+FIELD=VALUE[+...]`` (e.g.
    ``record+sampling=random``, to measure a candidate against the recipe it changes in one run);
    checked here, so that a typo fails before anything trains."""
    base, *sets = name.split("+")
    if base not in RECIPES:
        raise argparse.ArgumentTypeError(f"invalid choice: {base!r} (choose from {', '.join(map(repr, RECIPES))}; "
                                         f"a variant is NAME+FIELD=VALUE)")
    parse_overrides(sets, flag=f"--recipe {name}")
    return name


def build_trainer(recipe_name: str, seed: int, vocab_size: int, train_ids, val_ids, args,
                  model_over: dict, train_over: dict) -> Trainer:
    base, *sets = recipe_name.split("+")  # a variant's own overrides, then --set's
    variant_model, variant_train = parse_overrides(sets)
    run = dict(max_steps=args.steps, block_size=BLOCK, eval_batch_size=256, progress=False, device="cpu", seed=seed,
               log_interval=1)
    # the package's one assembler (the CLI's `train --recipe` uses it too): the budget, the recipe, then these
    model_kwargs, train_kwargs = configs(base, vocab_size, model={**variant_model, **model_over},
                                         train={**run, **variant_train, **train_over})
    torch.manual_seed(seed)
    try:
        config = TransformerConfig(**model_kwargs)
    except (TypeError, ValueError) as err:
        raise SystemExit(f"--set: {err}") from None
    model = Transformer(config)
    params = model.num_parameters()
    if params > MAX_PARAMS:
        raise SystemExit(f"{recipe_name}: {params} parameters exceed the budget's {MAX_PARAMS}")
    try:
        train_config = TrainConfig(**train_kwargs)
    except (TypeError, ValueError) as err:
        raise SystemExit(f"--set or --steps: {err}") from None
    print(f"{recipe_name}: params={params}\n  model: {config}\n  train: {train_config}", flush=True)
    return Trainer(model, train_ids, val_ids, config=train_config)


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


# Seconds of each recipe's first compilation in this process (TrainConfig(compile=True)); the
# models built after it, for the thread trial or the other seeds, reuse the compiled code.
COMPILE_S: dict[str, float] = {}


def compile_before_the_clock(name: str, trainer: Trainer) -> None:
    """Compile ``trainer``'s model now (nothing without compile=True), and keep the seconds the
    recipe's first compilation took."""
    COMPILE_S.setdefault(name, trainer.warm_up())


def choose_threads(names: list[str], vocab_size: int, train_ids, val_ids, args, model_over: dict,
                   train_over: dict, trial_steps: int = 20) -> dict[str, int]:
    """For each recipe, the thread count (1 .. the machine's cores) that trains it fastest, timed
    on a throw-away copy: 5 warm-up steps, then ``trial_steps`` steps per count, the counts taken
    in turn twice so that both see the same load. The runs to be measured are not touched (their
    models and batch generators are built afterwards, from their own seeds)."""
    counts = list(range(1, (os.cpu_count() or 1) + 1))
    chosen = {}
    for name in names:
        with contextlib.redirect_stdout(io.StringIO()):
            trainer = build_trainer(name, args.seed, vocab_size, train_ids, val_ids, args,
                                    model_over if name == names[0] else {},
                                    train_over if name == names[0] else {})
        compile_before_the_clock(name, trainer)
        trainer.fit(steps=min(5, args.steps))
        spent = dict.fromkeys(counts, 0.0)
        for _ in range(2):
            for n in counts:
                torch.set_num_threads(n)
                start = trainer.elapsed
                trainer.fit(steps=trial_steps)
                spent[n] += trainer.elapsed - start
        chosen[name] = min(counts, key=spent.get)
        print(f"{name}: {chosen[name]} thread(s); ms per step by thread count: "
              f"{ {n: round(t / (2 * trial_steps) * 1000, 1) for n, t in spent.items()} }", flush=True)
    return chosen


def cpu_name() -> str:
    """The CPU's model name and family (``/proc/cpuinfo``; '' where unknown): results are compared
    only between runs on the same kind of CPU."""
    try:
        info = open("/proc/cpuinfo").read()
    except OSError:
        return ""
    fields = {}
    for line in info.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return f"{fields.get('model name', '')} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')})"


def cpu_has_bf16() -> bool:
    """Whether the CPU multiplies bf16 matrices natively (AVX512-BF16 or AMX); without it, the
    bf16 recipes still run, but slower than in float32 (Linux only; False where unknown)."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


PROBE_STEPS = 3


def train_chunk(trainer: Trainer, steps: int, threads: int, adapt: bool) -> int:
    """Train ``steps`` steps; return the thread count used for most of them. With ``adapt``,
    the first ``PROBE_STEPS`` run at each count from 1 to the machine's cores (the one in use
    last), the rest at the fastest: the load of a shared machine changes within a run, and two
    threads can be many times slower than one as soon as another process takes a core. The
    probe steps are training steps like the others (timed, and the thread count changes no
    number of the run: checked bit for bit on this project's CPU). A compiled recipe does not
    adapt: torch.compile's kernels are built for the thread count they were compiled at (measured
    here: 26 ms a step at 2 threads, 114 ms at 1 after compiling at 2), so its count is the one
    chosen before training."""
    counts = range(1, (os.cpu_count() or 1) + 1)
    if not adapt or steps <= PROBE_STEPS * len(counts):
        torch.set_num_threads(threads)
        trainer.fit(steps=steps)
        return threads
    per_step = {}
    for n in sorted(counts, key=lambda n: n != threads):
        torch.set_num_threads(n)
        start = trainer.elapsed
        trainer.fit(steps=PROBE_STEPS)
        per_step[n] = trainer.elapsed - start
    best = min(per_step, key=per_step.get)
    torch.set_num_threads(best)
    trainer.fit(steps=steps - PROBE_STEPS * len(per_step))
    return best


def train_seed(names: list[str], seed: int, vocab_size: int, train_ids, val_ids, args,
               model_over: dict, train_over: dict, threads: dict[str, int]) -> dict:
    """Train the recipes ``names`` with one seed, interleaved in chunks of 100 steps (so that
    their speeds are measured under the same machine load); return each one's result. With
    ``--threads auto`` each chunk picks its thread count again (:func:`train_chunk`).

    Every ``args.eval_every`` steps, until a recipe's loss on the whole validation split reaches
    ``args.target``, the recipe is evaluated (the evaluation is outside the timed training, and
    it changes nothing in the run: no random numbers, no weights); ``time_to_target_s`` is the
    training time up to the first evaluation at or below the target (None if none was)."""
    # --set applies to the first recipe named.
    trainers = {name: build_trainer(name, seed, vocab_size, train_ids, val_ids, args,
                                    model_over if name == names[0] else {},
                                    train_over if name == names[0] else {})
                for name in names}
    # torch.compile's compilation (a recipe with compile=True) happens here, before the clock, as
    # in the speedruns' rules; its seconds are reported beside the training time (COMPILE_S).
    for name, trainer in trainers.items():
        compile_before_the_clock(name, trainer)
    chunk = args.eval_every or (100 if len(names) > 1 else 250)
    threads = dict(threads)  # updated chunk by chunk with --threads auto
    used = {name: [] for name in names}  # the thread count of each chunk
    curves = {name: [] for name in names}  # (step, training seconds, val loss) until the target
    reached = dict.fromkeys(names)
    while any(t.step < args.steps for t in trainers.values()):
        for name, trainer in trainers.items():
            if trainer.step >= args.steps:
                continue
            threads[name] = train_chunk(trainer, min(chunk, args.steps - trainer.step), threads[name],
                                        adapt=args.threads == "auto" and not trainer.config.compile)
            used[name].append(threads[name])
            recent = trainer.history["train_loss"][-chunk:]
            print(f"seed {seed} {name:8s} step {trainer.step:5d}  train_loss {sum(recent) / len(recent):.4f}  "
                  f"lr {trainer.history['lr'][-1]:.2e}  "
                  f"{trainer.tokens_seen / trainer.elapsed:,.0f} tok/s  load {os.getloadavg()[0]:.2f}",
                  flush=True)
            if args.eval_every and reached[name] is None and trainer.step < args.steps:
                val = round(trainer.evaluate()["val_loss"], 4)
                curves[name].append([trainer.step, round(trainer.elapsed, 2), val])
                if val <= args.target:
                    reached[name] = curves[name][-1]
                print(f"seed {seed} {name:8s} step {trainer.step:5d}  val_loss {val:.4f}", flush=True)
    runs = {}
    for name, trainer in trainers.items():
        torch.set_num_threads(threads[name])
        t_eval = time.perf_counter()
        val = trainer.evaluate()
        eval_s = time.perf_counter() - t_eval
        final = round(val["val_loss"], 4)
        if args.eval_every and reached[name] is None:
            curves[name].append([trainer.step, round(trainer.elapsed, 2), final])
            if final <= args.target:
                reached[name] = curves[name][-1]
        runs[name] = {"val_loss": final, "params": trainer.model.num_parameters(),
                      "train_tokens": trainer.tokens_seen, "steps": trainer.step,
                      "tokens_per_s": round(trainer.tokens_seen / trainer.elapsed),
                      "train_s": round(trainer.elapsed, 1), "eval_s": round(eval_s, 1),
                      "time_s": round(trainer.elapsed + eval_s, 1),
                      "threads_per_chunk": used[name],
                      "time_to_target_s": reached[name][1] if reached[name] else None,
                      "steps_to_target": reached[name][0] if reached[name] else None,
                      "val_curve": curves[name]}
        print(f"seed {seed} {name:8s} val_loss {runs[name]['val_loss']:.4f}  time to {args.target}: "
              f"{runs[name]['time_to_target_s']} s", flush=True)
    return runs


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


def summarise(per_seed: list[dict], name: str) -> dict:
    """One recipe over the seeds: lists per seed, and the mean and sample sd of the loss."""
    runs = [r[name] for r in per_seed]
    losses = [r["val_loss"] for r in runs]
    out = {key: [r[key] for r in runs] for key in ("val_loss", "tokens_per_s", "train_s", "eval_s", "time_s",
                                                   "time_to_target_s", "steps_to_target", "val_curve",
                                                   "threads_per_chunk")}
    out.update(mean=round(statistics.fmean(losses), 4),
               sd=round(statistics.stdev(losses), 4) if len(losses) > 1 else None,
               params=runs[0]["params"], train_tokens=runs[0]["train_tokens"], steps=runs[0]["steps"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="python-docs", help="'python-docs', 'tinyshakespeare' or a path")
    parser.add_argument("--recipe", nargs="+", action="extend", default=None, type=recipe_variant,
                        help="the recipe(s) to train: 'ours' (the course's, AdamW), 'record' (Muon and "
                             "the speedrun's ingredients) or 'baseline' (nanoGPT's CPU recipe), or a variant "
                             "NAME+FIELD=VALUE[+...] (e.g. record+sampling=random); default: ours")
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
    model_over, train_over = parse_overrides(args.set)

    load_start = os.getloadavg()
    t_start = time.perf_counter()
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
    if args.profile:
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
        return
    seeds = [args.seed + i for i in range(args.seeds)]
    per_seed = [train_seed(names, seed, tokenizer.vocab_size, train_ids, val_ids, args, model_over, train_over,
                           threads) for seed in seeds]
    out = {"benchmark": "train_budget", "corpus": args.corpus, "val_windows": (len(val_ids) - 1) // BLOCK,
           "recipes": names, "seeds": seeds}
    for name in names:
        out[name] = summarise(per_seed, name)
    if "baseline" in names:
        out["speed_ratio"] = {name: [round(r[name]["tokens_per_s"] / r["baseline"]["tokens_per_s"], 3)
                                     for r in per_seed] for name in names if name != "baseline"}
        # the speedrun: time to the target against the baseline's whole training time, per seed
        out["time_to_target_ratio"] = {
            name: [round(r[name]["time_to_target_s"] / r["baseline"]["train_s"], 3)
                   if r[name]["time_to_target_s"] is not None else None for r in per_seed]
            for name in names if name != "baseline"}
        out["train_time_ratio"] = {name: [round(r[name]["train_s"] / r["baseline"]["train_s"], 3)
                                          for r in per_seed] for name in names if name != "baseline"}
        # the same with torch.compile's compilation counted (0 s for a recipe without it)
        out["train_time_ratio_with_compile"] = {
            name: [round((r[name]["train_s"] + COMPILE_S.get(name, 0.0)) / r["baseline"]["train_s"], 3)
                   for r in per_seed]
            for name in names if name != "baseline"}
    # The rule for a new record: the first recipe named against each other one, over the seeds
    # of this interleaved run: the exact one-sided permutation test of the losses (p < 0.01 with
    # >= 5 seeds each to count) and the ratio of the summed training times.
    first = names[0]
    out["versus"] = {other: {"mean_diff": round(out[first]["mean"] - out[other]["mean"], 4),
                             "p_value": round(permutation_p_value(out[first]["val_loss"], out[other]["val_loss"]), 4),
                             "train_time_ratio": round(sum(out[first]["train_s"]) / sum(out[other]["train_s"]), 3)}
                     for other in names[1:]}
    out.update({"compile_s": {name: round(COMPILE_S.get(name, 0.0), 1) for name in names},
                "target": args.target, "eval_every": args.eval_every,
                "wall_s": round(time.perf_counter() - t_start, 1), "threads": threads,
                "cpu_bf16": cpu_has_bf16(), "cpu": cpu_name(),
                "loadavg_start": [round(x, 2) for x in load_start],
                "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                "overrides": {**model_over, **train_over}, "torch": torch.__version__})
    print(json.dumps(out))
    if args.save:
        save_result(out, args.save)


if __name__ == "__main__":
    main()
