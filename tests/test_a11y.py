"""fundamentallm.a11y: figures described in words (the book's alt text), the description carried
inside the PNG, and the kernel hook that adds it to every plot a notebook shows."""

from __future__ import annotations

import base64
import io
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fundamentallm.a11y import (  # noqa: E402
    alt_text_problems,
    describe_figure,
    png_description,
    png_with_description,
    set_alt_text,
)
from fundamentallm.viz import plot_attention_heads  # noqa: E402


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=30)
    return buffer.getvalue()


def test_a_line_plot_is_described_by_its_titles_axes_ranges_and_legend():
    fig, (loss, bars) = plt.subplots(1, 2)
    loss.plot([0, 50, 100], [3.0, 2.0, 1.5], label="train")
    loss.plot([0, 50, 100], [3.1, 2.2, 1.9], label="val")
    loss.set(xlabel="step", ylabel="loss", title="Training")
    loss.set_yscale("log")
    loss.legend()
    bars.bar(["pre-LN", "post-LN"], [1.0, 4.0])
    bars.set_ylabel("gradient norm")
    fig.suptitle("Two runs")
    fig.canvas.draw()
    text = describe_figure(fig)
    plt.close(fig)
    # the findings first (read from the data), then the title, then each panel's kind and axes
    assert text.startswith("Training: both fall; val ends highest (1.9), train lowest (1.5). "
                           "Largest: post-LN (4), smallest: pre-LN (1). Figure titled “Two runs”. 2 panels."), text
    assert "Panel 1, Training: line plot with 2 lines of loss (log scale) against step" in text
    assert len(text) <= 250, text  # the second panel's axes no longer fit: its finding does
    assert "10^" not in text  # log-scale tick labels are numbers, not categories


def test_heatmaps_name_their_rows_columns_and_colour_scale():
    fig = plot_attention_heads(np.full((2, 3, 3), 1 / 3), tokens=["the", "cat", "sat"], title="heads")
    fig.canvas.draw()
    text = describe_figure(fig)
    plt.close(fig)
    assert "2 panels" in text and "Panel 1, head 0: heatmap, query (rows) by key (columns)" in text
    assert text.startswith("Head 0: every cell is 0.333. Head 1: every cell is 0.333."), text
    assert "query and key: the, cat, sat" in text and len(text) <= 250, text


def test_a_hand_written_description_comes_first_and_must_be_text():
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2])
    set_alt_text(fig, "The loss  falls.")
    assert describe_figure(fig).startswith("The loss falls. Line plot")
    with pytest.raises(ValueError, match="text must be a non-empty string"):
        set_alt_text(fig, "  ")
    plt.close(fig)
    # A long finding and a long title: the title and axes give way, the whole stays in the limit.
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [3, 1, 2], label="validation")
    ax.set(title="Validation loss of every recipe at every step of the run " * 2, xlabel="step", ylabel="loss")
    finding = ("The record's validation loss ends lowest, below the baseline's at every step of the run and "
               "below the course's own recipe from the first evaluation on, by a margin that grows with training.")
    set_alt_text(fig, finding)
    text = describe_figure(fig)
    assert text.startswith(" ".join(finding.split())) and len(text) <= 260 and not alt_text_problems(text), text
    assert "Line plot" in text and "step" in text.split(". ", 1)[-1], text  # the axes still fit
    plt.close(fig)


def test_the_description_travels_inside_the_png_unchanged():
    fig, ax = plt.subplots()
    ax.plot([1, 2], [2, 1])
    png = _png(fig)
    plt.close(fig)
    assert png_description(png) is None
    text = "Attention α over “the cat” → 0.9"
    tagged = png_with_description(png, text)
    assert png_description(tagged) == text
    again = png_with_description(tagged, "other")  # replaced, not added twice
    assert png_description(again) == "other" and len(again) == len(png_with_description(png, "other"))
    from PIL import Image

    assert np.array_equal(np.asarray(Image.open(io.BytesIO(png))), np.asarray(Image.open(io.BytesIO(tagged))))
    with pytest.raises(ValueError, match="png must be the bytes of a PNG"):
        png_with_description(b"GIF89a", "x")


