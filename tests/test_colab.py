"""The Colab/Jupyter edition (fundamentallm/course/colab.py): up to date with book/, free of MyST,
numbered as the book pages are, and executable."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from fundamentallm.course import main
from fundamentallm.course.colab import (
    EDITION_DIR,
    GENERATED,
    MYST_LEFTOVERS,
    Renderer,
    _colab_button,
    cells_sha256,
    cite_text,
    edited,
    number_targets,
    page_names,
    parse_bib,
    reference_line,
    render_edition,
    stamp,
)

ROOT = Path(__file__).resolve().parents[1]
EDITION = ROOT / EDITION_DIR
REGENERATE = (f"python -m fundamentallm.course colab-edition {EDITION_DIR}` (it refuses to write over a "
              f"notebook someone edited, and says which; students work in work/, which `python3 start.py` fills)")
MYST = MYST_LEFTOVERS


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return render_edition(ROOT)


def test_edition_is_up_to_date(rendered):
    """The committed edition equals what the generator writes now: edit book/, then regenerate."""
    committed = {p.name: p.read_text(encoding="utf-8") for p in EDITION.glob("*.ipynb")}
    by_hand = sorted(p.name for p in EDITION.glob("*.ipynb") if edited(p, rendered.get(p.name)))
    assert not by_hand, (f"colab/{by_hand} edited by hand since generated (a student's answers?): copy them "
                         f"out first (`python3 start.py` puts the chapters in work/), then regenerate with "
                         f"`python -m fundamentallm.course colab-edition {EDITION_DIR} --force`")
    assert committed.keys() == rendered.keys(), f"colab/ lists other chapters than _toc.yml; run `{REGENERATE}"
    stale = sorted(name for name, text in rendered.items() if committed[name] != text)
    assert not stale, f"colab/ is stale for {stale}: run `{REGENERATE}"


def test_no_myst_markup_is_left(rendered):
    for name, text in rendered.items():
        nb = nbformat.reads(text, as_version=4)
        assert not [c for c in nb.cells if c.cell_type == "code" and c.get("outputs")], name
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "markdown":
                continue
            for pattern in MYST:
                m = re.search(pattern, cell.source, flags=re.M)
                assert not m, f"{name} cell {i}: MyST markup {m.group(0)!r} left in the edition"


def test_numbers_follow_the_book(rendered):
    """Chapter 2's first equation is (2.1) and its first exercise 2.1, as on the built page."""
    nb = json.loads(rendered["02_attention_by_hand.ipynb"])
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert text.startswith("# 2. ")
    assert "\\tag{2.1}" in text and "eq. (2.1)" in text
    assert "### Exercise 2.1: " in text
    assert "(Vaswani et al., 2017)" in text and nb["cells"][-1]["source"][0] == "## References\n"
    ids = [c["id"] for c in nb["cells"]]
    assert len(ids) == len(set(ids))


def test_solutions_follow_the_check_as_collapsed_text_and_never_run(rendered):
    """Statement -> answer cell -> check -> the solution as Markdown in <details> (collapsed in
    every viewer, never executed by Run All), in every chapter."""
    for name, text in rendered.items():
        cells = json.loads(text)["cells"]
        checks = [i for i, c in enumerate(cells) if "check" in c["metadata"].get("tags", [])]
        assert checks, name
        for i in checks:
            assert "answer" in cells[i - 1]["metadata"].get("tags", []), (name, i)
            after = "".join(cells[i + 1]["source"])
            assert cells[i + 1]["cell_type"] == "markdown" and after.startswith("<details>\n<summary>Solution to Exercise ")
            assert "```python" in after and after.rstrip().endswith("</details>"), (name, i)
        code = [c for c in cells if c["cell_type"] == "code"]
        assert not [c for c in code if "solution" in c["metadata"].get("tags", [])
                    or c["metadata"].get("jupyter", {}).get("source_hidden")], name


BIB = """
@article{Ba2016, author = {Ba, Jimmy Lei and Kiros, Jamie Ryan and Hinton, Geoffrey E.},
  title = {Layer {N}ormalization}, journal = {arXiv}, year = {2016}}
@inproceedings{Zhang2019, author = {Zhang, Biao and Sennrich, Rico}, title = {RMS}, booktitle = {NeurIPS}, year = 2019}
@misc{Kaiser2020, author = {Kaiser, {\\L}ukasz}, title = {One}, year = {2020}, url = {https://example.org}}
"""


def test_the_grader_finds_every_answer_in_the_edition(rendered):
    """Students answer in this edition (work/, Colab): the grader finds each exercise's answer cell
    by its label, which the statement keeps in an HTML comment (hidden in every viewer)."""
    from fundamentallm.course import book_chapters
    from fundamentallm.course.grading import submitted_code

    for chapter in book_chapters(ROOT):
        nb = nbformat.reads(rendered[chapter.path.name], as_version=4)
        for ex in chapter.exercises:
            assert (submitted_code(nb, ex.label) or "").strip() == ex.answer.strip(), (chapter.name, ex.label)


