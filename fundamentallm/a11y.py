"""Plots that say what they show, to a screen reader as well as to the eye.

Two halves, joined by the PNG file itself:

* In a notebook kernel, :func:`install_figure_alt` (run when ``fundamentallm`` is imported inside
  IPython) wraps the inline backend's PNG printer: every matplotlib figure a cell displays carries a
  text description of itself in its PNG, an ``iTXt`` chunk named ``Description``.
  :func:`describe_figure` writes it from the figure: its title, and for each panel the kind of plot,
  the panel's title, what is plotted against what (axis labels, log scales, ranges), the legend and
  category labels, the colour bar's label. A figure can carry a description written by hand with
  :func:`set_alt_text`; it comes first, before the derived one.
* In the book build, the book's Sphinx extension (:mod:`fundamentallm.course.book_build`) reads
  the description back as the ``alt`` text of each notebook plot (myst-nb otherwise writes the
  file's hash), and makes a few fixes to the theme's HTML that axe-core asks for.

The PNG's pixels are unchanged, and the same figure always gives the same description (no
timestamps), so a rebuild writes the same files.
"""

from __future__ import annotations

import base64
import re
import struct
import sys
import zlib
from typing import Any, Optional

from .alt_findings import ARROW, E_NUMBER, TOKEN_NAME, panel_finding, plotted_lines, speakable
from .alt_findings import num as _num  # 3 significant digits, the findings' format

KEYWORD = "Description"
MAX_PANELS = 6  # panels described one by one; the rest are counted
MAX_LABELS = 12  # category labels (tokens, names) listed per axis
MAX_ALT = 250  # characters of alt text: the finding and the axes, then details as far as they fit


# ---------------------------------------------------------------------------------------------
# Describing a figure


def set_alt_text(fig, text: str):
    """Give ``fig`` a description written by hand (what the figure shows and what to notice); the
    derived description (titles, axes, legend) follows it in the alt text. Returns ``fig``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text must be a non-empty string describing the figure, got {text!r}")
    fig._fl_alt_text = speakable(" ".join(text.split()))
    return fig


def _range(ax, which: str) -> tuple[float, float]:
    """The data's range along an axis (without the axes' margins), or the axis limits."""
    import numpy as np

    lo, hi = (ax.dataLim.intervalx if which == "x" else ax.dataLim.intervaly)
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
        lo, hi = sorted(getattr(ax, f"get_{which}lim")())
    return float(lo), float(hi)


# TeX commands a plot label uses, as the character a reader sees (others lose their backslash).
_SYMBOLS = {"cdot": "·", "times": "×", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "approx": "≈",
            "to": "→", "rightarrow": "→", "infty": "∞", "pm": "±", "ell": "ℓ", "alpha": "α", "beta": "β",
            "gamma": "γ", "theta": "θ", "lambda": "λ", "mu": "μ", "sigma": "σ", "tau": "τ", "eta": "η",
            "epsilon": "ε", "varepsilon": "ε", "Delta": "Δ", "nabla": "∇", "log": "log", "exp": "exp",
            "quad": " ", ",": " ", "left": "", "right": "", "partial": "∂", "rho": "ρ", "pi": "π",
            "omega": "ω", "propto": "∝", "phi": "φ", "psi": "ψ", "sum": "Σ", "prod": "Π", "lVert": "‖", "rVert": "‖"}


def _clean(text: str) -> str:
    """Matplotlib mathtext ($\\alpha$, $\\times$) to readable text, whitespace collapsed, and
    said well (:func:`speakable`)."""
    return speakable(_clean_tex(text))


def _clean_tex(text: str) -> str:
    """Matplotlib mathtext ($\\alpha$, $\\times$) to readable text, whitespace collapsed."""
    text = re.sub(r"\$([^$]*)\$", lambda m: re.sub(r"\\(mathrm|mathdefault|text|mathbf|mathit)\{([^}]*)\}", r"\2",
                                                    m.group(1)), text)
    text = text.replace("\\|", "‖").replace("\\,", " ").replace("\\;", " ")
    text = re.sub(r"\\sqrt\{([^}]*)\}", r"sqrt(\1)", text)
    text = re.sub(r"\\frac\{([^}]*)\}\{([^}]*)\}", r"(\1)/(\2)", text)
    text = re.sub(r"\\([A-Za-z]+)", lambda m: _SYMBOLS.get(m.group(1), m.group(1)), text)
    text = text.replace("{", "").replace("}", "").replace("\\", "")
    # read aloud: "x_i" as "x i", "|x|" as "magnitude of x", "‖x‖" as "norm of x"
    text = re.sub(r"(?<=\S)_(?=[\w\u0370-\u03ff])", " ", text)
    text = re.sub(r"(?<![<\w])\|([^|<>]+)\|(?![>\w])", r"magnitude of \1", text)  # not "<|endoftext|>"
    text = re.sub(r"‖([^‖]+)‖", r"norm of \1", text)
    return " ".join(text.split())


def _tick_labels(axis) -> list[str]:
    """The text of an axis's tick labels when they name categories (tokens, heads, recipes)
    rather than numbers; [] for a numeric axis."""
    labels = [_clean_tex(t.get_text()) for t in axis.get_ticklabels()]
    labels = [t for t in labels if t]
    if not labels:
        return []
    numeric = re.compile(r"^[\u2212+-]?[\d.,]+(e[\u2212+-]?\d+)?%?$|^10\^?[\u2212+-]?\d+$|^\d+\^[\u2212+-]?\d+$")
    if all(numeric.match(t.replace(" ", "")) for t in labels):
        return []
    return [speakable(t) for t in labels]


def _list(items: list[str], limit: int = MAX_LABELS) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _axis_phrase(ax, which: str) -> str:
    """An axis's label (and log scale), or '' when it has no label."""
    label = _clean(getattr(ax, f"get_{which}label")())
    if label and getattr(ax, f"get_{which}scale")() == "log" and "log" not in label.lower():
        label += " (log scale)"
    return label


