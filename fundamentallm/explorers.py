"""The chapters' explorers: each function returns a :class:`~fundamentallm.interactive.Explorer`
(live ipywidgets in a kernel, precomputed frames in the book) over the chapter's own objects.

| chapter | explorer |
| --- | --- |
| 02 | :func:`attention_explorer`: the attention weights of a sentence the reader types |
| 04 | :func:`rope_explorer`: RoPE's angles and the score against the offset for any position pair |
| 05 | :func:`norm_explorer`: per-token mean, standard deviation and RMS before and after a norm |
| 06 | :func:`depth_explorer`: gradient norm per block for any depth, pre-LN against post-LN |
| 07 | :func:`logits_explorer`: the model's next-token distribution for a typed prompt, read after any block |
| 08 | :func:`tokenizer_explorer`: the tokens and merges of typed text, after the first k merges |
| 09 | :func:`training_explorer`: a schedule, and a short training run that a button continues |
| 10 | :func:`sampling_explorer`: temperature, top-k and top-p on the distribution after a typed prompt |
| 14 | :func:`cache_explorer`: grouped-query and sliding-window masks, and the KV cache they need |

Bad input (an empty text box, characters outside the vocabulary, a temperature or top-p of 0)
returns a short message, which the explorer shows in place of the figure.
"""

from __future__ import annotations

import math
import zlib
from typing import Any, Callable

import torch

from .interactive import Explorer, choice, slider, text

MAX_WORDS = 24   # attention maps beyond this many words are unreadable
MAX_CHARS = 120  # typed text longer than this is cut (tokens), or refused (prompts)


def _plt():
    import matplotlib.pyplot as plt
    return plt


def unknown_characters(tokenizer, text_: str) -> list[str]:
    """The distinct characters of ``text_`` that ``tokenizer`` cannot encode and decode back."""
    return [c for c in dict.fromkeys(text_) if tokenizer.decode(tokenizer.encode(c)) != c]


def _check_prompt(tokenizer, prompt: str, what: str = "prompt") -> str | None:
    """A message if ``prompt`` cannot be fed to the model, else None."""
    if not prompt:
        return f"The {what} is empty: type a few characters."
    if len(prompt) > MAX_CHARS:
        return f"The {what} has {len(prompt)} characters: type at most {MAX_CHARS}."
    bad = unknown_characters(tokenizer, prompt)
    if bad:
        return (f"The {what} has characters the tokenizer never saw: {' '.join(map(repr, bad))}. "
                "Remove them or use characters of the training text.")
    return None


def _label(token: str) -> str:
    return {" ": "␣", "\n": "\\n", "\t": "\\t"}.get(token, token)


# --- chapter 2 ---------------------------------------------------------------------------------

def _word_vector(word: str, dim: int) -> torch.Tensor:
    """A fixed random vector per word (seeded by the word: the same word, the same vector)."""
    return torch.randn(dim, generator=torch.Generator().manual_seed(zlib.crc32(word.encode())))


def attention_explorer(sentence: str = "the cat sat on the mat because the cat was tired",
                       dim: int = 32, seed: int = 1) -> Explorer:
    """Self-attention of a typed sentence: each word an untrained random vector of ``dim``
    channels; queries and keys the vectors themselves (``Q = K = X``) or random projections."""
    from .attention import causal_mask, scaled_dot_product_attention
    from .viz import plot_attention

    g = torch.Generator().manual_seed(seed)
    W_q, W_k = (torch.randn(dim, dim, generator=g) / dim ** 0.5 for _ in range(2))

    def draw(sentence, queries_and_keys, mask):
        words = sentence.split()
        if not words:
            return "The sentence is empty: type a few words."
        if len(words) > MAX_WORDS:
            return f"{len(words)} words: type at most {MAX_WORDS} so the map stays readable."
        X = torch.stack([_word_vector(w, dim) for w in words])  # (T, dim)
        q, k = (X, X) if queries_and_keys == "Q = K = X" else (X @ W_q, X @ W_k)
        m = causal_mask(len(words)) if mask == "causal" else None
        _, weights = scaled_dot_product_attention(q, k, X, mask=m, return_weights=True)
        size = 2.5 + 0.22 * len(words)
        fig, ax = _plt().subplots(figsize=(size + 1, size))
        plot_attention(weights, tokens=words, ax=ax, title=f"{queries_and_keys}, {mask} mask")
        fig.colorbar(ax.images[0], ax=ax, fraction=0.046, label="weight")
        return fig

    return Explorer({"sentence": text(sentence, frames=[sentence, "to be or not to be"]),
                     "queries_and_keys": choice(["Q = K = X", "random W_q, W_k"]),
                     "mask": choice(["causal", "none"])}, draw,
                    alt="Attention weights of the typed sentence: queries down, keys across, "
                        "brighter is more weight",
                    title="Attention of your own sentence")


# --- chapter 4 ---------------------------------------------------------------------------------

