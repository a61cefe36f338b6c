"""Plotting helpers the book uses. Each returns the matplotlib ``Figure`` (or draws on ``ax``)
and never calls ``plt.show()``, so notebooks decide how to display."""

from __future__ import annotations

from typing import Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch


def _np(x) -> np.ndarray:
    return x.detach().float().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _labels(tokens: Optional[Sequence[str]], n: int, name: str) -> Optional[list[str]]:
    """``tokens`` as a list of ``n`` labels (None stays None), or a ValueError naming ``name``."""
    if tokens is None:
        return None
    labels = list(tokens)
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels for {n} rows or columns of weights; "
                         f"for queries that differ from the keys, pass query_tokens")
    return labels


def plot_attention(weights, tokens: Optional[Sequence[str]] = None, ax=None, title: Optional[str] = None,
                   annotate: bool = False, cmap: str = "viridis", vmax: Optional[float] = 1.0,
                   query_tokens: Optional[Sequence[str]] = None):
    """Heatmap of one ``(T_q, T_k)`` attention matrix: rows are queries, columns keys.

    ``tokens`` label the keys, and the queries too unless ``query_tokens`` is given: pass it when
    the queries are another sequence (cross-attention, where ``T_q`` may differ from ``T_k``).

    The colour scale runs from 0 to ``vmax`` (default 1, the largest possible weight), so that
    several heatmaps are comparable: a diffuse row looks dim and a one-hot row bright. With
    ``vmax=None`` the scale ends at the largest weight of this matrix instead. The colour bar is
    drawn only when the function makes its own figure; on a given ``ax``, add one shared bar with
    ``fig.colorbar(ax.images[0], ax=axes)``."""
    w = _np(weights)
    if w.ndim != 2:
        raise ValueError(f"weights must be (T_q, T_k), got shape {w.shape}")
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(0.45 * w.shape[1] + 2, 0.45 * w.shape[0] + 1.5))
    top = max(1e-9, float(w.max())) if vmax is None else float(vmax)
    im = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=top)
    rows = _labels(tokens if query_tokens is None else query_tokens, w.shape[0],
                   "tokens (for the queries too)" if query_tokens is None else "query_tokens")
    cols = _labels(tokens, w.shape[1], "tokens")
    if cols is not None:
        ax.set_xticks(range(len(cols)), labels=cols, rotation=90)
    if rows is not None:
        ax.set_yticks(range(len(rows)), labels=rows)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if annotate:
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if w[i, j] < 0.6 * top else "black")
    if title:
        ax.set_title(title)
    if fig is not None:
        fig.colorbar(im, ax=ax, fraction=0.046)
        fig.tight_layout()
    return fig if fig is not None else ax.figure


def plot_attention_heads(weights, tokens: Optional[Sequence[str]] = None, title: Optional[str] = None,
                         max_cols: int = 4, query_tokens: Optional[Sequence[str]] = None):
    """Grid of heatmaps, one per head (``head 0`` .. ``head H-1``, as indexed in code), for
    ``(H, T_q, T_k)`` weights, all on one 0-1 colour scale with one shared colour bar
    (``tokens`` and ``query_tokens`` as in :func:`plot_attention`)."""
    w = _np(weights)
    if w.ndim != 3:
        raise ValueError(f"weights must be (H, T_q, T_k), got shape {w.shape}")
    H = w.shape[0]
    cols = min(H, max_cols)
    rows = (H + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols + 0.8, 3.0 * rows), squeeze=False,
                             layout="constrained")
    for h, ax in enumerate(axes.flat):
        if h < H:
            plot_attention(w[h], tokens=tokens, ax=ax, title=f"head {h}", query_tokens=query_tokens)
        else:
            ax.axis("off")
    fig.colorbar(axes.flat[0].images[0], ax=axes, fraction=0.046 / cols, label="attention weight")
    if title:
        fig.suptitle(title)
    return fig