def _line_kind(lines, points, references) -> str:
    """What ``plot`` drew, in words: data lines, marker-only points, reference lines (a fit, a
    chance level, a guide) counted apart: "line plot with 3 lines and a reference line",
    "3 points and a fitted line"."""
    parts = []
    if lines:
        parts.append("line plot" if len(lines) == 1 else f"line plot with {len(lines)} lines")
    if points:
        n = sum(len(p.get_xdata()) for p in points)
        parts.append(f"{n} point{'s' if n != 1 else ''}" if len(points) == 1 else f"{len(points)} series of points")
    if references:
        fitted = [r for r in references if re.search(r"\bfit", str(r.get_label() or ""), re.I)]
        kind = "fitted" if len(fitted) == len(references) else "reference"
        parts.append(f"a {kind} line" if len(references) == 1 else f"{len(references)} {kind} lines")
    if not lines:
        return "plot of " + (" and ".join(parts))
    return " and ".join(parts) if len(parts) < 3 else f"{parts[0]}, {parts[1]} and {parts[2]}"


def _bar_centres(bars) -> dict:
    """The range of the bars' centres along their category axis ({'x': (lo, hi)} for vertical
    bars): channels 0..255 run from 0 to 255, not from the edge -0.5 to 255.5."""
    centres = []
    horizontal = False
    for container in bars:
        horizontal = getattr(container, "orientation", "vertical") == "horizontal"
        for p in container.patches:
            centres.append(p.get_y() + p.get_height() / 2 if horizontal else p.get_x() + p.get_width() / 2)
    if not centres:
        return {}
    return {("y" if horizontal else "x"): (float(min(centres)), float(max(centres)))}


