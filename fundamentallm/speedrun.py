"""The record's rule, run: recipes trained side by side in one interleaved run, judged by the
records page's rule (chapter "records" of the book).

The budget is fixed (:data:`fundamentallm.recipes.BUDGET`: nanoGPT's CPU recipe, 2000 steps x 12 x
64 characters, at most 0.81M parameters); a recipe is a name of :data:`fundamentallm.recipes.RECIPES`
or a variant ``NAME+FIELD=VALUE[+...]``. :func:`run_compare` trains the recipes with the same seeds,
alternating in chunks of 100 steps so that their speeds are measured under the same machine load,
and returns every figure; :func:`verdict` applies the rule: a new record needs at least 5 seeds
each, a one-sided exact permutation test of the validation losses with p < 0.01, and a summed
training time no longer than the current record's in that run.

``python -m fundamentallm record try RECIPE`` is the learner's door to it;
``benchmarks/train_budget.py`` the project's (it adds the profile).
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from . import Transformer, TransformerConfig
from .data import load_corpus, train_val_split
from .recipes import BUDGET, RECIPES, configs
from .tokenizers import CharacterTokenizer
from .training import TrainConfig, Trainer
from .utils import cpu_has_bf16

STEPS, BATCH, BLOCK = BUDGET["steps"], BUDGET["batch_size"], BUDGET["block_size"]  # 1,536,000 tokens
MAX_PARAMS = BUDGET["max_params"]
RULE_SEEDS, RULE_P = 5, 0.01  # the records page's rule


@dataclass(frozen=True)
class RunSettings:
    """What a run is trained and measured with (``args`` below: the benchmark passes its argparse
    namespace, which has the same fields): the steps (the budget's 2000 unless a quick trial), the
    first seed, the threads (``"auto"`` or a count), the speedrun's target loss and how often
    (steps) the validation loss is evaluated until it is reached (0: only at the end)."""

    steps: int = STEPS
    seed: int = BUDGET["seed"]
    threads: object = "auto"
    target: float = 1.90
    eval_every: int = 100


def permutation_p_value(new: list[float], old: list[float]) -> float:
    """One-sided exact permutation test that ``new`` losses are lower than ``old``: the share of
    all ways to split the pooled losses into groups of the two sizes whose mean difference
    (first group minus second) is at most the observed one. No assumption on the distribution;
    with 5 seeds each the smallest possible value is 1/252 (every new run below every old one).

    The records page's rule: a new record needs p < 0.01 with >= 5 seeds each, measured against
    the previous record in one interleaved run (``train_budget.py --recipe NEW record --compare
    --seeds 5``)."""
    from itertools import combinations

    if len(new) < 1 or len(old) < 1:
        raise ValueError(f"need at least one loss in each group, got {len(new)} new and {len(old)} old")
    pooled = [*new, *old]
    observed = sum(new) / len(new) - sum(old) / len(old)
    total = sum(pooled)
    hits = count = 0
    for group in combinations(range(len(pooled)), len(new)):
        first = sum(pooled[i] for i in group)
        diff = first / len(new) - (total - first) / len(old)
        hits += diff <= observed + 1e-12  # ties count against the new recipe
        count += 1
    return hits / count


def parse_overrides(items: list[str], flag: str = "--set") -> tuple[dict, dict]:
    """``key=value`` pairs -> (model overrides, train overrides), by field name; an error names
    ``flag``, where they came from."""
    model_fields = set(TransformerConfig.__dataclass_fields__)
    train_fields = set(TrainConfig.__dataclass_fields__)
    model, train = {}, {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key or not raw:
            raise ValueError(f"{flag} {item!r}: expected FIELD=VALUE, e.g. --set lr=1e-3")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        if key in model_fields:
            model[key] = value
        elif key in train_fields:
            train[key] = value
        else:
            raise ValueError(f"{flag} {item!r}: unknown field {key!r}")
    return model, train


def recipe_variant(name: str) -> str:
    """A recipe's name, or a variant of one, ``NAME+FIELD=VALUE[+...]`` (e.g.
    ``record+sampling=random``, to measure a candidate against the recipe it changes in one run);
    checked here, so that a typo fails before anything trains."""
    base, *sets = name.split("+")
    sets = [item for item in sets if item]  # "NAME+": the recipe itself under another label
    if base not in RECIPES:
        raise ValueError(f"invalid choice: {base!r} (choose from {', '.join(map(repr, RECIPES))}; "
                                         f"a variant is NAME+FIELD=VALUE)")
    parse_overrides(sets, flag=f"--recipe {name}")
    return name


def build_trainer(recipe_name: str, seed: int, vocab_size: int, train_ids, val_ids, args,
                  model_over: dict, train_over: dict) -> Trainer:
    base, *sets = recipe_name.split("+")  # a variant's own overrides, then --set's
    sets = [item for item in sets if item]  # "NAME+": the recipe itself under another label
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
        raise ValueError(f"--set: {err}") from None
    model = Transformer(config)
    params = model.num_parameters()
    if params > MAX_PARAMS:
        raise ValueError(f"{recipe_name}: {params} parameters exceed the budget's {MAX_PARAMS}")
    try:
        train_config = TrainConfig(**train_kwargs)
    except (TypeError, ValueError) as err:
        raise ValueError(f"--set or --steps: {err}") from None
    print(f"{recipe_name}: params={params}\n  model: {config}\n  train: {train_config}", flush=True)
    return Trainer(model, train_ids, val_ids, config=train_config)


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


def run_compare(names: list[str], corpus: str, seeds: list[int], args, model_over: Optional[dict] = None,
                train_over: Optional[dict] = None) -> dict:
    """Train the recipes ``names`` with each seed of ``seeds``, interleaved (:func:`train_seed`), on
    the character tokens of ``corpus`` (split as the budget says), and return every figure: per
    recipe the losses and times of each seed with their mean and sd; against the baseline (when it
    is one of ``names``) the ratios of speed, training time and time to the target; and ``versus``:
    the first recipe against each other one, by the rule (:func:`permutation_p_value` of the losses
    and the ratio of the summed training times). ``model_over``/``train_over`` change the first
    recipe only."""
    model_over, train_over = model_over or {}, train_over or {}
    load_start = os.getloadavg()
    t_start = time.perf_counter()
    text = load_corpus(corpus)
    tokenizer = CharacterTokenizer.from_text(text)
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    train_ids, val_ids = train_val_split(ids, BUDGET["val_fraction"])
    print(f"corpus={corpus} chars={len(text)} vocab={tokenizer.vocab_size} train_tokens={len(train_ids)} "
          f"val_tokens={len(val_ids)} load={load_start}", flush=True)
    if args.threads == "auto":
        threads = choose_threads(names, tokenizer.vocab_size, train_ids, val_ids, args, model_over, train_over)
    else:
        threads = dict.fromkeys(names, args.threads)
    per_seed = [train_seed(names, seed, tokenizer.vocab_size, train_ids, val_ids, args, model_over, train_over,
                           threads) for seed in seeds]
    out = {"benchmark": "train_budget", "corpus": corpus, "val_windows": (len(val_ids) - 1) // BLOCK,
           "recipes": names, "seeds": seeds}
    for name in names:
        out[name] = summarise(per_seed, name)
    if "baseline" in names:
        others = [name for name in names if name != "baseline"]
        out["speed_ratio"] = {name: [round(r[name]["tokens_per_s"] / r["baseline"]["tokens_per_s"], 3)
                                     for r in per_seed] for name in others}
        # the speedrun: time to the target against the baseline's whole training time, per seed
        out["time_to_target_ratio"] = {
            name: [round(r[name]["time_to_target_s"] / r["baseline"]["train_s"], 3)
                   if r[name]["time_to_target_s"] is not None else None for r in per_seed] for name in others}
        out["train_time_ratio"] = {name: [round(r[name]["train_s"] / r["baseline"]["train_s"], 3)
                                          for r in per_seed] for name in others}
        # the same with torch.compile's compilation counted (0 s for a recipe without it)
        out["train_time_ratio_with_compile"] = {
            name: [round((r[name]["train_s"] + COMPILE_S.get(name, 0.0)) / r["baseline"]["train_s"], 3)
                   for r in per_seed] for name in others}
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
    return out


def verdict(versus: dict, seeds: int, steps: int = STEPS) -> dict:
    """The records page's rule applied to one ``versus`` entry of :func:`run_compare` (a candidate
    against the current record, trained in the same run with ``seeds`` seeds each): a new record
    when the run used the whole budget, at least :data:`RULE_SEEDS` seeds each, the one-sided
    permutation test gives p < :data:`RULE_P`, and the candidate's summed training time is no longer
    than the record's. Returns ``new_record`` and, for every condition, whether it held."""
    conditions = {"whole budget": steps == STEPS,
                  f"at least {RULE_SEEDS} seeds each": seeds >= RULE_SEEDS,
                  f"p < {RULE_P}": versus["p_value"] < RULE_P,
                  "training time no longer than the record's": versus["train_time_ratio"] <= 1.0}
    return {"new_record": all(conditions.values()), "conditions": conditions}


def commit_of(path: Path) -> Optional[str]:
    """The git commit of the checkout that holds ``path`` (None outside a clone or without git): a
    submission names the code it ran."""
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