def plot_loss_curves(history: dict, keys: Sequence[str] = ("train_loss", "val_loss"), ax=None,
                     x_key: str = "step", title: Optional[str] = None, logy: bool = False):
    """Line plot of ``history[key]`` against ``history[x_key]`` (or index) for each key present.
    For keys logged at different steps, ``history[key + "_step"]`` gives their x values."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.5))
    for key in keys:
        if key not in history or len(history[key]) == 0:
            continue
        y = _np(history[key])
        x = history.get(f"{key}_step", history.get(x_key, range(len(y))))
        x = _np(x)[: len(y)] if len(_np(x)) >= len(y) else np.arange(len(y))
        ax.plot(x, y, label=key)
    ax.set_xlabel(x_key)
    ax.set_ylabel("loss")
    if logy:
        ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return fig if fig is not None else ax.figure


def plot_attention_grid(attentions, tokens: Optional[Sequence[str]] = None, title: Optional[str] = None,
                        cell_size: float = 2.4):
    """Grid of heatmaps, one row per layer and one column per head, for a model's attention:
    a sequence of ``(H, T_q, T_k)`` arrays (one per layer) or one ``(L, H, T_q, T_k)`` array."""
    ws = [_np(w) for w in attentions]
    if not ws or any(w.ndim != 3 for w in ws) or len({w.shape for w in ws}) != 1:
        raise ValueError("attentions must be a non-empty sequence of equally shaped (H, T_q, T_k) "
                         f"arrays, got shapes {[w.shape for w in ws]}")
    L, H = len(ws), ws[0].shape[0]
    # constrained layout keeps each title clear of the tick labels of the row above
    fig, axes = plt.subplots(L, H, figsize=(cell_size * H, cell_size * L + 0.4), squeeze=False,
                             layout="constrained")
    for layer, w in enumerate(ws):
        for head in range(H):
            ax = axes[layer, head]
            ax.imshow(w[head], cmap="viridis", vmin=0.0, vmax=1.0)
            if tokens is not None:
                ax.set_xticks(range(len(tokens)), labels=list(tokens), fontsize=7)
                ax.set_yticks(range(len(tokens)), labels=list(tokens), fontsize=7)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
            ax.set_title(f"layer {layer}, head {head}", fontsize=9)
    if title:
        fig.suptitle(title)
    return fig


def plot_positional_encoding(pe, ax=None, title: Optional[str] = None, cmap: str = "RdBu_r"):
    """Heatmap of a ``(max_seq_len, d_model)`` positional-encoding table: one row per position,
    one column per channel, on a colour scale symmetric around zero."""
    p = _np(pe)
    if p.ndim != 2:
        raise ValueError(f"pe must be (max_seq_len, d_model), got shape {p.shape}")
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.5))
    limit = max(1e-9, float(np.abs(p).max()))
    im = ax.imshow(p, cmap=cmap, vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    ax.set_xlabel("channel")
    ax.set_ylabel("position")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(im, ax=ax, fraction=0.046)
    if fig is not None:
        fig.tight_layout()
    return fig if fig is not None else ax.figure


def plot_parameter_breakdown(breakdown: dict, ax=None, title: Optional[str] = None):
    """Stacked horizontal bars, one per model: each component's share of the parameters.

    ``breakdown`` maps a model name to ``{component: count}`` (e.g. ``{"nano": {"embeddings":
    16384, "attention": 33280, ...}}``); components missing from a model count as 0. Each bar is
    annotated with the model's total.
    """
    if not breakdown:
        raise ValueError("breakdown is empty: pass {model_name: {component: count}}")
    models = list(breakdown)
    components: list[str] = []  # in first-seen order, skipping those that are 0 everywhere
    for parts in breakdown.values():
        components += [c for c in parts if c not in components
                       and any(p.get(c, 0) for p in breakdown.values())]
    totals = np.array([sum(breakdown[m].values()) for m in models], dtype=float)
    if (totals <= 0).any():
        raise ValueError(f"every model needs a positive parameter count, got totals {totals.tolist()}")
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 0.6 * len(models) + 1.6))
    left = np.zeros(len(models))
    for i, comp in enumerate(components):
        share = np.array([breakdown[m].get(comp, 0) for m in models], dtype=float) / totals
        ax.barh(models, share, left=left, color=plt.cm.tab10(i % 10), label=comp)
        for y, (x0, w) in enumerate(zip(left, share)):
            if w >= 0.07:
                ax.text(x0 + w / 2, y, f"{w:.0%}", ha="center", va="center", fontsize=8, color="white")
        left += share
    for y, total in enumerate(totals):
        ax.text(1.01, y, f"{total / 1e6:.2f}M" if total >= 1e5 else f"{int(total):,}", va="center", fontsize=9)
    ax.set_xlim(0, 1.12)
    ax.set_xlabel("share of parameters")
    ax.invert_yaxis()
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(models) < 4 else -0.15),
              ncol=min(len(components), 4), fontsize=8, frameon=False)
    if title:
        ax.set_title(title)
    if fig is not None:
        fig.tight_layout()
    return fig if fig is not None else ax.figure


def plot_causal_leak(changes, ax=None, title: Optional[str] = None, floor: float = 1e-12):
    """Heatmap of a ``(T, T)`` leak matrix: entry ``[t, s]`` is how much the logits at position
    ``s`` move when token ``t`` is changed (max absolute difference). A causal model is exactly 0
    below the diagonal (``s < t``); zeros are drawn in white, the rest on a log colour scale."""
    from matplotlib.colors import LogNorm

    c = _np(changes).astype(float)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(f"changes must be a square (T, T) matrix, got shape {c.shape}")
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.5, 4))
    masked = np.ma.masked_less_equal(c, floor)
    vmax = max(float(c.max()), floor * 10)
    cmap = plt.get_cmap("magma_r").copy()
    cmap.set_bad("white")
    im = ax.imshow(masked, cmap=cmap, norm=LogNorm(vmin=max(floor, vmax * 1e-6), vmax=vmax))
    ax.set_xlabel("position s whose logits are read")
    ax.set_ylabel("position t whose token is changed")
    if title:
        ax.set_title(title)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, label="max |Δ logits|")
    if fig is not None:
        fig.tight_layout()
    return fig if fig is not None else ax.figure


def plot_lr_schedule(configs, steps: Optional[int] = None, ax=None, title: Optional[str] = None,
                     logy: bool = False):
    """Learning rate against optimizer step, from :func:`fundamentallm.training.lr_at`, for one
    ``TrainConfig`` or a mapping ``{label: TrainConfig}``. ``steps`` defaults to each config's
    ``max_steps``."""
    from .training import TrainConfig, lr_at  # lazy: plotting needs no trainer otherwise

    if isinstance(configs, TrainConfig):
        configs = {configs.schedule: configs}
    if not isinstance(configs, dict) or not configs or \
            not all(isinstance(c, TrainConfig) for c in configs.values()):
        raise TypeError("configs must be a TrainConfig or a non-empty mapping {label: TrainConfig}")
    if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool) or steps < 1):
        raise ValueError(f"steps={steps!r} must be None or an integer >= 1")
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, config in configs.items():
        n = steps if steps is not None else config.max_steps
        ax.plot(range(n), [lr_at(s, config) for s in range(n)], label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    if logy:
        ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    return fig if fig is not None else ax.figure


def plot_token_distribution(probs, labels: Optional[Sequence[str]] = None, reference=None, ax=None,
                            top: int = 20, title: Optional[str] = None):
    """Bar chart of a next-token distribution ``(V,)``: the ``top`` most likely tokens, most
    likely first. With ``reference`` (the distribution before a filter, ``(V,)``) the reference
    is drawn as wide grey bars and ``probs`` (after the filter) as narrow coloured bars on top,
    in the reference's order; a token the filter removed shows grey only."""
    p = _np(probs).astype(float)
    ref = _np(reference).astype(float) if reference is not None else None
    if p.ndim != 1 or (ref is not None and ref.shape != p.shape):
        raise ValueError(f"probs and reference must be (V,) vectors of one shape, got {p.shape} and "
                         f"{None if ref is None else ref.shape}")
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"top={top!r} must be a positive integer")
    if labels is not None and len(labels) != len(p):
        raise ValueError(f"labels has {len(labels)} entries but probs has {len(p)}")
    order = np.argsort(-(ref if ref is not None else p), kind="stable")[:top]
    names = [str(labels[i]) if labels is not None else str(i) for i in order]
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(0.32 * len(order) + 2, 3))
    x = np.arange(len(order))
    if ref is not None:
        ax.bar(x, ref[order], width=0.8, color="0.82", label="before")
    ax.bar(x, p[order], width=0.45 if ref is not None else 0.8, color="C0",
           label="after" if ref is not None else None)
    ax.set_xticks(x, labels=names, fontsize=8)
    ax.set_xlim(-0.6, len(order) - 0.4)
    ax.set_ylabel("probability")
    ax.grid(axis="y", alpha=0.3)
    if ref is not None:
        ax.legend(fontsize=8, loc="upper right")
    if title:
        ax.set_title(title, fontsize=10)
    if fig is not None:
        fig.tight_layout()
    return fig if fig is not None else ax.figure


