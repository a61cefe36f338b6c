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
drop-down list (``<select>``); a control with one value is written as text. Frames are PNG
images embedded as base64 data URIs, drawn at :data:`DENSITY` times the pixels they are shown at
(sharp on phones and high-density screens), so keep the grid small: the page carries every frame
(``explorer.nbytes`` says how much).

:class:`Explorer` gives one explorer two faces. In a live kernel (Jupyter, JupyterLab, VS Code,
Colab) it is core ipywidgets -- sliders, drop-downs, text boxes, buttons -- that call ``draw``
again on every change, with the reader's own text and the live model; in the built book it is the
precomputed frames above (the book's ``_config.yml`` drops the widget view from HTML pages, see
``nb_mime_priority_overrides``). One display object carries both::

    Explorer({"temperature": slider(0.0, 2.0, 0.1, 1.0, frames=[0.5, 1.0, 2.0]),
              "prompt": text("Return the ", frames=["Return the ", "def "])},
             draw, alt="next-token distribution")

``draw`` returns a matplotlib ``Figure``, or a string: a short message shown in place of the
figure (bad input: an empty text box, a character outside the vocabulary, a temperature of 0).
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
import time
from dataclasses import dataclass
from numbers import Real
from typing import Any, Callable, Mapping, Sequence

MAX_FRAMES = 120  # a guard for page weight: 120 small PNGs are about 1-2 MB


DENSITY = 2  # frames are drawn at twice the pixels they are shown at (sharp on phones and HiDPI screens)


def figure_to_data_uri(fig, dpi: int = 72 * DENSITY) -> str:
    """A matplotlib ``Figure`` as a ``data:image/png;base64,...`` URI; the figure is closed.
    The PNG is reduced to a 64-colour palette: plots need no more, and it is 2-3x smaller."""
    import matplotlib.pyplot as plt
    from PIL import Image  # a dependency of matplotlib

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    buffer = io.BytesIO()
    image.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _is_slider(values: Sequence[Any]) -> bool:
    return all(isinstance(v, Real) and not isinstance(v, bool) for v in values)


