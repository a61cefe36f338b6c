"""Book hygiene: the configuration, the table of contents and the chapter standard
(book/CONTRIBUTING.md) checked on every chapter notebook, without executing anything.

Executing the chapters is nbmake's job (``pytest`` collects the notebooks listed in _toc.yml);
running each exercise's solution against its check is tests/test_course.py's.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat
import pytest
import yaml

from fundamentallm import checks

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text()) if (ROOT / "_config.yml").exists() else {}
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text()) if (ROOT / "_toc.yml").exists() else {}
REPO_URL = (CONFIG.get("repository") or {}).get("url", "")

BOOTSTRAP = """\
# Installs the course package and the chapters' extras when the package is missing (e.g. on
# Colab); needs network access to GitHub. Locally, `python3 start.py` in a clone sets it all up
# (README, Quick start). One torch thread: the chapters' models are tiny, and more threads slow them.
import importlib.util, os, subprocess, sys
os.environ.setdefault("OMP_NUM_THREADS", "1")
SOURCE = "fundamentallm[book] @ git+{url}"
if importlib.util.find_spec("fundamentallm") is None:
    if subprocess.run([sys.executable, "-m", "pip", "install", "-q", SOURCE]).returncode != 0:
        print("Could not install fundamentallm: in a clone of the repository run `python3 start.py` "
              "(README, Quick start), or `pip install '.[book]'`; on Linux without an NVIDIA GPU first "
              "`pip install torch --index-url https://download.pytorch.org/whl/cpu` (a plain `pip install "
              "torch` there is the CUDA build, several GB). Then restart the kernel.")"""

ARC = ["Objectives", "Intuition", "The math", "Build it from scratch", "Validate", "Look at it",
       "Experiment", "Exercises", "Summary"]


def _toc_entries(node) -> list[str]:
    """Every file of the toc, in reading order (root first), recursing into parts and sections."""
    out = []
    if isinstance(node, dict):
        for key in ("root", "file"):
            if key in node:
                out.append(str(node[key]))
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key, []) or []:
                out.extend(_toc_entries(child))
    return out


TOC_ENTRIES = _toc_entries(TOC)


def _resolve(entry: str) -> Path | None:
    for suffix in (".ipynb", ".md"):
        if (ROOT / f"{entry}{suffix}").exists():
            return ROOT / f"{entry}{suffix}"
    return None


PAGES = [p for p in (_resolve(e) for e in TOC_ENTRIES) if p is not None]
NOTEBOOK_PAGES = [p for p in PAGES if p.suffix == ".ipynb"]
# A chapter is a notebook named NN_name. A toc notebook with another name is an appendix page, in
# an unnumbered part (book/records: the CPU training record, which reads stored benchmark
# results): it keeps the page rules (title, bootstrap cell, seeds, citations) but not the chapter
# arc or the exercises, since it builds no piece of the model for the reader to re-implement.
CHAPTERS = [p for p in NOTEBOOK_PAGES if re.fullmatch(r"\d\d_\w+", p.stem)]
chapter_param = pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
page_param = pytest.mark.parametrize("path", NOTEBOOK_PAGES, ids=[p.stem for p in NOTEBOOK_PAGES])


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _markdown_cells(path: Path) -> list[str]:
    if path.suffix == ".md":
        return [path.read_text()]
    return [c.source for c in _read(path).cells if c.cell_type == "markdown"]


def _markdown_text(path: Path) -> str:
    return "\n\n".join(_markdown_cells(path))


def _strip_code_blocks(markdown: str) -> str:
    """Drop the contents of code fences (```python ... ```), keep MyST directives (```{note})
    and their contents, so that `## ` or `(x)=` inside code is no heading or label."""
    out, stack = [], []  # stack of (fence, is_code)
    for line in markdown.splitlines():
        m = re.match(r"^\s*(`{3,}|~{3,}|:{3,})\s*(.*)$", line)
        if m and stack and m.group(1)[0] == stack[-1][0][0] and len(m.group(1)) >= len(stack[-1][0]) \
                and not m.group(2):
            stack.pop()  # a closing fence
            continue
        if m and not (stack and stack[-1][1]) and (m.group(2) or m.group(1)[0] != ":"):
            stack.append((m.group(1), not m.group(2).startswith("{")))
            continue
        if not any(is_code for _, is_code in stack):
            out.append(line)
    return "\n".join(out)


def _prose(path: Path) -> str:
    """The markdown of a page with code blocks removed, one cell at a time."""
    return "\n\n".join(_strip_code_blocks(source) for source in _markdown_cells(path))


# --- configuration and table of contents ------------------------------------------------------

def test_config_is_complete():
    assert CONFIG.get("title") == "FundamentaLLM"
    assert CONFIG.get("author")
    assert CONFIG.get("only_build_toc_files") is True
    excluded = set(CONFIG.get("exclude_patterns", []))
    for pattern in ("_build", ".*", "**/.*", "tests", "fundamentallm", "benchmarks", "README.md",
                    "student_edition", "book/CONTRIBUTING.md"):
        assert pattern in excluded, f"_config.yml exclude_patterns lacks {pattern!r}"
    execute = CONFIG.get("execute", {})
    assert execute.get("execute_notebooks") == "force"
    assert isinstance(execute.get("timeout"), int) and execute["timeout"] > 0
    assert execute.get("allow_errors") is False
    extensions = set(CONFIG.get("parse", {}).get("myst_enable_extensions", []))
    assert {"amsmath", "colon_fence", "dollarmath", "deflist", "substitution"} <= extensions
    assert CONFIG.get("bibtex_bibfiles") == ["book/references.bib"]
    sphinx = CONFIG.get("sphinx", {})
    extensions = sphinx.get("extra_extensions", []) + sphinx.get("config", {}).get("extensions", [])
    assert {"sphinx_exercise", "sphinxcontrib.bibtex", "myst_nb", "sphinx_book_theme"} <= set(extensions)
    launch = CONFIG.get("launch_buttons", {})
    assert launch.get("colab_url") == "https://colab.research.google.com"
    assert launch.get("binderhub_url") == "https://mybinder.org"
    html = CONFIG.get("html", {})
    for button in ("use_repository_button", "use_issues_button", "use_edit_page_button"):
        assert html.get(button) is True, f"_config.yml html.{button} should be true"


def test_repository_url_is_one_github_repository():
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", REPO_URL), REPO_URL
    assert CONFIG["repository"].get("branch") == "main"
    assert CONFIG["repository"].get("path_to_book", "") == ""


def test_toc_structure():
    assert TOC.get("format") == "jb-book"
    assert TOC.get("root") == "book/intro"
    assert TOC_ENTRIES, "_toc.yml lists no files"
    assert len(TOC_ENTRIES) == len(set(TOC_ENTRIES)), "a file is listed twice in _toc.yml"
    assert TOC_ENTRIES[-1] == "book/bibliography", "the bibliography page comes last"
    for part in TOC.get("parts", []):
        assert part.get("caption"), f"every part needs a caption: {part}"
    numbered = [e for part in TOC.get("parts", []) if part.get("numbered")
                for e in _toc_entries({"chapters": part.get("chapters", [])})]
    assert all(re.fullmatch(r"book/\d\d_\w+", e) for e in numbered), numbered
    assert [int(e[5:7]) for e in numbered] == list(range(1, len(numbered) + 1)), \
        f"numbered chapters must be 01, 02, ... in order: {numbered}"


@pytest.mark.parametrize("entry", TOC_ENTRIES)
def test_toc_entry_exists(entry):
    assert _resolve(entry) is not None, f"_toc.yml lists {entry} but neither {entry}.ipynb nor .md exists"


def test_every_notebook_is_in_the_toc():
    listed = {f"{e}.ipynb" for e in TOC_ENTRIES}
    notebooks = sorted(p.relative_to(ROOT).as_posix() for p in BOOK.rglob("*.ipynb")
                       if ".ipynb_checkpoints" not in p.parts)
    missing = [nb for nb in notebooks if nb not in listed]
    assert not missing, f"notebooks not listed in _toc.yml: {missing}"


def test_bibliography_page_is_the_only_one():
    pages = [p.relative_to(ROOT).as_posix() for p in PAGES if "{bibliography}" in _markdown_text(p)]
    assert pages == ["book/bibliography.md"], pages


# --- notebooks: stored clean, bootstrap cell, one title ---------------------------------------

ALL_NOTEBOOKS = sorted(p for p in BOOK.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=[p.stem for p in ALL_NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    nb = _read(path)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, (f"{path.name}: cells {dirty} have outputs or execution counts; "
                       f"run `nbstripout --keep-id {path.relative_to(ROOT)}`")
    assert "widgets" not in nb.metadata, f"{path.name}: widget state in the notebook metadata"
    no_id = [i for i, c in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]) if "id" not in c]
    assert not no_id, f"{path.name}: cells {no_id} have no id (nbformat 4.5 requires one)"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", \
        f"{path.name}: kernelspec must be python3"


@page_param
def test_first_cells_are_title_and_bootstrap(path):
    nb = _read(path)
    assert len(nb.cells) >= 3
    first = nb.cells[0]
    assert first.cell_type == "markdown" and re.match(r"# \S", first.source), \
        f"{path.name}: the first cell must be markdown starting with '# <Title>'"
    assert not re.match(r"# \d", first.source), f"{path.name}: no chapter number in the title"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[1] is code[0], f"{path.name}: cell 2 must be the bootstrap code cell"
    expected = BOOTSTRAP.format(url=REPO_URL)
    assert code[0].source.strip() == expected, (
        f"{path.name}: the first code cell must be exactly the bootstrap cell of "
        f"book/CONTRIBUTING.md, installing from {REPO_URL} (_config.yml repository.url)")
    assert "remove-cell" in _tags(code[0]), f"{path.name}: tag the bootstrap cell remove-cell"
    assert "set_seed(" in code[1].source, f"{path.name}: the second code cell sets the seeds"


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=[p.stem for p in ALL_NOTEBOOKS])
def test_no_control_characters(path):
    """A stray control character is usually an unescaped backslash in a generator script:
    the "\\b" of "\\bar" becomes a backspace, and MathJax fails on it."""
    for i, cell in enumerate(_read(path).cells):
        bad = sorted({hex(ord(ch)) for ch in cell.source if ord(ch) < 32 and ch not in "\n\t"})
        assert not bad, f"{path.name} cell {i}: control characters {bad} in the source"


