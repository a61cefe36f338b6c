"""Interactive figures that need no kernel: every frame is drawn while the notebook runs, and a
few lines of inline JavaScript swap them when the reader moves a slider or picks from a list.

The same output works in the built HTML book (no server, no CDN), in Jupyter and in Colab: it is
one self-contained ``text/html`` output, shown by the notebook because the returned object has a
``_repr_html_``. ipywidgets need a live kernel and are dead in a static page; this trades the
infinite choice of a widget for a grid of precomputed frames::

    explorer = frame_explorer(
        {"temperature": [0.5, 1.0, 2.0], "filter": ["none", "top-k 5"]},
        lambda temperature, filter: draw(temperature, filter),  # returns a matplotlib Figure
        alt="next-token distribution after the filter")
    explorer  # last expression of the cell: displayed

A control whose values are all numbers is a slider (``<input type=range>``); any other is a
drop-down list (``<select>``). Frames are PNG images embedded as base64 data URIs, so keep the
grid small: the page carries every frame (``explorer.nbytes`` says how much).
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
from numbers import Real
from typing import Any, Callable, Mapping, Sequence

MAX_FRAMES = 120  # a guard for page weight: 120 small PNGs are about 1-2 MB


def figure_to_data_uri(fig, dpi: int = 72) -> str:
    """A matplotlib ``Figure`` as a ``data:image/png;base64,...`` URI; the figure is closed.
    The PNG is reduced to a 256-colour palette: plots need no more, and it is 2-3x smaller."""
    import matplotlib.pyplot as plt
    from PIL import Image  # a dependency of matplotlib

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    buffer = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _is_slider(values: Sequence[Any]) -> bool:
    return all(isinstance(v, Real) and not isinstance(v, bool) for v in values)


class FrameExplorer:
    """Precomputed frames and the controls that choose among them (see :func:`frame_explorer`).
    ``frames`` maps ``"i,j,..."`` (the index of each control's value) to an image URI; the page
    carries each distinct image once."""

    def __init__(self, controls: dict[str, list], frames: dict[str, str], initial: tuple[int, ...],
                 alt: str, title: str | None = None):
        self.controls, self.frames, self.initial = controls, frames, initial
        self.alt, self.title = alt, title
        digest = hashlib.sha1(json.dumps([list(controls), sorted(frames.items()), alt],
                                         default=str).encode()).hexdigest()[:10]
        self.id = f"fl-explorer-{digest}"  # deterministic: the same notebook builds the same page

    @property
    def nbytes(self) -> int:
        """Size of the HTML output in bytes (what the page carries for this figure)."""
        return len(self._repr_html_().encode())

    def _control_html(self, position: int, name: str, values: list) -> str:
        label, start = html.escape(str(name)), self.initial[position]
        if _is_slider(values):
            shown = html.escape(str(values[start]))
            return (f'<label>{label} <input type="range" min="0" max="{len(values) - 1}" step="1" '
                    f'value="{start}" data-position="{position}" aria-label="{label}"> '
                    f'<output>{shown}</output></label>')
        options = "".join(f'<option value="{i}"{" selected" if i == start else ""}>'
                          f'{html.escape(str(v))}</option>' for i, v in enumerate(values))
        return (f'<label>{label} <select data-position="{position}" aria-label="{label}">'
                f'{options}</select></label>')

    def _repr_html_(self) -> str:
        controls = " ".join(self._control_html(i, name, values)
                            for i, (name, values) in enumerate(self.controls.items()))
        labels = {i: [str(v) for v in values] for i, values in enumerate(self.controls.values())}
        key = ",".join(str(i) for i in self.initial)
        images = list(dict.fromkeys(self.frames.values()))  # distinct images, in first-seen order
        position = {uri: i for i, uri in enumerate(images)}
        index = {k: position[uri] for k, uri in self.frames.items()}
        title = f'<div class="fl-title"><strong>{html.escape(self.title)}</strong></div>' if self.title else ""
        # One script per explorer, scoped to its own element; it only swaps an image's src.
        script = f"""<script>(function() {{
  var root = document.getElementById("{self.id}");
  var images = {json.dumps(images)};
  var frames = {json.dumps(index)};
  var labels = {json.dumps(labels)};
  var controls = root.querySelectorAll("[data-position]");
  var image = root.querySelector("img");
  function update() {{
    var key = [];
    controls.forEach(function (c) {{
      key.push(c.value);
      var out = c.parentNode.querySelector("output");
      if (out) out.textContent = labels[c.dataset.position][+c.value];
    }});
    image.src = images[frames[key.join(",")]];
    image.dataset.frame = key.join(",");
  }}
  controls.forEach(function (c) {{ c.addEventListener("input", update); }});
}})();</script>"""
        return (f'<div class="fl-explorer" id="{self.id}" style="max-width:100%;overflow-x:auto">{title}'
                f'<div class="fl-controls" style="display:flex;flex-wrap:wrap;gap:0.4em 1.2em;'
                f'margin:0.3em 0">{controls}</div>'
                f'<img src="{self.frames[key]}" data-frame="{key}" alt="{html.escape(self.alt)}" '
                f'style="max-width:100%;height:auto;background:white">{script}</div>')

    def __repr__(self) -> str:  # what a console shows; notebooks use _repr_html_
        sizes = {name: len(values) for name, values in self.controls.items()}
        return f"FrameExplorer({len(self.frames)} frames, controls {sizes}, {self.nbytes:,} bytes)"


def frame_explorer(controls: Mapping[str, Sequence[Any]], draw: Callable[..., Any], alt: str,
                   initial: Mapping[str, Any] | None = None, title: str | None = None,
                   dpi: int = 72) -> FrameExplorer:
    """Draw ``draw(**values)`` (a matplotlib ``Figure``) for every combination of the controls'
    values and return a :class:`FrameExplorer` that shows one at a time.

    ``controls`` maps a keyword of ``draw`` to the values a reader can choose, in order;
    ``initial`` maps some of them to the value shown first (default: each control's first);
    ``alt`` describes the figure for a reader who cannot see it."""
    if not isinstance(controls, Mapping) or not controls:
        raise ValueError("controls must be a non-empty mapping {keyword: [values]}")
    controls = {str(name): list(values) for name, values in controls.items()}
    for name, values in controls.items():
        if not values:
            raise ValueError(f"control {name!r} has no values; give it at least one")
        if len({str(v) for v in values}) != len(values):
            raise ValueError(f"control {name!r} has repeated values {values}")
    if not callable(draw):
        raise TypeError(f"draw must be a callable returning a matplotlib Figure, got {type(draw).__name__}")
    if not isinstance(alt, str) or not alt.strip():
        raise ValueError("alt must describe the figure in words (it is the image's alt text)")
    n_frames = 1
    for values in controls.values():
        n_frames *= len(values)
    if n_frames > MAX_FRAMES:
        raise ValueError(f"{n_frames} frames (the product of the controls' sizes) is more than "
                         f"MAX_FRAMES={MAX_FRAMES}; give the controls fewer values")
    initial = dict(initial or {})
    unknown = set(initial) - set(controls)
    if unknown:
        raise ValueError(f"initial names unknown controls {sorted(unknown)}; controls are {list(controls)}")
    start = []
    for name, values in controls.items():
        if name in initial and initial[name] not in values:
            raise ValueError(f"initial[{name!r}]={initial[name]!r} is not one of {values}")
        start.append(values.index(initial[name]) if name in initial else 0)
    frames = {}
    for index in itertools.product(*(range(len(v)) for v in controls.values())):
        kwargs = {name: controls[name][i] for name, i in zip(controls, index)}
        fig = draw(**kwargs)
        if not hasattr(fig, "savefig"):
            raise TypeError(f"draw({kwargs}) returned {type(fig).__name__}, not a matplotlib Figure")
        frames[",".join(map(str, index))] = figure_to_data_uri(fig, dpi=dpi)
    return FrameExplorer(controls, frames, tuple(start), alt=alt, title=title)
