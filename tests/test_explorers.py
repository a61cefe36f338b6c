"""fundamentallm.explorers and the live face of fundamentallm.interactive.Explorer.

In-process: every explorer's bad input gives a short message, never an exception, and the book's
frames carry no widget. In a real kernel (nbclient): every explorer's widget answers a change of a
control's value with a new picture, and a displayed explorer carries both faces (the widget view
for a live front-end, the frames as text/html for the book and untrusted notebooks).
"""

from __future__ import annotations

import html
import json
import os
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("ipywidgets")

import fundamentallm as fl  # noqa: E402
from fundamentallm import explorers as X  # noqa: E402
from fundamentallm.interactive import Explorer, choice, slider, text  # noqa: E402
from fundamentallm.tokenizers import ByteBPETokenizer, CharacterTokenizer  # noqa: E402

TEXT = "def f(x):\n    return x + 1\n\nThe quick brown fox jumps over the lazy dog. " * 20

# Small live objects, the same in-process and in the kernel (the kernel runs this source too).
SETUP = textwrap.dedent('''
    import torch
    import fundamentallm as fl
    from fundamentallm import explorers as X
    from fundamentallm.tokenizers import ByteBPETokenizer, CharacterTokenizer
    torch.manual_seed(0)
    TEXT = {text!r}
    tok = CharacterTokenizer.from_text(TEXT)
    ids = torch.tensor(tok.encode(TEXT))
    def small(L=1, position="pre"):
        torch.manual_seed(0)
        return fl.Transformer(fl.TransformerConfig(vocab_size=tok.vocab_size, d_model=16, num_heads=2,
                              num_layers=L, max_seq_len=32, norm_position=position))
    model = small(2)
    bpe = ByteBPETokenizer.from_text(TEXT, 300)
    xb, yb = ids[:64].view(2, 32), ids[1:65].view(2, 32)
    make = {{
        "attention": lambda: X.attention_explorer(),
        "rope": lambda: X.rope_explorer(),
        "norm": lambda: X.norm_explorer(),
        "depth": lambda: X.depth_explorer(small, xb, yb, max_depth=4),
        "logits": lambda: X.logits_explorer(model, tok, prompt="def "),
        "tokenizer": lambda: X.tokenizer_explorer(bpe),
        "training": lambda: X.training_explorer(lambda: small(1), ids, 16, max_steps=20, chunk=5, book_steps=5),
        "sampling": lambda: X.sampling_explorer(model, tok, prompt="def ", sample_tokens=5),
        "cache": lambda: X.cache_explorer(),
    }}
''').format(text=TEXT)

# A control each explorer changes, and its new value
CHANGES = {"attention": ("sentence", "a rose is a rose"), "rope": ("m", 100), "norm": ("offset", 3.0),
           "depth": ("depth", 3), "logits": ("prompt", "return "), "tokenizer": ("merges_used", 0),
           "training": ("schedule", "constant"), "sampling": ("temperature", 0.5),
           "cache": ("kv_heads", 1)}

# Bad input per explorer, and a word the message must contain
BAD = [("attention", {"sentence": "  "}, "empty"),
       ("attention", {"sentence": "w " * 40}, "at most"),
       ("logits", {"prompt": ""}, "empty"),
       ("logits", {"prompt": "naïve ∑"}, "never saw"),
       ("tokenizer", {"sentence": ""}, "empty"),
       ("sampling", {"temperature": 0.0}, "temperature of 0"),
       ("sampling", {"top_p": 0.0}, "top-p = 0"),
       ("sampling", {"prompt": "€uro"}, "'€'"),
       ("sampling", {"prompt": ""}, "empty"),
       ("cache", {"query_heads": 8, "kv_heads": 16}, "divides"),
       ("training", {"warmup_steps": 30}, "longer than the run")]


@pytest.fixture(scope="module")
def make():
    space: dict = {}
    exec(SETUP, space)  # noqa: S102 -- our own source, shared with the kernel test
    return space["make"]