class FrameExplorer:
    """Precomputed frames and the controls that choose among them (see :func:`frame_explorer`).
    ``frames`` maps ``"i,j,..."`` (the index of each control's value) to an image URI; the page
    carries each distinct image once."""

    def __init__(self, controls: dict[str, list], frames: dict[str, str], initial: tuple[int, ...],
                 alt: str, title: str | None = None, note: str | None = None, density: float = 1):
        self.controls, self.frames, self.initial, self.density = controls, frames, initial, density
        self.lists: set[str] = set()  # controls shown as a list even when their values are numbers
        self.alt, self.title, self.note = alt, title, note
        digest = hashlib.sha1(json.dumps([list(controls), sorted(frames.items()), alt],
                                         default=str).encode()).hexdigest()[:10]
        self.id = f"fl-explorer-{digest}"  # deterministic: the same notebook builds the same page

    def _width(self, uri: str) -> int:
        """The CSS width an image is shown at: its pixels divided by the density it was drawn at."""
        png = base64.b64decode(uri.split(",", 1)[1][:64])
        return round(int.from_bytes(png[16:20], "big") / self.density)

    @property
    def nbytes(self) -> int:
        """Size of the HTML output in bytes (what the page carries for this figure)."""
        return len(self._repr_html_().encode())

    def _control_html(self, position: int, name: str, values: list) -> str:
        label, start = html.escape(str(name)), self.initial[position]
        if len(values) == 1:  # nothing to choose in the book: say the value, not a control that cannot move
            return (f'<span class="fl-fixed">{label}: <strong>{html.escape(str(values[0]))}</strong> '
                    f'<small>(other values in the live explorer)</small></span>')
        if _is_slider(values) and name not in self.lists:
            shown = html.escape(str(values[start]))
            return (f'<label>{label} <input type="range" min="0" max="{len(values) - 1}" step="1" '
                    f'value="{start}" data-position="{position}" aria-label="{label}" '
                    f'aria-valuetext="{shown}"> <output aria-hidden="true">{shown}</output></label>')
        options = "".join(f'<option value="{i}"{" selected" if i == start else ""}>'
                          f'{html.escape(str(v))}</option>' for i, v in enumerate(values))
        return (f'<label>{label} <select data-position="{position}" aria-label="{label}">'
                f'{options}</select></label>')

    def frame_alt(self, index: Sequence[int]) -> str:
        """The image's alt text for the frame at ``index``: the description and the shown values
        (the script keeps it in step with the controls)."""
        shown = ", ".join(f"{name} {values[i]}" for (name, values), i in zip(self.controls.items(), index))
        return f"{self.alt} (shown: {shown})"

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
  var widths = {json.dumps([self._width(uri) for uri in images])};
  var frames = {json.dumps(index)};
  var labels = {json.dumps(labels)};
  var controls = root.querySelectorAll("[data-position]");
  var names = {json.dumps(list(self.controls))};
  var fixed = {json.dumps([i for i, v in enumerate(self.controls.values()) if len(v) == 1])};
  var alt = {json.dumps(self.alt)};
  var image = root.querySelector("img");
  var dead = root.querySelector(".fl-dead");
  if (dead) dead.hidden = true;  // the script runs: the controls work
  function update() {{
    var key = [], shown = [];
    fixed.forEach(function (i) {{ key[i] = "0"; shown[i] = names[i] + " " + labels[i][0]; }});
    controls.forEach(function (c) {{
      var label = labels[c.dataset.position][+c.value];
      key[+c.dataset.position] = c.value;
      shown[+c.dataset.position] = names[c.dataset.position] + " " + label;
      if (c.type === "range") c.setAttribute("aria-valuetext", label);
      var out = c.parentNode.querySelector("output");
      if (out) out.textContent = label;
    }});
    image.src = images[frames[key.join(",")]];
    image.width = widths[frames[key.join(",")]];
    image.dataset.frame = key.join(",");
    image.alt = alt + " (shown: " + shown.join(", ") + ")";
  }}
  controls.forEach(function (c) {{ c.addEventListener("input", update); }});
  // print the default frame, whatever the reader moved to; back to it after printing
  var first = [image.src, image.alt, image.dataset.frame, image.width], shown = null;
  window.addEventListener("beforeprint", function () {{
    shown = [image.src, image.alt, image.dataset.frame, image.width];
    image.src = first[0]; image.alt = first[1]; image.dataset.frame = first[2]; image.width = first[3];
  }});
  window.addEventListener("afterprint", function () {{
    if (shown) {{ image.src = shown[0]; image.alt = shown[1]; image.dataset.frame = shown[2]; image.width = shown[3]; }}
  }});
}})();</script>"""
        # Shown where the script cannot run (a notebook opened untrusted in Jupyter, GitHub's
        # viewer): the controls would move without changing the picture, so say why.
        dead = ('<p class="fl-note fl-dead" style="font-size:0.9em;margin:0.2em 0"><em>These '
                'controls need JavaScript, which this view does not run (an untrusted notebook): '
                'run this cell to bring the explorer to life (in Jupyter, trust the notebook '
                'first: File, Trust Notebook).</em></p>')
        note = (f'<p class="fl-note" style="font-size:0.9em;margin:0.2em 0">{html.escape(self.note)}</p>'
                if self.note else "")
        return (f'<div class="fl-explorer" id="{self.id}" style="max-width:100%;overflow-x:auto">{title}'
                f'<div class="fl-controls" style="display:flex;flex-wrap:wrap;gap:0.4em 1.2em;'
                f'margin:0.3em 0">{controls}</div>'
                f'<img src="{self.frames[key]}" data-frame="{key}" width="{self._width(self.frames[key])}" '
                f'alt="{html.escape(self.frame_alt(self.initial))}" '
                f'style="max-width:100%;height:auto;background:white">{dead}{note}{script}</div>')

    def __repr__(self) -> str:  # what a console shows; notebooks use _repr_html_
        sizes = {name: len(values) for name, values in self.controls.items()}
        return f"FrameExplorer({len(self.frames)} frames, controls {sizes}, {self.nbytes:,} bytes)"


def frame_explorer(controls: Mapping[str, Sequence[Any]], draw: Callable[..., Any], alt: str,
                   initial: Mapping[str, Any] | None = None, title: str | None = None,
                   dpi: int = 72 * DENSITY, note: str | None = None) -> FrameExplorer:
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
    return FrameExplorer(controls, frames, tuple(start), alt=alt, title=title, note=note,
                         density=dpi / 72)


# --- one explorer, two faces ------------------------------------------------------------------

@dataclass(frozen=True)
class Control:
    """One control of an :class:`Explorer`: ``kind`` is "slider", "choice" or "text"; ``value``
    the first value; ``frames`` the values the book's precomputed frames cover."""

    kind: str
    value: Any
    frames: tuple
    options: tuple = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None


def slider(low: float, high: float, step: float, value: float,
           frames: Sequence[float] | None = None) -> Control:
    """A slider from ``low`` to ``high`` by ``step`` (integers if all four are)."""
    for name, v in [("low", low), ("high", high), ("step", step), ("value", value)]:
        if not isinstance(v, Real) or isinstance(v, bool):
            raise TypeError(f"slider {name}={v!r} must be a number")
    if not low <= value <= high or step <= 0:
        raise ValueError(f"slider needs low <= value <= high and step > 0, got "
                         f"low={low}, value={value}, high={high}, step={step}")
    frames = tuple(sorted(frames)) if frames is not None else (value,)  # left to right, ascending
    if value not in frames or any(not low <= f <= high for f in frames):
        raise ValueError(f"slider frames={list(frames)} must include value={value} and lie in [{low}, {high}]")
    return Control("slider", value, frames, low=low, high=high, step=step)