def _describe_axes(ax, colorbars: dict) -> tuple[str, str, list[str]]:
    """A panel as (finding, kind and axes, details): what its data show (alt_findings), what is
    plotted against what, and the rest (categories, ranges, legend, colour scale, notes) in the
    order they are dropped from the end when the alt text runs long."""
    from matplotlib.collections import PathCollection, PolyCollection
    from matplotlib.container import BarContainer

    details = []
    lines, points, references = plotted_lines(ax)
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    fills = [c for c in ax.collections if isinstance(c, PolyCollection)]
    kinds = []
    if ax.images:
        kinds.append("heatmap")
    if bars:
        horizontal = bars[0].orientation == "horizontal" if hasattr(bars[0], "orientation") else False
        kinds.append("horizontal bar chart" if horizontal else "bar chart")
    loglog = ax.get_xscale() == "log" and ax.get_yscale() == "log"
    if references and not (lines or points) and kinds:  # a chance level over bars or a heatmap
        kinds[-1] += " with a reference line" if len(references) == 1 else f" with {len(references)} reference lines"
    elif lines or points or references:
        kinds.append(_line_kind(lines, points, references))
        if loglog and not (ax.images or bars):
            kinds[-1] = "log-log " + kinds[-1]
    if scatters:
        kinds.append("scatter plot")
    if fills and not kinds:
        kinds.append("filled plot")
    if not kinds:
        texts = [_clean(t.get_text()) for t in ax.texts if t.get_text().strip()]
        return ("", "text: " + _list(texts, 8), []) if texts else ("", "", [])
    x, y = _axis_phrase(ax, "x"), _axis_phrase(ax, "y")
    xcats, ycats = _tick_labels(ax.xaxis), _tick_labels(ax.yaxis)
    finding = speakable(panel_finding(ax, x, y, xcats, ycats))  # (line labels are not cleaned)
    if kinds[0].startswith("log-log "):  # the kind says both axes are logarithmic
        x, y = x.replace(" (log scale)", ""), y.replace(" (log scale)", "")
    kind = " and ".join(kinds)
    if ax.images:
        rows = f"{y} (rows)" if y and y.lower() != "rows" else "rows"
        columns = f"{x} (columns)" if x and x.lower() != "columns" else "columns"
        short = kind + (f", {rows} by {columns}" if x or y else "")
    else:
        joint = ": " if kind.startswith(("plot of ", "log-log plot of ")) else " of "  # not "of ... of"
        short = f"{kind}{joint}{y or 'values'}" + (f" against {x}" if x else "")
    if ax.images:
        x, y = x or "columns", y or "rows"
    x = x or ("x" if ax.get_xscale() != "log" else "x (log scale)")
    y = y or ("y" if ax.get_yscale() != "log" else "y (log scale)")
    if xcats and xcats == ycats:
        details.append(f"{y} and {x}: {_list(xcats)}")
    else:
        if xcats:
            details.append(f"{x}: {_list(xcats)}")
        if ycats:
            details.append(f"{y}: {_list(ycats)}")
    legend = ax.get_legend()
    if legend is not None:
        names = [_clean(t.get_text()) for t in legend.get_texts() if t.get_text().strip()]
        if names:
            details.append("legend: " + _list(names, 8))
    for image in ax.images:
        bar = colorbars.get(id(image))
        if bar is not None:
            lo, hi = bar.mappable.get_clim()
            label = _clean(bar.ax.get_ylabel() or bar.ax.get_xlabel())
            details.append(f"colour scale{' ' + label if label else ''} from {_num(lo)} to {_num(hi)}")
            break
    if not ax.images:
        centres = _bar_centres(bars)
        for which, cats in (("x", xcats), ("y", ycats)):
            if not cats:
                lo, hi = centres[which] if which in centres else _range(ax, which)
                details.append(f"{x if which == 'x' else y} from {_num(lo)} to {_num(hi)}")
    notes = [_clean(t.get_text()) for t in ax.texts if t.get_text().strip()]
    if notes and len(notes) <= 6:
        details.append("notes: " + "; ".join(notes))
    elif notes and ax.images:
        details.append("each cell labelled with its value")
    return finding, short, details


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".;,")
    return text[:1].upper() + text[1:] + "." if text else ""


def _fit(pieces: list[str], budget: int) -> list[str]:
    """The pieces, in order, that fit in ``budget`` characters (a piece that does not fit is left
    out; a shorter one after it may still fit)."""
    kept, used = [], 0
    for piece in pieces:
        if piece and used + len(piece) + 1 <= budget:
            kept.append(piece)
            used += len(piece) + 1
    return kept


