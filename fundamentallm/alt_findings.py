"""What a plot shows, in one sentence read from its data: the first words of its alt text.

An alt text that lists the axes tells a reader what was measured, not what came out. These
helpers read the plotted data back from a matplotlib panel and state the finding the way the prose
would: a curve that rises, falls or peaks (and where), which line ends highest and where two lines
cross, the largest and smallest bar, the hottest cell of a heatmap, a scatter's trend.
:func:`fundamentallm.a11y.describe_figure` puts this first (after a hand-written description, when
a figure has one) and the axes after it.
"""

from __future__ import annotations

import math
import re

import numpy as np


def spoken_number(v: float, digits: int = 3) -> str:
    """``v`` to ``digits`` significant digits, written the way a screen reader says it well: no
    e-notation ("1e-05", "2.3e+08" are read letter by letter). Between 0.001 and 100,000 as
    before (1150, 0.0123); above, with thousands separators and words (120,000, 230 million,
    1.5 billion); below, as a decimal down to 0.000001, then as "2 times 10 to the minus 10"."""
    v = float(v)
    if v == 0 or not np.isfinite(v):
        return "0" if v == 0 else str(v)
    if 1e-3 <= abs(v) < 1e5:
        text = f"{v:.{digits}g}"
        return f"{round(v):d}" if "e" in text else text
    v = float(f"{v:.{digits}g}")  # rounded first: 999,999 is 1 million at 3 digits
    a, sign = abs(v), "-" if v < 0 else ""
    if a >= 1e5:
        for scale, word in ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")):
            if a >= scale:
                text = f"{a / scale:.{digits}g}"
                return f"{sign}{f'{round(a / scale):,d}' if 'e' in text else text} {word}"
        return f"{sign}{round(a):,d}"
    exponent = math.floor(math.log10(a))
    if exponent >= -6:
        return sign + f"{a:.{digits - 1 - exponent}f}".rstrip("0").rstrip(".")
    mantissa = f"{a / 10 ** exponent:.{digits}g}"
    return f"{sign}{'' if mantissa == '1' else mantissa + ' times '}10 to the minus {-exponent}"


def num(v: float) -> str:
    """3 significant digits, without an exponent (1150, not 1.15e3; 230 million, not 2.3e8):
    :func:`spoken_number`."""
    return spoken_number(v, 3)


def _name(label: str, fallback: str) -> str:
    """An axis label without its unit or scale note in brackets: 'loss (log scale)' -> 'loss'."""
    label = re.sub(r"\s*[(\[][^)\]]*[)\]]\s*$", "", label or "").strip()
    return label or fallback


def _line_label(line, i: int) -> str:
    label = str(line.get_label() or "")
    return label if label and not label.startswith("_") else f"line {i + 1}"


# a line's label that marks it as a guide, not a data series: chance level, a power-law guide, a fit
_REFERENCE = re.compile(r"chance|∝|\\propto|\bfit|fitted|guide|reference|slope|ideal|\bO\(|~ ?[A-Za-z]\^", re.I)


def line_role(ax, line) -> str:
    """What a line drawn with ``plot`` is: 'points' (markers only), 'reference' (a horizontal or
    vertical reference line, a 2-point line at constant x or y, a dashed 2-point guide, or a line
    labelled like a reference: "chance", "∝ T", "fit"), or 'line' (a data series)."""
    style = str(line.get_linestyle())
    if style in ("None", "none", "", " "):
        return "points"
    if line.get_transform() != ax.transData:  # axhline / axvline: one coordinate in axes units
        return "reference"
    if _REFERENCE.search(str(line.get_label() or "")):
        return "reference"
    x, y = _xy(line)
    if len(x) == 2 and (x[0] == x[1] or y[0] == y[1] or style in ("--", ":", "-.", "dashed", "dotted", "dashdot")):
        return "reference"
    return "line"


def plotted_lines(ax) -> tuple[list, list, list]:
    """The visible lines of ``ax`` drawn with ``plot`` (2 points or more), split
    into (data lines, marker-only series, reference lines)."""
    groups = {"line": [], "points": [], "reference": []}
    for line in ax.get_lines():
        if not line.get_visible():
            continue
        role = line_role(ax, line)
        if len(line.get_xdata()) > 1:  # (a single marker is an annotation, not a series)
            groups[role].append(line)
    return groups["line"], groups["points"], groups["reference"]


