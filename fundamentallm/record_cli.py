"""``python -m fundamentallm record try RECIPE``: a learner's recipe judged by the records page's rule.

The candidate (a recipe of :data:`fundamentallm.recipes.RECIPES` or a variant
``NAME+FIELD=VALUE[+...]``, e.g. ``record+lr=4e-3+muon_lr=0.04``) and the current record are
trained on the learner's machine in one interleaved run, with the same seeds, under the fixed
budget (:mod:`fundamentallm.speedrun`). The verdict follows the rule: at least 5 seeds each, the
whole budget, a one-sided exact permutation test of the validation losses with p < 0.01, and a
summed training time no longer than the record's. A JSON file keeps everything needed to
reproduce it: the command line, the machine, the versions, the seeds, the overrides and the commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from pathlib import Path

from . import cli
from .cli import CommandError
from .recipes import BUDGET, RECIPES


def _recipe(text: str) -> str:
    """``RECIPE``'s type: a recipe or a variant, checked before anything trains."""
    base, *sets = text.split("+")
    if base not in RECIPES:
        raise argparse.ArgumentTypeError(f"invalid recipe {base!r} (choose from {', '.join(map(repr, RECIPES))}; "
                                         f"a variant is NAME+FIELD=VALUE, e.g. record+lr=4e-3)")
    from .speedrun import parse_overrides  # imports torch: only once a recipe is given

    try:
        parse_overrides([item for item in sets if item], flag=f"RECIPE {text}")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def add_parsers(sub) -> None:
    """Add ``record`` (with its one action, ``try``) to the command line's subparsers ``sub``."""
    record = sub.add_parser("record", help="judge a recipe of your own against the current record",
                            formatter_class=cli.Formatter, description=__doc__.split("\n\n")[0])
    actions = record.add_subparsers(dest="action", required=True, metavar="{try}")
    attempt = actions.add_parser(
        "try", formatter_class=cli.Formatter,
        help="train RECIPE and the current record side by side and apply the records page's rule",
        description="Train RECIPE and the current record in one interleaved run (same seeds, same budget, "
                    "same data and evaluation) and print the verdict of the records page's rule. At the full "
                    "budget each recipe trains for about a minute per seed on a 2-core CPU (the stored "
                    "record: 51-59 s, plus about 30 s of compilation once), so 5 seeds take about 12 minutes.",
        epilog="examples:\n"
               "  python -m fundamentallm record try record+lr=4e-3            # the rule, 5 seeds\n"
               "  python -m fundamentallm record try ours --seeds 2 --steps 200  # a quick look (no verdict)\n"
               "  python -m fundamentallm record try record --corpus tinyshakespeare")
    attempt.add_argument("recipe", type=_recipe, metavar="RECIPE",
                         help="a recipe (" + ", ".join(RECIPES) + ") or a variant NAME+FIELD=VALUE[+...] "
                              "(any TransformerConfig or TrainConfig field)")
    attempt.add_argument("--against", default="record", choices=list(RECIPES),
                         help="the recipe to beat: the current record")
    attempt.add_argument("--corpus", default="python-docs",
                         help="'python-docs' (built in), 'tinyshakespeare' (downloaded once) or a UTF-8 text file")
    attempt.add_argument("--seeds", type=cli.positive_int, default=5,
                         help="seeds SEED, SEED+1, ... for each recipe (the rule needs at least 5)")
    attempt.add_argument("--seed", type=cli.nonneg_int, default=BUDGET["seed"], help="the first seed")
    attempt.add_argument("--steps", type=cli.positive_int, default=BUDGET["steps"],
                         help="the budget's steps; fewer gives a quick look but no verdict")
    attempt.add_argument("--threads", default="auto",
                         help="torch threads for both recipes, or 'auto' (the fastest, chosen as the benchmark does)")
    attempt.add_argument("--out", default=None, metavar="PATH",
                         help="the JSON to write (default: record-try-<UTC time>.json in this folder); never "
                              "replaced without --force")
    attempt.add_argument("--force", action="store_true", help="replace an existing --out")


def _threads(text: str):
    if text == "auto":
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise CommandError(f"--threads {text!r}: expected 'auto' or an integer >= 1")


