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

The explorers of chapters 8-14 are defined in :mod:`fundamentallm.explorers_training` and imported
here. Bad input (an empty text box, characters outside the vocabulary, a temperature or top-p of 0)
returns a short message, which the explorer shows in place of the figure.
"""

from __future__ import annotations

import math
import zlib
from typing import Any, Callable

import torch

from .explorer_input import MAX_CHARS, MAX_WORDS, _check_prompt, _label, _plt, unknown_characters
from .interactive import Explorer, choice, slider, text

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
                    alt="With a causal mask each word attends only to itself and earlier words (the upper "
                        "triangle is empty); with Q = K = X a word weighs itself and its repeats most. "
                        "Heatmap: queries down, keys across, brighter is more weight",
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

    return Explorer({"m": slider(0, max_position, 1, 40, frames=[0, 40, 128]),
                     "n": slider(0, max_position, 1, 30, frames=[30, 100, 190]),
                     "base": choice([10000, 500000, 100], frames=[10000, 100])}, draw,
                    alt="The score depends only on the offset n − m: move m and n together and the dot "
                        "stays put; a smaller base turns every pair faster. Left: the angle per channel "
                        "pair; right: the score against the offset",
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
                     "offset": slider(-6.0, 6.0, 0.5, 0.0, frames=[-3.0, 0.0, 5.0]),
                     "scale": slider(0.1, 10.0, 0.1, 1.0, frames=[0.3, 1.0, 8.0])}, draw,
                    alt="After the norm token 0 looks like the others whatever its shift and scale "
                        "(LayerNorm: mean 0, standard deviation 1; RMSNorm: RMS 1). Bars: mean, standard "
                        "deviation and RMS of five tokens, before and after",
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
                                     frames=sorted({d for d in (1, 2, 6, 12) if d <= max_depth} | {start})),
                     "show": choice(["both", "pre", "post"], frames=["both"])}, draw,
                    alt="How the gradient norm changes from the first block to the last, pre-LN against "
                        "post-LN (the legend gives each last/first ratio). Bars: gradient norm per block "
                        "at initialisation, log scale, for the chosen depth",
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
                     "after_block": slider(0, L, 1, L, frames=sorted({0, L // 2, L} if L > 4 else range(L + 1))),
                     "show": choice(["probability", "logit"], frames=["probability"])}, draw,
                    alt="Read after block 0 (the embedding alone) the model can only guess from the last "
                        "character; after the last block it uses the whole prompt. Bar chart of the most "
                        "likely next tokens",
                    title="The model's next token for your prompt")


# chapters 8-14 live in their own module (training and generation); one import gives every explorer
from .explorers_training import (  # noqa: E402
    cache_explorer,
    sampling_explorer,
    tokenizer_explorer,
    training_explorer,
)

__all__ = ["MAX_CHARS", "MAX_WORDS", "attention_explorer", "block_grad_norms", "cache_explorer",
           "depth_explorer", "logits_explorer", "norm_explorer", "rope_explorer", "sampling_explorer",
           "tokenizer_explorer", "training_explorer", "unknown_characters", "_check_prompt", "_label"]
