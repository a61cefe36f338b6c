"""The attention heatmaps share one 0-1 colour scale, so a diffuse head looks dim next to a
one-hot head (a per-matrix scale would make both look equally sharp)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from fundamentallm.viz import plot_attention, plot_attention_heads  # noqa: E402


def test_plot_attention_uses_a_zero_to_one_scale_by_default():
    diffuse = torch.full((4, 4), 0.25)
    fig, ax = plt.subplots()
    plot_attention(diffuse, ax=ax)
    assert ax.images[0].get_clim() == (0.0, 1.0)
    plt.close(fig)


def test_plot_attention_vmax_none_keeps_the_old_per_matrix_scale():
    diffuse = torch.full((4, 4), 0.25)
    fig = plot_attention(diffuse, vmax=None)
    assert fig.axes[0].images[0].get_clim() == pytest.approx((0.0, 0.25))
    plt.close(fig)


def test_plot_attention_heads_shares_one_scale_and_one_colour_bar():
    w = torch.stack([torch.eye(3), torch.full((3, 3), 1 / 3)])  # one-hot head, uniform head
    fig = plot_attention_heads(w)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert [im.get_clim() for im in images] == [(0.0, 1.0)] * 2
    assert len(fig.axes) == 3  # two heads and one shared colour bar
    assert [ax.get_title() for ax in fig.axes[:2]] == ["head 0", "head 1"]
    plt.close(fig)


def test_cross_attention_heatmaps_label_queries_and_keys_apart():
    """Cross-attention weights are (T_q, T_k) with T_q != T_k: query_tokens label the rows."""
    w = torch.full((2, 2, 3), 1 / 3)  # 2 heads, 2 queries, 3 keys
    fig = plot_attention_heads(w, tokens=["(", "5", ")"], query_tokens=[")", "5"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["(", "5", ")"]
    assert [t.get_text() for t in ax.get_yticklabels()] == [")", "5"]
    plt.close(fig)
    with pytest.raises(ValueError, match="query_tokens"):
        plot_attention(w[0], tokens=["(", "5", ")"])  # the keys' labels cannot label 2 queries
    with pytest.raises(ValueError, match="query_tokens has 3 labels for 2"):
        plot_attention(w[0], tokens=["(", "5", ")"], query_tokens=["a", "b", "c"])
    plt.close("all")