def cmd_record(args: argparse.Namespace) -> dict:
    """Run ``record try``: train, judge, print the verdict and write the JSON."""
    out = Path(args.out or datetime.datetime.now(datetime.timezone.utc).strftime("record-try-%Y%m%d-%H%M%S.json"))
    if out.exists() and not args.force:
        raise CommandError(f"--out {str(out)!r} exists; pass another --out or --force to replace it")
    if out.is_dir():
        raise CommandError(f"--out {str(out)!r} is a folder; pass a file name")
    threads = _threads(args.threads)
    import torch

    from . import __version__
    from .speedrun import (
        STEPS,
        RunSettings,
        commit_of,
        cpu_has_bf16,
        cpu_name,
        parse_overrides,
        run_compare,
        verdict,
    )

    candidate = args.recipe if args.recipe != args.against else args.recipe + "+"  # itself, under another label
    seeds = [args.seed + i for i in range(args.seeds)]
    settings = RunSettings(steps=args.steps, seed=args.seed, threads=threads)
    run = run_compare([candidate, args.against], args.corpus, seeds, settings)
    versus = run["versus"][args.against]
    judged = verdict(versus, len(seeds), args.steps)
    mine, theirs = run[candidate], run[args.against]
    speedrun = None
    if None not in mine["time_to_target_s"] and None not in theirs["time_to_target_s"]:
        from .speedrun import permutation_p_value

        speedrun = {"target": run["target"], "p_value": round(permutation_p_value(mine["time_to_target_s"],
                                                                                   theirs["time_to_target_s"]), 4)}
    print(f"\n{candidate} against {args.against} on {args.corpus}: {len(seeds)} seeds each ({seeds[0]}..{seeds[-1]}), "
          f"{args.steps} steps, one interleaved run")
    bf16 = cpu_has_bf16()
    print(f"  machine: {cpu_name()}, {os.cpu_count()} CPUs, bf16 instructions: {'yes' if bf16 else 'no'}"
          + ("" if bf16 else " (so the recipes' bf16-native products and Muon's Newton-Schulz run in float32 here, "
                             "and their times differ from the stored records'; the verdict compares on this machine)"))
    print(f"  validation loss {mine['mean']:.4f} vs {theirs['mean']:.4f} (difference {versus['mean_diff']:+.4f}); "
          f"one-sided permutation test p = {versus['p_value']:.4f}")
    print(f"  training time {sum(mine['train_s']):.1f} s vs {sum(theirs['train_s']):.1f} s "
          f"(ratio {versus['train_time_ratio']:.3f}; compilation before the clock: "
          f"{run['compile_s'][candidate]} s vs {run['compile_s'][args.against]} s)")
    if speedrun:
        print(f"  time to loss {speedrun['target']}: p = {speedrun['p_value']:.4f} (the speedrun's rule)")
    failed = [name for name, held in judged["conditions"].items() if not held]
    print("  verdict: " + ("A NEW RECORD by the rule" if judged["new_record"] else
                           "not a new record (" + "; ".join(f"not {name}" for name in failed) + ")"))
    if args.steps != STEPS:
        print(f"  (a quick look: the rule judges the whole budget of {STEPS} steps)")
    result = {"command": "record try", "candidate": candidate, "against": args.against, "corpus": args.corpus, "seeds": seeds,
              "steps": args.steps, "overrides": dict(zip(("model", "train"),
                                                         parse_overrides([s for s in candidate.split("+")[1:] if s]))),
              **judged, "p_value": versus["p_value"], "mean_diff": versus["mean_diff"],
              "train_time_ratio": versus["train_time_ratio"], "speedrun": speedrun,
              "reproduce": f"python -m fundamentallm record try {args.recipe} --against {args.against} "
                           f"--corpus {args.corpus} --seeds {args.seeds} --seed {args.seed} --steps {args.steps}",
              "machine": {"platform": platform.platform(), "cpu": cpu_name(), "cpus": os.cpu_count(), "cpu_bf16": bf16,
                          "python": platform.python_version()},
              "torch": torch.__version__, "fundamentallm": __version__,
              "commit": commit_of(Path(__file__).resolve().parent),
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "run": run}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"  wrote {out} (everything needed to reproduce it; the records page says how to submit)")
    return {key: result[key] for key in ("command", "candidate", "against", "corpus", "new_record", "p_value",
                                         "mean_diff", "train_time_ratio")} | {"out": str(out)}
