"""The explorers of training and generation (chapters 8, 9, 10 and 14): the tokens of typed
text, a short training run, sampling filters and the KV cache. Each returns an
:class:`~fundamentallm.interactive.Explorer`; :mod:`fundamentallm.explorers` lists them all."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from .explorer_input import MAX_CHARS, _check_prompt, _label, _plt
from .interactive import Explorer, choice, slider, text

# --- chapter 8 ---------------------------------------------------------------------------------

def tokenizer_explorer(bpe, sentence: str = "The tokenizer splits this sentence into tokens.") -> Explorer:
    """The tokens of typed text under the first ``merges`` merges of a trained
    :class:`~fundamentallm.tokenizers.ByteBPETokenizer` (0: bytes), and the merges that fired."""
    from matplotlib.patches import Rectangle

    from .tokenizers import ByteBPETokenizer

    merges = list(bpe.merges)  # in training order
    prefixes: dict[int, ByteBPETokenizer] = {}

    def draw(sentence, merges_used):
        if not sentence:
            return "The text is empty: type a few words."
        if len(sentence) > MAX_CHARS:
            return f"The text has {len(sentence)} characters: type at most {MAX_CHARS}."
        tok = prefixes.get(merges_used)
        if tok is None:
            tok = prefixes[merges_used] = ByteBPETokenizer(merges[:merges_used], pattern=bpe.pattern)
        ids = tok.encode(sentence)
        pieces = [tok.token_bytes(i) for i in ids]
        fired = sorted({i for i in ids if i >= 256})
        fig, ax = _plt().subplots(figsize=(10, 1.7))
        x, row, width = 0, 0, 48
        for j, piece in enumerate(pieces):
            shown = piece.decode("utf-8", "replace")
            n = max(len(shown), 1)
            if x + n > width:
                x, row = 0, row + 1
            ax.add_patch(Rectangle((x, -row), n, 0.9, alpha=0.35, facecolor=f"C{j % 10}", edgecolor="white"))
            for c, ch in enumerate(shown):
                ax.text(x + c + 0.5, -row + 0.45, "·" if ch == " " else ch, ha="center", va="center",
                        family="monospace", fontsize=11)
            x += n
        ax.set_xlim(0, width)
        ax.set_ylim(-row - 0.2, 1)
        ax.axis("off")
        fig.set_size_inches(10, 0.9 + 0.5 * (row + 1))
        longest = sorted(fired, key=lambda i: -len(tok.token_bytes(i)))[:6]
        learned = ", ".join(repr(tok.token_bytes(i).decode("utf-8", "replace")) for i in longest)
        ax.set_title(f"{len(ids)} tokens for {len(sentence.encode())} bytes with the first {merges_used} "
                     f"merges; longest learned tokens used: {learned or 'none'}", loc="left", fontsize=9)
        fig.tight_layout()
        return fig

    n = len(merges)
    return Explorer({"sentence": text(sentence, frames=[sentence, "def encode(self, text):", "unbelievable"]),
                     "merges_used": slider(0, n, 1, n, frames=sorted({0, min(16, n), min(64, n), n}))}, draw,
                    alt="With 0 merges every byte is a token; each merge glues a frequent pair, so the "
                        "count of tokens falls as merges are added. The typed text as coloured boxes, one "
                        "per token",
                    title="Tokens of your own text")


# --- chapter 9 ---------------------------------------------------------------------------------

def training_explorer(make_model: Callable[[], Any], train_ids: torch.Tensor, block_size: int,
                      max_steps: int = 200, chunk: int = 20, book_steps: int = 40) -> Explorer:
    """A learning-rate schedule and a live run that follows it: the button trains ``chunk`` more
    steps of ``make_model()`` on ``train_ids``; changing a setting starts a new run. The book's
    frames show ``book_steps`` steps of each setting."""
    from .training import TrainConfig, Trainer, lr_at

    state: dict[str, Any] = {}

    def config(schedule, warmup_steps, lr):
        return TrainConfig(lr=float(lr), min_lr=float(lr) / 10, warmup_steps=warmup_steps,
                           max_steps=max_steps, schedule=schedule, batch_size=8, block_size=block_size,
                           eval_interval=0, progress=False, seed=0)

    def trainer_for(settings):
        if state.get("settings") != settings:
            state["settings"] = settings
            state["trainer"] = Trainer(make_model(), train_ids, config=config(*settings))
        return state["trainer"]

    def draw(schedule, warmup_steps, lr):
        if warmup_steps > max_steps:
            return f"warmup_steps={warmup_steps} is longer than the run ({max_steps} steps)."
        trainer = trainer_for((schedule, warmup_steps, lr))
        c = trainer.config
        fig, (a0, a1) = _plt().subplots(1, 2, figsize=(10, 3.2))
        steps = range(max_steps + 1)
        a0.plot(steps, [lr_at(s, c) for s in steps], lw=1.2)
        a0.axvline(trainer.step, color="C3", ls=":", label=f"now: step {trainer.step}")
        a0.set(xlabel="step", ylabel="learning rate", title=f"{schedule}, warmup {warmup_steps}")
        a0.legend(fontsize=8)
        h = trainer.history
        if h["step"]:
            a1.plot(h["step"], h["train_loss"], lw=1)
            a1.set_title(f"training loss: {h['train_loss'][-1]:.3f} at step {h['step'][-1]}")
        else:
            a1.text(0.5, 0.5, f"press 'train {chunk} more steps'", ha="center", va="center",
                    transform=a1.transAxes)
            a1.set_title("training loss")
        a1.set(xlabel="step", xlim=(0, max_steps))
        for ax in (a0, a1):
            ax.grid(alpha=0.3)
        fig.tight_layout()
        return fig

    def train_more(explorer):
        trainer = trainer_for(tuple(explorer.values[k] for k in ("schedule", "warmup_steps", "lr")))
        if trainer.step >= max_steps:
            return f"The run is complete ({max_steps} steps): change a setting to start another."
        trainer.fit(steps=chunk)

    def start_over(explorer):
        state.clear()

    def book_frame(schedule, warmup_steps, lr):  # a run of its own, the live run kept aside
        live = dict(state)
        state.clear()
        try:
            trainer_for((schedule, warmup_steps, lr)).fit(steps=book_steps)
            return draw(schedule, warmup_steps, lr)
        finally:
            state.clear()
            state.update(live)

    explorer = Explorer({"schedule": choice(["cosine", "inverse_sqrt", "constant"]),
                     "warmup_steps": slider(0, max_steps, 10, 20, frames=[20]),
                     "lr": choice([1e-3, 3e-3, 1e-2], value=3e-3, frames=[3e-3])}, draw,
                    alt="Warm-up ramps the learning rate up before cosine or inverse-sqrt decays it, and "
                        "the loss falls over the run. Left: learning rate against step; right: the "
                        "training loss so far",
                    title="A schedule and a run you can continue",
                    actions={f"train {chunk} more steps": train_more, "start over": start_over},
                    draw_frame=book_frame)
    explorer.state = state  # the live run: state["trainer"]
    return explorer


# --- chapter 10 --------------------------------------------------------------------------------

def sampling_explorer(model, tokenizer, prompt: str = "Return the ", top: int = 20,
                      sample_tokens: int = 40) -> Explorer:
    """The next-token distribution after a typed prompt, before (grey) and after (colour)
    temperature, top-k and top-p, and one sampled continuation (seed 0) with those settings."""
    from .generation import apply_temperature, generate, top_k_filter, top_p_filter
    from .viz import plot_token_distribution

    labels = [_label(tokenizer.decode([i])) or f"<{i}>" for i in range(tokenizer.vocab_size)]
    V = tokenizer.vocab_size
    device = next(model.parameters()).device

    def draw(prompt, temperature, top_k, top_p):
        problem = _check_prompt(tokenizer, prompt)
        if problem:
            return problem
        if temperature <= 0:
            return ("A temperature of 0 divides the logits by zero: it is greedy decoding (always "
                    "the most likely token). Choose a temperature above 0 to sample.")
        if top_p <= 0:
            return "top-p = 0 keeps no token at all: choose p above 0 (1 keeps every token)."
        ids = torch.tensor([tokenizer.encode(prompt)[-model.config.max_seq_len:]], device=device)
        model.eval()
        with torch.no_grad():
            logits = model(ids)[0][0, -1].float().cpu()
        filtered = apply_temperature(logits, temperature)
        if top_k > 0:
            filtered = top_k_filter(filtered, top_k)
        if top_p < 1:
            filtered = top_p_filter(filtered, top_p)
        after = torch.softmax(filtered, -1)
        room = model.config.max_seq_len - ids.shape[1]
        out = generate(model, ids, min(sample_tokens, room), temperature=temperature,
                       top_k=top_k or None, top_p=top_p if top_p < 1 else None,
                       generator=torch.Generator(device=device).manual_seed(0))
        sample = tokenizer.decode(out[0, ids.shape[1]:].tolist())
        fig, ax = _plt().subplots(figsize=(9, 3.4))
        plot_token_distribution(after, labels, reference=torch.softmax(logits, -1), top=top, ax=ax,
                                title=f"after {prompt[-30:]!r}: {int((after > 0).sum())} of {V} tokens kept")
        fig.text(0.01, 0.0, "a sample (seed 0): " + repr(sample)[:80], family="monospace", fontsize=10)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        return fig

    return Explorer({"prompt": text(prompt),
                     "temperature": slider(0.0, 2.0, 0.05, 1.0, frames=[0.5, 1.0, 1.5]),
                     "top_k": slider(0, V, 1, 0, frames=[0, 5, 20]),
                     "top_p": slider(0.0, 1.0, 0.05, 1.0, frames=[0.2, 0.5, 0.8, 1.0])}, draw,
                    alt="Temperature sharpens (below 1) or flattens (above 1) the distribution; top-k and "
                        "top-p drop its tail (the title counts the tokens kept). Grey bars: the model; "
                        "coloured: what survives; below, one sample",
                    title="Sample from your own prompt")


# --- chapter 14 --------------------------------------------------------------------------------

def cache_explorer(num_layers: int = 32, head_dim: int = 128, bytes_per_value: int = 2,
                   shown_positions: int = 16) -> Explorer:
    """Which key/value head each query head reads (grouped-query attention), where each query may
    look (causal, or a sliding window), and the KV cache that needs, per sequence, for a model of
    ``num_layers`` layers and ``head_dim`` channels per head (Llama 3 8B: 32 and 128, bf16)."""
    from .attention import allowed_keys

    def draw(query_heads, kv_heads, window, context):
        if query_heads % kv_heads:
            return (f"{query_heads} query heads cannot share {kv_heads} key/value heads evenly: "
                    "choose a number of key/value heads that divides the query heads.")
        w = window or None
        per_row = context / shown_positions  # tokens one row (column) of the mask stands for
        mask = allowed_keys(shown_positions, shown_positions, 0,
                            window=None if w is None else max(1, math.ceil(w / per_row)))
        fig, (a0, a1, a2) = _plt().subplots(1, 3, figsize=(11, 3.3),
                                            gridspec_kw={"width_ratios": [1, 1.2, 1.4]})
        a0.imshow(mask.float(), cmap="Blues", vmin=0, vmax=1)
        a0.set(title="causal" if w is None else f"sliding window {w:,}",
               xlabel=f"key position (1 cell = {per_row:,.0f} tokens)", ylabel="query position")
        group = query_heads // kv_heads
        a1.scatter(range(query_heads), [h // group for h in range(query_heads)],
                   c=[h // group for h in range(query_heads)], cmap="tab10", s=18)
        a1.set(title=f"{group} query heads per key/value head", xlabel="query head",
               ylabel="key/value head it reads")
        lengths = torch.linspace(1, context, 100)
        per_token = 2 * num_layers * kv_heads * head_dim * bytes_per_value
        full = 2 * num_layers * query_heads * head_dim * bytes_per_value * lengths
        kept = lengths if w is None else lengths.clamp(max=w)
        a2.plot(lengths, full / 2 ** 30, "--", color="gray", label=f"{query_heads} kv heads, causal")
        a2.plot(lengths, per_token * kept / 2 ** 30, color="C3",
                label=f"{kv_heads} kv heads" + ("" if w is None else f", window {w}"))
        size = per_token * (context if w is None else min(context, w)) / 2 ** 30
        a2.set(title=f"KV cache at {context:,} tokens: {size:.3g} GiB", xlabel="tokens in the sequence",
               ylabel="GiB per sequence")
        a2.legend(fontsize=7)
        for ax in (a1, a2):
            ax.grid(alpha=0.3)
        fig.tight_layout()
        return fig

    return Explorer({"query_heads": choice([32, 16, 8], frames=[32]),
                     "kv_heads": choice([1, 2, 4, 8, 16, 32], value=8, frames=[1, 4, 8, 32]),
                     "window": slider(0, 32768, 1024, 0, frames=[0, 1024, 4096]),
                     "context": slider(1024, 131072, 1024, 8192, frames=[8192])}, draw,
                    alt="Fewer key/value heads and a sliding window shrink the KV cache below the full "
                        "multi-head one. Left: where each query may look; middle: the KV head each query "
                        "head reads; right: cache size against context",
                    title="Grouped-query and sliding-window attention: masks and cache")