def describe_figure(fig) -> str:
    """A text description of a matplotlib figure, for alt text, in at most about :data:`MAX_ALT`
    characters: first what it shows -- the hand-written description (:func:`set_alt_text`) if
    any, else each panel's finding read from its data (a trend, a crossing, the largest bar or
    cell: :mod:`fundamentallm.alt_findings`) -- then the figure's title and each panel's kind and
    axes, then, as far as they fit, categories, legend, ranges and colour scale."""
    colorbars = {}
    panels = []
    for ax in fig.axes:
        bar = getattr(ax, "_colorbar", None)
        if bar is not None:
            colorbars[id(bar.mappable)] = bar
        else:
            panels.append(ax)
    described = []
    for ax in panels:
        finding, short, details = _describe_axes(ax, colorbars)
        title = _clean(ax.get_title() or ax.get_title("left") or ax.get_title("right"))
        if not short and not title:
            continue
        described.append((title, finding, short, details))
    manual = getattr(fig, "_fl_alt_text", None)
    head = [_sentence(manual)] if manual else []
    many = len(described) > 1
    if not manual:
        findings = [(f"{t}: {f}" if many and t else f) for t, f, _, _ in described[:MAX_PANELS] if f]
        head = _fit([_sentence(f) for f in findings], MAX_ALT // 2) if findings else []
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None and suptitle.get_text().strip():
        head.append(f"Figure titled “{_clean(suptitle.get_text())}”.")
    if not described:
        return " ".join(head) or "A figure with no plotted data."
    budget = max(MAX_ALT - len(" ".join(head)) - 1, 60)
    if not many:
        title, _, short, details = described[0]
        # the panel's title and axes, or as much of them as fits after a long hand-written finding
        # (the kind and the axes' names, without units, before the title alone)
        bare = re.sub(r"\s*\([^()]*\)", "", short)
        options = [f"{title}: {short}" if title and short else title or short, short, bare, title]
        first = next((o for o in options if o and len(o) + 1 <= budget), "")
        if not first:
            return " ".join(head)
        body = [first[:1].upper() + first[1:]] + _fit(details, budget - len(first) - 2)
        return " ".join(head + ["; ".join(body) + "."])
    shown = described[:MAX_PANELS]
    intro = f"{len(described)} panels."
    shorts = [f"Panel {i + 1}, " + (f"{t}: {s}" if t and s else t or s) + "." for i, (t, _, s, _) in enumerate(shown)]
    kept, used = [], len(intro)  # the first panels, in order, as far as they fit
    for piece in shorts:
        if used + len(piece) + 1 > budget:
            break
        kept.append(len(kept))
        used += len(piece) + 1
    body = [intro] + [shorts[i] for i in kept] if kept else []
    titles = [t for t, _, _, _ in shown if t]
    if not kept and len(titles) == len(shown):  # no panel's kind fits: at least each panel's title
        body = _fit([f"{len(described)} panels: " + "; ".join(titles) + "."],
                    MAX_ALT - len(" ".join(head)) - 1)  # (not the floor of 60 a panel's kind gets)
    rest = budget - len(" ".join(body))
    # a panel's ranges in its own sentence, after its title and kind, where they fit (a second
    # "Panel 1: ..." would sound like another panel of the same name)
    for i in kept:
        extra = "; " + "; ".join(shown[i][3][:2]) if shown[i][3] else ""
        if extra and len(extra) <= rest:
            body[1 + i] = body[1 + i][:-1] + extra + "."
            rest -= len(extra)
    return " ".join(head + body)


_RAW_TEX = re.compile(r"\\[A-Za-z]+|\$|[_^]\{|[{}]")
# read aloud badly: a plain-text subscript ("ω_i", "d_model") or a pipe ("|x|")
_UNSPOKEN = re.compile(r"(?<=\w)_(?=\w)|\|")
# a word or two said twice in a row ("rows (rows)"), not across the items of a list ("SFT, SFT (short)")
# (a hyphenated doubling, "log-log", is one word)
_REPEATED = re.compile(r"\b([A-Za-z]{2,}(?:[^\w,;]+[A-Za-z]{2,})?)(?!-[A-Za-z])[^\w,;]+\1\b", re.I)


def alt_text_problems(alt: str, limit: int = MAX_ALT + 10) -> list[str]:
    """What is wrong with an alt text: raw TeX, a subscript or pipe written as plain text ("ω_i",
    "|x|"), a number in e-notation ("1e-05"), an arrow "->" or a special token's name ("<cls>")
    (read out character by character), a word or two repeated back to back ("rows (rows)",
    "(log scale) (log scale)"), or more than ``limit`` characters. [] when nothing is."""
    problems = []
    for pattern, what in ((E_NUMBER, "e-notation"), (ARROW, "arrow"), (TOKEN_NAME, "token name")):
        if pattern.search(alt):
            problems.append(f"{what} {pattern.search(alt).group(0).strip()!r}")
    if _RAW_TEX.search(alt):
        problems.append(f"raw TeX {_RAW_TEX.search(alt).group(0)!r}")
    if _UNSPOKEN.search(alt):
        problems.append(f"read aloud badly {_UNSPOKEN.search(alt).group(0)!r}")
    if _REPEATED.search(alt):
        problems.append(f"repeated {_REPEATED.search(alt).group(0)!r}")
    if len(alt) > limit:
        problems.append(f"{len(alt)} characters")
    return problems


# ---------------------------------------------------------------------------------------------
# The description inside the PNG (an iTXt chunk: UTF-8 text)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_with_description(png: bytes, text: str) -> bytes:
    """``png`` with an ``iTXt`` chunk ``Description: text`` inserted before its end (any earlier
    Description chunk is replaced); the image data is untouched."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("png must be the bytes of a PNG file")
    chunks, pos = [], 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind = png[pos + 4:pos + 8]
        end = pos + 12 + length
        data = png[pos + 8:pos + 8 + length]
        if not (kind in (b"tEXt", b"iTXt") and data.split(b"\0", 1)[0] == KEYWORD.encode()):
            chunks.append((kind, png[pos:end]))
        pos = end
    itxt = _chunk(b"iTXt", KEYWORD.encode() + b"\0\0\0\0\0" + text.encode("utf-8"))
    out = [png[:8]]
    for kind, raw in chunks:
        if kind == b"IEND":
            out.append(itxt)
        out.append(raw)
    return b"".join(out)


def png_description(png: bytes) -> Optional[str]:
    """The ``Description`` text stored in a PNG (``iTXt`` or ``tEXt``), or None."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    pos = 8
    while pos + 8 <= len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        if kind == b"tEXt" and data.split(b"\0", 1)[0] == KEYWORD.encode():
            return data.split(b"\0", 1)[1].decode("latin-1")
        if kind == b"iTXt" and data.split(b"\0", 1)[0] == KEYWORD.encode():
            rest = data.split(b"\0", 1)[1]
            compressed, rest = rest[0], rest[2:]
            _language, _translated, text = rest.split(b"\0", 2)
            return (zlib.decompress(text) if compressed else text).decode("utf-8")
        if kind == b"IEND":
            break
        pos += 12 + length
    return None


# ---------------------------------------------------------------------------------------------
# The notebook kernel: every displayed figure's PNG carries its description

_installed = False


def _wrap(printer):
    """The inline backend's PNG printer, with the figure's description added to its output
    (base64 text, bytes, or a ``(data, metadata)`` pair for retina figures)."""
    if getattr(printer, "_fl_alt", False):
        return printer

    def printer_with_alt(fig, *args, **kwargs):
        result = printer(fig, *args, **kwargs)
        try:
            text = describe_figure(fig)
        except Exception:  # a description must never stop a figure from showing
            return result
        data, meta = result if isinstance(result, tuple) else (result, None)
        if isinstance(data, str):
            data = base64.b64encode(png_with_description(base64.b64decode(data), text)).decode("ascii")
        elif isinstance(data, (bytes, bytearray)):
            data = png_with_description(bytes(data), text)
        else:
            return result
        return (data, meta) if meta is not None else data

    printer_with_alt._fl_alt = True
    return printer_with_alt


def _ensure_wrapped(*_args: Any) -> None:
    """Wrap the PNG printer of matplotlib figures, if matplotlib is loaded and not yet wrapped
    (run before every cell: ``%matplotlib inline`` or a first ``import matplotlib.pyplot`` installs
    a fresh printer)."""
    figure = sys.modules.get("matplotlib.figure")
    if figure is None:
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    formatter = shell.display_formatter.formatters.get("image/png")
    if formatter is None:
        return
    printer = formatter.type_printers.get(figure.Figure)
    if printer is not None and not getattr(printer, "_fl_alt", False):
        formatter.for_type(figure.Figure, _wrap(printer))


def install_figure_alt() -> bool:
    """In an IPython kernel, give every matplotlib figure a cell displays a text description
    (:func:`describe_figure`) inside its PNG, for the book's alt text. Returns whether a kernel
    was found. Safe to call more than once.

    The inline backend registers its PNG printer lazily (when a cell first draws a figure) and
    again on ``%matplotlib inline``: the PNG formatter's ``for_type`` is wrapped so that any printer
    registered for matplotlib's ``Figure`` gets the description, and a printer already there is
    wrapped now."""
    global _installed
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    formatter = shell.display_formatter.formatters.get("image/png")
    if formatter is None:
        return False
    if not _installed:
        for_type = formatter.for_type

        def for_type_with_alt(typ, func=None):
            if (func is not None and getattr(typ, "__name__", "") == "Figure"
                    and getattr(typ, "__module__", "") == "matplotlib.figure"):
                func = _wrap(func)
            return for_type(typ, func)

        formatter.for_type = for_type_with_alt
        shell.events.register("pre_run_cell", _ensure_wrapped)
        _installed = True
    _ensure_wrapped()
    return True