@page_param
def test_one_title_per_chapter(path):
    headings = re.findall(r"^# .*$", _prose(path), flags=re.M)
    assert len(headings) == 1, f"{path.name}: exactly one '# ' heading (the title); got {headings}"


@page_param
def test_no_installs_or_other_repositories_in_chapters(path):
    nb = _read(path)
    for i, cell in enumerate(nb.cells[2:], start=2):
        assert "pip install" not in cell.source or cell.cell_type == "markdown", \
            f"{path.name} cell {i}: only the bootstrap cell installs packages"
    for url in re.findall(r"git\+(https?://[^\s\"']+)", "\n".join(c.source for c in nb.cells)):
        assert url == REPO_URL, f"{path.name}: installs from {url}, not {REPO_URL}"


@pytest.mark.parametrize("name", ["README.md", "book/CONTRIBUTING.md", "book/intro.md"])
def test_docs_mention_no_other_repository(name):
    path = ROOT / name
    if not path.exists():
        pytest.fail(f"{name} is missing")
    repo_path = REPO_URL.removeprefix("https://github.com/")
    for owner_repo in re.findall(r"github\.com[/:]([\w.-]+/[\w.-]+)", path.read_text()):
        assert owner_repo.removesuffix(".git") == repo_path, \
            f"{name} mentions github.com/{owner_repo}; the repository is {REPO_URL} (_config.yml)"