def rope_explorer(head_dim: int = 32, max_position: int = 255) -> Explorer:
    """RoPE for a query at position m and a key at position n: the angle each channel pair turns
    between them, and the score ``(R_m q)·(R_n k)`` of one fixed pair q, k against the offset."""
    from .positions import rope_frequencies

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, head_dim // 2, 2, generator=g, dtype=torch.float64)
    q, k = torch.view_as_complex(q), torch.view_as_complex(k)  # a channel pair as one complex number
    offsets = torch.arange(-max_position, max_position + 1)

    def draw(m, n, base):
        theta = rope_frequencies(head_dim, base=float(base))  # (head_dim/2,)
        # (R_m q)·(R_n k) = Re sum_i q_i conj(k_i) e^{i (m - n) θ_i}
        scores = (q * k.conj() * torch.exp(1j * torch.outer(-offsets.double(), theta))).real.sum(-1)
        angle = torch.remainder((n - m) * theta + math.pi, 2 * math.pi) - math.pi
        fig, (a0, a1) = _plt().subplots(1, 2, figsize=(10, 3.4))
        a0.bar(range(len(theta)), angle, color="C0")
        a0.set(xlabel="channel pair i (fast to slow)", ylabel="angle (n − m)·θ_i, radians",
               title=f"angle between m={m} and n={n}", ylim=(-math.pi, math.pi))
        a1.plot(offsets, scores, lw=1)
        here = scores[n - m + max_position].item()
        a1.plot([n - m], [here], "o", color="C3")
        a1.set(xlabel="offset n − m", ylabel="score", title=f"score {here:.2f} at offset {n - m} (base {base})")
        for ax in (a0, a1):
            ax.grid(alpha=0.3)
        fig.tight_layout()
        return fig

    return Explorer({"m": slider(0, max_position, 1, 40, frames=[0, 40]),
                     "n": slider(0, max_position, 1, 30, frames=[30, 190]),
                     "base": choice([10000, 500000, 100], frames=[10000, 100])}, draw,
                    alt="Left: the angle each RoPE channel pair turns between query position m "
                        "and key position n. Right: the score of a fixed query and key against "
                        "the offset n − m, a dot at the chosen pair",
                    title="RoPE for any pair of positions")


# --- chapter 5 ---------------------------------------------------------------------------------

def norm_explorer(channels: int = 16, seed: int = 3) -> Explorer:
    """Five token vectors; the reader shifts and scales token 0 and picks the norm: the mean,
    standard deviation and root mean square of every token before and after it."""
    from .norms import LayerNorm, RMSNorm

    g = torch.Generator().manual_seed(seed)
    base = torch.tensor([[0.0], [4.0], [-2.0], [0.5], [1.0]]) + \
        torch.tensor([[1.0], [0.5], [3.0], [10.0], [0.1]]) * torch.randn(5, channels, generator=g)
    norms = {"LayerNorm": LayerNorm(channels), "RMSNorm": RMSNorm(channels)}

    def draw(norm, offset, scale):
        x = base.clone()
        x[0] = offset + scale * x[0]
        with torch.no_grad():
            y = norms[norm](x)
        stats = {"mean": lambda v: v.mean(-1), "std": lambda v: v.std(-1, unbiased=False),
                 "RMS": lambda v: v.pow(2).mean(-1).sqrt()}
        fig, axes = _plt().subplots(1, 2, figsize=(10, 3.2), sharey=True)
        for ax, (name, v) in zip(axes, [("input", x), (f"after {norm}", y)]):
            for j, (stat, fn) in enumerate(stats.items()):
                ax.bar(torch.arange(5) + (j - 1) * 0.27, fn(v), 0.27, label=stat)
            ax.set(title=name, xlabel="token", xticks=range(5))
            ax.axhline(0, color="k", lw=0.6)
            ax.grid(alpha=0.3, axis="y")
        axes[0].legend(fontsize=8)
        axes[0].set_ylabel("statistic over the channels")
        fig.tight_layout()
        return fig

    return Explorer({"norm": choice(["LayerNorm", "RMSNorm"]),
                     "offset": slider(-6.0, 6.0, 0.5, 0.0, frames=[0.0, 5.0]),
                     "scale": slider(0.1, 10.0, 0.1, 1.0, frames=[1.0, 8.0])}, draw,
                    alt="Mean, standard deviation and root mean square of five tokens, before "
                        "and after the norm; token 0 shifted and scaled by the controls",
                    title="Norm statistics per token")


# --- chapter 6 ---------------------------------------------------------------------------------

def block_grad_norms(model) -> list[float]:
    """The gradient norm of each block's parameters (after a backward pass)."""
    return [torch.sqrt(sum(p.grad.pow(2).sum() for p in b.parameters() if p.grad is not None)).item()
            for b in model.blocks]