def choice(options: Sequence[Any], value: Any = None, frames: Sequence[Any] | None = None) -> Control:
    """A drop-down list of ``options`` (the book's frames cover all of them unless ``frames``)."""
    options = tuple(options)
    if not options:
        raise ValueError("choice needs at least one option")
    value = options[0] if value is None else value
    frames = tuple(frames) if frames is not None else options
    if value not in options or value not in frames or not set(frames) <= set(options):
        raise ValueError(f"choice value={value!r} and frames={list(frames)} must be among "
                         f"options={list(options)}, frames including the value")
    return Control("choice", value, frames, options=options)


def text(value: str, frames: Sequence[str] | None = None) -> Control:
    """A text box; in the book, a drop-down list of the example texts ``frames``."""
    if not isinstance(value, str):
        raise TypeError(f"text value must be a str, got {type(value).__name__}")
    frames = tuple(dict.fromkeys(frames)) if frames is not None else (value,)  # each text once
    if value not in frames:
        raise ValueError(f"text frames={list(frames)} must include value={value!r}")
    return Control("text", value, frames)


def message_figure(message: str):
    """A small figure that holds only ``message`` (a frame of the book for a message)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 1))
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    ax.axis("off")
    return fig


LIVE_NOTE = ("Live explorer: it recomputes in this kernel. If moving a control changes nothing, "
             "the kernel that drew it has stopped: run this cell again.")
BOOK_NOTE = ("Precomputed frames. Open this chapter in Jupyter or Colab and run the cell for the "
             "live explorer: your own text, any value.")


class Explorer:
    """An explorer with two faces (see the module docstring). ``controls`` maps keywords of
    ``draw`` to :func:`slider`, :func:`choice` or :func:`text`; ``actions`` maps a button's label
    to ``action(explorer)``, which changes live state (trains more steps, say) before the figure
    is drawn again; ``draw_frame``, if given, draws the book's frames instead of ``draw``.
    ``explorer.values`` holds the values shown; ``explorer.last`` what ``draw``
    last returned (a ``Figure`` is closed once rendered, a string is a message)."""

    def __init__(self, controls: Mapping[str, Control], draw: Callable[..., Any], alt: str,
                 title: str | None = None, actions: Mapping[str, Callable[[Explorer], Any]] | None = None,
                 dpi: int = 72, width: str = "100%", draw_frame: Callable[..., Any] | None = None):
        if not isinstance(controls, Mapping) or not controls or not all(
                isinstance(c, Control) for c in controls.values()):
            raise ValueError("controls must be a non-empty mapping {keyword: slider(...) | choice(...) | text(...)}")
        if not callable(draw):
            raise TypeError(f"draw must be callable, got {type(draw).__name__}")
        if not isinstance(alt, str) or not alt.strip():
            raise ValueError("alt must describe the figure in words (it is the image's alt text)")
        self.controls, self.draw, self.alt, self.title = dict(controls), draw, alt, title
        self.actions = dict(actions or {})
        self.dpi, self.width = dpi, width
        self.draw_frame = draw_frame or draw  # the book's frames (a different draw if given)
        self.values = {name: c.value for name, c in self.controls.items()}
        self.last: Any = None
        self.seconds = self.cpu_seconds = 0.0  # wall and CPU time of the last live redraw (draw + PNG)
        self._static: FrameExplorer | None = None
        self._widget = None
        self._quiet = False
        self.state: dict = {}  # live objects an explorer keeps between changes (a training run)

    # the book's face
    def _draw_frame(self, **values):
        out = self.draw_frame(**values)
        return message_figure(out) if isinstance(out, str) else out

    @property
    def static(self) -> FrameExplorer:
        """The precomputed frames (drawn on first use)."""
        if self._static is None:
            self._static = frame_explorer(
                {name: list(c.frames) for name, c in self.controls.items()}, self._draw_frame,
                alt=self.alt, initial={name: c.value for name, c in self.controls.items()},
                title=self.title, dpi=self.dpi * DENSITY,
                note=BOOK_NOTE)
            # a choice among numbers (RoPE's base, a head count) is a list, as in the live face
            self._static.lists = {name for name, c in self.controls.items() if c.kind != "slider"}
        return self._static

    # the live face
    def render(self) -> Any:
        """Call ``draw`` with the current values and show the result in the live face; returns
        it. Any error becomes a one-line message in place of the figure, never a traceback."""
        import matplotlib.pyplot as plt

        start, cpu = time.perf_counter(), time.process_time()
        open_before = set(plt.get_fignums())
        try:
            out = self.draw(**self.values)
        except Exception as err:  # noqa: BLE001 -- a live control must not print a traceback
            out = f"Could not draw this: {type(err).__name__}: {err}"
            for number in set(plt.get_fignums()) - open_before:  # what the failed draw left open
                plt.close(number)
        png = None
        if not isinstance(out, str):
            buffer = io.BytesIO()  # no bbox_inches="tight": it draws the figure twice
            out.savefig(buffer, format="png", dpi=self.dpi, facecolor="white")
            plt.close(out)
            png = buffer.getvalue()
        self.seconds = time.perf_counter() - start
        self.cpu_seconds = time.process_time() - cpu  # the same, less what other processes took
        self.last = out
        if self._widget is not None:
            if png is None:
                self._message.value = f'<p style="color:#8a1c1c" role="status">{html.escape(out)}</p>'
                self._message.layout.display = None
                self._image.layout.display = "none"
            else:
                self._image.value = png
                self._message.layout.display = "none"
                self._image.layout.display = None
            self._status.value = (f'<small>Recomputed in {1000 * self.seconds:.0f} ms. '
                                  f'{html.escape(LIVE_NOTE)}</small>')
        return out

    def set(self, **values) -> Any:
        """Change some controls' values (as a reader would) and draw again."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown controls {sorted(unknown)}; controls are {list(self.controls)}")
        self.values.update(values)
        if self._widget is not None:
            self._quiet = True  # move the widgets without drawing once per value
            try:
                for name, value in values.items():
                    self.inputs[name].value = value
            finally:
                self._quiet = False
        return self.render()

    def press(self, label: str) -> Any:
        """Run the action of the button ``label`` and draw again."""
        if label not in self.actions:
            raise ValueError(f"no button {label!r}; buttons are {list(self.actions)}")
        try:
            note = self.actions[label](self)
        except Exception as err:  # noqa: BLE001
            note = f"{type(err).__name__}: {err}"
        out = self.render()
        if isinstance(note, str) and self._widget is not None and not isinstance(out, str):
            self._message.value = f"<p role='status'>{html.escape(note)}</p>"
            self._message.layout.display = None
        return out

    @property
    def widget(self):
        """The ipywidgets face (built on first use; needs ``pip install ipywidgets``)."""
        if self._widget is None:
            import ipywidgets as w

            self.inputs = {}
            for name, c in self.controls.items():
                style = {"description_width": "initial"}
                if c.kind == "slider":
                    ints = all(isinstance(v, int) for v in (c.low, c.high, c.step, c.value))
                    cls = w.IntSlider if ints else w.FloatSlider
                    box = cls(value=c.value, min=c.low, max=c.high, step=c.step, description=name,
                              continuous_update=False, style=style)
                elif c.kind == "choice":
                    box = w.Dropdown(options=list(c.options), value=c.value, description=name, style=style)
                else:
                    box = w.Text(value=c.value, description=name, continuous_update=False, style=style,
                                 layout=w.Layout(width="28em"))
                box.layout.margin = "0 1em 0.2em 0"
                box.observe(self._on_change(name), names="value")
                self.inputs[name] = box
            buttons = []
            for label in self.actions:
                button = w.Button(description=label, layout=w.Layout(width="auto"))
                button.on_click(lambda _b, label=label: self.press(label))
                buttons.append(button)
            self._image = w.Image(format="png", layout=w.Layout(max_width=self.width))
            self._message, self._status = w.HTML(), w.HTML()
            title = [w.HTML(f"<strong>{html.escape(self.title)}</strong>")] if self.title else []
            row = w.Box(list(self.inputs.values()) + buttons,
                        layout=w.Layout(display="flex", flex_flow="row wrap", align_items="center"))
            self._widget = w.VBox(title + [row, self._message, self._image, self._status])
            self.render()
        return self._widget

    def _on_change(self, name):
        def changed(change):
            self.values[name] = change["new"]
            if not self._quiet:
                self.render()
        return changed

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": f"{self.title or 'Explorer'}: run this cell in Jupyter, JupyterLab, "
                                "VS Code or Colab (with ipywidgets installed) for the live controls.",
                  "text/html": self.static._repr_html_()}
        try:
            view = self.widget._repr_mimebundle_()
        except ImportError:  # no ipywidgets: the frames alone
            return bundle
        bundle["application/vnd.jupyter.widget-view+json"] = view["application/vnd.jupyter.widget-view+json"]
        return bundle

    def __repr__(self) -> str:
        return f"Explorer({list(self.controls)}, buttons {list(self.actions)})"