@pytest.mark.parametrize("name, values, words", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_shows_a_message_not_a_traceback(make, name, values, words):
    explorer = make[name]()
    widget = explorer.widget  # the live face: the message replaces the picture
    out = explorer.set(**values)
    assert isinstance(out, str) and words in out and "Traceback" not in out, out
    assert explorer._image.layout.display == "none" and html.escape(words) in explorer._message.value
    good = explorer.set(**{k: explorer.controls[k].value for k in values})  # back to a good value
    assert not isinstance(good, str) and explorer._message.layout.display == "none"
    assert widget is explorer.widget


def test_an_error_inside_draw_becomes_a_message():
    def draw(n):
        raise RuntimeError(f"boom {n}")
    e = Explorer({"n": slider(0, 3, 1, 1)}, draw, alt="x")
    assert e.set(n=2) == "Could not draw this: RuntimeError: boom 2"

    def half_drawn(n):
        matplotlib.pyplot.figure()
        raise ValueError("half way")
    e = Explorer({"n": slider(0, 3, 1, 1)}, half_drawn, alt="x")
    open_before = matplotlib.pyplot.get_fignums()
    assert e.set(n=1) == "Could not draw this: ValueError: half way"
    assert matplotlib.pyplot.get_fignums() == open_before  # the failed figure was closed


def test_controls_are_validated():
    with pytest.raises(ValueError, match="low <= value <= high"):
        slider(0, 1, 0.1, 2)
    with pytest.raises(ValueError, match="frames"):
        slider(0, 10, 1, 5, frames=[1, 2])
    with pytest.raises(ValueError, match="options"):
        choice(["a", "b"], value="c")
    with pytest.raises(TypeError, match="str"):
        text(3)
    with pytest.raises(ValueError, match="slider"):
        Explorer({"n": [1, 2]}, lambda n: None, alt="x")
    e = Explorer({"n": slider(0, 3, 1, 1)}, lambda n: None, alt="x")
    with pytest.raises(ValueError, match="unknown controls"):
        e.set(m=1)
    with pytest.raises(ValueError, match="no button"):
        e.press("go")


def test_both_faces_in_one_bundle_and_the_frames_need_no_kernel(make):
    explorer = make["norm"]()
    bundle = explorer._repr_mimebundle_()
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view["model_id"] == explorer.widget.model_id
    page = bundle["text/html"]
    assert page.count("<img") == 1 and "fl-dead" in page and "Precomputed frames" in page
    assert "aria-valuetext" in page and "(shown: norm LayerNorm, offset 0.0, scale 1.0)" in page
    assert len(explorer.static.frames) == 2 * 3 * 3  # norm, offset, scale
    assert "ipywidgets" not in page and "http" not in page.split("base64,")[0]
    assert "run this cell" in bundle["text/plain"]


def test_training_explorer_continues_its_run(make):
    e = make["training"]()
    assert e.widget is not None
    e.press("train 5 more steps")
    e.press("train 5 more steps")
    assert e.state["trainer"].step == 10 and e.state["trainer"].history["step"][-1] == 10
    e.set(lr=1e-2)  # a new setting starts a new run
    assert e.state["trainer"].step == 0
    for _ in range(4):
        e.press("train 5 more steps")
    assert e.state["trainer"].step == 20  # max_steps
    e.press("train 5 more steps")
    assert "complete" in e._message.value and e.state["trainer"].step == 20
    e.press("start over")
    assert e.state["trainer"].step == 0


def test_same_values_same_picture(make):
    a, b = make["sampling"](), make["sampling"]()
    assert a.widget is not b.widget
    a.set(temperature=0.7, top_k=5)
    b.set(temperature=0.7, top_k=5)
    assert a._image.value == b._image.value


KERNEL_TEST = '''
changes = {changes!r}
report = {{}}
for name, build in make.items():
    e = build()
    w = e.widget  # the live face, as a front-end would show it
    before = bytes(e._image.value)
    control, value = changes[name]
    e.inputs[control].value = value  # what moving the control in a front-end does
    after = bytes(e._image.value)
    report[name] = [len(before) > 0, before != after, e.values[control] == value, e._message.value]
print("REPORT " + __import__("json").dumps(report))
'''


def test_every_explorer_answers_a_change_in_a_kernel(tmp_path):
    """nbclient runs a notebook in a fresh python3 kernel: each explorer's widget, given a new
    value, draws a new picture; a displayed explorer's output carries both faces."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP),
                nbformat.v4.new_code_cell(KERNEL_TEST.format(changes=CHANGES)),
                nbformat.v4.new_code_cell("X.cache_explorer()")]
    env_path = os.environ.get("PYTHONPATH")
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert env_path == os.environ.get("PYTHONPATH")
    lines = [o.get("text", "") for o in nb.cells[1].outputs if o.output_type == "stream"]
    report = json.loads("".join(lines).split("REPORT ", 1)[1])
    assert set(report) == set(CHANGES)
    for name, (drawn, changed, recorded, message) in report.items():
        assert drawn and changed and recorded and not message, (name, report[name])
    (display,) = [o for o in nb.cells[2].outputs if o.output_type == "execute_result"]
    assert {"application/vnd.jupyter.widget-view+json", "text/html", "text/plain"} <= set(display.data)
    assert "<img" in display.data["text/html"]
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    assert display.data["application/vnd.jupyter.widget-view+json"]["model_id"] in state.get("state", {})


def test_unknown_characters_are_found():
    tok = CharacterTokenizer.from_text("abc ")
    assert X.unknown_characters(tok, "abé ∑a") == ["é", "∑"]
    bpe = ByteBPETokenizer.from_text("abc abc", 258)
    assert X.unknown_characters(bpe, "any ∑ text") == []  # bytes encode everything


def test_the_explorer_models_are_untouched(make):
    # reading the logits (and the logit lens) leaves the model's mode and weights as they were
    space: dict = {}
    exec(SETUP, space)  # noqa: S102
    model = space["model"]
    model.train()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    e = X.logits_explorer(model, space["tok"], prompt="def ")
    e.set(after_block=1)
    e.set(after_block=0, show="logit")
    assert model.training
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    assert isinstance(fl.Transformer, type)


def test_the_book_drops_widget_views_and_state():
    """_config.yml drops the widget view from HTML pages (the frames show instead) and lists the
    extension that drops the recorded widget state; the extension removes it from a page."""
    from pathlib import Path

    import yaml


    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "_config.yml").read_text())["sphinx"]
    assert ["html", "application/vnd.jupyter.widget-view+json", None] in \
        config["config"]["nb_mime_priority_overrides"]
    assert "fundamentallm.course.book_build" in config["config"]["extensions"]
    assert config["config"]["nb_ipywidgets_js"] == {}  # no widget JavaScript from a CDN

    class App:
        def __init__(self):
            self.env = type("Env", (), {})()
            self.env.docname = "book/14_modern_decoder"
            self.env.nb_metadata = {self.env.docname: {"js_files": {"ipywidgets_state": (None, {}),
                                                                    "other": ("x.js", {})}}}

        def connect(self, event, handler):
            self.event, self.handler = event, handler

    from fundamentallm.course import book_build

    app = App()
    book_build.drop_widget_state(app, None)
    assert app.env.nb_metadata[app.env.docname]["js_files"] == {"other": ("x.js", {})}


def test_widgets_are_built_without_unknown_arguments(make):
    # ipywidgets warns (DeprecationWarning) about an argument it does not know, then ignores it
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in ("cache", "training"):
            explorer = make[name]()
            assert explorer.widget is not None and not isinstance(explorer.last, str), explorer.last
    unknown = [str(w.message) for w in caught if "__init__() takes exactly one argument" in str(w.message)
               or "unrecognized arguments" in str(w.message)]
    assert not unknown, unknown


def test_a_sliders_frames_run_left_to_right_in_ascending_order():
    assert slider(0.0, 1.0, 0.05, 1.0, frames=[1.0, 0.6]).frames == (0.6, 1.0)
    e = Explorer({"p": slider(0.0, 1.0, 0.05, 1.0, frames=[1.0, 0.6])}, lambda p: f"p={p}", alt="x")
    assert e.static.controls == {"p": [0.6, 1.0]} and e.static.initial == (1,)


def test_the_books_controls_all_move_and_sliders_have_stops(make):
    """In the book (precomputed frames) no explorer shows a control with one value (it is written
    as text), and every slider has at least three stops, so moving it shows the effect."""
    for name, build in make.items():
        explorer = build()
        for control, values in explorer.static.controls.items():
            page = explorer.static._repr_html_()
            if len(values) == 1:
                assert f'class="fl-fixed">{control}: ' in page, (name, control)
            elif all(isinstance(v, (int, float)) for v in values) and explorer.controls[control].kind == "slider":
                assert len(values) >= 3 or len(values) == len(range(int(explorer.controls[control].low),
                                                                       int(explorer.controls[control].high) + 1)), \
                    f"{name}: slider {control} has {len(values)} stops in the book"
            elif explorer.controls[control].kind == "choice":
                assert f'<select data-position="{list(explorer.controls).index(control)}"' in page, (name, control)
