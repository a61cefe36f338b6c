"""The Colab/Jupyter edition: every chapter with its MyST markup rendered to plain Markdown.

Colab and classic Jupyter render none of MyST, so the book's notebooks show raw ``{eq}`` and
``{cite}`` roles, ``:::{exercise}`` fences and ``$$ ... $$ (label)`` there. This module writes a
copy of each chapter (``NN_name``; not the appendix pages) that renders everywhere, numbered
exactly as the Jupyter Book pages are:

* the title gets its chapter number (``# 2. Attention by hand``);
* ``$$ ... $$ (label)`` becomes ``$$ ... \\tag{2.1} $$``, and ``{eq}`label``` becomes ``(2.1)``;
* ``{cite}`key``` becomes ``(Vaswani et al., 2017)``, ``{cite:t}`` ``Vaswani et al. (2017)``, and
  a reference list (parsed from ``book/references.bib``) is appended to the chapter;
* ``{exercise}`` becomes a heading ``### Exercise 2.1: title``; an exercise reads statement ->
  answer cell (the stub the student edits) -> check -> the solution *after* the check, as
  non-executing Markdown in a ``<details>`` block (its code in a fenced block, then its idea):
  collapsed in Colab, JupyterLab, classic Notebook, nbconvert and GitHub, and never run by Run
  All, so a student's answer is never overwritten and the edition does not solve itself; a
  ``{solution}`` or ``dropdown`` written in Markdown becomes ``<details>`` too;
* admonitions become block quotes, ``{figure}``/``{image}`` plain images; local images are
  inlined as ``data:`` URIs, so they show in Colab without the repository being published.

Usage (regenerates the committed edition; a test fails when it is stale)::

    python -m fundamentallm.course colab-edition colab [--force]

Each generated notebook carries the SHA-256 of its cells (``metadata.fundamentallm.generated``).
A notebook whose cells no longer match it was edited -- a student's answers, say -- and the
command refuses to write over it (or to delete it) without ``--force``; students work in a copy
(``work/``, which ``python3 start.py`` fills).

Its :func:`_colab_button`, a hook of the book's Sphinx extension (:mod:`.book_build`), points
each page's Colab button at the edition (``colab/NN_name.ipynb``) instead of the MyST source.
"""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
import re
import subprocess
from pathlib import Path
from typing import Optional

from .book import page_title, toc_files

EDITION_DIR = "colab"
SOLUTION_MARK = "{solution-start}"
_DIRECTIVE = re.compile(r"^(\s*)(`{3,}|:{3,})\{([\w-]+)\}[ \t]*(.*)$")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_ROLE = re.compile(r"\{([\w:-]+)\}`([^`]+)`")
_LABELLED_EQ = re.compile(r"\$\$(?P<body>(?:(?!\$\$).)+?)\$\$[ \t]*\((?P<label>[\w:.-]+)\)", re.S)
_LATEX = {r"{\L}": "Ł", r"{\l}": "ł", r'{\"o}': "ö", r'{\"u}': "ü", r'{\"a}': "ä", r"{\'e}": "é",
          r"{\'a}": "á", r"{\`e}": "è", r"{\c{c}}": "ç", r"{\ss}": "ß", r"\&": "&"}
_CHAPTER_FILE = re.compile(r"\d\d_\w+")  # a chapter's file name, without .ipynb
# MyST markup that must not be left in a rendered notebook (the tests search every Markdown cell)
MYST_LEFTOVERS = [r"\{eq\}`", r"\{cite(:\w+)?\}`", r"\{(ref|numref|doc)\}`", r"^\s*(`{3,}|:{3,})\{[\w-]+\}",
                  r"\$\$\s*\([\w:.-]+\)", r"^\([\w:.-]+\)=\s*$", r"^\s*:(label|class|name):"]
ADMONITIONS = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger",
               "error", "seealso", "admonition"}


# --------------------------------------------------------------------------- references.bib

