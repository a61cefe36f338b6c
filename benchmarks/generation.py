"""Generation speed: tokens/s with and without the KV cache, next to Hugging Face's ``generate``.

Greedy decoding from a 16-token prompt per sequence, random weights (nothing downloaded), at
batch 1 and at batch 8 (``--batch``; eight different prompts of the same length, so no padding;
tokens/s counts every sequence's tokens):

* ``tiny``: ``TransformerConfig.preset("tiny")`` (d_model 256, 6 layers, 8 heads, vocab 256),
  500 new tokens (``max_seq_len`` raised to 1024 so that prompt + 500 tokens fit);
* ``gpt2``: ``TransformerConfig.preset("gpt2")`` (GPT-2 small, 124M parameters), 200 new tokens;
* ``tiny-gqa``: a Llama-architecture model of the tiny size with 2 key/value heads for 8 query
  heads (grouped-query attention), 500 new tokens;
* ``llama-gqa``: Llama-3.2-1B-shaped (d_model 2048, 32 query and 8 key/value heads of size 64,
  d_ff 8192, RoPE base 500000 with Llama 3 scaling, untied) with 4 of its 16 layers and a 32000
  vocabulary instead of 128256, so that two copies fit a shared CPU machine, 100 new tokens.

Both models of a size get the same random weights (``fundamentallm.interop.from_hf_gpt2`` /
``from_hf_llama``). Each size is measured with ``fundamentallm.generation.generate``
(``attn_impl="sdpa"``; ``use_cache=True`` and ``False`` on a model prepared with
``optimize_for_decoding``, and ``use_cache=True`` on one with nn.Linear's default weight layout)
and with the Hugging Face model's ``generate`` (``GPT2LMHeadModel`` or ``LlamaForCausalLM``;
``do_sample=False``, ``min_new_tokens`` = ``max_new_tokens`` so it never stops early). The KV
cache's bytes per token are reported (ours stores only the key/value heads, as HF's does). Implementations are interleaved
in each repetition so that a change in machine load hits them alike; the figure is the median.

Without the KV cache (recomputation) is measured at batch 1 only. ``--profile`` adds where the
time of one cached token goes, for ours and HF's (torch.profiler: matrix products, attention, every
other operator, and the rest -- Python, generation bookkeeping), and the floor the memory puts
under it: at batch 1 every weight is read once per token, so the weights' bytes divided by the
rate at which this machine streams memory (measured here: a sum over a tensor larger than the
caches) bounds the tokens per second of any implementation of the same computation.

Run:  python benchmarks/generation.py [--repeats 3] [--sizes tiny gpt2] [--batch 1 8] [--profile]
Prints a table, then one JSON line (the last line).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import statistics
import time

import torch
from record import save_result  # benchmarks/record.py (the script's folder is on sys.path)

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.cli import positive_int
from fundamentallm.generation import generate, optimize_for_decoding
from fundamentallm.interop import from_hf_gpt2, from_hf_llama

SIZES = {
    "tiny": dict(preset="tiny", overrides=dict(max_seq_len=1024), new_tokens=500),
    "gpt2": dict(preset="gpt2", overrides=dict(), new_tokens=200),
    "tiny-gqa": dict(llama=dict(vocab_size=256, hidden_size=256, intermediate_size=688, num_hidden_layers=6,
                                num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024),
                     new_tokens=500),
    "llama-gqa": dict(llama=dict(vocab_size=32000, hidden_size=2048, intermediate_size=8192, num_hidden_layers=4,
                                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=1024,
                                 rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                  "original_max_position_embeddings": 8192}),
                      new_tokens=100),
}
PROMPT_LEN = 16


def build_llama_pair(size: str):
    """(ours, hf) for a Llama-architecture size: HF's model from a config, ours imported from it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(**SIZES[size]["llama"], tie_word_embeddings=False, bos_token_id=0,
                                      eos_token_id=0, pad_token_id=0)).eval()
    imported = from_hf_llama(hf)
    ours = Transformer(dataclasses.replace(imported.config, attn_impl="sdpa")).eval()
    ours.load_state_dict(imported.state_dict())
    return ours, hf


def build_ours(size: str) -> Transformer:
    spec = SIZES[size]
    torch.manual_seed(0)
    config = TransformerConfig.preset(spec["preset"], attn_impl="sdpa", **spec["overrides"])
    return Transformer(config).eval()