# --- the chapter arc, exercises, citations, labels --------------------------------------------

@chapter_param
def test_chapter_follows_the_arc(path):
    """The arc's '##' headings in order; a heading may add a subtitle after a colon."""
    headings = [h.strip() for h in re.findall(r"^## (.+)$", _prose(path),
                                              flags=re.M)]
    normal = [h.lower() for h in headings]
    position = -1
    for heading in ARC:
        # "## Look at it" or "## Look at it: gradients through time"
        later = [i for i, h in enumerate(normal) if i > position and
                 (h == heading.lower() or h.startswith(heading.lower() + ":"))]
        assert later, (f"{path.name}: the '## {heading}' heading is missing or out of order; "
                       f"the arc is {ARC}; the chapter's '##' headings are {headings}")
        position = later[0]


def _defined_names(source: str) -> set[str]:
    tree = ast.parse(source)
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _exercises(path: Path) -> list[dict]:
    """Parse the gated exercise blocks; fail with the cell index on any deviation."""
    cells = _read(path).cells
    chapter = path.stem[:2]
    found = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown" or not re.search(r"^:{3,}\{exercise\}|^`{3,}\{exercise\}",
                                                          cell.source, flags=re.M):
            continue
        where = f"{path.name} cell {i}"
        m = re.search(r"^:label:\s*(\S+)\s*$", cell.source, flags=re.M)
        assert m, f"{where}: the exercise needs a ':label: ch{chapter}-exK'"
        label = m.group(1)
        assert re.fullmatch(rf"ch{chapter}-ex\d+", label), \
            f"{where}: label {label!r} must look like ch{chapter}-exK"
        block = cells[i + 1:]
        if block and block[0].cell_type == "code" and "answer" in _tags(block[0]):
            # the exercise contract (book/CONTRIBUTING.md): the stub the student edits
            meta = block[0].metadata.get("exercise", {})
            assert meta.get("difficulty") in (1, 2, 3) and isinstance(meta.get("minutes"), int), \
                f"{where}: the answer cell of {label} needs metadata exercise: {{difficulty: 1-3, minutes: N}}"
            block = block[1:]
        assert len(block) >= 4, f"{where}: {label} is not followed by solution-start, code, end, check"
        start = block[0]
        assert start.cell_type == "markdown" and re.match(
            rf"^`{{3,}}\{{solution-start\}}\s+{re.escape(label)}\s*$", start.source.splitlines()[0]), \
            f"{where}: the cell after {label} must open with '````{{solution-start}} {label}'"
        assert re.search(r"^:class:\s*dropdown\s*$", start.source, flags=re.M), \
            f"{where}: the solution of {label} must have ':class: dropdown' (collapsed)"
        j = 1
        solution_cells = []
        while j < len(block) and block[j].cell_type == "code" and "solution" in _tags(block[j]):
            solution_cells.append(block[j])
            j += 1
        assert solution_cells, f"{where}: {label} needs a code cell tagged 'solution' after solution-start"
        while j < len(block) and block[j].cell_type == "markdown" and not re.match(r"^`{3,}\{solution-end\}",
                                                                                    block[j].source):
            j += 1  # the solution's explanation of the idea
        assert j < len(block) and block[j].cell_type == "markdown" and \
            re.match(r"^`{3,}\{solution-end\}", block[j].source), \
            f"{where}: the solution cells of {label} must be followed by '````{{solution-end}}'"
        assert j + 1 < len(block) and block[j + 1].cell_type == "code" and "check" in _tags(block[j + 1]), \
            f"{where}: a code cell tagged 'check' must follow the solution of {label}"
        found.append({"label": label, "solutions": [c.source for c in solution_cells],
                      "check": block[j + 1].source})
    return found