def plot_attention_examples(examples: dict, tokens, title: Optional[str] = None,
                            highlight_query: Optional[int] = None, cell_size: float = 1.6):
    """Grid of heatmaps, one row per example and one column per head, for one layer:
    ``examples`` maps a row label to that example's ``(H, T_q, T_k)`` weights. ``tokens`` is one
    list shared by every row or a mapping ``{row label: tokens}``. ``highlight_query`` outlines
    that query's row in every panel (e.g. the token whose output the model reads)."""
    from matplotlib.patches import Rectangle

    if not isinstance(examples, dict) or not examples:
        raise ValueError("examples must be a non-empty mapping {row label: (H, T_q, T_k) weights}")
    ws = {label: _np(w) for label, w in examples.items()}
    shapes = {w.shape for w in ws.values()}
    if any(w.ndim != 3 for w in ws.values()) or len({s[0] for s in shapes}) != 1:
        raise ValueError(f"every example needs (H, T_q, T_k) weights with the same H, got {sorted(shapes)}")
    R, H = len(ws), next(iter(ws.values())).shape[0]
    fig, axes = plt.subplots(R, H, figsize=(cell_size * H + 0.6, cell_size * R + 0.5), squeeze=False,
                             layout="constrained")
    for r, (label, w) in enumerate(ws.items()):
        toks = list(tokens[label]) if isinstance(tokens, dict) else list(tokens)
        if len(toks) != w.shape[-1]:
            raise ValueError(f"row {label!r}: {len(toks)} tokens for {w.shape[-1]} keys")
        for head in range(H):
            ax = axes[r, head]
            ax.imshow(w[head], cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_xticks(range(len(toks)), labels=toks if r == R - 1 else [], fontsize=6, rotation=90)
            ax.set_yticks(range(w.shape[1]), labels=toks[:w.shape[1]] if head == 0 else [], fontsize=6)
            if highlight_query is not None:
                ax.add_patch(Rectangle((-0.5, highlight_query - 0.5), w.shape[-1], 1.0, fill=False,
                                       edgecolor="red", linewidth=1.2))
            if r == 0:
                ax.set_title(f"head {head}", fontsize=8)
            if head == 0:
                ax.set_ylabel(label, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_accuracy_curves(steps, curves: dict, ax=None, title: Optional[str] = None,
                         chance: Optional[float] = None, xlabel: str = "training step"):
    """Accuracy against training step, one line per entry of ``curves`` (``{label: accuracies}``,
    each as long as ``steps``); ``chance`` draws the accuracy of guessing as a dotted line."""
    x = _np(steps)
    if not isinstance(curves, dict) or not curves:
        raise ValueError("curves must be a non-empty mapping {label: accuracies}")
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, acc in curves.items():
        y = _np(acc)
        if y.shape != x.shape:
            raise ValueError(f"curve {label!r} has {y.shape[0] if y.ndim else 0} points for {len(x)} steps")
        ax.plot(x, y, marker="o", ms=3, label=label)
    if chance is not None:
        ax.axhline(chance, color="k", ls=":", lw=1, label="chance")
    ax.set(xlabel=xlabel, ylabel="accuracy", ylim=(-0.02, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")  # rising curves leave that corner empty
    if title:
        ax.set_title(title, fontsize=10)
    if fig is not None:
        fig.tight_layout()
    return fig if fig is not None else ax.figure


def plot_runs(curves: dict, ax=None, smooth: int = 1, logy: bool = False, ylabel: str = "loss",
              xlabel: str = "step", title: Optional[str] = None, styles: Optional[dict] = None):
    """One line per run for ``{name: sequence of values}`` (a loss or gradient-norm trace per
    training step), optionally smoothed by a trailing moving average over ``smooth`` steps
    (the first points average what is available). ``styles`` maps a name to ``plot`` keyword
    arguments, e.g. ``{"correct": {"color": "k", "lw": 2}}``."""
    if not curves:
        raise ValueError("curves is empty: pass {run_name: values}")
    if not isinstance(smooth, int) or smooth < 1:
        raise ValueError(f"smooth={smooth!r} must be a positive integer (1 = no smoothing)")
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, values in curves.items():
        y = _np(values).astype(float).ravel()
        if smooth > 1 and len(y):
            csum = np.cumsum(np.insert(y, 0, 0.0))
            counts = np.minimum(np.arange(1, len(y) + 1), smooth)
            y = (csum[1:] - csum[np.arange(1, len(y) + 1) - counts]) / counts
        ax.plot(np.arange(len(y)), y, label=name, **(styles or {}).get(name, {}))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    if fig is not None:
        fig.tight_layout()
    return fig if fig is not None else ax.figure