def depth_explorer(make_model: Callable[[int, str], Any], inputs: torch.Tensor, targets: torch.Tensor,
                   max_depth: int = 24) -> Explorer:
    """Gradient norm of every block at initialisation, pre-LN beside post-LN, for any depth.
    ``make_model(num_layers, norm_position)`` builds the chapter's model; one batch is used."""
    def draw(depth, show):
        positions = ["pre", "post"] if show == "both" else [show]
        fig, ax = _plt().subplots(figsize=(8, 3.2))
        width = 0.8 / len(positions)
        for i, position in enumerate(positions):
            model = make_model(depth, position)
            _, loss = model(inputs, targets)
            loss.backward()
            norms = block_grad_norms(model)
            ax.bar(torch.arange(1, depth + 1) + (i - (len(positions) - 1) / 2) * width, norms, width,
                   label=f"{position}-LN (last/first {norms[-1] / norms[0]:.2f})", color=f"C{i}")
        ax.set(xlabel="block (1 = nearest the input)", ylabel="gradient norm of the block",
               title=f"depth {depth}, at initialisation", yscale="log")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        fig.tight_layout()
        return fig

    start = min(6, max_depth)
    return Explorer({"depth": slider(1, max_depth, 1, start,
                                     frames=sorted({d for d in (2, 6, 12) if d <= max_depth} | {start})),
                     "show": choice(["both", "pre", "post"], frames=["both"])}, draw,
                    alt="Gradient norm of each block at initialisation, pre-LN and post-LN bars "
                        "side by side, for the chosen depth",
                    title="Gradient norms against depth")


# --- chapter 7 ---------------------------------------------------------------------------------

def logits_explorer(model, tokenizer, prompt: str = "Return the ", top: int = 20) -> Explorer:
    """The model's next-token distribution after a typed prompt, read after block ``k`` (the
    final norm and output layer applied to the residual stream there; ``k = num_layers`` is the
    model's own output)."""
    from .viz import plot_token_distribution

    labels = [_label(tokenizer.decode([i])) or f"<{i}>" for i in range(tokenizer.vocab_size)]
    L = len(model.blocks)

    def draw(prompt, after_block, show):
        problem = _check_prompt(tokenizer, prompt)
        if problem:
            return problem
        ids = torch.tensor([tokenizer.encode(prompt)[-model.config.max_seq_len:]])
        streams = []
        hooks = [b.register_forward_hook(lambda _m, _i, out: streams.append(out)) for b in model.blocks]
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits = model(ids.to(next(model.parameters()).device))[0][0, -1].float().cpu()
                if after_block < L:  # the logit lens: the output layer on an earlier stream
                    h = streams[after_block - 1] if after_block > 0 else model.token_embedding(ids)
                    logits = model.lm_head(model.norm_f(h))[0, -1].float().cpu()
        finally:
            for hook in hooks:
                hook.remove()
            model.train(was_training)
        fig, ax = _plt().subplots(figsize=(9, 3.2))
        where = "the model's output" if after_block == L else f"read after block {after_block} of {L}"
        if show == "probability":
            plot_token_distribution(torch.softmax(logits, -1), labels, top=top, ax=ax,
                                    title=f"next token after {prompt[-30:]!r}, {where}")
        else:
            order = logits.argsort(descending=True)[:top]
            ax.bar(range(top), logits[order])
            ax.set_xticks(range(top), [labels[i] for i in order])
            ax.set(ylabel="logit", title=f"top {top} logits after {prompt[-30:]!r}, {where}")
            ax.grid(alpha=0.3, axis="y")
        fig.tight_layout()
        return fig

    return Explorer({"prompt": text(prompt, frames=[prompt, "def ", "import "]),
                     "after_block": slider(0, L, 1, L, frames=sorted({0, L})),
                     "show": choice(["probability", "logit"], frames=["probability"])}, draw,
                    alt="Bar chart of the most likely next tokens after the prompt",
                    title="The model's next token for your prompt")


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
                    alt="The typed text cut into tokens, one coloured box per token",
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
                    alt="Left: the learning rate against the step. Right: the training loss of "
                        "the run so far",
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
        fig.text(0.01, 0.0, "a sample (seed 0): " + repr(sample)[:90], family="monospace", fontsize=8)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
        return fig

    return Explorer({"prompt": text(prompt),
                     "temperature": slider(0.0, 2.0, 0.05, 1.0, frames=[0.5, 1.0, 1.5]),
                     "top_k": slider(0, V, 1, 0, frames=[0, 5]),
                     "top_p": slider(0.0, 1.0, 0.05, 1.0, frames=[1.0, 0.6])}, draw,
                    alt="Bar chart of the twenty most likely next tokens: grey bars before the "
                        "filters, coloured bars after them; below, one sampled continuation",
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
                     "kv_heads": choice([1, 2, 4, 8, 16, 32], value=8, frames=[1, 8]),
                     "window": slider(0, 32768, 1024, 0, frames=[0, 4096]),
                     "context": slider(1024, 131072, 1024, 8192, frames=[8192])}, draw,
                    alt="Left: the positions each query may attend to. Middle: the key/value head "
                        "each query head reads. Right: the KV cache's size against the sequence "
                        "length",
                    title="Grouped-query and sliding-window attention: masks and cache")