@chapter_param
def test_exercises_are_gated_and_checked(path):
    exercises = _exercises(path)
    assert len(exercises) >= 3, f"{path.name}: {len(exercises)} exercises; the standard asks for >= 3"
    for ex in exercises:
        where = f"{path.name} {ex['label']}"
        defined = set()
        for source in ex["solutions"]:
            tree = ast.parse(source)
            for node in tree.body:
                assert isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign)), (
                    f"{where}: a solution cell holds only imports, top-level functions and "
                    f"answer values (a prediction) "
                    f"(found {type(node).__name__} at line {node.lineno})")
                if isinstance(node, ast.FunctionDef):
                    assert ast.get_docstring(node), f"{where}: {node.name} needs a docstring"
            defined |= _defined_names(source)
        tree = ast.parse(ex["check"])
        calls = [n for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
        assert len(tree.body) == 1 and calls, f"{where}: the check cell is one call, checks.check_*(...)"
        func = calls[0].value.func
        assert isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and \
            func.value.id == "checks", f"{where}: the check cell must call checks.check_*(...)"
        assert func.attr in checks.CHECKS, \
            f"{where}: checks.{func.attr} is not a registered check in fundamentallm/checks/"
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        stray = used - defined - {"checks"}
        assert not stray, f"{where}: the check cell uses {sorted(stray)}, not defined in the solution"


def _assigned_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


@chapter_param
def test_nothing_depends_on_exercise_code(path):
    """The student edition replaces solution functions with stubs: no other cell may use them."""
    from_exercises: set[str] = set()
    for i, cell in enumerate(_read(path).cells):
        if cell.cell_type != "code":
            continue
        tags = _tags(cell)
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # IPython magics: nbmake reports real syntax errors
            continue
        if "solution" in tags:
            from_exercises |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            continue
        if "check" in tags:
            continue
        loads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        bad = loads & from_exercises
        assert not bad, f"{path.name} cell {i} uses {sorted(bad)}, defined in an exercise solution"
        from_exercises -= _assigned_names(tree)


CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def _bib_keys() -> list[str]:
    return re.findall(r"^@\w+\s*\{\s*([^,\s]+)\s*,", (BOOK / "references.bib").read_text(), flags=re.M)


@page_param
def test_chapter_cites_a_reference(path):
    assert CITE.search(_markdown_text(path)), f"{path.name}: cite at least one paper with {{cite}}`Key`"


def test_cited_keys_exist():
    keys = set(_bib_keys())
    for page in PAGES:
        for group in CITE.findall(_markdown_text(page)):
            for key in (k.strip() for k in group.split(",")):
                assert key in keys, f"{page.name} cites {key!r}, which is not in book/references.bib"


REQUIRED_FIELDS = {
    "article": [("author",), ("title",), ("journal",), ("year",)],
    "inproceedings": [("author",), ("title",), ("booktitle",), ("year",)],
    "book": [("author", "editor"), ("title",), ("publisher",), ("year",)],
    "techreport": [("author",), ("title",), ("institution",), ("year",)],
    "misc": [("author", "title"), ("year",)],
}


def test_references_bib_is_valid():
    from pybtex.database import parse_file

    keys = _bib_keys()
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    assert not duplicates, f"book/references.bib has duplicate keys: {duplicates}"
    data = parse_file(str(BOOK / "references.bib"))
    assert len(data.entries) == len(keys)
    for key, entry in data.entries.items():
        assert re.fullmatch(r"[A-Z][A-Za-z]+\d{4}[a-z]?", key), f"key {key!r} is not AuthorYear"
        kind = entry.type.lower()
        assert kind in REQUIRED_FIELDS, f"{key}: use one of {sorted(REQUIRED_FIELDS)}, not @{kind}"
        present = {f.lower() for f in entry.fields} | {r.lower() for r in entry.persons}
        for alternatives in REQUIRED_FIELDS[kind]:
            assert present & set(alternatives), f"{key} (@{kind}) needs a {' or '.join(alternatives)} field"


LABEL_PATTERNS = [
    re.compile(r"^:label:\s*(\S+)\s*$", re.M),                 # exercises, figures, math directives
    re.compile(r"^:name:\s*(\S+)\s*$", re.M),                  # named directives
    re.compile(r"^\(([\w.-]+)\)=\s*$", re.M),                  # MyST targets
    re.compile(r"\$\$\s*\(([\w.-]+)\)\s*$", re.M),              # $$ ... $$ (label)
]


def test_labels_are_unique_across_the_book():
    seen: dict[str, str] = {}
    duplicates = []
    for page in PAGES:
        text = _prose(page)
        labels = [m for pattern in LABEL_PATTERNS for m in pattern.findall(text)]
        for label in labels:
            if label in seen:
                duplicates.append(f"{label} ({seen[label]} and {page.name})")
            seen.setdefault(label, page.name)
    assert not duplicates, f"labels defined twice: {duplicates}"