def test_every_plot_a_notebook_shows_carries_its_description(tmp_path):
    """In a kernel, importing fundamentallm wraps the inline backend's PNG printer, whichever
    comes first: pyplot, the package, or the first figure."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nimport fundamentallm"),
        nbformat.v4.new_code_cell("fig, ax = plt.subplots()\nax.plot([1, 2, 3], [3, 1, 2])\n"
                                  "ax.set(xlabel='step', ylabel='loss', title='A run')\nplt.show()"),
        nbformat.v4.new_code_cell("%config InlineBackend.figure_format = 'retina'\n"
                                  "plt.figure(); plt.bar(['a', 'b'], [1, 2]); plt.title('Bars')"),
    ]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    found = []
    for cell in nb.cells[1:]:
        for out in cell.outputs:
            if "image/png" in out.get("data", {}):
                found.append(png_description(base64.b64decode(out["data"]["image/png"])))
    assert found == ["Loss dips to 1 at step 2. A run: line plot of loss against step; step from 1 to 3; "
                     "loss from 1 to 3.",
                     "Largest: b (2), smallest: a (1). Bars: bar chart of values; x: a, b; y from 0 to 2."], found


def test_diagram_text_is_large_enough_for_a_laptop():
    """Every diagram's font sizes are at least 12 in a viewBox at most 900 wide: shown full-width
    (about 935 px at 1280 px), its text is at least 12 px (tests/test_browser.py measures it)."""
    from pathlib import Path

    images = sorted((Path(__file__).resolve().parents[1] / "book" / "images").glob("*.svg"))
    assert images
    for svg in images:
        text = svg.read_text(encoding="utf-8")
        width = float(re.search(r'viewBox="[\d.]+ [\d.]+ ([\d.]+) [\d.]+"', text).group(1))
        sizes = [float(v) for v in re.findall(r"font-size=[\"']([\d.]+)", text)]
        assert width <= 900, f"{svg.name}: viewBox {width} wide"
        assert sizes and min(sizes) >= 12, f"{svg.name}: font-size {min(sizes)} < 12"


def test_quiz_options_show_no_raw_markdown():
    """A quiz option is the summary of a <details> block: raw HTML, where Markdown is not rendered,
    so code in it is written <code>...</code> (a backtick would show as a backtick)."""
    from pathlib import Path

    import nbformat

    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "book").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                found += [f"{path.name}: {s}" for s in re.findall(r"<summary>([^<]*[`*][^<]*)</summary>", cell.source)]
    assert not found, found


def test_descriptions_do_not_repeat_themselves():
    """No "(log scale) (log scale)" when a label already says log, no "rows (rows)", and powers of
    two on a log axis are numbers, not category names."""
    fig, (line, heat) = plt.subplots(1, 2)
    line.plot([0.5, 1, 2, 4], [1.0, 0.5, 0.3, 0.2])
    line.set_xscale("log", base=2)
    line.set(xlabel="batch size", ylabel="loss (log scale)")
    line.set_yscale("log")
    heat.imshow(np.eye(3))
    heat.set(ylabel="rows")
    fig.canvas.draw()
    text = describe_figure(fig)
    plt.close(fig)
    assert "(log scale) (log scale)" not in text and "rows (rows)" not in text, text
    assert "2^" not in text and "batch size goes from 0.5 to 4" in text, text


def test_descriptions_state_the_finding_first_without_tex_repeats_or_length():
    """Each description opens with what the data show -- a trend, a peak, a crossing, the largest
    bar or cell, a scatter's correlation -- then the axes, in at most 250 characters, with TeX
    labels read as text."""
    fig, axes = plt.subplots(2, 3, figsize=(9, 5))
    x = np.arange(10)
    axes[0, 0].plot(x, -(x - 4.0) ** 2)
    axes[0, 0].set(xlabel=r"$\ell$ (layer)", ylabel=r"$\|\nabla_{W} L\|$", title=r"$\sqrt{d}$ scaling")
    axes[0, 1].plot(x, x, label="pre-LN")
    axes[0, 1].plot(x, 9 - x, label="post-LN")
    axes[0, 1].legend()
    axes[0, 1].set(xlabel="step", ylabel=r"loss $\times 10^{3}$")
    axes[0, 2].barh(["a", "b", "c"], [3, 1, 2])
    axes[1, 0].imshow(np.arange(6).reshape(2, 3))
    axes[1, 0].set(xlabel="columns", ylabel="rows")
    axes[1, 1].scatter(x, 2 * x + 1)
    axes[1, 1].set(xlabel="width", ylabel="loss (log scale)")
    axes[1, 1].set_yscale("log")
    axes[1, 2].plot(x, np.ones(10))
    fig.canvas.draw()
    text = describe_figure(fig)
    plt.close(fig)
    assert text.startswith("Sqrt(d) scaling: norm of ∇ W L peaks at 0 at ℓ 4. Largest: a (3), smallest: b (1)."), text
    assert not alt_text_problems(text), (alt_text_problems(text), text)
    fig, ax = plt.subplots()
    ax.plot(x, x, label="pre-LN")
    ax.plot(x, 9 - x, label="post-LN")
    ax.set(xlabel="step", ylabel="loss")
    fig.canvas.draw()
    text = describe_figure(fig)
    plt.close(fig)
    assert text.startswith("Pre-LN and post-LN cross near step 5; pre-LN ends highest (9), post-LN lowest (0)."), text
    for label in [r"$\alpha \cdot x_{t}$", "rows", "loss (log scale)"]:
        fig, ax = plt.subplots()
        ax.imshow(np.eye(3))
        ax.set(ylabel=label, xlabel=label)
        ax.set_yscale("linear")
        fig.canvas.draw()
        text = describe_figure(fig)
        plt.close(fig)
        assert not alt_text_problems(text), (alt_text_problems(text), text)


def _described(draw) -> str:
    fig, ax = plt.subplots()
    draw(fig, ax)
    fig.canvas.draw()
    text = describe_figure(fig)
    plt.close(fig)
    return text


def test_points_and_reference_lines_are_not_counted_as_data_lines():
    """Marker-only series are points; axhline, a 2-point line at constant y, and lines labelled
    "chance", "∝ T" or "fit" are references: neither counts as a line, nor is named as ending highest."""
    def fit(fig, ax):
        n = np.array([1e3, 1e4, 1e5])
        ax.plot(n, [3.0, 2.6, 2.0], "o", label="measured")
        ax.plot(n, 5 * n ** -0.08, "--", label="fit")
        ax.plot(n[1], 2.6, "*")  # a single marker: an annotation, not a series
        ax.set(xlabel="parameters", ylabel="loss")
    text = _described(fit)
    assert "plot of 3 points and a fitted line: loss against parameters" in text.lower(), text
    assert "line plot" not in text.lower(), text

    def refs(fig, ax):
        t = np.arange(1, 9)
        ax.plot(t, 0.1 * t, label="attention")
        ax.plot(t, 0.2 * t + 0.05, label="loop")
        ax.plot(t, 10 * t, ":", label=r"$\propto T$")
        ax.axhline(0.5, label="chance")
        ax.plot([1, 8], [0.3, 0.3], color="grey")
        ax.set(xlabel="T", ylabel="seconds")
        ax.legend()
    text = _described(refs)
    assert "line plot with 2 lines and 3 reference lines" in text.lower(), text
    assert "loop ends highest" in text and "∝ T ends" not in text, text


def test_lines_that_end_tied_are_said_to_end_tied():
    def tied(fig, ax):
        x = np.arange(5.0)
        ax.plot(x, x / 4, label="a")
        ax.plot(x, np.sqrt(x) / 2, label="b")
        ax.plot(x, x / 8, label="c")
        ax.set(xlabel="step", ylabel="accuracy")
    text = _described(tied)
    assert "a and b end tied highest (1), c lowest (0.5)" in text, text


def test_panel_details_only_follow_their_own_kept_panel_and_no_bare_panel_count():
    fig, axes = plt.subplots(1, 3)
    for i, ax in enumerate(axes):
        ax.plot(np.arange(1, 31), np.linspace(0, 0.31, 30))
        ax.set(title=f"a rather long panel title number {i} " * 2, xlabel="step", ylabel="y")
    set_alt_text(fig, "w" * 150)
    fig.canvas.draw()
    text = describe_figure(fig)
    set_alt_text(fig, "w" * 215)
    short = describe_figure(fig)
    assert not re.search(r"\d panels\.$", text) and not short.endswith("panels."), (text, short)
    assert "3 panels: a rather long" not in text, text  # panel 1's kind fits: no titles-only list
    set_alt_text(fig, "w" * 100)
    for ax in axes:
        ax.set_title(f"panel {ax.get_subplotspec().colspan.start}")
        ax.set_ylabel("a long label " * 12)
    titles = describe_figure(fig)
    assert titles.endswith("3 panels: panel 0; panel 1; panel 2."), titles
    set_alt_text(fig, "w" * 225)
    assert len(describe_figure(fig)) <= 250, describe_figure(fig)  # the titles only where they fit
    plt.close(fig)
    for described in (text, short):  # panels described from the first on, none skipped
        numbers = [int(n) for n in re.findall(r"Panel (\d), ", described)]
        assert numbers == list(range(1, len(numbers) + 1)), described
    for panel in re.findall(r"Panel (\d): step from", text + short):
        assert f"Panel {panel}, " in text + short, (text, short)


def test_a_bar_charts_range_is_its_bar_centres():
    text = _described(lambda fig, ax: (ax.bar(np.arange(256), np.arange(256) % 7), ax.set(xlabel="channel"),
                                       ax.axhline(3, ls=":", label="chance")))
    assert "channel from 0 to 255" in text and "bar chart with a reference line of" in text.lower(), text


def test_subscripts_and_pipes_are_read_as_words_and_flagged_when_raw():
    def labels(fig, ax):
        ax.plot([0, 1, 2], [1.0, 2.0, 4.0])
        ax.set(xlabel="ω_i", ylabel="max |x|")
    text = _described(labels)
    assert "ω i" in text and "max magnitude of x" in text and not alt_text_problems(text), text
    assert alt_text_problems("A line plot of ω_i.") and alt_text_problems("A line plot of |x|.")
    from fundamentallm.a11y import _clean

    assert _clean("<|endoftext|>") == "<|endoftext|>"  # a special token is not a magnitude


def test_a_single_panel_keeps_its_kind_and_axes_after_a_long_hand_finding():
    fig, ax = plt.subplots()
    ax.plot([128, 256, 512], [900.0, 850.0, 800.0], label="cached")
    ax.plot([128, 256, 512], [850.0, 400.0, 200.0], label="no cache")
    ax.set(xlabel="sequence length (tokens)", ylabel="tokens/s", xscale="log", yscale="log",
           title="Generation speed with and without the cache")
    set_alt_text(fig, "With the cache, generation keeps 800 to 900 tokens per second from 128 to 512 tokens; "
                      "without it the rate falls fourfold, from 850 to 200, as every step recomputes the prefix.")
    fig.canvas.draw()
    text = describe_figure(fig)
    plt.close(fig)
    assert "log-log line plot with 2 lines of tokens/s against sequence length" in text.lower(), text
    assert len(text) <= 250 and not alt_text_problems(text), (len(text), text)


def test_numbers_arrows_and_token_names_are_said_as_words():
    """A screen reader spells out "1e-05", "2.3e+08", "->" and "<cls>" character by character: in a
    hand-written description, a label or a number read from the data they are written as words,
    and alt_text_problems flags them where they remain."""
    from fundamentallm.alt_findings import num

    assert [num(v) for v in (2.3e8, 1.5e9, 123456, 1.23e-5, 2e-10, 1150, 0.0123)] == [
        "230 million", "1.5 billion", "123,000", "0.0000123", "2 times 10 to the minus 10", "1150", "0.0123"]
    fig, ax = plt.subplots()
    ax.plot([1e3, 1e5, 2.3e8], [3.0, 2.0, 1.0], label="lr 3e-3")
    ax.plot([1e3, 1e5, 2.3e8], [3.5, 2.5, 2.0], label="lr 1e-2")
    ax.set(xlabel="parameters", ylabel="loss", title="Max -> Min, from the <cls> token")
    ax.legend()
    set_alt_text(fig, "The spread is at most 2e-07 (eps 1e-05, 2.30e+08 tokens); lr 3e-3 -> lower")
    fig.canvas.draw()
    text = describe_figure(fig)
    set_alt_text(fig, "x")
    derived = describe_figure(fig)
    plt.close(fig)
    assert text.startswith("The spread is at most 2 times 10 to the minus 7 (eps 0.00001, 230 million tokens); "
                           "lr 0.003 to lower."), text
    assert "Max to Min, from the class token token" not in text and "Max to Min, from the class token" in text, text
    assert "lr 0.01 ends highest" in " ".join((text, derived)) or "lr 0.01" in derived, derived
    assert "parameters from 1000 to 230 million" in derived, derived
    for said in (text, derived):
        assert not alt_text_problems(said), (alt_text_problems(said), said)
    for raw in ("spread 1e-05", "2.3e8 parameters", "Max -> Min", "the <cls> row"):
        assert alt_text_problems(raw), raw
    assert not alt_text_problems("step 1e3x and model v1e5, 3 - 1 > 0")  # not numbers, not an arrow


def test_each_panel_is_named_once():
    """A panel's colour scale or ranges follow in its own sentence ("Panel 1, ...; colour scale
    ..."), not in a second "Panel 1: ..." that sounds like another panel."""
    fig, axes = plt.subplots(1, 2)
    for ax, title in zip(axes, ("attention weights P", "score gradient dL/dS")):
        fig.colorbar(ax.imshow(np.tril(np.arange(1.0, 17.0).reshape(4, 4))), ax=ax)
        ax.set(title=title, xlabel="key", ylabel="query")
    set_alt_text(fig, "Both the weights P and the score gradient dL/dS are exactly zero above the diagonal, so no "
                      "query sends gradient to a future key")  # (panel 2 does not fit after panel 1's scale)
    fig.canvas.draw()
    text = describe_figure(fig)
    plt.close(fig)
    assert "Panel 1, attention weights P: heatmap, query (rows) by key (columns); colour scale" in text, text
    for panel in ("Panel 1", "Panel 2"):
        assert text.count(panel) <= 1, text
    assert len(text) <= 250 and not alt_text_problems(text), text