def parse_bib(text: str) -> dict[str, dict[str, str]]:
    """``@kind{Key, field = {value}, ...}`` entries -> ``{key: {"kind": ..., field: value}}``."""
    entries = {}
    for m in re.finditer(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", text):
        i, depth, fields = m.end(), 1, {"kind": m.group(1).lower()}
        start = i
        while depth and i < len(text):  # the entry ends at the brace that closes "@kind{"
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[start:i - 1]
        for f in re.finditer(r"(\w+)\s*=\s*", body):
            j, value = f.end(), ""
            if body[j] == "{":
                depth, k = 0, j
                while True:
                    depth += {"{": 1, "}": -1}.get(body[k], 0)
                    k += 1
                    if depth == 0:
                        break
                value = body[j + 1:k - 1]
            else:
                value = re.match(r'"?([^",}]*)', body[j:]).group(1)
            fields.setdefault(f.group(1).lower(), _plain(value))
        entries[m.group(2)] = fields
    return entries


def _plain(latex: str) -> str:
    for k, v in _LATEX.items():
        latex = latex.replace(k, v)
    return re.sub(r"\s+", " ", latex.replace("{", "").replace("}", "")).strip()


def _family_names(entry: dict) -> list[str]:
    names = [a.strip() for a in entry.get("author", entry.get("title", "?")).split(" and ")]
    return [a.split(",")[0].strip() if "," in a else a.split()[-1] for a in names if a]


def cite_text(entry: dict, textual: bool = False) -> str:
    """``Vaswani et al., 2017`` (or ``Vaswani et al. (2017)`` when ``textual``), as Jupyter Book's
    author_year style shows it, with round brackets."""
    names = _family_names(entry)
    who = names[0] if len(names) == 1 else (" and ".join(names) if len(names) == 2 else f"{names[0]} et al.")
    return f"{who} ({entry.get('year', 'n.d.')})" if textual else f"{who}, {entry.get('year', 'n.d.')}"


def reference_line(entry: dict) -> str:
    """One item of a chapter's reference list."""
    authors = [a.strip() for a in entry.get("author", "").split(" and ") if a.strip()]
    authors = [" ".join(reversed([p.strip() for p in a.split(",", 1)])) for a in authors]
    who = ", ".join(authors[:-1]) + " and " + authors[-1] if len(authors) > 1 else "".join(authors)
    venue = entry.get("journal") or entry.get("booktitle") or entry.get("publisher") or entry.get("institution", "")
    parts = [f"{who} ({entry.get('year', 'n.d.')}).", f"{entry.get('title', '')}."]
    if venue:
        parts.append(f"*{venue}*.")
    if entry.get("url"):
        parts.append(f"<{entry['url']}>")
    return " ".join(p for p in parts if p.strip(". "))


# --------------------------------------------------------------------------- numbering

def chapter_number(path: Path) -> int:
    m = re.match(r"(\d+)_", Path(path).name)
    if not m:
        raise ValueError(f"chapter file {path} must be named NN_name.ipynb")
    return int(m.group(1))


def number_targets(chapters: list[Path]) -> dict[str, tuple[str, str]]:
    """Every equation, exercise and figure label of the book -> (kind, "N.k"), numbered per
    chapter in reading order, as Sphinx numbers them on the built pages."""
    import nbformat

    targets: dict[str, tuple[str, str]] = {}
    for path in chapters:
        n, counts = chapter_number(path), {"eq": 0, "exercise": 0, "figure": 0}
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            text = _outside_code(cell.source)
            found = [(m.start(), "eq", m.group(1)) for m in re.finditer(
                r"\$\$(?:(?!\$\$).)+?\$\$[ \t]*\(([\w:.-]+)\)", text, re.S)]
            for m in re.finditer(r"^[ \t]*(?:`{3,}|:{3,})\{(exercise|figure)\}.*\n((?:[ \t]*:\w[\w-]*:.*\n)*)",
                                 text, re.M):
                label = re.search(r":(?:label|name):\s*(\S+)", m.group(2))
                found.append((m.start(), m.group(1), label.group(1) if label else None))
            for _, kind, label in sorted(found, key=lambda f: f[0]):
                counts[kind] += 1
                if label:
                    targets[label] = (kind, f"{n}.{counts[kind]}")
    return targets


def _outside_code(text: str) -> str:
    """``text`` with the contents of plain code fences blanked (directives are kept)."""
    out, fence = [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is None and m and not _DIRECTIVE.match(line):
            fence = m.group(1)
        elif fence is not None and m and line.strip() == fence[0] * len(line.strip()) and len(line.strip()) >= len(fence):
            fence = None
        elif fence is not None:
            line = ""
        out.append(line)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- rendering

class Renderer:
    """Renders the Markdown of one chapter; collects the citation keys it meets."""

    def __init__(self, targets: dict, bib: dict, book_dir: Path, pages: Optional[dict] = None):
        self.targets, self.bib, self.book_dir = targets, bib, Path(book_dir)
        self.pages = pages or {}  # a {doc} target's name -> its text here (see page_names)
        self.cited: list[str] = []

    def number(self, label: str, kind: str = "") -> str:
        if label not in self.targets or (kind and self.targets[label][0] != kind):
            raise ValueError(f"reference to an unknown {kind or 'target'} label {label!r}")
        return self.targets[label][1]

    def role(self, m: re.Match) -> str:
        name, content = m.group(1), m.group(2)
        if name == "eq":
            return f"({self.number(content.strip(), 'eq')})"
        if name.startswith("cite"):
            keys = [k.strip() for k in content.split(",")]
            missing = [k for k in keys if k not in self.bib]
            if missing:
                raise ValueError(f"citation keys {missing} are not in references.bib")
            self.cited += [k for k in keys if k not in self.cited]
            if name in ("cite:t", "cite:ts"):
                return ", ".join(cite_text(self.bib[k], textual=True) for k in keys)
            return "(" + "; ".join(cite_text(self.bib[k]) for k in keys) + ")"
        explicit = re.match(r"(.*?)\s*<([^>]+)>$", content, re.S)
        if explicit:
            return explicit.group(1)
        if name == "doc":
            return self.pages.get(content.strip().rsplit("/", 1)[-1], content)
        if name in ("ref", "numref") and content in self.targets:
            kind, num = self.targets[content]
            return {"eq": f"eq. ({num})", "exercise": f"Exercise {num}", "figure": f"Figure {num}"}[kind]
        return content

    def image(self, path: str) -> str:
        """A local image as a ``data:`` URI (Colab shows it with no repository to fetch from)."""
        if re.match(r"[a-z]+:", path):
            return path
        file = (self.book_dir / path).resolve()
        if not file.is_file():
            raise ValueError(f"image {path!r} not found under {self.book_dir}")
        mime = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        return f"data:{mime};base64,{base64.b64encode(file.read_bytes()).decode('ascii')}"

    def markdown(self, text: str) -> str:
        text = self.blocks(text)
        text = _LABELLED_EQ.sub(lambda m: f"$${m.group('body').rstrip()}\n\\tag{{{self.number(m.group('label'), 'eq')}}}\n$$", text)
        lines, fence = [], None
        for line in text.splitlines():  # roles, targets and images outside code fences only
            m = _FENCE.match(line)
            if fence is None and m:
                fence = m.group(1)
            elif fence is not None and m and len(line.strip()) >= len(fence) and set(line.strip()) == {fence[0]}:
                fence = None
            elif fence is None:
                if re.match(r"^\([\w:.-]+\)=\s*$", line):
                    continue
                line = _ROLE.sub(self.role, line)
                line = re.sub(r"(!\[[^\]]*\]\()([^)\s]+)", lambda g: g.group(1) + self.image(g.group(2)), line)
                line = re.sub(r'(<img\b[^>]*\bsrc=")([^"]+)', lambda g: g.group(1) + self.image(g.group(2)), line)
            lines.append(line)
        return "\n".join(lines)

    def blocks(self, text: str) -> str:
        """Replace each MyST directive (``:::{name}`` or ````` ```{name} `````) by plain Markdown."""
        lines, out, i = text.splitlines(), [], 0
        while i < len(lines):
            m = _DIRECTIVE.match(lines[i])
            if not m:
                out.append(lines[i])
                i += 1
                continue
            fence = m.group(2)
            j = next((k for k in range(i + 1, len(lines)) if lines[k].strip()
                      and set(lines[k].strip()) == {fence[0]} and len(lines[k].strip()) >= len(fence)), len(lines))
            body, options = lines[i + 1:j], {}
            while body and re.match(r"^\s*:(\w[\w-]*):(.*)$", body[0]):
                key, value = re.match(r"^\s*:(\w[\w-]*):(.*)$", body.pop(0)).groups()
                options[key] = value.strip()
            out.extend(self.directive(m.group(3), m.group(4).strip(), options, "\n".join(body).strip("\n")).splitlines())
            i = j + 1
        return "\n".join(out)

    def directive(self, name: str, arg: str, options: dict, body: str) -> str:
        body = self.blocks(body)
        if name == "exercise":
            num = self.number(options["label"], "exercise") if "label" in options else "?"
            # the label, hidden from readers, is what the grader finds the answer by
            # (fundamentallm.course.grader.grading.submitted_code): work done in this edition is graded
            mark = f"\n\n<!-- {{exercise}} :label: {options['label']} -->" if "label" in options else ""
            return f"### Exercise {num}" + (f": {arg}" if arg else "") + f"\n\n{body}{mark}"
        if name in ("solution-start", "solution-end"):
            return ""  # the gated markers: handled cell by cell in render_notebook
        if name == "solution" or name == "dropdown" or options.get("class", "") == "dropdown":
            title = (f"Solution to Exercise {self.number(arg, 'exercise')}" if name == "solution" and arg in self.targets
                     else arg or name.capitalize())
            return f"<details>\n<summary>{title}</summary>\n\n{body}\n\n</details>"
        if name in ("figure", "image"):
            alt = options.get("alt", "figure")
            md = f"![{alt}]({arg})"
            if name == "figure" and body:
                label = options.get("name")
                num = f"Figure {self.targets[label][1]}: " if label in self.targets else ""
                md += f"\n\n*{num}{body}*"
            return md
        if name == "math":
            tag = f"\n\\tag{{{self.number(options['label'], 'eq')}}}" if options.get("label") in self.targets else ""
            return f"$$\n{body}{tag}\n$$"
        if name in ADMONITIONS:
            title = arg if name == "admonition" else name.capitalize() + (f": {arg}" if arg else "")
            quoted = "\n".join("> " + line if line else ">" for line in body.splitlines())
            return f"> **{title}**\n>\n{quoted}"
        return body


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


GENERATED = "fundamentallm"  # the notebook metadata key of the generator's stamp


def cells_sha256(cells: list) -> str:
    """The SHA-256 of the cells' types and sources (not outputs or metadata: running a notebook
    changes those, answering an exercise changes a source)."""
    data = json.dumps([[c["cell_type"], _source(c)] for c in cells], ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def stamp(nb: dict) -> dict:
    """``nb`` with the generator's stamp: the SHA-256 of its cells as generated."""
    meta = dict(nb.get("metadata") or {})
    meta[GENERATED] = {"generated": cells_sha256(nb["cells"])}
    return dict(nb, metadata=meta)


def _clean_in_git(path: Path) -> bool:
    """Whether git tracks ``path`` and it has no change against the last commit."""
    try:
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", path.name], cwd=path.parent,
                                 capture_output=True, timeout=60).returncode == 0
        changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", path.name], cwd=path.parent,
                                 capture_output=True, timeout=60).returncode != 0
    except (OSError, subprocess.SubprocessError):
        return False
    return tracked and not changed


def edited(path: Path, new_text: Optional[str] = None) -> bool:
    """Whether the notebook at ``path`` differs from what the generator wrote there: its cells no
    longer match its stamp. A notebook without a stamp (an older generator's) counts as the
    generator's when it equals ``new_text`` or is unchanged in git; anything unreadable is kept."""
    path = Path(path)
    if not path.exists():
        return False
    text = path.read_text(encoding="utf-8", errors="replace")
    if new_text is not None and text == new_text:
        return False
    try:
        nb = json.loads(text)
        recorded = ((nb.get("metadata") or {}).get(GENERATED) or {}).get("generated")
        if recorded is not None:
            return cells_sha256(nb["cells"]) != recorded
    except (ValueError, KeyError, TypeError, AttributeError):
        return True
    return not _clean_in_git(path)


def refuse_to_overwrite(paths, force: bool = False, command: str = "") -> None:
    """Raise ``ValueError`` naming every notebook of ``paths`` (path -> the text about to be
    written there, or None for a deletion) that someone edited, unless ``force``."""
    if force:
        return
    changed = [str(p) for p, text in paths.items() if edited(p, text)]
    if changed:
        raise ValueError(
            f"{', '.join(changed)}: edited since it was generated (a student's answers?), so it is "
            f"left as it is. Work in a copy -- `python3 start.py` puts the chapters in work/ -- "
            f"or pass --force to {command or 'overwrite'} anyway (the edits are lost).")


def _cell_id(base: str, suffix: str) -> str:
    return f"{base}-{suffix}"[:64]


def page_names(root: Path) -> dict[str, str]:
    """What a ``{doc}`` link becomes in the edition, for every page of the toc: a chapter is
    "chapter N" (its notebook in this edition is numbered so); any other page, such as the
    appendix the edition leaves out, is its title in italics."""
    root, out = Path(root), {}
    for f in toc_files(root):
        name = Path(f).name
        if _CHAPTER_FILE.fullmatch(name):
            out[name] = f"chapter {chapter_number(Path(name))}"
            continue
        title = page_title(root / f"{f}.ipynb") or page_title(root / f"{f}.md")
        if title:
            out[name] = f"*{title}*"
    return out


def _solution_details(number: str, code: list[str], idea: list[str]) -> str:
    """The solution of exercise ``number`` as collapsed, non-executing Markdown."""
    fence = "````" if any("```" in c for c in code) else "```"
    blocks = [f"{fence}python\n{c.strip()}\n{fence}" for c in code if c.strip()]
    return (f"<details>\n<summary>Solution to Exercise {number} (try the exercise first)</summary>\n\n"
            + "\n\n".join(blocks + [i.strip() for i in idea if i.strip()]) + "\n\n</details>")


def render_notebook(path: Path, targets: dict, bib: dict, pages: Optional[dict] = None,
                    note: Optional[str] = None) -> dict:
    """The Colab/Jupyter edition of one chapter, as a notebook dict (nbformat 4 JSON), stamped
    (:func:`stamp`). A student notebook (no solutions: :func:`~.book.to_student_notebook`) renders
    too, with nothing after its checks. ``note``: the line under the title (default: the edition's)."""
    import nbformat

    from .book import ANSWER_TAG, exercise_parts, make_stub

    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    student = not any(SOLUTION_MARK in _source(c) or "solution" in c.get("metadata", {}).get("tags", [])
                      for c in nb["cells"])
    parts = [] if student else exercise_parts(nbformat.reads(json.dumps(nb), as_version=4))
    in_solution = {i for part in parts for i in part["solution"]}
    by_check = {part["check"]: part for part in parts}
    stub_before_check = {part["check"]: part for part in parts if part["answer"] is None}
    renderer = Renderer(targets, bib, Path(path).parent, pages)
    n, cells = chapter_number(path), []

    def text(cell) -> str:
        return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]

    for i, cell in enumerate(nb["cells"]):
        if i in in_solution:
            continue
        source = text(cell)
        if i in stub_before_check:  # an older chapter without an answer cell: write the stub
            part = stub_before_check[i]
            stub = make_stub("\n\n".join(text(nb["cells"][j]) for j in part["solution_code"]), part["label"])
            cells.append({"cell_type": "code", "id": _cell_id(cell.get("id", f"c{i}"), "answer"),
                          "metadata": {"tags": [ANSWER_TAG]}, "execution_count": None, "outputs": [],
                          "source": stub.splitlines(keepends=True)})
        if cell["cell_type"] == "markdown":
            source = renderer.markdown(source)
            if not cells:
                source = re.sub(r"^# ", f"# {n}. ", source, count=1)
        cells.append(dict(cell, source=source.splitlines(keepends=True)))
        if i in by_check:
            part = by_check[i]
            code = [text(nb["cells"][j]) for j in part["solution_code"]]
            idea = [renderer.markdown(text(nb["cells"][j])) for j in part["solution"]
                    if nb["cells"][j]["cell_type"] == "markdown" and "{solution-" not in text(nb["cells"][j])]
            details = _solution_details(renderer.number(part["label"], "exercise"), code, idea)
            cells.append({"cell_type": "markdown", "id": _cell_id(cell.get("id", f"c{i}"), "solution"),
                          "metadata": {}, "source": details.splitlines(keepends=True)})
    if renderer.cited:
        refs = sorted(renderer.cited, key=lambda k: (_family_names(bib[k])[0], bib[k].get("year", "")))
        text_refs = "## References\n\n" + "\n".join(f"- {reference_line(bib[k])}" for k in refs)
        cells.append({"cell_type": "markdown", "id": _cell_id(f"c{n:02d}", "references"), "metadata": {},
                      "source": text_refs.splitlines(keepends=True)})
    if note is None:
        note = (f"*Chapter {n}'s Jupyter edition, generated from `book/{Path(path).name}` (contributors "
                f"edit that, then run `python -m fundamentallm.course colab-edition {EDITION_DIR}`). Write "
                f"your answers in your own copy: `work/`, which `python3 start.py` fills, or on Colab "
                f"File > Save a copy in Drive.*")
    cells.insert(1, {"cell_type": "markdown", "id": _cell_id(f"c{n:02d}", "edition"), "metadata": {},
                     "source": [note]})
    return stamp(dict(nb, cells=cells))


