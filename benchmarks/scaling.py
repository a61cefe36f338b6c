"""Scaling laws as an experiment: IsoFLOP sweeps on a CPU, fitted laws, and a held-out prediction.

The rules, fixed before any run (Hoffmann et al. 2022's approaches 2 and 3, at toy scale):

* **Data**: the built-in ``python-docs`` corpus (the Python reference docs, ``pydoc_data``),
  character tokens, the course's 90/10 split. Training windows of ``T = 64`` characters, drawn at
  random (``Trainer``'s default sampling), 8 per step (512 tokens a step). Validation: the same
  fixed held-out set for every run, the first 512 non-overlapping 64-character windows of the
  validation split (32,768 tokens).
* **Models**: chapter 9's decoder (RMSNorm, RoPE, SwiGLU, no bias, tied embeddings) with
  ``num_layers = 2`` and a width from the ladder ``WIDTHS`` (4 to 192, alternately x1.5 and
  x1.33); ``num_heads = max(1, d_model // 8)`` (one head below 16). N is the non-embedding
  parameter count (Kaplan et al. 2020), about ``24·num_layers·d_model²``; the ladder's
  neighbours differ by 1.8-2.3x in N.
* **Compute**: ``C = 6·N·D`` with that N (``fundamentallm.flops``); a run at budget C trains for
  ``steps = round(C / (6·N·512))`` steps. The FLOPs counted with the attention and the output
  layer are stored beside it.
* **Sizes per budget**: the 5 ladder widths centred on the width whose N is nearest
  ``sqrt(C / 120)`` (20 tokens per parameter, Chinchilla's rule, only as the centre of the
  grid). If the lowest loss is at an edge, the grid is widened one ladder step on that side,
  up to twice, until the minimum is interior.
* **Optimizer**: AdamW (betas 0.9, 0.95, weight decay 0.1, clipping 1.0), peak learning rate
  ``LR_RULE(d) = 4e-3·sqrt(64/d_model)``, linear warmup over 5% of the steps, cosine decay to a
  tenth of the peak at the run's last step (the schedule's length matches the run, as Hoffmann
  et al. found it must). Sensitivity: the sweep at one budget is repeated with the rule x0.5 and
  x2.
* **Seeds**: one per run (seed 0); the seed-to-seed spread is measured at one point.
* **Budgets**: ``BUDGETS`` = 3e9, 1e10, 3e10, 1e11 FLOPs; held out: 3e11. Changed once, after the
  first runs (2026-11-28): the plan was 1e10 to 3e11 with a held-out 1e12, but the optimum sat at
  the narrowest widths, the slowest per FLOP on a CPU, so the budgets were moved down threefold,
  and the ladder was extended below 8 (4, 6) when the lowest loss at 3e9 was at width 8. No run
  was discarded.
* **Prediction**: after the sweep, the fits (``fundamentallm.scaling``) give N_opt and the loss
  at a budget 3x above the largest swept; these are written to the JSON **before** the run at
  that budget is made; then the ladder width nearest N_opt is trained there, with its two ladder
  neighbours (an over-trained smaller model and an under-trained larger one).

Run (about 7 CPU-minutes with one thread, 2026-11-28; phases resume from the JSON):
    nice -n 10 env OMP_NUM_THREADS=1 python benchmarks/scaling.py --save
    python benchmarks/scaling.py --report        # the fits and figures from the stored runs
Prints a line per run, then the figures, then one JSON line (the last line).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import time
from pathlib import Path

import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm import scaling as fits
from fundamentallm.data import load_corpus, train_val_split
from fundamentallm.flops import parameter_counts, training_flops_per_token
from fundamentallm.tokenizers import CharacterTokenizer
from fundamentallm.training import TrainConfig, Trainer

RESULTS = Path(__file__).resolve().parent.parent / "fundamentallm" / "results" / "scaling.json"
WIDTHS = (4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192)
NUM_LAYERS, HEAD_DIM, BLOCK, BATCH = 2, 8, 64, 8
BUDGETS = (3e9, 1e10, 3e10, 1e11)
HELDOUT_BUDGET = 3e11
SENSITIVITY_BUDGET, LR_MULTS = 1e10, (0.5, 2.0)
SEED_BUDGET = 1e10
VAL_WINDOWS = 512


def lr_rule(d_model: int) -> float:
    return 4e-3 * math.sqrt(64 / d_model)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def model_config(d_model: int, vocab_size: int) -> TransformerConfig:
    return TransformerConfig(vocab_size=vocab_size, d_model=d_model, num_heads=max(1, d_model // HEAD_DIM),
                             num_layers=NUM_LAYERS, max_seq_len=BLOCK, norm="rmsnorm", pos_encoding="rope",
                             activation="swiglu", bias=False, attn_impl="sdpa")


def non_embedding(d_model: int, vocab_size: int) -> int:
    with torch.device("meta"):
        model = Transformer(model_config(d_model, vocab_size))
    return parameter_counts(model)["non_embedding"]


@torch.no_grad()
def val_loss(model, val_windows) -> float:
    model.eval()
    total = 0.0
    for chunk in val_windows.split(64):
        _, loss = model(chunk[:, :-1], targets=chunk[:, 1:])
        total += loss.item() * chunk.shape[0]
    return total / val_windows.shape[0]


def train_one(data, d_model, budget, role, lr_mult=1.0, seed=0):
    train_ids, val_windows, V = data
    n = non_embedding(d_model, V)
    steps = max(1, round(budget / (6 * n * BATCH * BLOCK)))
    tokens = steps * BATCH * BLOCK
    lr = lr_rule(d_model) * lr_mult
    torch.manual_seed(seed)
    cfg = model_config(d_model, V)
    model = Transformer(cfg)
    counts = parameter_counts(model)
    tc = TrainConfig(lr=lr, min_lr=lr / 10, warmup_steps=max(1, round(0.05 * steps)), max_steps=steps,
                     batch_size=BATCH, block_size=BLOCK, betas=(0.9, 0.95), weight_decay=0.1, grad_clip=1.0,
                     eval_interval=0, progress=False, seed=seed, device="cpu", mixed_precision="off")
    c0, t0 = cpu_seconds(), time.perf_counter()
    Trainer(model, train_ids, train_ids[:BLOCK * 4], tc).fit()
    loss = val_loss(model, val_windows)
    per_token = training_flops_per_token(cfg, BLOCK)
    return {"role": role, "budget": budget, "d_model": d_model, "num_layers": NUM_LAYERS,
            "num_heads": cfg.num_heads, "n_non_embedding": counts["non_embedding"],
            "n_total": counts["total"], "tokens": tokens, "steps": steps, "lr": lr, "lr_mult": lr_mult,
            "seed": seed, "flops_6nd": 6 * counts["non_embedding"] * tokens,
            "flops_counted": per_token["total"] * tokens, "epochs": tokens / len(train_ids),
            "val_loss": loss, "cpu_s": cpu_seconds() - c0, "wall_s": time.perf_counter() - t0,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}  # (runs before 2026-12-07 lack it)


def key(run):
    return (run["role"], run["budget"], run["d_model"], run["lr_mult"], run["seed"])


def load_store():
    if RESULTS.exists():
        return json.loads(RESULTS.read_text(encoding="utf-8"))
    return {"benchmark": "scaling", "runs": []}


def save_store(store):
    RESULTS.write_text(json.dumps(store, indent=1) + "\n", encoding="utf-8")


def centre_grid(budget, V):
    target = math.sqrt(budget / 120)
    ns = [non_embedding(d, V) for d in WIDTHS]
    c = min(range(len(WIDTHS)), key=lambda i: abs(math.log(ns[i] / target)))
    c = min(max(c, 2), len(WIDTHS) - 3)
    return list(range(c - 2, c + 3))


def run_budget(store, data, budget, role="sweep", lr_mult=1.0, save=True):
    V = data[2]
    idx = centre_grid(budget, V)
    done = {key(r): r for r in store["runs"]}
    for _ in range(3):
        for i in idx:
            probe = {"role": role, "budget": budget, "d_model": WIDTHS[i], "lr_mult": lr_mult, "seed": 0}
            if key(probe) not in done:
                run = train_one(data, WIDTHS[i], budget, role, lr_mult)
                store["runs"].append(run)
                done[key(run)] = run
                print(f"{role:>14} C={budget:.0e} d={run['d_model']:>3} N={run['n_non_embedding']:>7,} "
                      f"D={run['tokens']:>9,} steps={run['steps']:>5} lr={run['lr']:.2e} "
                      f"val={run['val_loss']:.4f} cpu={run['cpu_s']:.1f}s", flush=True)
                if save:
                    save_store(store)
        losses = [done[(role, budget, WIDTHS[i], lr_mult, 0)]["val_loss"] for i in idx]
        best = losses.index(min(losses))
        if best == 0 and idx[0] > 0:
            idx = [idx[0] - 1] + idx
        elif best == len(idx) - 1 and idx[-1] < len(WIDTHS) - 1:
            idx = idx + [idx[-1] + 1]
        else:
            break


def sweep_runs(store, role="sweep", lr_mult=1.0):
    return [r for r in store["runs"] if r["role"] == role and r["lr_mult"] == lr_mult and r["seed"] == 0]


def analyse(store, n_boot=200):
    runs = sweep_runs(store)
    a2 = fits.approach2(runs, n_boot=n_boot, seed=0)
    a3 = fits.approach3(runs, n_boot=n_boot, seed=0)
    return a2, a3


def predict(store, n_boot=200):
    a2, a3 = analyse(store, n_boot)
    C = HELDOUT_BUDGET
    n_opt = fits.power_law(C, *a2["n_opt"]["coef"])
    V = store["vocab_size"]
    ns = [non_embedding(d, V) for d in WIDTHS]
    i = min(range(len(WIDTHS)), key=lambda j: abs(math.log(ns[j] / n_opt)))
    chosen = [WIDTHS[j] for j in (i - 1, i, i + 1) if 0 <= j < len(WIDTHS)]
    preds = {}
    for d in chosen:
        n = non_embedding(d, V)
        steps = max(1, round(C / (6 * n * BATCH * BLOCK)))
        preds[str(d)] = {"n_non_embedding": n, "tokens": steps * BATCH * BLOCK,
                         "loss_approach3": fits.chinchilla_loss(n, steps * BATCH * BLOCK, a3["params"])}
    return {"budget": C, "n_opt_approach2": n_opt, "d_opt_approach2": fits.power_law(C, *a2["d_opt"]["coef"]),
            "loss_min_approach2": fits.loss_at_budget(C, a2), "nearest_width": WIDTHS[i],
            "n_opt_approach3": fits.chinchilla_optimum(C, a3["params"])[0], "runs": preds,
            "made_before_the_runs": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", nargs="+", default=["all"],
                   choices=("all", "sweep", "sensitivity", "seeds", "predict", "heldout", "report"))
    p.add_argument("--report", action="store_true", help="only the fits and figures from the stored runs")
    p.add_argument("--save", action="store_true", help="write every run to fundamentallm/results/scaling.json")
    p.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples of the fits (default: 200)")
    args = p.parse_args()
    torch.set_num_threads(1)
    phases = {"report"} if args.report else set(args.phase)
    if "all" in phases:
        phases |= {"sweep", "sensitivity", "seeds", "predict", "heldout"}
    store = load_store()
    text = load_corpus("python-docs")
    tok = CharacterTokenizer.from_text(text)
    ids = torch.tensor(tok.encode(text))
    train_ids, val_ids = train_val_split(ids, 0.1)
    val_windows = val_ids[:VAL_WINDOWS * BLOCK + 1].unfold(0, BLOCK + 1, BLOCK)[:VAL_WINDOWS]  # (512, 65)
    data = (train_ids, val_windows, tok.vocab_size)
    store.update({"corpus": "python-docs", "vocab_size": tok.vocab_size, "train_tokens": len(train_ids),
                  "val_tokens": int(val_windows.shape[0] * BLOCK), "block_size": BLOCK, "batch_size": BATCH,
                  "num_layers": NUM_LAYERS, "head_dim": HEAD_DIM, "widths": list(WIDTHS),
                  "budgets": list(BUDGETS), "lr_rule": "4e-3 * sqrt(64 / d_model)",
                  "torch": torch.__version__, "threads": torch.get_num_threads(), "load": os.getloadavg()[0]})
    if "sweep" in phases:
        for C in BUDGETS:
            run_budget(store, data, C, save=args.save)
    if "sensitivity" in phases:
        for m in LR_MULTS:
            run_budget(store, data, SENSITIVITY_BUDGET, role="sweep", lr_mult=m, save=args.save)
    if "seeds" in phases:
        runs = [r for r in sweep_runs(store) if r["budget"] == SEED_BUDGET]
        best = min(runs, key=lambda r: r["val_loss"])
        done = {key(r) for r in store["runs"]}
        for seed in (1, 2):
            if ("sweep", SEED_BUDGET, best["d_model"], 1.0, seed) not in done:
                run = train_one(data, best["d_model"], SEED_BUDGET, "sweep", 1.0, seed)
                store["runs"].append(run)
                print(f"seed {seed}: d={run['d_model']} val={run['val_loss']:.4f}", flush=True)
                if args.save:
                    save_store(store)
    if "predict" in phases and "prediction" not in store:
        store["prediction"] = predict(store, n_boot=0)  # point fits: intervals are not needed here
        print("prediction:", json.dumps(store["prediction"]), flush=True)
        if args.save:
            save_store(store)
    if "heldout" in phases:
        done = {key(r) for r in store["runs"]}
        for d in store["prediction"]["runs"]:
            if ("heldout", HELDOUT_BUDGET, int(d), 1.0, 0) not in done:
                run = train_one(data, int(d), HELDOUT_BUDGET, "heldout")
                store["runs"].append(run)
                print(f"held-out C={HELDOUT_BUDGET:.0e} d={d} val={run['val_loss']:.4f} "
                      f"(predicted {store['prediction']['runs'][d]['loss_approach3']:.4f}) "
                      f"cpu={run['cpu_s']:.1f}s", flush=True)
                if args.save:
                    save_store(store)
    summary = {"benchmark": "scaling", "runs": len(store["runs"]),
               "cpu_s": round(sum(r["cpu_s"] for r in store["runs"]), 1)}
    if hasattr(fits, "approach2") and len(sweep_runs(store)) >= 12:
        a2, a3 = analyse(store, n_boot=args.n_boot)
        print(fits.describe(a2, a3))
        for C, n, d, loss in zip(a2["budgets"], a2["n_opt_at"], a2["d_opt_at"], a2["loss_min_at"]):
            print(f"C={C:.0e}: N_opt={n:,.0f} D_opt={d:,.0f} ({d / n:.0f} tokens per parameter) L_min={loss:.4f}")
        for r in (r for r in store["runs"] if r["role"] == "heldout"):
            pr = store["prediction"]["runs"][str(r["d_model"])]["loss_approach3"]
            print(f"held-out d={r['d_model']}: predicted {pr:.4f}, measured {r['val_loss']:.4f} "
                  f"({100 * (pr - r['val_loss']) / r['val_loss']:+.2f} %)")
        # diagnoses, after the held-out runs (not predictions): N counted with the embedding, and
        # approach 3 without the runs too short to leave warmup behind
        runs = sweep_runs(store)
        a2t = fits.approach2([dict(r, n_non_embedding=r["n_total"]) for r in runs], n_boot=0)
        print(f"approach 2 with N counted with the embedding: a = {a2t['n_opt']['coef'][1]:.3f}")
        long = fits.approach3([r for r in runs if r["steps"] >= 100], n_boot=0, starts=5)["params"]
        print(f"approach 3 without the {sum(r['steps'] < 100 for r in runs)} runs under 100 steps: "
              f"a = {long['a']:.3f}, N_opt({HELDOUT_BUDGET:.0e}) = {fits.chinchilla_optimum(HELDOUT_BUDGET, long)[0]:,.0f}")
        for r in (r for r in store["runs"] if r["role"] == "heldout"):
            pr = fits.chinchilla_loss(r["n_non_embedding"], r["tokens"], long)
            print(f"  held-out d={r['d_model']}: {pr:.4f} vs {r['val_loss']:.4f} "
                  f"({100 * (pr - r['val_loss']) / r['val_loss']:+.2f} %)")
        if args.save:
            store["fits"] = {"approach2": a2, "approach3": a3, "n_boot": args.n_boot}
            save_store(store)
        summary.update({"a": a2["n_opt"]["coef"][1], "b": a2["d_opt"]["coef"][1],
                        "alpha": a3["params"]["alpha"], "beta": a3["params"]["beta"], "E": a3["params"]["E"]})
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
