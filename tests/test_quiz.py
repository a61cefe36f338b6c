"""The self-check quiz that ends every chapter (book/CONTRIBUTING.md): one markdown cell starting
``## Self-check quiz``, 4-6 questions ``**Qn.** ...``, each option its own
``<details><summary>(x) ...</summary>`` block whose body starts ``✓ Right:`` or ``✗ Not quite:``
and explains that option; exactly one right option per question. Plain HTML: it works without a
kernel in the HTML book, Jupyter, Colab and on GitHub."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from fundamentallm.course.book import toc_files

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [ROOT / f"{f}.ipynb" for f in toc_files(ROOT)
            if re.fullmatch(r"book/\d\d_\w+", f) and (ROOT / f"{f}.ipynb").exists()]

OPTION = re.compile(r"<details><summary>\((?P<letter>[a-z])\) (?P<text>.+?)</summary>\n\n"
                    r"(?P<verdict>✓ Right:|✗ Not quite:)(?P<why>[^<]*?)\n\n</details>", re.S)


def quiz_cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells
            if c.cell_type == "markdown" and c.source.startswith("## Self-check quiz")]


def questions(source: str) -> list[tuple[str, str]]:
    """[(question number, the text from **Qn.** to the next question)]."""
    parts = re.split(r"^\*\*Q(\d+)\.\*\*", source, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def test_every_chapter_is_found():
    assert len(CHAPTERS) >= 14, [p.name for p in CHAPTERS]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_has_one_quiz_with_explained_options(path):
    cells = quiz_cells(path)
    assert len(cells) == 1, f"{path.name}: {len(cells)} '## Self-check quiz' cells; the contract asks for one"
    qs = questions(cells[0])
    assert 4 <= len(qs) <= 6, f"{path.name}: the quiz has {len(qs)} questions; it needs 4 to 6"
    assert [int(n) for n, _ in qs] == list(range(1, len(qs) + 1)), f"{path.name}: number the questions Q1, Q2, ..."
    for n, text in qs:
        where = f"{path.name} Q{n}"
        blocks = text.count("<details>")
        options = list(OPTION.finditer(text))
        assert len(options) == blocks >= 2, (
            f"{where}: {blocks} <details> blocks, {len(options)} well-formed options; each option is "
            "'<details><summary>(a) text</summary>', a blank line, '✓ Right:' or '✗ Not quite:' "
            "with its explanation, a blank line, '</details>'")
        letters = [o["letter"] for o in options]
        assert letters == [chr(ord("a") + i) for i in range(len(options))], f"{where}: options {letters}"
        right = [o["letter"] for o in options if o["verdict"].startswith("✓")]
        assert len(right) == 1, f"{where}: {len(right)} right options {right}; exactly one must be right"
        for o in options:
            assert len(o["why"].split()) >= 5, f"{where} ({o['letter']}): explain why, not only right/wrong"
            # the summary is raw HTML: MyST does not parse it, so $...$ would show as raw TeX in the book
            assert "$" not in o["text"], f"{where} ({o['letter']}): no math in an option's summary; write it in text"