def _toc_chapters(root: Path) -> list[Path]:
    """The chapter notebooks of the toc (``NN_name``); appendix pages are not in the edition
    (book/records reads the repository's stored results, which a Colab copy does not have)."""
    return [root / f"{f}.ipynb" for f in toc_files(root)
            if _CHAPTER_FILE.fullmatch(Path(f).name) and (root / f"{f}.ipynb").exists()]


def render_edition(root: Path = Path("."), note=None) -> dict[str, str]:
    """Every chapter of the toc -> ``{file name: notebook JSON text}``, as written to disk.
    ``note``: a function of the chapter number giving the line under its title (default: the
    edition's)."""
    root = Path(root)
    chapters = _toc_chapters(root)
    numbers = [chapter_number(p) for p in chapters]
    if numbers != list(range(1, len(chapters) + 1)):
        # Jupyter Book numbers chapters by their place in _toc.yml; the edition by file name
        raise ValueError(f"the toc's chapters must be numbered 1..N in order by their file names; got {numbers}")
    bib = parse_bib((root / "book" / "references.bib").read_text(encoding="utf-8"))
    targets, pages = number_targets(chapters), page_names(root)
    return {p.name: json.dumps(render_notebook(p, targets, bib, pages, note(chapter_number(p)) if note else None),
                               indent=1, ensure_ascii=False) + "\n"
            for p in chapters}