def test_bibliography_and_citations():
    bib = parse_bib(BIB)
    assert set(bib) == {"Ba2016", "Zhang2019", "Kaiser2020"}
    assert bib["Ba2016"]["title"] == "Layer Normalization" and bib["Zhang2019"]["year"] == "2019"
    assert cite_text(bib["Ba2016"]) == "Ba et al., 2016"
    assert cite_text(bib["Zhang2019"], textual=True) == "Zhang and Sennrich (2019)"
    assert cite_text(bib["Kaiser2020"]) == "Kaiser, 2020"
    assert reference_line(bib["Kaiser2020"]) == "Łukasz Kaiser (2020). One. <https://example.org>"


def _chapter(tmp_path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(s) for s in cells]
    path = tmp_path / "book" / "05_x.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_renderer_on_each_construct(tmp_path):
    (tmp_path / "book" / "images").mkdir(parents=True)
    (tmp_path / "book" / "images" / "d.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    path = _chapter(tmp_path, [
        "# T", "$$\na = b\n$$ (e-one)\n\n$$ c $$\n\n$$\nd\n$$ (e-two)",
        ":::{exercise} Do it\n:label: ex-a\n\nProve {eq}`e-two` and {eq}`e-one`.\n:::",
        "```{figure} images/d.svg\n:name: fig-d\n:alt: a diagram\n\nThe caption.\n```\n\nSee {numref}`fig-d`.",
        ":::{note}\nMind {cite}`Ba2016,Zhang2019`.\n:::", "(a-target)=\n![x](images/d.svg)",
        "```python\n{eq}`not-a-role`\n```"])
    targets = number_targets([path])
    assert targets == {"e-one": ("eq", "5.1"), "e-two": ("eq", "5.2"), "ex-a": ("exercise", "5.1"),
                       "fig-d": ("figure", "5.1")}
    r = Renderer(targets, parse_bib(BIB), path.parent)
    cells = [r.markdown(c.source) for c in nbformat.read(path, as_version=4).cells]
    assert cells[1] == "$$\na = b\n\\tag{5.1}\n$$\n\n$$ c $$\n\n$$\nd\n\\tag{5.2}\n$$"
    assert cells[2] == "### Exercise 5.1: Do it\n\nProve (5.2) and (5.1).\n\n<!-- {exercise} :label: ex-a -->"
    assert cells[3].startswith("![a diagram](data:image/svg+xml;base64,")
    assert cells[3].endswith("*Figure 5.1: The caption.*\n\nSee Figure 5.1.")
    assert cells[4] == "> **Note**\n>\n> Mind (Ba et al., 2016; Zhang and Sennrich, 2019)."
    assert cells[5].startswith("![x](data:image/svg+xml;base64,") and "a-target" not in cells[5]
    assert cells[6] == "```python\n{eq}`not-a-role`\n```"
    with pytest.raises(ValueError, match="unknown eq label 'nope'"):
        r.markdown("{eq}`nope`")
    with pytest.raises(ValueError, match="not in references.bib"):
        r.markdown("{cite}`Nobody1999`")


def test_doc_links_name_the_chapter_or_the_left_out_page():
    """A {doc} link cannot point at a page in a lone notebook: a chapter becomes "chapter N" (the
    edition's notebooks are numbered so), a page the edition leaves out becomes its title."""
    pages = page_names(ROOT)
    assert pages["04_positions"] == "chapter 4" and pages["records"] == "*The CPU training record*"
    r = Renderer({}, parse_bib(BIB), ROOT / "book", pages)
    assert r.markdown("See {doc}`04_positions` and the appendix {doc}`records`.") == (
        "See chapter 4 and the appendix *The CPU training record*.")
    assert r.markdown("{doc}`the appendix <records>`") == "the appendix"
    edition = render_edition(ROOT)
    text = "".join("".join(c["source"]) for c in json.loads(edition["14_modern_decoder.ipynb"])["cells"])
    assert "*The CPU training record*" in text and "{doc}" not in text


