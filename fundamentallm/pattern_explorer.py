"""Chapter 16's explorer: the attention pattern of any head of a trained model, over a typed text.

:func:`pattern_explorer` takes a model and its tokenizer; the reader types a text and picks a
layer and a head. Left: the head's pattern (queries down, keys across, one row per token).
Right: for every query, the weight the head puts on the previous token and on the token after the
query's last earlier occurrence (the induction key), so that a head's kind reads off the plot.
It is a module of its own, next to :mod:`fundamentallm.explorers` (chapters 2-14), built the same
way: live ipywidgets in a kernel, precomputed frames (drawn at twice the usual density) in the book.
"""

from __future__ import annotations

import torch

from .explorers import _check_prompt, _label
from .interactive import Explorer, choice
from .interactive import text as text_box

DPI = 144  # twice the explorers' 72: the pattern's one-character ticks stay legible


def induction_keys(ids: torch.Tensor) -> torch.Tensor:
    """(T,) ids -> (T,) for each query t the key k = s + 1 where s < t is the last earlier
    position holding the same token as t, or -1 where the token is new (no induction key)."""
    keys = torch.full_like(ids, -1)
    last: dict[int, int] = {}
    for t, token in enumerate(ids.tolist()):
        if token in last:
            keys[t] = last[token] + 1
        last[token] = t
    return keys


def pattern_explorer(model, tokenizer, text: str, examples: tuple[str, ...] = (),
                     head_frames: tuple[int, ...] | None = None) -> Explorer:
    """The pattern of one head of ``model`` over a typed text. ``text`` is shown first; the book's
    frames cover it and ``examples``, every layer, and the heads ``head_frames`` (all by default;
    each frame costs about half a second); the live explorer takes any text of at most
    ``model.config.max_seq_len`` tokens and any head."""
    import matplotlib.pyplot as plt

    config = model.config
    layers, heads = list(range(config.num_layers)), list(range(config.num_heads))
    if len(layers) < 2 or len(heads) < 2:
        raise ValueError("the explorer picks a layer and a head: the model needs >= 2 of each")
    patterns: dict[str, dict] = {}

    def cached(text):  # the frames share one forward per text
        if text not in patterns:
            ids = torch.tensor(tokenizer.encode(text))[None]
            with torch.no_grad():
                _, cache = model.run_with_cache(ids, names=lambda n: n.endswith("hook_pattern"))
            patterns[text] = {"ids": ids[0], "cache": cache}
        return patterns[text]

    def draw(text, layer, head):
        bad = _check_prompt(tokenizer, text, "text")
        if bad:
            return bad
        n = len(tokenizer.encode(text))
        if n > config.max_seq_len:
            return f"The text has {n} tokens: type at most {config.max_seq_len} (the model's context)."
        if n < 2:
            return "Type at least two characters: a one-token text has one key."
        run = cached(text)
        ids, pattern = run["ids"], run["cache"][f"blocks.{layer}.attn.hook_pattern"][0, head]
        labels = [_label(tokenizer.decode([i])) for i in ids.tolist()]
        keys = induction_keys(ids)
        t = torch.arange(n)
        prev = torch.cat([torch.tensor([float("nan")]), pattern[t[1:], t[1:] - 1]])
        has = keys >= 0
        ind = torch.full((n,), float("nan"))
        ind[has] = pattern[t[has], keys[has]]
        size = 2.0 + 0.07 * n
        fig, (a0, a1) = plt.subplots(1, 2, figsize=(2 * size + 1.0, size),
                                     gridspec_kw={"width_ratios": [1, 0.8]})
        a0.imshow(pattern, cmap="Blues", vmin=0, vmax=1)
        a0.set_xticks(range(n), labels=labels, fontsize=5)
        a0.set_yticks(range(n), labels=labels, fontsize=5)
        a0.set(xlabel="key", ylabel="query", title=f"layer {layer}, head {head}")
        a1.plot(t, prev, "o-", ms=3, label=f"previous token (mean {prev[1:].mean():.2f})")
        mean_ind = f"{ind[has].mean():.2f}" if has.any() else "no repeated token"
        a1.plot(t, ind, "s", ms=4, color="C3", label=f"induction key (mean {mean_ind})")
        a1.set(ylim=(-0.03, 1.03), xlabel="query position", ylabel="attention weight",
               title="weight on the previous token and on the induction key")
        a1.legend(fontsize=7, loc="upper left")
        a1.grid(alpha=0.3)
        fig.tight_layout()
        return fig

    frames = tuple(dict.fromkeys((text, *examples)))
    if head_frames is not None and (len(set(head_frames)) < 2 or not set(head_frames) <= set(heads)):
        raise ValueError(f"head_frames={head_frames!r} must name >= 2 heads among {heads}")
    if len(frames) < 2:
        raise ValueError("give at least one example besides the text: the book's text control needs two")
    return Explorer({"text": text_box(text, frames=frames), "layer": choice(layers, value=layers[-1]),
                     "head": choice(heads, value=(head_frames or heads)[0], frames=head_frames)}, draw, dpi=DPI,
                    alt="Left: the attention pattern of the chosen head over the typed text, queries "
                        "down, keys across, darker is more weight. Right: per query, the weight on "
                        "the previous token and on the token after the query's last earlier "
                        "occurrence",
                    title="Attention patterns of the trained model, over your text")