def colab_edition(out_dir: Path, root: Path = Path("."), force: bool = False, note=None) -> list[Path]:
    """Write the edition to ``out_dir`` (replacing its notebooks); returns the written paths.
    Refuses (``ValueError``, nothing written) when a notebook there was edited since it was
    generated (:func:`edited`), unless ``force``."""
    out_dir = Path(out_dir)
    rendered = render_edition(root, note)
    old = {p: None for p in out_dir.glob("*.ipynb") if p.name not in rendered}
    refuse_to_overwrite({**{out_dir / name: text for name, text in rendered.items()}, **old}, force,
                        "overwrite or delete them")
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in old:
        path.unlink()
    written = []
    for name, text in rendered.items():
        (out_dir / name).write_text(text, encoding="utf-8")
        written.append(out_dir / name)
    return written


# --------------------------------------------------------------------------- Sphinx: the Colab button

def _colab_button(app, pagename, templatename, context, doctree):
    """Point the launch menu's Colab link of a chapter at its Colab/Jupyter edition."""
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []) if isinstance(group, dict) else []:
            if button.get("text") == "Colab" and pagename.startswith("book/") \
                    and _CHAPTER_FILE.fullmatch(pagename.rsplit("/", 1)[-1]):
                button["url"] = re.sub(r"/blob/([^/]+)/(?:.*/)?book/([^/]+\.ipynb)$",
                                       rf"/blob/\1/{EDITION_DIR}/\2", button["url"])
