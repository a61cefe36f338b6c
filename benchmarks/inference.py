"""Making generation cheap (chapter 17), measured: weight-only quantization, speculative decoding,
the paged KV cache and continuous batching.

* **Quantization**: a character-level target (``--target nano``: chapter 17's, d_model 64, 2 layers;
  ``micro``: d_model 128, 4 layers; trained ``--steps`` steps on the built-in corpus) and a
  GPT-2-small-shaped model built from ``TransformerConfig.preset("gpt2")`` with random weights
  (bytes and tokens/s only: its loss means nothing; ``--no-big`` skips it) in float32, int8 per
  output channel and int4 in groups of 32 (symmetric and asymmetric): bytes of the linear weights
  against float32, validation loss of the trained model and its change, greedy tokens/s with the KV
  cache. torchao's int8 weight-only is measured when ``torchao`` imports, else the reason is recorded.
* **Speculative decoding**: for each draft size (``--drafts``: d_model x layers, each trained
  ``--draft-steps`` steps) and each lookahead ``k`` (``--ks``), the acceptance rate, the tokens per
  target forward and the speed-up over the target alone (sampling at temperature 1, the same
  seeds; the two interleaved in each repetition; medians), and a draft step's cost in target steps.
* **Paged memory**: a batch of 32 requests of lengths uniform in 20..1024 with GPT-2 small's cache
  (12 layers, 12 heads of 64, float32): memory reserved contiguously and in blocks of 16.
* **Continuous batching** on the target: ``--requests`` requests of mixed prompt and output
  lengths arriving over time, served by ``paged.ContinuousBatcher`` from one pool: tokens/s against
  decoding each alone with ``generate``, whether every output is equal, and the peak blocks held
  against a contiguous reservation of max_seq_len positions per request.

Run:  python benchmarks/inference.py [--target micro] [--steps 400] [--draft-steps 150] [--repeats 3] [--save PATH]
Prints a table, then one JSON line (the last line).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from record import save_result  # benchmarks/record.py (the script's folder is on sys.path)

from fundamentallm import (
    CharacterTokenizer,
    TrainConfig,
    Trainer,
    Transformer,
    TransformerConfig,
    load_corpus,
)
from fundamentallm.generation import generate
from fundamentallm.paged import BlockPool, ContinuousBatcher, Request, kv_memory
from fundamentallm.quantize import linear_weight_bytes, quantize_model
from fundamentallm.speculative import speculative_generate

TARGETS = {"nano": (64, 4, 2), "micro": (128, 4, 4)}  # d_model, heads, layers
SCHEMES = {"float32": None, "int8/row": (8, None, True), "int4/32 sym": (4, 32, True),
           "int4/32 asym": (4, 32, False)}


def train(vocab, data, d_model, heads, layers, steps):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=vocab, d_model=d_model, num_heads=heads, num_layers=layers,
                                          max_seq_len=64, attn_impl="sdpa"))
    if steps:
        Trainer(model, data, config=TrainConfig(lr=1e-2, warmup_steps=min(20, steps), max_steps=steps,
                                                batch_size=16, progress=False, device="cpu")).fit()
    return model.eval()


def rate(fn, n):
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def quantization(model, val, prompt, tokens, repeats):
    x, y = val
    out, float_bytes = {}, linear_weight_bytes(model)
    models = {name: model if s is None else quantize_model(copy.deepcopy(model), *s) for name, s in SCHEMES.items()}
    rates = {name: [] for name in models}
    for _ in range(repeats):
        for name, m in models.items():
            rates[name].append(rate(lambda m=m: generate(m, prompt, tokens, greedy=True), tokens))
    for name, m in models.items():
        row = {"bytes": linear_weight_bytes(m), "ratio": round(linear_weight_bytes(m) / float_bytes, 4),
               "tokens_per_s": round(statistics.median(rates[name]), 1)}
        if val[0] is not None:
            with torch.no_grad():
                row["val_loss"] = round(m(x, y)[1].item(), 4)
        out[name] = row
    if "val_loss" in out["float32"]:
        for row in out.values():
            row["loss_change_pct"] = round(100 * (row["val_loss"] / out["float32"]["val_loss"] - 1), 3)
    return out


def torchao_int8(model, prompt, tokens) -> dict:
    try:
        from torchao.quantization import int8_weight_only, quantize_
    except ImportError as e:
        return {"skipped": f"not run: torchao is not installed in the course's environment, which adds no "
                           f"dependencies, and this machine has no network to fetch it ({e.__class__.__name__}: {e})"}
    m = copy.deepcopy(model)
    quantize_(m, int8_weight_only())
    return {"tokens_per_s": round(rate(lambda: generate(m, prompt, tokens, greedy=True), tokens), 1)}


def step_seconds(model, prompt, reps=30):
    """Seconds of one decoding step (one token, KV cache)."""
    cache = model.make_kv_cache(1)
    with torch.no_grad():
        model.next_token_logits(prompt[None], kv_cache=cache)
        start = time.perf_counter()
        for _ in range(reps):
            cache.length = len(prompt)
            model.next_token_logits(prompt[None, -1:], kv_cache=cache)
    return (time.perf_counter() - start) / reps


def speculative(target, draft, prompt, tokens, ks, repeats):
    out = {"draft_step_in_target_steps": round(step_seconds(draft, prompt) / step_seconds(target, prompt), 3)}
    for k in ks:
        base, fast, stats_all = [], [], []
        for r in range(repeats):
            base.append(rate(lambda r=r: generate(target, prompt, tokens, generator=torch.Generator().manual_seed(r)),
                             tokens))
            start = time.perf_counter()
            _, stats = speculative_generate(target, draft, prompt, tokens, k=k,
                                            generator=torch.Generator().manual_seed(r))
            fast.append(tokens / (time.perf_counter() - start))
            stats_all.append(stats)
        drafted = sum(s.drafted for s in stats_all)
        out[str(k)] = {"acceptance_rate": round(sum(s.accepted for s in stats_all) / drafted, 3),
                       "tokens_per_target_forward": round(sum(s.generated for s in stats_all)
                                                          / sum(s.rounds for s in stats_all), 3),
                       "target_tokens_per_s": round(statistics.median(base), 1),
                       "speculative_tokens_per_s": round(statistics.median(fast), 1),
                       "speedup": round(statistics.median(fast) / statistics.median(base), 3)}
    return out


def batching(model, vocab, num_requests, block_size=8) -> dict:
    """Continuous batching against decoding each request alone: tokens/s, equality, peak blocks."""
    g = torch.Generator().manual_seed(0)
    specs = [(int(torch.randint(2, 17, (), generator=g)), int(torch.randint(4, 41, (), generator=g)), 2 * i)
             for i in range(num_requests)]  # prompt length, new tokens, arrival step
    prompts = [torch.randint(0, vocab, (n,), generator=g).tolist() for n, _, _ in specs]
    T = model.config.max_seq_len
    pool = BlockPool.for_model(model, num_blocks=num_requests * -(-T // block_size), block_size=block_size)
    requests = [Request(p, new, arrival) for p, (_, new, arrival) in zip(prompts, specs)]
    batcher = ContinuousBatcher(model, pool)
    start = time.perf_counter()
    batcher.run(requests)
    batched_s = time.perf_counter() - start
    start = time.perf_counter()
    alone = [generate(model, torch.tensor(p), new, greedy=True)[len(p):].tolist()
             for p, (_, new, _) in zip(prompts, specs)]
    alone_s = time.perf_counter() - start
    total = sum(len(r.output) for r in requests)
    peak = max(t["blocks_used"] for t in batcher.trace)
    running = [len(t["running"]) for t in batcher.trace]
    # a contiguous cache reserves max_seq_len positions for every request running at once
    contiguous_peak = max(running) * T
    return {"requests": num_requests, "tokens": total, "steps": len(batcher.trace),
            "max_running": max(running), "outputs_equal_alone": all(r.output == a for r, a in zip(requests, alone)),
            "batched_tokens_per_s": round(total / batched_s, 1), "alone_tokens_per_s": round(total / alone_s, 1),
            "speedup": round(alone_s / batched_s, 3), "block_size": block_size,
            "peak_positions_paged": peak * block_size, "peak_positions_contiguous": contiguous_peak,
            "peak_saving": round(1 - peak * block_size / contiguous_peak, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(TARGETS), default="micro",
                        help="the target's size: nano (chapter 17's, d_model 64, 2 layers) or micro (128, 4 layers)")
    parser.add_argument("--steps", type=int, default=400, help="training steps of the target")
    parser.add_argument("--draft-steps", type=int, default=150, help="training steps of each draft")
    parser.add_argument("--drafts", nargs="+", default=["32x1", "64x1", "64x2"],
                        help="draft sizes, d_model x layers (heads = d_model / 16)")
    parser.add_argument("--requests", type=int, default=12, help="requests of the continuous-batching run")
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per generation (<= 52)")
    parser.add_argument("--big-tokens", type=int, default=16, help="new tokens for the GPT-2-sized model")
    parser.add_argument("--no-big", action="store_true", help="skip the GPT-2-sized model")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 6])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--save", default=None, help="also write the JSON here")
    args = parser.parse_args()
    if not 1 <= args.tokens <= 64 - 6 - max(args.ks):
        parser.error(f"--tokens={args.tokens} must be in [1, {64 - 6 - max(args.ks)}] (the models' 64 positions)")
    try:
        drafts = {name: tuple(int(x) for x in name.split("x")) for name in args.drafts}
    except ValueError:
        parser.error(f"--drafts={args.drafts} must be d_model x layers, e.g. 32x1")
    torch.set_num_threads(args.threads)

    text = load_corpus("python-docs")
    tok = CharacterTokenizer.from_text(text)
    data = torch.tensor(tok.encode(text))
    split = int(0.9 * len(data))
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(data) - split - 65, (64,), generator=g) + split
    val = (torch.stack([data[s:s + 64] for s in starts]), torch.stack([data[s + 1:s + 65] for s in starts]))
    target = train(tok.vocab_size, data[:split], *TARGETS[args.target], args.steps)
    prompt = torch.tensor(tok.encode("The "))

    result = {"benchmark": "inference", "target": args.target, "steps": args.steps, "draft_steps": args.draft_steps,
              "tokens": args.tokens, "repeats": args.repeats, "threads": args.threads,
              "gpt2_random_weights": "the GPT-2-sized model has random weights: its bytes and tokens/s are "
                                     "meaningful, its loss is not (not measured)"}
    result["quantization"] = quantization(target, val, prompt, args.tokens, args.repeats)
    result["torchao_int8"] = torchao_int8(target, prompt, args.tokens)
    if not args.no_big:
        torch.manual_seed(0)
        big = Transformer(TransformerConfig.preset("gpt2", attn_impl="sdpa")).eval()
        ids = torch.randint(0, 50257, (8,), generator=torch.Generator().manual_seed(0))
        result["quantization_gpt2_random"] = quantization(big, (None, None), ids, args.big_tokens, 1)
        del big
    result["speculative"] = {}
    for name, (d, layers) in drafts.items():
        draft = train(tok.vocab_size, data[:split], d, max(1, d // 16), layers, args.draft_steps)
        row = speculative(target, draft, prompt, args.tokens, args.ks, args.repeats)
        result["speculative"][name] = {"parameters": draft.num_parameters(), **row}
    result["target_parameters"] = target.num_parameters()
    result["continuous_batching"] = batching(target, tok.vocab_size, args.requests)
    lengths = torch.randint(20, 1025, (32,), generator=torch.Generator().manual_seed(0)).tolist()
    mem = kv_memory(lengths, 1024, 16, bytes_per_position=2 * 12 * 12 * 64 * 4)
    result["paged"] = {"requests": 32, "block_size": 16, **{key: (round(v, 4) if isinstance(v, float) else v)
                                                           for key, v in mem.items()}}

    for name, row in result["quantization"].items():
        print(f"{name:>13}: {row['ratio']:.3f}x bytes, loss {row.get('val_loss')} "
              f"({row.get('loss_change_pct')} %), {row['tokens_per_s']} tokens/s")
    for name, row in result.get("quantization_gpt2_random", {}).items():
        print(f"gpt2 {name:>13}: {row['bytes'] / 2**20:.1f} MiB ({row['ratio']:.3f}x), {row['tokens_per_s']} tokens/s")
    print("torchao int8:", result["torchao_int8"])
    for name, rows in result["speculative"].items():
        print(f"draft {name} ({rows['parameters']:,} parameters; a step costs {rows['draft_step_in_target_steps']} "
              f"of a target step of {result['target_parameters']:,}):")
        for k, row in rows.items():
            if isinstance(row, dict):
                print(f"  k={k}: acceptance {row['acceptance_rate']}, {row['tokens_per_target_forward']} "
                      f"tokens/forward, speed-up {row['speedup']}x")
    cb = result["continuous_batching"]
    print(f"continuous batching: {cb['requests']} requests, up to {cb['max_running']} at once, outputs equal alone: "
          f"{cb['outputs_equal_alone']}, {cb['batched_tokens_per_s']} against {cb['alone_tokens_per_s']} tokens/s "
          f"({cb['speedup']}x), peak {cb['peak_positions_paged']} positions paged against "
          f"{cb['peak_positions_contiguous']} contiguous")
    print(f"paged: contiguous waste {mem['contiguous_waste']:.1%}, paged waste {mem['paged_waste']:.1%}")
    if args.save:
        save_result(result, args.save)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
