"""Response time of each chapter's live explorer (fundamentallm.explorers): the time from a
changed control to the new picture (``draw`` and the PNG), the target being under 300 ms on 2
cores, except the explicit "train more" button. Also the time to draw each explorer's book frames.

Wall time depends on the machine's load: each line also gives the process's CPU time for the
same work, what the wall time would be on an otherwise idle core. The objects are the chapters' sizes: a nano character model (chapters 7 and 10), chapter 6's
32-wide models, chapter 8's 512-token BPE, chapter 9's nano decoder. Each explorer's controls are
changed ``--repeats`` times in turn (first to another value, then back), after one warm-up
render; the median and the largest time are printed.

Run:  OMP_NUM_THREADS=1 python benchmarks/explorers.py [--repeats 5] [--no-frames]
Prints one line per explorer, then one JSON line (the last line):
``{"ms": {"attention (ch02)": {"median": ..., "max": ..., "cpu_median": ...}, ...}, "train_more_ms": {"total": ..., "redraw": ...},
"frames_s": {...}, "target_ms": 300, "over_target": [...], "loadavg": [...], "torch": ...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

TARGET_MS = 300


def build():
    """The nine explorers over chapter-sized live objects; returns {name: (explorer, changes)}."""
    import torch

    import fundamentallm as fl
    from fundamentallm import explorers as X

    torch.manual_seed(0)
    text = fl.load_corpus("python-docs")[:300_000]
    tok = fl.CharacterTokenizer.from_text(text)
    ids = torch.tensor(tok.encode(text))
    nano = fl.Transformer(fl.TransformerConfig.preset("nano", vocab_size=tok.vocab_size, attn_impl="sdpa"))

    def ch06_model(num_layers, norm_position):  # chapter 6's make_model
        torch.manual_seed(0)
        return fl.Transformer(fl.TransformerConfig(
            vocab_size=tok.vocab_size, d_model=32, num_heads=4, d_ff=128, num_layers=num_layers,
            max_seq_len=32, activation="relu", norm_position=norm_position, tie_weights=False,
            attn_impl="sdpa"))

    def ch09_model():  # chapter 9's make_model
        torch.manual_seed(0)
        return fl.Transformer(fl.TransformerConfig(
            vocab_size=tok.vocab_size, d_model=64, num_heads=4, num_layers=2, max_seq_len=32,
            norm="rmsnorm", pos_encoding="rope", activation="swiglu", bias=False, attn_impl="sdpa"))

    xb, yb = ids[:8 * 32].view(8, 32), ids[1:8 * 32 + 1].view(8, 32)
    bpe = fl.ByteBPETokenizer.from_text(text[:100_000], 512)
    return {
        "attention (ch02)": (X.attention_explorer(), [{"sentence": "a rose is a rose is a rose"},
                                                      {"queries_and_keys": "random W_q, W_k"}]),
        "rope (ch04)": (X.rope_explorer(), [{"m": 100}, {"n": 7}, {"base": 100}]),
        "norm (ch05)": (X.norm_explorer(), [{"offset": 3.5}, {"scale": 6.0}, {"norm": "RMSNorm"}]),
        "depth (ch06)": (X.depth_explorer(ch06_model, xb, yb), [{"depth": 24}, {"depth": 12}, {"show": "post"}]),
        "logits (ch07)": (X.logits_explorer(nano, tok), [{"prompt": "import os"}, {"after_block": 1}]),
        "tokenizer (ch08)": (X.tokenizer_explorer(bpe), [{"sentence": "def encode(self, text):"},
                                                         {"merges_used": 100}]),
        "training (ch09)": (X.training_explorer(ch09_model, ids, 32), [{"warmup_steps": 50},
                                                                       {"schedule": "constant"}]),
        "sampling (ch10)": (X.sampling_explorer(nano, tok), [{"temperature": 0.6}, {"top_k": 10},
                                                            {"top_p": 0.8}, {"prompt": "def "}]),
        "cache (ch14)": (X.cache_explorer(), [{"kv_heads": 2}, {"window": 4096}, {"context": 65536}]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of changes per explorer (default: 5)")
    parser.add_argument("--no-frames", action="store_true", help="skip timing the book's frames")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"argument --repeats: {args.repeats} must be >= 1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import matplotlib

    matplotlib.use("Agg")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    print(f"load average {os.getloadavg()} on {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s)")
    result = {"ms": {}, "frames_s": {}, "target_ms": TARGET_MS}
    for name, (explorer, changes) in build().items():
        explorer.widget  # noqa: B018 -- the live face, drawn once (warm-up)
        start = {k: explorer.values[k] for change in changes for k in change}
        times, cpu = [], []
        for _ in range(args.repeats):
            for change in changes:
                for values in (change, {k: start[k] for k in change}):
                    out = explorer.set(**values)
                    assert not isinstance(out, str), f"{name}: {values} gave the message {out!r}"
                    times.append(1000 * explorer.seconds)
                    cpu.append(1000 * explorer.cpu_seconds)
        result["ms"][name] = {"median": round(statistics.median(times), 1), "max": round(max(times), 1),
                              "cpu_median": round(statistics.median(cpu), 1)}
        line = (f"{name:<18} change -> picture: median {statistics.median(times):4.0f} ms "
                f"(CPU {statistics.median(cpu):4.0f} ms), max {max(times):5.0f} ms")
        if name.startswith("training"):  # the explicit button, exempt from the target
            t0 = time.perf_counter()
            explorer.press("train 20 more steps")
            total = 1000 * (time.perf_counter() - t0)
            result["train_more_ms"] = {"total": round(total, 1), "redraw": round(1000 * explorer.seconds, 1)}
            line += f"; 'train 20 more steps' (exempt): {total:.0f} ms, of which {1000 * explorer.seconds:.0f} ms redraw"
        if not args.no_frames:
            t0 = time.perf_counter()
            frames = explorer.static
            result["frames_s"][name] = round(time.perf_counter() - t0, 2)
            line += f"; book: {len(frames.frames)} frames in {result['frames_s'][name]:.1f} s, {frames.nbytes // 1000} kB"
        print(line, flush=True)
    result["over_target"] = [n for n, t in result["ms"].items() if t["median"] > TARGET_MS]
    result["over_target_cpu"] = [n for n, t in result["ms"].items() if t["cpu_median"] > TARGET_MS]
    result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    result["torch"] = torch.__version__
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
