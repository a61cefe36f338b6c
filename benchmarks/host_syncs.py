"""Host reads per training step and per generated token (``fundamentallm.utils.count_host_syncs``).

Each read of a tensor's value on the host (``.item()``, ``int(t)``, ``bool(t)``, ``.tolist()``;
``aten._local_scalar_dense``) makes the CPU wait for the GPU to finish its queue. The package
checks its inputs once, at the door (the public ``forward``, once per ``generate`` call, when the
``Trainer`` receives its data), so that:

* a public ``model(x, y)`` reads once (every value check together);
* a ``Trainer.train_step`` reads once (its logged loss, with what its checks need), two
  micro-batches included, as the model runs inside ``utils.inputs_checked``;
* a generated token costs no read (greedy or sampled, with the KV cache) beyond the few reads
  of the whole call (the prompt's check, the first logits' check); with ``stop`` one per token.

The counts do not depend on the machine (no timing): run on a CPU, they are a GPU's counts too.

Run:  python benchmarks/host_syncs.py [--device cpu|cuda|...]   (the model and data on that device)
Prints a table, then one JSON line (the last line).
"""

from __future__ import annotations

import argparse
import json

import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.generation import generate
from fundamentallm.training import TrainConfig, Trainer
from fundamentallm.utils import count_host_syncs

NEW_TOKENS = 32


def _count(fn) -> int:
    with count_host_syncs() as counted:
        fn()
    return counted["syncs"]


def main(device: str = "cpu") -> dict:
    torch.manual_seed(0)
    config = TransformerConfig.preset("nano", vocab_size=96, max_seq_len=64, dropout=0.0,
                                      pos_encoding="rope", norm="rmsnorm", activation="swiglu", bias=False)
    model = Transformer(config).to(device)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 96, (4, 32), generator=g).to(device)
    data = torch.randint(0, 96, (5000,), generator=g)
    trainer = Trainer(model, data, config=TrainConfig(max_steps=4, batch_size=8, block_size=32, grad_accum_steps=2,
                                                      warmup_steps=0, progress=False, device=device))
    trainer.train_step()  # warm up (optimizer state allocated)
    prompt = ids[:1, :8]
    seeded = dict(generator=torch.Generator(device=device).manual_seed(0))
    counts = {
        "public forward + backward": _count(lambda: model(ids, ids)[1].backward()),
        "Trainer.train_step (2 micro-batches)": _count(trainer.train_step),
        f"generate greedy, {NEW_TOKENS} tokens": _count(
            lambda: generate(model, prompt, NEW_TOKENS, greedy=True)),
        f"generate sampled (top_k, top_p), {NEW_TOKENS} tokens": _count(
            lambda: generate(model, prompt, NEW_TOKENS, top_k=20, top_p=0.9, **seeded)),
        f"generate greedy with stop, {NEW_TOKENS} tokens": _count(
            lambda: generate(model, prompt, NEW_TOKENS, greedy=True, stop=[95])),
    }
    width = max(map(len, counts))
    for name, n in counts.items():
        per = f"  ({n / NEW_TOKENS:.2f} per token)" if "generate" in name else ""
        print(f"{name:<{width}}  {n:>3} host reads{per}")
    return {"benchmark": "host_syncs", "new_tokens": NEW_TOKENS, "device": str(device), "counts": counts}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="where the model and data live (default: cpu)")
    print(json.dumps(main(parser.parse_args().device)))
