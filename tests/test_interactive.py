"""fundamentallm.interactive: precomputed frames behind sliders and drop-down lists."""

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from fundamentallm.interactive import MAX_FRAMES, FrameExplorer, frame_explorer  # noqa: E402


def draw(n, kind):
    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot(range(n), [i if kind == "up" else -i for i in range(n)])
    return fig


def test_one_frame_per_combination_and_controls_by_type():
    calls = []

    def spy(n, kind):
        calls.append((n, kind))
        return draw(n, kind)

    e = frame_explorer({"n": [2, 3, 4], "kind": ["up", "down"]}, spy, alt="a line",
                       initial={"kind": "down"}, title="Lines")
    assert isinstance(e, FrameExplorer)
    assert sorted(calls) == sorted((n, k) for n in [2, 3, 4] for k in ["up", "down"])
    assert set(e.frames) == {f"{i},{j}" for i in range(3) for j in range(2)}
    assert all(uri.startswith("data:image/png;base64,") for uri in e.frames.values())
    assert len(set(e.frames.values())) == 6  # every combination draws a different picture
    page = e._repr_html_()
    assert page.count('type="range"') == 1 and page.count("<select") == 1  # numbers: slider
    assert 'max="2"' in page and '<option value="1" selected>down</option>' in page
    assert f'src="{e.frames["0,1"]}"' in page  # the initial frame is shown first
    assert 'alt="a line (shown: n 2, kind down)"' in page and "Lines" in page
    assert "http" not in re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)  # no URL
    assert e.nbytes == len(page.encode()) and "6 frames" in repr(e)
    assert not plt.get_fignums()  # every drawn figure was closed


def test_same_input_same_page():
    a = frame_explorer({"n": [2, 3]}, lambda n: draw(n, "up"), alt="x")
    b = frame_explorer({"n": [2, 3]}, lambda n: draw(n, "up"), alt="x")
    assert a.id == b.id and a._repr_html_() == b._repr_html_()


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(controls={}), ValueError, "non-empty"),
    (dict(controls={"n": []}), ValueError, "no values"),
    (dict(controls={"n": [2, 2]}), ValueError, "repeated"),
    (dict(draw=None), TypeError, "callable"),
    (dict(alt=" "), ValueError, "alt"),
    (dict(initial={"m": 2}), ValueError, "unknown controls"),
    (dict(initial={"n": 9}), ValueError, "not one of"),
    (dict(controls={"n": list(range(2, MAX_FRAMES + 3))}), ValueError, "MAX_FRAMES"),
    (dict(draw=lambda n: None), TypeError, "not a matplotlib Figure"),
])
def test_bad_input_is_named(kwargs, error, match):
    args = dict(controls={"n": [2, 3]}, draw=lambda n: draw(n, "up"), alt="x") | kwargs
    with pytest.raises(error, match=match):
        frame_explorer(**args)


def test_identical_frames_are_carried_once():
    # "kind" changes nothing in this drawing: six frames, three distinct images
    e = frame_explorer({"n": [2, 3, 4], "kind": ["a", "b"]}, lambda n, kind: draw(n, "up"), alt="x")
    assert len(e.frames) == 6 and len(set(e.frames.values())) == 3
    page = e._repr_html_()
    assert sum(page.count(uri) for uri in set(e.frames.values())) == 3 + 1  # + the initial src


def test_frames_are_drawn_at_twice_the_size_they_are_shown_and_fixed_values_are_not_controls():
    """A frame's PNG has twice the pixels of the width the page shows it at (sharp on phones and
    high-density screens), and the script keeps the width as the frames change. A control with
    one value in the book is written as text, not a slider or a list that cannot move."""
    import base64

    e = frame_explorer({"n": [2, 3, 4], "kind": ["up"]}, draw, alt="a line")
    page = e._repr_html_()
    uri = re.search(r'<img src="(data:image/png;base64,[^"]+)"', page).group(1)
    png = base64.b64decode(uri.split(",", 1)[1])
    pixels = int.from_bytes(png[16:20], "big")
    shown = int(re.search(r'<img [^>]*width="(\d+)"', page).group(1))
    assert abs(pixels - 2 * shown) <= 1 and 130 <= shown <= 160, (pixels, shown)  # about 2 in at 72 px per inch
    assert 'var widths = ' in page and "image.width = widths" in page
    assert page.count('type="range"') == 1 and "<select" not in page
    assert re.search(r'class="fl-fixed">kind: <strong>up</strong>', page), page[:2000]