def _xy(line):
    x = np.asarray(line.get_xdata(), dtype=float)
    y = np.asarray(line.get_ydata(), dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    return x[keep], y[keep]


def _one_curve(x, y, ylab: str, xlab: str) -> str:
    lo, hi = float(y.min()), float(y.max())
    span = hi - lo
    if span <= 1e-12 * max(1.0, abs(hi)):
        return f"{ylab} stays at {num(hi)}"
    i_max, i_min = int(y.argmax()), int(y.argmin())
    ends_hi, ends_lo = max(y[0], y[-1]), min(y[0], y[-1])
    if 0 < i_max < len(y) - 1 and hi - ends_hi > 0.2 * span:
        return f"{ylab} peaks at {num(hi)} at {xlab} {num(x[i_max])}"
    if 0 < i_min < len(y) - 1 and ends_lo - lo > 0.2 * span:
        return f"{ylab} dips to {num(lo)} at {xlab} {num(x[i_min])}"
    verb = "rises" if y[-1] > y[0] else "falls"
    return f"{ylab} {verb} from {num(y[0])} to {num(y[-1])} as {xlab} goes from {num(x[0])} to {num(x[-1])}"


def _lines(ax, lines, ylab: str, xlab: str) -> str:
    curves = [(i, *_xy(ln)) for i, ln in enumerate(lines)]
    curves = [(i, x, y) for i, x, y in curves if len(y) > 1]
    if not curves:
        return ""
    if len(curves) == 1:
        _, x, y = curves[0]
        return _one_curve(x, y, ylab, xlab)
    named = [(_line_label(lines[i], i), x, y) for i, x, y in curves]
    if not any(not n.startswith("line ") for n, _, _ in named) and len(named) > 4:
        return ""  # many unnamed lines (samples, one per channel): no one line to single out
    parts = []
    if len(named) == 2 and len(named[0][1]) == len(named[1][1]) and np.allclose(named[0][1], named[1][1]):
        (a, x, ya), (b, _, yb) = named
        sign = np.sign(ya - yb)
        change = np.nonzero(sign[1:] * sign[:-1] < 0)[0]
        if len(change):
            parts.append(f"{a} and {b} cross near {xlab} {num(x[change[0] + 1])}")
    directions = {("rise" if y[-1] > y[0] else "fall") if y[-1] != y[0] else "stay" for _, _, y in named}
    if len(directions) == 1 and "stay" not in directions:
        parts.insert(0, f"{'both' if len(named) == 2 else f'all {len(named)} lines'} {directions.pop()}")
    finals = [(float(y[-1]), n) for n, _, y in named]
    top, bottom = max(v for v, _ in finals), min(v for v, _ in finals)

    def tied(value: float) -> list[str]:
        return [n for v, n in finals if abs(v - value) <= 1e-9 * max(abs(v), abs(value), 1e-300)]

    if tied(top) == [n for _, n in finals]:
        if len(named) > 1:
            parts.append(f"all {len(named)} lines end tied at {num(top)}" if len(named) > 2
                         else f"both lines end tied at {num(top)}")
        return "; ".join(parts)
    highest, lowest = tied(top), tied(bottom)
    hi = (f"{highest[0]} ends highest ({num(top)})" if len(highest) == 1
          else f"{' and '.join(highest)} end tied highest ({num(top)})")
    lo = (f"{lowest[0]} lowest ({num(bottom)})" if len(lowest) == 1
          else f"{' and '.join(lowest)} tied lowest ({num(bottom)})")
    parts.append(f"{hi}, {lo}")
    return "; ".join(parts)


def _bars(ax, containers, categories: list[str]) -> str:
    horizontal = getattr(containers[0], "orientation", "vertical") == "horizontal"
    values = [[(p.get_width() if horizontal else p.get_height()) for p in c.patches] for c in containers]
    if len(containers) == 1:
        v = np.asarray(values[0], dtype=float)
        if len(v) < 2 or not np.isfinite(v).all():
            return ""
        names = categories if len(categories) == len(v) else [f"bar {i + 1}" for i in range(len(v))]
        hi, lo = int(v.argmax()), int(v.argmin())
        if v[hi] == v[lo]:
            return f"all {len(v)} bars are equal ({num(v[hi])})"
        return f"largest: {names[hi]} ({num(v[hi])}), smallest: {names[lo]} ({num(v[lo])})"
    n = min(len(v) for v in values)
    labels = [str(c.get_label() or "") for c in containers]
    if n < 1 or any(not lab or lab.startswith("_") for lab in labels):
        return ""
    grid = np.asarray([v[:n] for v in values], dtype=float)
    wins = np.bincount(grid.argmax(0), minlength=len(containers))
    best = int(wins.argmax())
    return f"{labels[best]} is highest in {wins[best]} of {n} groups"


def _heatmap(ax, image, rows: list[str], columns: list[str], ylab: str, xlab: str) -> str:
    a = np.ma.masked_invalid(np.asarray(image.get_array(), dtype=float))
    if a.ndim != 2 or a.count() < 2:
        return ""
    if a.max() == a.min():
        return f"every cell is {num(a.max())}"
    r, c = np.unravel_index(int(a.argmax()), a.shape)
    row = rows[r] if len(rows) == a.shape[0] else num(r)
    col = columns[c] if len(columns) == a.shape[1] else num(c)
    return f"largest value {num(a.max())} at {ylab} {row}, {xlab} {col}"


def _scatter(collection, ylab: str, xlab: str) -> str:
    xy = np.asarray(collection.get_offsets(), dtype=float)
    if xy.ndim != 2 or len(xy) < 3:
        return ""
    xy = xy[np.isfinite(xy).all(1)]
    if len(xy) < 3 or xy[:, 0].std() == 0 or xy[:, 1].std() == 0:
        return ""
    r = float(np.corrcoef(xy[:, 0], xy[:, 1])[0, 1])
    if abs(r) < 0.5:
        return f"no clear trend of {ylab} with {xlab} (correlation {r:.2f})"
    return f"{ylab} {'rises' if r > 0 else 'falls'} with {xlab} (correlation {r:.2f})"


def panel_finding(ax, xlabel: str, ylabel: str, xcats: list[str], ycats: list[str]) -> str:
    """One clause on what ``ax`` shows (its data's trend, extreme or crossing), or '' when the
    data say nothing simple. ``xlabel``/``ylabel`` are the axes' cleaned labels, ``xcats``/``ycats``
    their category tick labels ([] on a numeric axis)."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer

    try:
        if ax.images:
            ylab, xlab = _name(ylabel, "row"), _name(xlabel, "column")
            ylab, xlab = ("row" if ylab == "rows" else ylab), ("column" if xlab == "columns" else xlab)
            return _heatmap(ax, ax.images[0], ycats, xcats, ylab, xlab)
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        if bars:
            horizontal = getattr(bars[0], "orientation", "vertical") == "horizontal"
            return _bars(ax, bars, ycats if horizontal else xcats)
        ylab, xlab = _name(ylabel, "y"), _name(xlabel, "x")
        lines, points, _references = plotted_lines(ax)
        lines = lines or points  # marker-only series speak when there is no data line
        if lines and not xcats:
            return _lines(ax, lines, ylab, xlab)
        scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
        if scatters:
            return _scatter(scatters[0], ylab, xlab)
    except (TypeError, ValueError, IndexError):  # data a plot holds in a form not read here
        return ""
    return ""


# a number in e-notation ("1e-05", "2.3e+08"), which a screen reader spells out letter by letter
E_NUMBER = re.compile(r"(?<!\w)(?<!\d\.)(\d+(?:\.\d+)?)[eE]([+\-\u2212]?\d+)(?!\w|\.\d)")
# a special token's name ("<cls>"), read as "less than c l s greater than"; said as words
TOKEN_NAME = re.compile(r"<([a-z]+)>")
TOKEN_WORDS = {"cls": "class", "pad": "padding", "unk": "unknown", "sep": "separator", "bos": "beginning",
                "eos": "end"}
ARROW = re.compile(r"\s*-+>\s*")  # "a -> b", read as "dash greater than"


def speakable(text: str) -> str:
    """``text`` as a screen reader says it well: numbers in e-notation written out with as many
    significant digits as they had ("1e-05" as "0.00001", "2.3e+08" as "230 million":
    :func:`~fundamentallm.alt_findings.spoken_number`), "->" as "to", a special token's name as
    words ("<cls>" as "class token")."""
    def number(m):
        digits = len(m.group(1).replace(".", "").lstrip("0")) or 1
        return spoken_number(float(m.group(1) + "e" + m.group(2).replace("\u2212", "-")), digits)

    text = E_NUMBER.sub(number, text)
    text = ARROW.sub(" to ", text)
    # ("the <cls> token" as "the class token", not "class token token")
    return re.sub(TOKEN_NAME.pattern + r"(?: token\b)?", lambda m: TOKEN_WORDS.get(m.group(1), m.group(1)) + " token", text)