def test_command_writes_the_edition(tmp_path, capsys):
    root = tmp_path / "repo"
    (root / "book").mkdir(parents=True)
    for name in ("_toc.yml",):
        shutil.copy(ROOT / name, root / name)
    shutil.copy(ROOT / "book" / "references.bib", root / "book")
    shutil.copy(ROOT / "book" / "01_why_attention.ipynb", root / "book")
    shutil.copytree(ROOT / "book" / "images", root / "book" / "images")  # inlined diagrams
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "99_removed.ipynb").write_text(json.dumps(stamp(  # generated, then removed from the toc
        {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})))
    assert main(["colab-edition", str(tmp_path / "out"), "--root", str(root)]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["01_why_attention.ipynb"]
    assert "wrote 1 Colab/Jupyter notebooks" in capsys.readouterr().out


def _mini_root(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "book").mkdir(parents=True)
    shutil.copy(ROOT / "book" / "references.bib", root / "book")
    shutil.copy(ROOT / "book" / "01_why_attention.ipynb", root / "book")
    shutil.copytree(ROOT / "book" / "images", root / "book" / "images")
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/01_why_attention\n")
    return root


def test_generated_notebooks_carry_the_stamp_of_their_cells(rendered):
    for name, text in rendered.items():
        nb = json.loads(text)
        assert nb["metadata"][GENERATED]["generated"] == cells_sha256(nb["cells"]), name


def test_an_edited_notebook_is_not_overwritten_without_force(tmp_path, capsys):
    """A student's answer in the output folder: the command refuses (exit 2, nothing written, the
    file named with the way out); running the notebook (outputs only) is not an edit; --force
    overwrites; a deleted chapter's edited notebook is not deleted either."""
    root, out = _mini_root(tmp_path), tmp_path / "out"
    assert main(["colab-edition", str(out), "--root", str(root)]) == 0
    path = out / "01_why_attention.ipynb"
    nb = json.loads(path.read_text())
    answer = next(c for c in nb["cells"] if "answer" in c["metadata"].get("tags", []))
    answer["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ran\n"}]
    path.write_text(json.dumps(nb))
    assert not edited(path) and main(["colab-edition", str(out), "--root", str(root)]) == 0
    nb = json.loads(path.read_text())
    answer = next(c for c in nb["cells"] if "answer" in c["metadata"].get("tags", []))
    answer["source"] = "my_answer = 42\n"
    path.write_text(json.dumps(nb))
    mine = path.read_text()
    capsys.readouterr()
    assert edited(path) and main(["colab-edition", str(out), "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert "01_why_attention.ipynb" in err and "--force" in err and "work/" in err
    assert path.read_text() == mine
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/01_renamed\n")
    shutil.copy(ROOT / "book" / "01_why_attention.ipynb", root / "book" / "01_renamed.ipynb")
    assert main(["colab-edition", str(out), "--root", str(root)]) == 2 and path.read_text() == mine
    assert main(["colab-edition", str(out), "--root", str(root), "--force"]) == 0 and not path.exists()
    # an unstamped notebook (an older generator's) counts as generated only when git has it unchanged
    (out / "03_x.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert edited(out / "03_x.ipynb") and not edited(out / "03_x.ipynb", (out / "03_x.ipynb").read_text())


def test_colab_button_opens_the_edition():
    base = "https://colab.research.google.com/github/o/r/blob/main/"
    context = {"header_buttons": [{"label": "launch-buttons", "buttons": [
        {"text": "Binder", "url": "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/book/02_x.ipynb"},
        {"text": "Colab", "url": base + "book/02_x.ipynb"}]}]}
    _colab_button(None, "book/02_x", "page.html", context, None)
    buttons = context["header_buttons"][0]["buttons"]
    assert buttons[1]["url"] == base + "colab/02_x.ipynb"
    assert buttons[0]["url"].endswith("book/02_x.ipynb")  # Binder opens the MyST source in JupyterLab


def test_appendix_pages_are_not_in_the_edition(tmp_path):
    """A toc notebook not named NN_name (the appendix, book/records) gets no Colab copy, and its
    Colab button keeps pointing at the book's notebook."""
    root = tmp_path / "repo"
    (root / "book").mkdir(parents=True)
    shutil.copy(ROOT / "book" / "references.bib", root / "book")
    shutil.copy(ROOT / "book" / "01_why_attention.ipynb", root / "book")
    shutil.copy(ROOT / "book" / "01_why_attention.ipynb", root / "book" / "records.ipynb")
    shutil.copytree(ROOT / "book" / "images", root / "book" / "images")
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nparts:\n  - caption: A\n    numbered: true\n"
                                   "    chapters:\n      - file: book/01_why_attention\n  - caption: Appendix\n"
                                   "    chapters:\n      - file: book/records\n")
    assert sorted(render_edition(root)) == ["01_why_attention.ipynb"]
    url = "https://colab.research.google.com/github/o/r/blob/main/book/records.ipynb"
    context = {"header_buttons": [{"buttons": [{"text": "Colab", "url": url}]}]}
    _colab_button(None, "book/records", "page.html", context, None)
    assert context["header_buttons"][0]["buttons"][0]["url"] == url


def test_config_lists_the_extension():
    assert "fundamentallm.course.book_build" in (ROOT / "_config.yml").read_text()


def test_a_generated_notebook_executes(rendered, tmp_path):
    """Chapter 2's edition runs end to end outside the repository (about 10-30 s): no error, each
    unattempted check prints one "not attempted yet" line, and no cell shows `Out: True`."""
    from nbclient import NotebookClient

    nb = nbformat.reads(rendered["02_attention_by_hand.ipynb"], as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    for cell in (c for c in nb.cells if "check" in c.metadata.get("tags", [])):
        text = "".join(o.get("text", "") for o in cell.outputs)
        assert "not attempted yet" in text and len(text.strip().splitlines()) == 1, text
        assert not [o for o in cell.outputs if o.output_type == "execute_result"]