def build_hf(config: TransformerConfig):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    hf_config = GPT2Config(vocab_size=config.vocab_size, n_positions=config.max_seq_len,
                           n_embd=config.d_model, n_layer=config.num_layers, n_head=config.num_heads,
                           n_inner=config.ff_dim, activation_function="gelu_new",
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                           bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = GPT2LMHeadModel(hf_config).eval()
    return model


def bench_size(size: str, n: int, repeats: int, skip_recompute: bool, recompute_repeats: int,
               batch: int = 1, profile: bool = False) -> dict:
    if "llama" in SIZES[size]:
        ours, hf = build_llama_pair(size)
    else:
        ours = build_ours(size)
        hf = build_hf(ours.config)
        # The same weights in both models (fundamentallm.interop maps HF's names and layouts), so
        # the two run exactly the same computation.
        ours.load_state_dict(from_hf_gpt2(hf).state_dict())
    # A second copy with the decoding layout (wide weights column-major); ``ours`` keeps
    # nn.Linear's default layout, so the table shows what the layout alone is worth.
    fast = optimize_for_decoding(copy.deepcopy(ours))
    prompt = torch.randint(0, ours.config.vocab_size, (batch, PROMPT_LEN), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(prompt)

    def run_cache():
        return generate(fast, prompt, n, greedy=True, use_cache=True)

    def run_cache_default_layout():
        return generate(ours, prompt, n, greedy=True, use_cache=True)

    def run_recompute():
        return generate(fast, prompt, n, greedy=True, use_cache=False)

    def run_recompute_default_layout():
        return generate(ours, prompt, n, greedy=True, use_cache=False)

    def run_hf():
        with torch.inference_mode():
            out = hf.generate(prompt, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, use_cache=True, pad_token_id=0)
        assert out.shape == (batch, PROMPT_LEN + n), out.shape
        return out

    # Warm-up (allocator, thread pool, HF's first-call set-up) on a few tokens.
    generate(ours, prompt, 4, greedy=True)
    generate(fast, prompt, 4, greedy=True)
    hf.generate(prompt, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    runs = {"ours_cache": run_cache, "hf_cache": run_hf, "ours_cache_default_layout": run_cache_default_layout}
    if not skip_recompute and batch == 1:
        runs["ours_recompute"] = run_recompute
        runs["ours_recompute_default_layout"] = run_recompute_default_layout
    times: dict[str, list[float]] = {k: [] for k in runs}
    outputs: dict[str, torch.Tensor] = {}
    for r in range(repeats):
        for name, fn in runs.items():
            if name.startswith("ours_recompute") and r >= recompute_repeats:
                continue  # recomputation is slow (minutes at GPT-2 size): fewer repetitions
            t0 = time.perf_counter()
            outputs[name] = fn()
            times[name].append(time.perf_counter() - t0)
            print(f"  {size} batch {batch} {name:25s} run {r}: {times[name][-1]:7.2f} s  "
                  f"({batch * n / times[name][-1]:7.1f} tok/s, load {os.getloadavg()[0]:.2f})", flush=True)
    # The cache changes only the speed: greedy tokens must be identical.
    if "ours_recompute" in outputs:
        assert torch.equal(outputs["ours_cache"], outputs["ours_recompute"]), \
            "greedy tokens differ with and without the KV cache"
        assert torch.equal(outputs["ours_cache"], outputs["ours_recompute_default_layout"]), \
            "greedy tokens differ with and without the KV cache (default layout)"
    assert torch.equal(outputs["ours_cache"], outputs["ours_cache_default_layout"]), \
        "greedy tokens differ between the two weight layouts"
    same_as_hf = torch.equal(outputs["ours_cache"], outputs["hf_cache"])  # near-ties may flip an argmax
    result = {"size": size, "batch": batch, "params": ours.num_parameters(),
              "hf_params": sum(p.numel() for p in hf.parameters()),
              "new_tokens": n, "prompt_len": PROMPT_LEN, "same_tokens_as_hf": same_as_hf,
              "num_heads": ours.config.num_heads, "num_kv_heads": ours.config.kv_heads,
              # K and V of every layer for one position, batch 1 (HF's cache stores the same per
              # token; ours is allocated for max_seq_len positions up front)
              "kv_cache_bytes_per_token": ours.make_kv_cache(1).bytes_per_token(),
              "weight_bytes": sum(p.numel() * p.element_size() for p in ours.parameters()),
              "kv_cache_bytes_if_mha": ours.make_kv_cache(1).bytes_per_token() * ours.config.num_heads
              // ours.config.kv_heads}
    for name, ts in times.items():
        med = statistics.median(ts)
        result[f"{name}_tok_s"] = round(batch * n / med, 2)
        result[f"{name}_runs_s"] = [round(t, 3) for t in ts]
    if "ours_recompute_tok_s" in result:
        result["cache_speedup"] = round(result["ours_cache_tok_s"] / result["ours_recompute_tok_s"], 2)
        result["cache_speedup_default_layout"] = round(
            result["ours_cache_default_layout_tok_s"] / result["ours_recompute_default_layout_tok_s"], 2)
    result["vs_hf"] = round(result["ours_cache_tok_s"] / result["hf_cache_tok_s"], 3)
    result["default_layout_vs_hf"] = round(result["ours_cache_default_layout_tok_s"] / result["hf_cache_tok_s"], 3)
    if profile:
        result["profile_ms_per_step"] = {"ours_cache": time_split(run_cache, n), "hf_cache": time_split(run_hf, n)}
    return result


# Where a decoding step's time goes: torch.profiler's operators, grouped.
GROUPS = {"matrix products": ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::matmul"),
          "attention": ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_softmax")}


def time_split(fn, n: int) -> dict:
    """Milliseconds per decoding step (one new token per sequence) of ``fn``, split into the
    operator groups above, every other operator, and the rest (wall time outside any operator:
    Python and the generation loop's bookkeeping). Self times, so nothing is counted twice."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
    split = dict.fromkeys((*GROUPS, "other operators"), 0.0)
    for event in prof.key_averages():
        if not event.key.startswith("aten::"):
            continue
        group = next((g for g, names in GROUPS.items() if event.key in names), "other operators")
        split[group] += event.self_cpu_time_total / 1e3
    split["outside operators"] = wall * 1e3 - sum(split.values())
    split["total (profiled)"] = wall * 1e3
    return {k: round(v / n, 3) for k, v in split.items()}


def stream_gb_s(repeats: int = 5) -> float:
    """The rate (GB/s) at which this machine reads memory with torch's threads: the best of
    ``repeats`` sums over a 512 MiB float32 tensor, larger than any CPU cache."""
    x = torch.ones(128 * 2**20)
    x.sum()
    best = min(_timed(x.sum) for _ in range(repeats))
    return x.numel() * x.element_size() / best / 1e9


def last_level_cache_bytes() -> int:
    """The largest CPU cache's size in bytes (Linux's /sys), or 0 where it cannot be read."""
    import glob

    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        text = open(path).read().strip()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=0)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--sizes", nargs="+", action="extend", default=None, choices=list(SIZES))
    parser.add_argument("--skip-recompute", action="store_true", help="measure only the cached paths")
    parser.add_argument("--new-tokens", type=positive_int, default=None,
                        help="override the number of new tokens of every size (for quick trials)")
    parser.add_argument("--gpt2-recompute-repeats", type=positive_int, default=1,
                        help="repetitions of the slow no-cache run at GPT-2 size")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--batch", nargs="+", type=positive_int, default=[1, 8],
                        help="batch sizes (default: 1 8)")
    parser.add_argument("--profile", action="store_true",
                        help="add where a cached step's time goes, and the memory's floor at batch 1")
    parser.add_argument("--save", default=None, metavar="PATH",
                        help="also write the JSON result to PATH (e.g. fundamentallm/results/NAME.json)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    load_start = os.getloadavg()
    results = []
    gb_s = stream_gb_s() if args.profile else None
    for size, batch in [(s, b) for s in args.sizes or list(SIZES) for b in args.batch]:
        r = bench_size(size, args.new_tokens or SIZES[size]["new_tokens"], args.repeats, args.skip_recompute,
                       args.repeats if size == "tiny" else args.gpt2_recompute_repeats, batch, args.profile)
        if gb_s and batch == 1 and r["weight_bytes"] > last_level_cache_bytes():
            # every weight read from memory once per token: no implementation of this computation
            # is faster (a model whose weights fit in the cache has no such floor)
            r["memory_floor_tok_s"] = round(gb_s * 1e9 / r["weight_bytes"], 1)
        results.append(r)
        rec = "ours_recompute_tok_s" in r
        print(f"{size:5s} batch {batch} params={r['params'] / 1e6:.2f}M new_tokens={r['new_tokens']} "
              f"KV cache {r['kv_cache_bytes_per_token'] / 1024:.0f} KiB/token "
              f"({r['num_kv_heads']} of {r['num_heads']} heads; MHA {r['kv_cache_bytes_if_mha'] / 1024:.0f}): "
              f"decoding layout: cache {r['ours_cache_tok_s']:.1f} tok/s"
              + (f", recompute {r['ours_recompute_tok_s']:.1f} (x{r['cache_speedup']})" if rec else "")
              + f" | default layout: cache {r['ours_cache_default_layout_tok_s']:.1f} tok/s"
              + (f", recompute {r['ours_recompute_default_layout_tok_s']:.1f} "
                 f"(x{r['cache_speedup_default_layout']})" if rec else "")
              + f" | HF {r['hf_cache_tok_s']:.1f} tok/s (ours/HF {r['vs_hf']}, "
              f"default layout/HF {r['default_layout_vs_hf']})"
              + (f" | memory floor {r['memory_floor_tok_s']:.1f} tok/s" if "memory_floor_tok_s" in r else ""),
              flush=True)
        for name, split in r.get("profile_ms_per_step", {}).items():
            print(f"      {name:10s} ms per step: " + ", ".join(f"{k} {v:.2f}" for k, v in split.items()), flush=True)
    out = {"benchmark": "generation", "results": results, "threads": torch.get_num_threads(),
           "memory_read_gb_s": round(gb_s, 2) if gb_s else None,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "loadavg_start": [round(x, 2) for x in load_start],
           "loadavg_end": [round(x, 2) for x in os.getloadavg()]}
    print(json.dumps(out))
    if args.save:
        save_result(out, args.save)


if __name__ == "__main__":
    main()
