"""The book's diagrams (book/images/*.svg): hand-editable SVG sources, each with a title and a
description for screen readers, shown in a chapter as a labelled MyST figure that the prose
refers to. Every image a chapter names exists."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGES = sorted((ROOT / "book" / "images").glob("*.svg"))
SVG_NS = "{http://www.w3.org/2000/svg}"


def _markdown() -> dict[str, str]:
    """Chapter name -> all its markdown cells' text."""
    out = {}
    for path in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        out[path.stem] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return out


def test_there_are_diagrams():
    assert len(IMAGES) >= 10


@pytest.mark.parametrize("path", IMAGES, ids=[p.name for p in IMAGES])
def test_svg_is_well_formed_and_described(path):
    root = ET.parse(path).getroot()  # raises on malformed XML
    assert root.tag == f"{SVG_NS}svg"
    for attribute in ("width", "height", "viewBox"):  # an <img> needs a natural size
        assert root.get(attribute), f"{path.name}: no {attribute}"
    title, desc = root.find(f"{SVG_NS}title"), root.find(f"{SVG_NS}desc")
    assert title is not None and title.text and title.text.strip(), f"{path.name}: no <title>"
    assert desc is not None and len(desc.text or "") > 40, f"{path.name}: no <desc> describing it"
    assert "href=\"http" not in path.read_text(encoding="utf-8"), f"{path.name} links outside"


@pytest.mark.parametrize("path", IMAGES, ids=[p.name for p in IMAGES])
def test_each_diagram_is_a_labelled_figure_referenced_from_the_prose(path):
    figure = re.compile(r"```\{figure\} images/" + re.escape(path.name) + r"\n(?P<options>(?::[^\n]*\n)+)")
    users = {name: m for name, text in _markdown().items() if (m := figure.search(text))}
    assert users, f"no chapter shows images/{path.name} as a {{figure}}"
    for name, m in users.items():
        options = dict(re.findall(r":(\w+):\s*(.*)", m.group("options")))
        assert options.get("alt", "").strip(), f"{name}: the figure {path.name} has no :alt:"
        label = options.get("name", "")
        assert label, f"{name}: the figure {path.name} has no :name: label"
        assert f"{{numref}}`{label}`" in _markdown()[name], f"{name}: no {{numref}}`{label}` in the text"


def test_every_image_a_chapter_names_exists():
    for name, text in _markdown().items():
        for ref in re.findall(r"images/[\w.-]+", text):
            assert (ROOT / "book" / ref).is_file(), f"{name} refers to {ref}, which does not exist"


def test_the_student_edition_carries_the_diagrams_and_the_books_mathjax(tmp_path):
    from fundamentallm.course import student_edition

    student_edition(tmp_path / "student", ROOT)
    for path in IMAGES:
        assert (tmp_path / "student" / "book" / "images" / path.name).is_file()
    assert (tmp_path / "student" / "_vendor" / "mathjax" / "tex-chtml.js").is_file()
    assert (tmp_path / "student" / "_static" / "fundamentallm.css").is_file()
