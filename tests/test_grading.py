"""Attacks on the grader (issue 25), each a student folder in one class graded once: every
attacker leaves every exercise as the stub, so any mark is a successful attack. Honest and wrong
students graded before and after the attackers must keep their rows; no process may outlive the
grading; no file outside the output may change.

The class is graded against a small fixture book written in tmp_path: chapter 02 has two
torch-free exercises (checks registered by this file), chapter 03 two real checks of the package
(``check_softmax_rows``, which forbids ``torch.softmax``, and ``check_make_causal_mask``). Attackers
that need torch submit chapter 03; the others only chapter 02 (their worker starts in a fraction
of a second)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from fundamentallm import checks
from fundamentallm.checks.core import CHECKS, FORBIDDEN, CheckFailed, exercise_check, rng
from fundamentallm.course import (
    grade,
    grading,
    main,
    proxy,
    review_source,
    sandbox,
    submitted_code,
    to_student_notebook,
    wire,
)

HAVE_BWRAP = sandbox.bwrap_path() is not None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP and not os.environ.get("CI"),
                                 reason="bubblewrap (bwrap) is not installed here: `apt install bubblewrap` "
                                        "(CI installs it and runs these tests)")
TIMEOUT_S = 20.0  # per exercise, of waiting for the worker (generous: a loaded machine); the hang costs it once
TOKEN = "fundamentallm-grading-test-daemon"


# --- the fixture book ----------------------------------------------------------------------------

@exercise_check
def check_fixture_running_sum(running_sum) -> str:
    """``running_sum(xs)`` -> the list of prefix sums of a list of ints."""
    for n in (0, 1, 5, 9):
        xs = [int(v) for v in torch.randint(-50, 50, (n,), generator=rng(700 + n))]
        expected = [sum(xs[:i + 1]) for i in range(len(xs))]
        got = running_sum(list(xs))
        if got != expected:
            raise CheckFailed(f"for xs={xs}: expected {expected}, got {got!r}")
    return "prefix sums of 4 lists"


@exercise_check
def check_fixture_count_words(count_words) -> str:
    """``count_words(text)`` -> {word: count}."""
    words = ["attention", "head", "token", "layer", "norm"]
    for seed in range(3):
        picks = torch.randint(0, len(words), (12,), generator=rng(800 + seed)).tolist()
        text = " ".join(words[i] for i in picks)
        expected = {w: text.split().count(w) for w in set(text.split())}
        got = count_words(text)
        if got != expected:
            raise CheckFailed(f"for {text!r}: expected {expected}, got {got!r}")
    return "3 texts"


FIXTURE_CHECKS = ("check_fixture_running_sum", "check_fixture_count_words")

CH02 = [  # (label, answer stub, solution, check, wrong answer)
    ("ch02-ex1", "def running_sum(xs):\n    raise NotImplementedError  # your code here\n",
     "def running_sum(xs):\n    out, total = [], 0\n    for x in xs:\n        total += x\n        out.append(total)\n    return out\n",
     "checks.check_fixture_running_sum(running_sum)",
     "def running_sum(xs):\n    return [sum(xs[:i]) for i in range(len(xs))]\n"),
    ("ch02-ex2", "def count_words(text):\n    raise NotImplementedError  # your code here\n",
     "def count_words(text):\n    counts = {}\n    for w in text.split():\n        counts[w] = counts.get(w, 0) + 1\n    return counts\n",
     "checks.check_fixture_count_words(count_words)",
     "def count_words(text):\n    return {w: 1 for w in text.split()}\n"),
]
CH03 = [
    ("ch03-ex1", "def softmax_rows(x):\n    raise NotImplementedError  # your code here\n",
     "def softmax_rows(x):\n    e = torch.exp(x - x.amax(-1, keepdim=True))\n    return e / e.sum(-1, keepdim=True)\n",
     "checks.check_softmax_rows(softmax_rows)",
     "def softmax_rows(x):\n    e = torch.exp(x)\n    return e / e.sum(-1, keepdim=True)\n"),
    ("ch03-ex2", "def make_causal_mask(T):\n    raise NotImplementedError  # your code here\n",
     "def make_causal_mask(T):\n    return torch.tril(torch.ones(T, T, dtype=torch.bool))\n",
     "checks.check_make_causal_mask(make_causal_mask)",
     "def make_causal_mask(T):\n    return torch.ones(T, T, dtype=torch.bool)\n"),
]
CHAPTERS = {"02_tiny": (CH02, "import math\n"), "03_tensors": (CH03, "import math\nimport torch\n")}
LABELS = [ex[0] for exs, _ in CHAPTERS.values() for ex in exs]
CHAPTER_OF = {"ch02": "02_tiny", "ch03": "03_tensors"}


def book_notebook(exercises, imports: str):
    nb = new_notebook()
    nb.cells = [new_markdown_cell("# A fixture chapter"), new_code_cell(imports + "from fundamentallm import checks\n")]
    for label, stub, solution, check, _ in exercises:
        nb.cells += [
            new_markdown_cell(f":::{{exercise}} {label}\n:label: {label}\n:class: variant\n\nWrite it.\n:::"),
            new_code_cell(stub, metadata={"tags": ["answer"], "exercise": {"difficulty": 1, "minutes": 5}}),
            new_markdown_cell(f"````{{solution-start}} {label}\n:class: dropdown\n````"),
            new_code_cell(solution, metadata={"tags": ["solution"]}),
            new_markdown_cell("The idea, in words."),
            new_markdown_cell("````{solution-end}\n````"),
            new_code_cell(check, metadata={"tags": ["check"]}),
        ]
    return nb


def write_book(root: Path) -> dict[str, Path]:
    (root / "book").mkdir(parents=True)
    (root / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n"
                                   + "".join(f"- file: book/{n}\n" for n in CHAPTERS), encoding="utf-8")
    (root / "book" / "intro.md").write_text("# Intro\n", encoding="utf-8")
    paths = {}
    for name, (exercises, imports) in CHAPTERS.items():
        paths[name] = root / "book" / f"{name}.ipynb"
        nbformat.write(book_notebook(exercises, imports), paths[name])
    return paths


def student(name: str, answers: dict[str, str] | None = None, wrong: bool = False, correct: bool = False):
    """{chapter: student notebook}: the student edition with ``answers`` {label: code}; all
    stubs by default; every chapter right (``correct``) or slightly wrong (``wrong``)."""
    out = {}
    for chapter, (exercises, imports) in CHAPTERS.items():
        nb = to_student_notebook(book_notebook(exercises, imports))
        for label, stub, solution, _check, wrong_code in exercises:
            code = (answers or {}).get(label, solution if correct else wrong_code if wrong else None)
            if code is not None:
                cell = next(c for c in nb.cells if c.cell_type == "code" and "answer" in c.metadata.get("tags", [])
                            and c.source == stub)
                cell.source = code
        out[chapter] = nb
    return out


# --- the attacks: answer code for one exercise; the other stays the stub -------------------------

STUB = {label: stub for exs, _ in CHAPTERS.values() for label, stub, *_ in exs}


def with_stub(label: str, attack: str) -> str:
    return attack + "\n\n" + STUB[label]


def attacks(paths: dict[str, Path], subs: Path, out: Path) -> dict[str, tuple[str, str]]:
    """{student: (label, answer code)} -- every attack of issue 25 and the bar's class."""
    book02, victim = str(paths["02_tiny"]), str(subs / "zz_honest" / "02_tiny.ipynb")
    daemon = f"[sys.executable, '-c', 'import time; time.sleep(120)', {TOKEN!r}]"
    return {
        "b01_noop_checks": ("ch02-ex1", with_stub("ch02-ex1", """
import fundamentallm.checks as checks_package
import fundamentallm.checks.core as core
for name in list(vars(checks_package)):
    if name.startswith("check_"):
        setattr(checks_package, name, lambda *a, **k: True)
core.CheckFailed.__init__ = lambda self, *a: None
class _Fake:
    def __getattr__(self, name):
        return lambda *a, **k: True
checks = _Fake()""")),
        "b02_patch_assert_close": ("ch03-ex1", with_stub("ch03-ex1", """
import torch.testing
torch.testing.assert_close = lambda *a, **k: None
torch.allclose = lambda *a, **k: True""")),
        "b03_patch_exec": ("ch02-ex1", with_stub("ch02-ex1", """
import builtins
builtins.exec = lambda *a, **k: None
builtins.print = lambda *a, **k: None""")),
        "b04_torch_function": ("ch03-ex1", """
import torch
class Mirror(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return True
def softmax_rows(x):
    return x.as_subclass(Mirror)
"""),
        "b05_frame_walk": ("ch02-ex1", with_stub("ch02-ex1", """
import gc, sys
frame = sys._getframe()
while frame is not None:
    for key, value in list(frame.f_locals.items()):
        if isinstance(value, dict):
            value.update({"passed": True, "total": 999})
    frame = frame.f_back
for obj in gc.get_objects():
    if isinstance(obj, dict) and "ok" in obj:
        obj["ok"] = True""")),
        "b06_forge_replies": ("ch02-ex1", with_stub("ch02-ex1", """
import json, os, struct
def _forged(header):
    head = json.dumps({**header, "buffers": []}).encode()
    return b"FLW1" + struct.pack(">QQ", len(head), 0) + head
for fd in range(0, 40):
    try:
        os.write(fd, _forged({"ok": True, "result": {"$d": [["value", True], ["changed", {"$d": []}]]}}) * 50)
    except OSError:
        pass""")),
        "b07_reads_the_book": ("ch02-ex1", f"""
import json
nb = json.load(open({book02!r}))
exec("\\n".join("".join(c["source"]) for c in nb["cells"] if "solution" in c["metadata"].get("tags", [])))
"""),
        "b08_reads_a_classmate": ("ch02-ex1", f"""
import json
nb = json.load(open({victim!r}))
exec("\\n".join("".join(c["source"]) for c in nb["cells"] if "answer" in c["metadata"].get("tags", [])))
"""),
        "b11_daemon": ("ch02-ex1", with_stub("ch02-ex1", f"""
import subprocess, sys
subprocess.Popen({daemon}, start_new_session=True)
for path in ({str(out / 'scores.csv')!r}, {str(out / 'details.csv')!r}):
    try:
        open(path, "w").write("student,total\\nb11_daemon,999\\nzz_honest,0\\n")
    except OSError:
        pass""")),
        "b12_setsid_escape": ("ch02-ex1", with_stub("ch02-ex1", f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, {daemon})
    os._exit(0)""")),
        "b13_kills_the_grader": ("ch02-ex1", with_stub("ch02-ex1", """
import os, signal
for pid in (os.getppid(), 1, -1):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass""")),
        "b14_sitecustomize": ("ch02-ex1", with_stub("ch02-ex1", f"""
import os, site, sys
places = sys.path + site.getsitepackages() + [os.path.dirname(os.__file__), {str(paths['02_tiny'].parent)!r}]
for place in places:
    for name in ("sitecustomize.py", "usercustomize.py", "02_tiny.ipynb"):
        try:
            open(os.path.join(place or ".", name), "w").write("print('pwned')\\n")
        except OSError:
            pass""")),
        "b15_profiler_off": ("ch03-ex1", """
import sys
import torch
def softmax_rows(x):
    sys.setprofile(None)
    return torch.softmax(x, -1)
"""),
        "b16_thread": ("ch03-ex1", """
import threading
import torch
def softmax_rows(x):
    out = []
    t = threading.Thread(target=lambda: out.append(torch.softmax(x, -1)))
    t.start()
    t.join()
    return out[0]
"""),
        "b17_aten": ("ch03-ex1", """
import torch
def softmax_rows(x):
    return torch.ops.aten._softmax(x, -1, False)
"""),
        "b18_log_softmax": ("ch03-ex1", """
def softmax_rows(x):
    return x.log_softmax(-1).exp()
"""),
        "b19_softmin": ("ch03-ex1", """
import torch.nn.functional as F
def softmax_rows(x):
    return F.softmin(-x, dim=-1)
"""),
        "b20_fake_filename": ("ch03-ex1", """
import torch
code = compile("def softmax_rows(x):\\n    return x.softmax(-1)\\n", torch.__file__, "exec")
exec(code)
"""),
        "c01_hang": ("ch02-ex1", "def running_sum(xs):\n    while True:\n        pass\n"),
        "c02_exits": ("ch02-ex1", "raise SystemExit(0)\n"),
        "c03_os_exit": ("ch02-ex2", "import os\n\ndef count_words(text):\n    os._exit(3)\n"),
        "c04_forbidden_call": ("ch03-ex1", "import torch\n\ndef softmax_rows(x):\n    return torch.softmax(x, -1)\n"),
        "c05_memory_bomb": ("ch02-ex1", "def running_sum(xs):\n    block = bytearray(64 * 2 ** 30)\n    return [len(block)]\n"),
        "c06_fork_bomb": ("ch02-ex1", with_stub("ch02-ex1", f"""
import os, sys
for _ in range(5):
    if os.fork() == 0:
        os.execv(sys.executable, {daemon})""")),
        "c07_huge_answer": ("ch02-ex1", "def running_sum(xs):\n    return [0] * 3_000_000\n"),
        # issue 38: out of the sandbox, and the judge talked around
        "d01_remounts_the_package": ("ch02-ex1", with_stub("ch02-ex1", """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
package = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["fundamentallm.course"].__file__)))
for target in (package, "/", "/usr", "/opt/fundamentallm"):
    libc.mount(b"none", target.encode(), None, 32 | 4096, None)  # MS_REMOUNT | MS_BIND, read-write
    libc.mount(b"none", target.encode(), None, 32, None)
for rel in ("course/grader/_worker.py", "checks/core.py", "course/grader/grading.py"):
    try:
        with open(os.path.join(package, rel), "a") as f:
            f.write("\\nraise SystemExit('pwned')\\n")
    except OSError:
        pass
os.setuid(0) if hasattr(os, "setuid") else None""")),
        "d02_methodcaller": ("ch03-ex1", """
from operator import methodcaller as call_named
def softmax_rows(x):
    return call_named("log_soft" + "max", -1)(x).exp()
"""),
        "d03_type_hints": ("ch03-ex1", """
import typing
import torch
def _spec(a: "getattr(torch, 'soft' + 'max')"):
    pass
def softmax_rows(x):
    return typing.get_type_hints(_spec)["a"](x, -1)
"""),
        "d04_child_python": ("ch03-ex1", """
import subprocess, sys, json
import torch
def softmax_rows(x):
    code = "import sys, json, torch; x = torch.tensor(json.load(sys.stdin)); print(json.dumps(torch.softmax(x, -1).tolist()))"
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(x.tolist()), capture_output=True, text=True)
    return torch.tensor(json.loads(out.stdout), dtype=x.dtype)
"""),
        "d05_checks_reference": ("ch03-ex1", """
import torch
import fundamentallm
from fundamentallm.checks import ch02 as reference
def softmax_rows(x):
    e = reference._reference_attention(x.unsqueeze(-1), torch.ones_like(x).unsqueeze(-1), torch.eye(x.shape[-1]))
    return e
"""),
        "d06_overrides_rot13": ("ch03-ex1", """
import codecs
import torch
import torch.overrides as o
NAME = codecs.decode("fbsgznk", "rot13")
FN = next(f for f in o.get_overridable_functions()[torch] if getattr(f, "__name__", "") == NAME)
def softmax_rows(x):
    return FN(x, -1)
"""),
        "d07_pydoc_locate": ("ch03-ex1", """
import pydoc
def softmax_rows(x):
    return pydoc.locate("torch." + "soft" + "max")(x, -1)
"""),
        "d08_formatter_field": ("ch03-ex1", """
import string
import torch
def _fetch(fn):
    return string.Formatter().get_field("0." + "soft" + "max", (torch,), {})[0]
softmax_rows = lambda x: _fetch(None)(x, -1)
"""),
    }


def _tree_digest(root: Path, skip: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        if skip in path.parents or path == skip or path.is_symlink() or not path.is_file():
            continue
        out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _processes_with(token: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.fixture(scope="module")
def fixture_checks():
    for name in FIXTURE_CHECKS:
        setattr(checks, name, CHECKS[name])
    yield
    for name in FIXTURE_CHECKS:
        delattr(checks, name)
        CHECKS.pop(name, None)
        FORBIDDEN.pop(name, None)


FORMULA = '=HYPERLINK("evil.example","click")'


@pytest.fixture(scope="module")
def graded(tmp_path_factory, fixture_checks):
    """The class, graded once (2 jobs). Returns a dict of what the tests look at."""
    tmp = tmp_path_factory.mktemp("class")
    paths = write_book(tmp / "book_root")
    subs, out = tmp / "submissions", tmp / "out"

    def put(name: str, notebooks: dict, only: tuple = ("02_tiny", "03_tensors")) -> None:
        (subs / name).mkdir(parents=True, exist_ok=True)
        for chapter, nb in notebooks.items():
            if chapter in only:
                nbformat.write(nb, subs / name / f"{chapter}.ipynb")

    for prefix, only in (("a", ("02_tiny", "03_tensors")), ("zz", ("02_tiny",))):  # before and after the attackers
        put(f"{prefix}_honest", student(prefix, correct=True), only)
        put(f"{prefix}_wrong", student(prefix, wrong=True), only)
    for name, (label, code) in attacks(paths, subs, out).items():
        put(name, student(name, {label: code}), only=(CHAPTER_OF[label[:4]],))
    # symbolic links to the book and to a classmate's notebook: never followed
    for name, target in (("b09_links_the_book", paths["02_tiny"]), ("b10_links_a_classmate", subs / "a_honest" / "02_tiny.ipynb")):
        (subs / name).mkdir()
        (subs / name / "02_tiny.ipynb").symlink_to(target)
    # check cells edited to pass: the book's checks run instead
    edited = student("c08")
    for nb in edited.values():
        for i, cell in enumerate(c for c in nb.cells if "check" in c.metadata.get("tags", [])):
            cell.source = "pass" if i % 2 else 'print("\u2713 passed")'
    put("c08_edited_checks", edited)
    for name, data in (("c09_broken_json", b"{ this is not a notebook"), ("c10_deep_json", b"[" * 200_000),
                       ("c11_not_utf8", b'{"cells": "\xff\xfe\xfa"}')):
        (subs / name).mkdir()
        (subs / name / "02_tiny.ipynb").write_bytes(data)
    many = student("c12")
    many["02_tiny"].cells += [new_markdown_cell(f"cell {i}") for i in range(10_000)]
    put("c12_ten_thousand_cells", many, only=("02_tiny",))
    deleted = student("c13", correct=True)
    nb = deleted["02_tiny"]
    start = next(i for i, c in enumerate(nb.cells) if ":label: ch02-ex2" in c.source)
    del nb.cells[start:start + 3]
    put("c13_deleted_exercise", deleted, only=("02_tiny",))
    put(FORMULA, student("f", {"ch02-ex1": f"raise ValueError({FORMULA!r})\n"}), only=("02_tiny",))

    before = _tree_digest(tmp, out)
    started = time.monotonic()
    rows, details = grade(subs, out / "scores.csv", out / "details.csv", root=tmp / "book_root",
                          timeout=TIMEOUT_S, jobs=2, quiet=True)
    elapsed = time.monotonic() - started
    time.sleep(0.5)
    left = _processes_with(TOKEN)
    after = _tree_digest(tmp, out)
    with open(out / "scores.csv", newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    with open(out / "details.csv", newline="", encoding="utf-8") as f:
        detail_table = list(csv.reader(f))
    print(f"graded {len(rows)} students in {elapsed:.1f} s")
    return {"rows": {r["student"]: r for r in rows}, "details": details, "table": table,
            "detail_table": detail_table, "left": left, "before": before, "after": after, "tmp": tmp,
            "subs": subs, "paths": paths}


def _marks(g, name) -> list[int]:
    return [g["rows"][name][label] for label in LABELS]


def _message(g, name, label) -> str:
    return next(r.message for r in g["details"] if r.student == name and r.label == label)


def _status(g, name, label) -> str:
    return next(r.status for r in g["details"] if r.student == name and r.label == label)


ATTACKERS = sorted(set(attacks({"02_tiny": Path("x")}, Path("s"), Path("o")))
                   | {"b09_links_the_book", "b10_links_a_classmate", "c08_edited_checks", "c09_broken_json",
                      "c10_deep_json", "c11_not_utf8", "c12_ten_thousand_cells", FORMULA})


@needs_bwrap
@pytest.mark.parametrize("name", ATTACKERS)
def test_every_attack_scores_zero(graded, name):
    assert _marks(graded, name) == [0, 0, 0, 0], [(r.label, r.message) for r in graded["details"] if r.student == name]


@needs_bwrap
def test_honest_and_wrong_students_keep_their_rows_before_and_after_the_attacks(graded):
    for prefix, honest in (("a", [1, 1, 1, 1]), ("zz", [1, 1, 0, 0])):  # zz_ submitted chapter 02 only
        assert _marks(graded, f"{prefix}_honest") == honest, \
            [(r.label, r.message) for r in graded["details"] if r.student == f"{prefix}_honest"]
        assert _marks(graded, f"{prefix}_wrong") == [0, 0, 0, 0]
        assert all(_status(graded, f"{prefix}_wrong", label) == "failed" for label in LABELS[:len(honest)]
                   if honest[LABELS.index(label)])
    assert _message(graded, "a_wrong", "ch03-ex1").startswith("check_softmax_rows failed")


@needs_bwrap
def test_one_row_per_student_and_the_books_denominator(graded):
    table, rows = graded["table"], graded["rows"]
    assert table[0] == ["student", *LABELS, "total", "out_of", "self_check", "self_check_of", "review"]
    assert len(table) == 1 + len(rows) == 1 + len(ATTACKERS) + 5
    assert all(r["out_of"] == len(LABELS) for r in rows.values())
    assert len(graded["details"]) == len(rows) * len(LABELS)
    assert _marks(graded, "c13_deleted_exercise")[:2] == [1, 0]
    assert "missing" in _message(graded, "c13_deleted_exercise", "ch02-ex2")


@needs_bwrap
def test_no_process_is_left_and_no_file_outside_the_output_changed(graded):
    assert graded["left"] == []
    assert graded["after"] == graded["before"]
    for d in {*sys.path, str(Path(sandbox.PACKAGE_DIR))}:
        assert not (Path(d or ".") / "sitecustomize.py").exists() or d == "", d


@needs_bwrap
def test_the_sandbox_hides_the_book_and_the_classmates(graded):
    for name in ("b07_reads_the_book", "b08_reads_a_classmate"):
        message = _message(graded, name, "ch02-ex1")
        assert "FileNotFoundError" in message, message
    for name in ("b09_links_the_book", "b10_links_a_classmate"):
        assert "symbolic link" in _message(graded, name, "ch02-ex1")


@needs_bwrap
def test_reasons_are_named(graded):
    g = graded
    assert "timed out" in _message(g, "c01_hang", "ch02-ex1")
    assert "SystemExit" in _message(g, "c02_exits", "ch02-ex1")
    assert "process ended" in _message(g, "c03_os_exit", "ch02-ex2")
    # the kernel's name or the public one, and where the student called it
    # (an alias as itself: "torch.Tensor.softmax (torch.softmax under another name)")
    assert re.search(r"not to use torch\.\S*softmax", _message(g, "c04_forbidden_call", "ch03-ex1"))
    assert re.search(r"not to use torch\.\S*softmax", _message(g, "b19_softmin", "ch03-ex1"))  # the worker's profiler
    assert "MemoryError" in _message(g, "c05_memory_bomb", "ch02-ex1")
    assert "could not be read" in _message(g, "c09_broken_json", "ch02-ex1")
    assert "not attempted" in _message(g, "c08_edited_checks", "ch02-ex1")
    for name in ("b03_patch_exec", "b05_frame_walk", "b07_reads_the_book", "b16_thread", "b17_aten",
                 "b20_fake_filename", "b13_kills_the_grader", "b11_daemon"):
        label = next(r.label for r in g["details"] if r.student == name and r.status == "needs review")
        assert "needs review" in _message(g, name, label)
        assert label in g["rows"][name]["review"]


@needs_bwrap
def test_csv_cells_are_not_formulas(graded):
    for line in graded["table"] + graded["detail_table"]:
        for cell in line:
            assert not cell.startswith(("=", "+", "-", "@")), cell
    assert any(line[0] == "'" + FORMULA for line in graded["table"])
    assert grading.csv_safe("=1+1") == "'=1+1" and grading.csv_safe("-2") == "'-2" and grading.csv_safe(3) == 3


# --- resume, the journal, without the sandbox ------------------------------------------------------

def _small_class(tmp: Path) -> tuple[Path, Path]:
    root = tmp / "book_root"
    write_book(root)
    subs = tmp / "subs"
    for name, kw in (("a_honest", {"correct": True}), ("b_wrong", {"wrong": True}), ("c_stubs", {})):
        (subs / name).mkdir(parents=True)
        nbformat.write(student(name, **kw)["02_tiny"], subs / name / "02_tiny.ipynb")
    return root, subs


@needs_bwrap
def test_a_killed_run_resumes_with_the_same_seed_and_rows(tmp_path, fixture_checks):
    root, subs = _small_class(tmp_path)
    out = tmp_path / "out" / "scores.csv"
    journal = Path(str(out) + ".journal.jsonl")
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_grading as t; "
            f"from fundamentallm import checks; [setattr(checks, n, checks.CHECKS[n]) for n in t.FIXTURE_CHECKS]; "
            f"from fundamentallm.course import main; sys.exit(main(sys.argv[1:]))")
    args = ["grade", str(subs), "--root", str(root), "--csv", str(out), "--chapters", "02", "--timeout", "30"]
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and '"student": "a_honest"' in journal.read_text():
            break
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    seed = lines[0]["seed"]
    assert not any(line.get("finished") for line in lines)
    with pytest.raises(ValueError, match="--resume"):
        grade(subs, out, root=root, chapters=["02"], quiet=True)
    rows, _ = grade(subs, out, root=root, chapters=["02"], resume=True, timeout=30, quiet=True)
    assert [(r["student"], r["total"]) for r in rows] == [("a_honest", 2), ("b_wrong", 0), ("c_stubs", 0)]
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert lines[0]["seed"] == seed and lines[-1] == {"finished": True}
    assert sum(1 for line in lines if line.get("student") == "a_honest") == 1  # not graded twice
    assert [r[0] for r in csv.reader(out.open())] == ["student", "a_honest", "b_wrong", "c_stubs"]


def test_a_student_who_stopped_the_grader_twice_gets_a_row(tmp_path, fixture_checks, monkeypatch):
    root, subs = _small_class(tmp_path)
    out = tmp_path / "scores.csv"
    labels = ["ch02-ex1", "ch02-ex2"]
    Path(str(out) + ".journal.jsonl").write_text(
        json.dumps({"seed": 5, "labels": labels}) + "\n" + '{"started": "a_honest"}\n{"started": "a_honest", "solo": true}\n',
        encoding="utf-8")
    monkeypatch.setattr(grading, "grade_student", lambda name, *a, **k: [
        grading.Result(name, "02_tiny", lab, False, "graded", "failed") for lab in labels])
    rows, details = grade(subs, out, root=root, chapters=["02"], resume=True, quiet=True)
    assert [r["student"] for r in rows] == ["a_honest", "b_wrong", "c_stubs"]
    assert "stopped the grader" in details[0].message and rows[0]["review"] == "ch02-ex1 ch02-ex2"


def test_without_bubblewrap_the_grader_says_so_and_still_grades(tmp_path, fixture_checks, monkeypatch, capsys):
    root, subs = _small_class(tmp_path)
    monkeypatch.setattr(sandbox, "bwrap_path", lambda: None)
    rows, _ = grade(subs, root=root, chapters=["02"], timeout=30)
    assert "bubblewrap (bwrap) is not installed" in capsys.readouterr().err
    assert [r["total"] for r in rows] == [2, 0, 0]


@needs_bwrap
def test_the_sandbox_sees_no_book_no_network_and_no_other_process(tmp_path):
    root = tmp_path / "book_root"
    write_book(root)
    worker = proxy.Worker(sandbox.Limits(), [root])
    try:
        worker.budget = 60
        code = f"""
import os, socket
seen = [os.path.exists(p) for p in ({str(root)!r}, {str(tmp_path)!r}, {os.path.join(os.getcwd(), "book")!r}, "/home")]
tmp = os.listdir("/tmp")
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    network = True
except OSError:
    network = False
try:
    open("/usr/lib/fundamentallm-test", "w")
    writable = True
except OSError:
    writable = False
"""
        reply, buffers = worker.request({"op": "load", "chapter": "c", "label": "x", "code": code,
                                         "prelude": "", "names": ["seen", "tmp", "pids", "network", "writable"]})
        values = wire.decode(reply["result"], buffers, lambda h: h)
    finally:
        worker.close()
    # (the working directory's own path may exist, empty, as the parent of a bound .venv inside
    # the repository, as on CI: what must not be seen is what lies in it, such as book/)
    assert values["seen"] == [False, False, False, False] or values["seen"][:3] == [False, False, False]
    # /tmp is empty but for the folders leading to this Python when it lives under /tmp (a clone
    # or a venv there, as issue 45 asks the grader to support): they are empty mount points
    prefix_parts = {Path(p).parts[2] for p in (sys.prefix, sys.base_prefix, os.path.realpath(sys.executable))
                    if Path(p).parts[:2] == ("/", "tmp") and len(Path(p).parts) > 2}
    assert set(values["tmp"]) <= prefix_parts, values["tmp"]
    assert values["network"] is False and values["writable"] is False
    assert values["pids"] == [1, 2]


# --- the wire format and the source review ----------------------------------------------------------

def test_the_wire_round_trips_data_and_refuses_the_rest():
    import numpy as np
    import torch

    value = [None, True, 3, 2.5, "s", (1, 2), {"a": torch.arange(6.0).reshape(2, 3), 1: np.eye(2)},
             {1, 2}, torch.tensor(True), torch.zeros(0, 3), torch.ones(2, dtype=torch.bfloat16)]
    obj, buffers = wire.encode(value)
    back = wire.decode(json.loads(json.dumps(obj)), buffers, lambda h: h)
    assert back[:6] == value[:6] and back[7] == {1, 2}
    assert torch.equal(back[6]["a"], value[6]["a"]) and np.array_equal(back[6][1], np.eye(2))
    assert back[9].shape == (0, 3) and back[10].dtype == torch.bfloat16
    with pytest.raises(wire.WireError, match="not data"):
        wire.encode([object()])

    def one_buffer(n):  # a stream that overwrites one buffer: each block crosses as it was yielded
        buffer = torch.zeros(2)
        for i in range(n):
            buffer.fill_(i)
            yield buffer
    obj, buffers = wire.encode({"blocks": one_buffer(3)})
    blocks = wire.decode(json.loads(json.dumps(obj)), buffers, lambda h: h)["blocks"]
    assert not isinstance(blocks, list) and [b.tolist() for b in blocks] == [[0, 0], [1, 1], [2, 2]]
    for bad in ({"$t": 0, "dtype": "float32", "shape": [4]}, {"$t": 0, "dtype": "object", "shape": [1]},
                {"$a": 0, "dtype": "O", "shape": [1]}, {"$zz": 1}, {"$t": 5, "dtype": "float32", "shape": [1]}):
        with pytest.raises(wire.WireError):
            wire.decode(bad, [b"1234"], lambda h: h)
    deep = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(wire.WireError, match="deeply"):
        wire.encode(deep)


def test_a_configuration_crosses_the_wire_as_a_record_and_a_state_dict_as_a_dict():
    """A dataclass (a TransformerConfig) crosses as its fields and arrives as a SimpleNamespace,
    which has no behaviour; an OrderedDict (a state dict) arrives as a dict; a field that is
    not data is refused, and a record with a private or non-identifier field name is refused."""
    import collections
    import types

    from fundamentallm.config import TransformerConfig

    config = TransformerConfig(vocab_size=20, d_model=16, num_heads=2, num_layers=1, max_seq_len=8)
    state = collections.OrderedDict(w=torch.ones(2))
    obj, buffers = wire.encode([config, state])
    got, back = wire.decode(json.loads(json.dumps(obj)), buffers, lambda h: h)
    assert type(got) is types.SimpleNamespace and got.num_heads == 2 and got.max_seq_len == 8
    assert type(back) is dict and torch.equal(back["w"], torch.ones(2))
    with pytest.raises(wire.WireError, match="not data"):
        wire.encode(types.SimpleNamespace(f=object()))
    for bad in ({"$r": [["__class__", 1]]}, {"$r": [["a b", 1]]}, {"$r": [[1, 1]]}, {"$r": [["x"]]}):
        with pytest.raises(wire.WireError):
            wire.decode(bad, [], lambda h: h)


@pytest.mark.parametrize("code, forbidden, hit, review", [
    ("from operator import methodcaller as m\n", ("torch.softmax",), None, "import of methodcaller"),
    ("import typing\nh = typing.get_type_hints(f)\n", ("torch.softmax",), None, "get_type_hints"),
    ("import string\nf = string.Formatter().get_field('0.x', (1,), {})\n", (), None, "get_field"),
    ("def f(x):\n    return x.softmax(-1)\n", ("torch.softmax",), "torch.softmax", None),
    ("from torch.nn.functional import softmax as s\n", ("torch.softmax",), "torch.softmax", None),
    ("def f(x):\n    return x.log_softmax(-1).exp()\n", ("torch.softmax",), "torch.softmax", None),
    ("import torch.nn as nn\nm = nn.Softmax(-1)\n", ("torch.softmax",), "torch.softmax", None),
    ("def f(x):\n    return F.layer_norm(x, (4,))\n", ("fundamentallm.norms.LayerNorm.forward",),
     "fundamentallm.norms.LayerNorm.forward", None),
    ("def softmax_rows(x):\n    return x.exp()\n", ("torch.softmax",), None, None),
    ("def f(x):\n    return x.entropy()\n", ("torch.special.entr",), None, None),
    ("import os\n", (), None, "import of os"),
    ("x = __import__('os')\n", (), None, "`__import__`"),
    ("import importlib\n", (), None, "import of importlib"),
    ("f = getattr(torch, name)\n", (), None, "computed name"),
    ("exec('1')\n", (), None, "`exec`"),
    ("import sys\nsys.setprofile(None)\n", (), None, "import of sys"),
    ("t = x.__class__\n", (), None, "`.__class__`"),
    ("y = torch.ops.aten.add\n", (), None, "`.ops`"),
    ("import threading\n", (), None, "import of threading"),
    ("from torch import _C\n", (), None, "private _C"),
    ("f = getattr(torch, 'soft' + 'max')\n", ("torch.softmax",), None, "computed name"),
    ("f = getattr(torch, 'softmax')\n", ("torch.softmax",), "torch.softmax", "names torch.softmax"),
    ('def f(x):\n    """Softmax of x."""\n    return x\n', ("torch.softmax",), None, None),
    ("g = functools.partial(getattr, torch)\n", (), None, "as a value"),
    ("from torch import *\n", ("torch.softmax",), None, "`import *`"),
    ("import operator\nf = operator.methodcaller('exp')\n", (), None, "`.methodcaller`"),
    ("f = torch.compile(g)\n", (), None, "`.compile`"),
    ("import re\npattern = re.compile(r'\\w+')\n", (), None, None),
    ("import math\nimport torch\n\ndef f(x):\n    return torch.exp(x) / math.pi\n", ("torch.softmax",), None, None),
])
def test_the_source_review(code, forbidden, hit, review):
    hits, reviews = review_source(code, forbidden)
    assert (hits[0].split(" ")[0] if hits else None) == hit, hits
    if review is None:
        assert reviews == [], reviews
    else:
        assert any(review in r for r in reviews), reviews


def test_submitted_code_is_matched_by_label_and_skips_solution_and_check_cells():
    nb = book_notebook(CH02, "import math\n")
    code = submitted_code(nb, "ch02-ex1")
    assert "raise NotImplementedError" in code and "total += x" not in code
    assert submitted_code(nb, "ch99-ex1") is None


def test_a_symlinked_or_special_notebook_is_not_read(tmp_path):
    real = tmp_path / "real.ipynb"
    nbformat.write(new_notebook(), real)
    (tmp_path / "link.ipynb").symlink_to(real)
    os.mkfifo(tmp_path / "fifo.ipynb")
    assert grading.read_notebook_file(real)[1] is None
    assert "symbolic link" in grading.read_notebook_file(tmp_path / "link.ipynb")[1]
    assert "not a regular file" in grading.read_notebook_file(tmp_path / "fifo.ipynb")[1]


def test_missing_submissions_folder_is_an_error(tmp_path, capsys):
    root, _ = _small_class(tmp_path)
    assert main(["grade", str(tmp_path / "nope"), "--root", str(root)]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["grade", str(tmp_path / "empty"), "--root", str(root)]) == 2
    assert "no student folder" in capsys.readouterr().err
    (tmp_path / "empty" / "x").mkdir()
    with pytest.raises(ValueError, match="timeout"):
        grade(tmp_path / "empty", root=root, timeout=0)


def test_a_check_may_differentiate_through_the_students_result_and_pass_a_generator():
    """Autograd reaches through a proxy to the worker, and a generator crosses as its state (and
    comes back advanced), as in a notebook."""
    worker = proxy.Worker(sandbox.Limits(), [])
    try:
        worker.budget = 60
        code = ("import torch\n\ndef f(x, w):\n    return (x * x * w).sum(-1), x.detach()\n\n"
                "def draw(generator):\n    return torch.rand(3, generator=generator)\n")
        reply, buffers = worker.request({"op": "load", "chapter": "c", "label": "x", "code": code,
                                         "prelude": "", "names": ["f", "draw"]})
        session = proxy.Session(worker, (), True)
        names = session._reply(reply, buffers, "answer")
        x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
        w = torch.randn(3, dtype=torch.float64, requires_grad=True)
        out, plain = names["f"](x, w)
        assert out.requires_grad and not plain.requires_grad
        gx, gw = torch.autograd.grad((out * torch.tensor([1.0, 2.0], dtype=torch.float64)).sum(), [x, w])
        ref_x, ref_w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        ref = torch.autograd.grad(((ref_x * ref_x * ref_w).sum(-1) * torch.tensor([1.0, 2.0], dtype=torch.float64)).sum(),
                                  [ref_x, ref_w])
        assert torch.allclose(gx, ref[0]) and torch.allclose(gw, ref[1])
        g, local = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        assert torch.equal(names["draw"](g), torch.rand(3, generator=local))
        assert torch.equal(torch.rand(2, generator=g), torch.rand(2, generator=local))  # advanced alike
    finally:
        worker.close()


# --- issue 38: an unprivileged worker, integrity, the judge, a table for every class -------------

def _in_worker(code: str, names: list, hidden=()) -> dict:
    worker = proxy.Worker(sandbox.Limits(), list(hidden))
    try:
        worker.budget = 120
        reply, buffers = worker.request({"op": "load", "chapter": "c", "label": "x", "code": code,
                                         "prelude": "", "names": names})
        assert "result" in reply, reply
        return wire.decode(reply["result"], buffers, lambda h: h)
    finally:
        worker.close()


@needs_bwrap
def test_the_worker_runs_unprivileged_with_no_capability_and_a_system_call_filter():
    values = _in_worker("""
import ctypes, os
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
status = {k: v.strip() for k, v in status.items() if k in ("Uid", "Gid", "CapEff", "CapPrm", "CapBnd", "CapInh", "NoNewPrivs", "Seccomp")}
def refused(fn):
    try:
        fn()
        return False
    except OSError:
        return True
fork = refused(os.fork)
spawn = refused(lambda: os.posix_spawn("/bin/true", ["/bin/true"], {}))
libc = ctypes.CDLL(None, use_errno=True)
remount = libc.mount(b"none", b"/opt/fundamentallm/fundamentallm", None, 32 | 4096, None)
write_package = refused(lambda: open("/opt/fundamentallm/fundamentallm/course/grader/_worker.py", "a"))
write_root = refused(lambda: open("/pwned", "w"))
write_dev = refused(lambda: open("/dev/pwned", "w"))
checks_seen = sorted(os.listdir("/opt/fundamentallm/fundamentallm/checks"))
""", ["status", "fork", "spawn", "remount", "write_package", "write_root", "write_dev", "checks_seen"])
    status = values["status"]
    assert [int(u) for u in status["Uid"].split()] == [int(status["Uid"].split()[0])] * 4
    assert int(status["Uid"].split()[0]) != 0 and int(status["Gid"].split()[0]) != 0
    for cap in ("CapEff", "CapPrm", "CapBnd", "CapInh"):
        assert int(status[cap], 16) == 0, (cap, status[cap])
    assert status["NoNewPrivs"] == "1"
    if sandbox.seccomp_unavailable() is None:
        assert status["Seccomp"] == "2" and values["fork"] and values["spawn"]
    assert values["remount"] == -1 and values["write_package"] and values["write_root"] and values["write_dev"]
    assert values["checks_seen"] == ["core.py"]  # no chapter's checks, references or answer keys


def test_the_seccomp_program_is_well_formed():
    import struct

    for machine in ("x86_64", "aarch64"):
        program = sandbox.seccomp_program(machine)
        assert len(program) % 8 == 0 and len(program) // 8 < 256
        n = len(program) // 8
        for i in range(n):
            code, jt, jf, k = struct.unpack_from("=HBBI", program, 8 * i)
            if code & 0x07 == 0x05:  # a jump stays inside the program
                assert i + 1 + max(jt, jf) < n
        assert struct.unpack_from("=HBBI", program, 8 * (n - 1))[0] == 0x06  # ends on a return


@needs_bwrap
def test_the_grader_hashes_its_files_and_a_change_stops_the_class(tmp_path, fixture_checks, monkeypatch):
    root, subs = _small_class(tmp_path)
    book02 = root / "book" / "02_tiny.ipynb"
    original = book02.read_bytes()
    real = grading.grade_student

    def tampering(name, folder, *a, **k):
        results = real(name, folder, *a, **k)
        if name == "b_wrong":  # as if b_wrong's code had rewritten the book
            book02.write_bytes(original + b" ")
        return results

    monkeypatch.setattr(grading, "grade_student", tampering)
    out = tmp_path / "out" / "scores.csv"
    with pytest.raises(grading.IntegrityError, match="while 'b_wrong' was graded") as e:
        grade(subs, out, root=root, chapters=["02"], timeout=30, quiet=True)
    assert "02_tiny.ipynb" in str(e.value)
    table = list(csv.reader(out.open()))
    assert [r[0] for r in table[1:]] == ["a_honest"]  # nothing from b_wrong on is written
    assert not any(json.loads(line).get("finished") for line in Path(str(out) + ".journal.jsonl").read_text().splitlines())
    assert grading.integrity_changes(grading.integrity_digest([]), grading.integrity_digest([])) == []


def test_a_table_for_every_class(tmp_path, fixture_checks, monkeypatch):
    """A folder name that is not UTF-8, a folder that vanishes, a notebook that is not a notebook:
    each gets a row that says what was wrong."""
    root, subs = _small_class(tmp_path)
    odd = os.fsdecode(b"d_name_\xff")
    (subs / odd).mkdir()
    (subs / odd / "02_tiny.ipynb").write_bytes(b"%PDF-1.4 not a notebook")
    (subs / "e_vanishes").mkdir()
    real_folders = grading.student_folders

    def folders(path):
        found = real_folders(path)
        if (subs / "e_vanishes").exists():
            (subs / "e_vanishes").rmdir()
        return found

    monkeypatch.setattr(grading, "student_folders", folders)
    out = tmp_path / "scores.csv"
    rows, details = grade(subs, out, root=root, chapters=["02"], timeout=30, quiet=True)
    names = [r["student"] for r in rows]
    assert names == ["a_honest", "b_wrong", "c_stubs", "d_name_\\xff", "e_vanishes"]
    by = {(r.student, r.label): r for r in details}
    assert "could not be read" in by[("d_name_\\xff", "ch02-ex1")].message
    assert "no 02_tiny.ipynb" in by[("e_vanishes", "ch02-ex1")].message
    assert [r[0] for r in csv.reader(out.open(encoding="utf-8"))][1:] == names
    assert main(["grade", str(subs), "--root", str(root), "--chapters", "02", "--timeout", "30"]) == 0


def test_self_check_items_count_no_marks_and_have_their_own_column(tmp_path, fixture_checks, monkeypatch):
    from fundamentallm.checks import core

    root, subs = _small_class(tmp_path)
    monkeypatch.setattr(core, "SELF_CHECK", {"check_fixture_count_words"})
    labels = ["ch02-ex1", "ch02-ex2"]
    monkeypatch.setattr(grading, "grade_student", lambda name, *a, **k: [
        grading.Result(name, "02_tiny", lab, True, "graded") for lab in labels])
    out = tmp_path / "scores.csv"
    rows, _ = grade(subs, out, root=root, chapters=["02"], quiet=True)
    assert rows[0]["total"] == 1 and rows[0]["out_of"] == 1
    assert rows[0]["self_check"] == 1 and rows[0]["self_check_of"] == 1
    table = list(csv.reader(out.open()))
    assert table[0] == ["student", *labels, "total", "out_of", "self_check", "self_check_of", "review"]
    assert table[1] == ["a_honest", "1", "1", "1", "1", "1", "1", ""]


def test_resume_grades_a_classmate_cut_short_beside_a_hang_alone_and_fairly(tmp_path, fixture_checks, monkeypatch):
    """Two kills with --jobs 2: the innocent student started twice beside the hanging one is graded
    again (alone), not given 0; a student who stops the grader while graded alone gets review."""
    root, subs = _small_class(tmp_path)
    out = tmp_path / "scores.csv"
    labels = ["ch02-ex1", "ch02-ex2"]
    Path(str(out) + ".journal.jsonl").write_text(
        json.dumps({"seed": 5, "labels": labels}) + "\n"
        + '{"started": "a_honest"}\n{"started": "b_wrong"}\n' * 2 + '{"started": "c_stubs", "solo": true}\n',
        encoding="utf-8")
    order = []

    def fake(name, *a, **k):
        order.append(name)
        return [grading.Result(name, "02_tiny", lab, True, "graded") for lab in labels]

    monkeypatch.setattr(grading, "grade_student", fake)
    rows, details = grade(subs, out, root=root, chapters=["02"], resume=True, jobs=2, quiet=True)
    assert [r["total"] for r in rows] == [2, 2, 0]
    assert order == ["a_honest", "b_wrong"]  # both again, one at a time; c_stubs not a third time
    assert "stopped the grader" in details[-1].message and rows[2]["review"] == "ch02-ex1 ch02-ex2"
    lines = [json.loads(line) for line in Path(str(out) + ".journal.jsonl").read_text().splitlines()]
    assert {"started": "a_honest", "solo": True} in lines


@needs_bwrap
def test_the_grader_works_from_a_python_environment_under_tmp(tmp_path, fixture_checks):
    """Issue 45: an environment under /tmp (a venv whose site-packages reach this one's through a
    .pth file) is bound inside the sandbox after its /tmp is mounted, so the worker finds it."""
    import sysconfig
    import tempfile

    with tempfile.TemporaryDirectory(dir="/tmp", prefix="fundamentallm-env-") as env:
        env = Path(env)
        subprocess.run([sys.base_prefix + "/bin/python3" if Path(sys.base_prefix, "bin", "python3").exists()
                        else sys.executable, "-m", "venv", "--without-pip", str(env / "venv")], check=True)
        python = env / "venv" / "bin" / "python"
        site_dir = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                       capture_output=True, text=True, check=True).stdout.strip())
        (site_dir / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
        root, subs = _small_class(tmp_path)
        out = tmp_path / "out" / "scores.csv"
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_grading as t; "
                f"from fundamentallm import checks; [setattr(checks, n, checks.CHECKS[n]) for n in t.FIXTURE_CHECKS]; "
                f"from fundamentallm.course import main; sys.exit(main(sys.argv[1:]))")
        repo = str(Path(__file__).resolve().parents[1])
        done = subprocess.run([str(python), "-c", code, "grade", str(subs), "--root", str(root), "--csv", str(out),
                               "--chapters", "02", "--timeout", "60"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": repo}, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        table = list(csv.reader(out.open()))
        assert [(r[0], r[3]) for r in table[1:]] == [("a_honest", "2"), ("b_wrong", "0"), ("c_stubs", "0")]
        assert "No such file" not in done.stderr


JUDGE_ATTACKS = ("d02_methodcaller", "d03_type_hints", "d06_overrides_rot13", "d07_pydoc_locate", "d08_formatter_field")


@needs_bwrap
@pytest.mark.parametrize("name", JUDGE_ATTACKS)
def test_the_dispatcher_records_a_forbidden_call_however_it_is_spelled(name):
    """Without the source review: the worker's torch function mode sees the forbidden function
    PyTorch dispatches, whatever route the answer took to it."""
    label, code = attacks({"02_tiny": Path("x")}, Path("s"), Path("o"))[name]
    worker = proxy.Worker(sandbox.Limits(), [])
    try:
        worker.budget = 120
        session = proxy.Session(worker, ["torch.softmax"], True)
        reply, buffers = worker.request({"op": "load", "chapter": "03", "label": label, "code": code,
                                         "prelude": "import math\nimport torch\n", "names": ["softmax_rows"]})
        fn = session._reply(reply, buffers, "answer")["softmax_rows"]
        with pytest.raises(CheckFailed, match=r"not to use torch\.\S*softmax"):  # the name it reached, or an alias's
            fn(torch.randn(3, 5))
        honest = "def softmax_rows(x):\n    e = torch.exp(x - x.amax(-1, keepdim=True))\n    return e / e.sum(-1, keepdim=True)\n"
        reply, buffers = worker.request({"op": "load", "chapter": "03", "label": label, "code": honest,
                                         "prelude": "", "names": ["softmax_rows"]})
        fn = session._reply(reply, buffers, "answer")["softmax_rows"]
        assert torch.allclose(fn(torch.randn(3, 5)).sum(-1), torch.ones(3, dtype=torch.float32))
    finally:
        worker.close()


@needs_bwrap
def test_the_worker_refuses_the_forbidden_method_complex_step_of_a_by_hand_check():
    """A check cell that calls a ``by_hand`` check makes the worker refuse complex arithmetic (the
    complex step), with or without forbidden names; a real answer still runs."""
    assert grading._check_by_hand("checks.check_gelu_backward(gelu_backward, limits, extremes)")
    assert not grading._check_by_hand("checks.check_softmax_rows(softmax_rows)")
    worker = proxy.Worker(sandbox.Limits(), [])
    try:
        worker.budget = 120
        for forbidden in ([], ["torch.autograd"]):
            session = proxy.Session(worker, forbidden, True, by_hand=True)
            code = "def cube_grad(x):\n    z = x.to(torch.complex128) + 1e-30j\n    return (z ** 3).imag / 1e-30\n"
            reply, buffers = worker.request({"op": "load", "chapter": "11", "label": "ch11-ex5", "code": code,
                                             "prelude": "import torch\n", "names": ["cube_grad"]})
            fn = session._reply(reply, buffers, "answer")["cube_grad"]
            with pytest.raises(CheckFailed, match="complex-step differentiation"):
                fn(torch.linspace(-1, 1, 5, dtype=torch.float64))
            honest = "def cube_grad(x):\n    return 3 * x ** 2\n"
            reply, buffers = worker.request({"op": "load", "chapter": "11", "label": "ch11-ex5", "code": honest,
                                             "prelude": "", "names": ["cube_grad"]})
            fn = session._reply(reply, buffers, "answer")["cube_grad"]
            assert torch.equal(fn(torch.ones(3, dtype=torch.float64)), torch.full((3,), 3.0, dtype=torch.float64))
    finally:
        worker.close()


# Wrong answers of the tables (checks/wrong_answers) that go around the method: torch's other names
# for a forbidden function, torch.func's transforms, autograd's engine, Richardson extrapolation.
AROUND_THE_METHOD = [
    ("check_softmax_rows", "the aten operator's overload torch.ops.aten.softmax.int"),
    ("check_layer_norm", "the aten operator's overload torch.ops.aten.layer_norm.default"),
    ("check_batch_norm_backward", "torch.func.vjp of a written-out batch norm"),
    ("check_rms_norm_jacobian", "torch.func.jacfwd of a written-out RMSNorm"),
    ("check_rms_norm_jacobian", "torch.func.jacrev of a written-out RMSNorm"),
    ("check_rms_norm_jacobian", "autograd's engine called directly"),
    ("check_rms_norm_jacobian", "complex-step differentiation inline on Python floats"),
    ("check_feed_forward_backward", "torch.func.vjp of the forward pass"),
    ("check_feed_forward_backward", "the GELU by its aten operator's overload"),
    ("check_gelu_backward", "torch.func.grad of the GELU"),
    ("check_swiglu_backward", "silu by its aten operator's overload"),
    ("check_alibi_slope_grad", "central differences extrapolated (Richardson"),
]


@needs_bwrap
def test_wrong_answers_around_the_method_are_refused_in_the_worker_as_in_a_kernel():
    """Each row's answer runs in the sandboxed worker, its check in the grader's process (as the
    grader runs a check cell): it is refused with the message it gets in a reader's kernel. The
    Richardson answer to ch11-ex4 (a finite difference extrapolated to 1e-13) once passed here only:
    a float that noted shifts of the slope caught it in a kernel and could not cross the wire."""
    import ast
    import contextlib
    import io

    from fundamentallm.checks.wrong import WRONG_ANSWERS

    prelude = ("import math\nimport numpy as np\nimport torch\nfrom torch import nn\n"
               "import torch.nn.functional as F\nimport fundamentallm\n")
    worker = proxy.Worker(sandbox.Limits(), [])
    try:
        worker.budget = 120
        for check, what in AROUND_THE_METHOD:
            row = next(w for w in WRONG_ANSWERS if w.check == check and w.what.startswith(what))
            names = sorted({n.id for n in ast.walk(ast.parse(row.call, mode="eval")) if isinstance(n, ast.Name)})
            session = proxy.Session(worker, list(FORBIDDEN.get(check, ())), True, by_hand=check in checks.BY_HAND)
            reply, buffers = worker.request({"op": "load", "chapter": row.chapter, "label": check, "code": row.source,
                                             "prelude": prelude, "names": names})
            namespace = {"checks": checks}
            for name, value in session._reply(reply, buffers, "answer").items():
                if isinstance(value, proxy.StudentProxy) and value._hid != 0:
                    value.__name__ = value.__qualname__ = name
                    namespace[name] = value
            with pytest.raises(CheckFailed, match=row.message), contextlib.redirect_stdout(io.StringIO()):
                with checks.core.strict():
                    eval(compile(f"checks.{check}({row.call})", "<check>", "eval"), namespace)  # noqa: S307
    finally:
        worker.close()


@needs_bwrap
def test_a_check_that_counts_torch_operations_counts_them_in_the_worker():
    """ch10's checks refuse a Python loop over the rows (more than 500 torch operations on a batch of
    4096): the grader's proxy asks the worker to count the student's operations there, with the budget
    left, so the loop is refused under the grader as in a reader's kernel, and a batched pass is not."""
    from fundamentallm import checks

    loop = ("def min_p_filter(logits, min_p):\n    out = logits.clone()\n    for row in out.view(-1, out.shape[-1]):\n"
            "        p = torch.softmax(row, -1)\n        row[p < min_p * p.max()] = float('-inf')\n    return out\n")
    batched = ("def min_p_filter(logits, min_p):\n    p = torch.softmax(logits, -1)\n"
               "    keep = p >= min_p * p.amax(-1, keepdim=True)\n    return logits.masked_fill(~keep, float('-inf'))\n")
    worker = proxy.Worker(sandbox.Limits(), [])
    try:
        worker.budget = 120
        session = proxy.Session(worker, list(checks.FORBIDDEN.get("check_min_p_filter", ())), True)
        for code, passes in ((loop, False), (batched, True)):
            reply, buffers = worker.request({"op": "load", "chapter": "10", "label": "ch10-ex4", "code": code,
                                             "prelude": "import torch\n", "names": ["min_p_filter"]})
            fn = session._reply(reply, buffers, "answer")["min_p_filter"]
            if passes:
                checks.check_min_p_filter(fn)
            else:
                with pytest.raises(CheckFailed, match="more than 500 tensor operations"):
                    checks.check_min_p_filter(fn)
    finally:
        worker.close()


@needs_bwrap
def test_a_child_process_and_the_checks_reference_are_out_of_reach():
    values = _in_worker("""
import subprocess, sys
try:
    subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True)
    child = "ran"
except OSError as e:
    child = type(e).__name__
try:
    from fundamentallm.checks import ch02
    reference = "imported"
except ImportError as e:
    reference = type(e).__name__
""", ["child", "reference"])
    assert values["reference"] in ("ImportError", "ModuleNotFoundError")
    if sandbox.seccomp_unavailable() is None:
        assert values["child"] == "PermissionError"


@needs_bwrap
def test_after_a_worker_crash_a_later_answer_may_use_an_earlier_ones_function(tmp_path, fixture_checks):
    root = tmp_path / "book_root"
    write_book(root)
    subs = tmp_path / "subs"
    (subs / "a_crashes").mkdir(parents=True)
    answers = {"ch02-ex1": "import os\n\ndef split_words(text):\n    return text.split()\n\n"
                           "def running_sum(xs):\n    os._exit(3)\n",
               "ch02-ex2": "def count_words(text):\n    counts = {}\n    for w in split_words(text):\n"
                           "        counts[w] = counts.get(w, 0) + 1\n    return counts\n"}
    nbformat.write(student("a", answers)["02_tiny"], subs / "a_crashes" / "02_tiny.ipynb")
    rows, details = grade(subs, root=root, chapters=["02"], timeout=60, quiet=True)
    by = {r.label: r for r in details}
    assert "ended" in by["ch02-ex1"].message or by["ch02-ex1"].status == "needs review"
    assert by["ch02-ex2"].passed, by["ch02-ex2"].message  # replayed: split_words is defined


def test_the_grader_reads_an_answer_in_place_and_refuses_one_too_large():
    r, w = os.pipe()
    try:
        data = torch.arange(1000, dtype=torch.float32)
        obj, buffers = wire.encode({"x": data})
        wire.send(w, {"ok": True, "result": obj}, buffers)
        header, got = wire.recv(r, time.monotonic() + 10)
        assert isinstance(got[0], memoryview)
        assert torch.equal(wire.decode(header["result"], got, lambda h: h)["x"], data)
        wire.send(w, {"ok": True, "result": obj}, buffers)
        with pytest.raises(wire.WireError, match="too large"):
            wire.recv(r, time.monotonic() + 10, max_buffers=100)
    finally:
        os.close(r)
        os.close(w)


# Checks hand students data only (issue 39, item 3; book/CONTRIBUTING.md): a check that handed the
# student's function an object (a model, functions closing over modules), which the grader's wire
# does not carry, would give an honest answer "needs review", never a mark. ch13-ex6 hands its
# configuration as a record and reads the returned model through its stand-in; ch13-ex7 and
# ch14-ex4 hand models and layers over as configurations and state dicts. Nothing may fail for an
# honest student.
OBJECT_CHECKS: set = set()


def test_the_grader_gives_the_books_own_answers_full_marks_in_every_chapter():
    """benchmarks/grading.py with one honest student (the book's solutions as the answers) and every
    chapter, through the sandboxed worker: every exercise passes, but the object-passing checks."""
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "grading.py"), "--students", "1", "--jobs", "1",
                           "--timeout", "120"], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": str(repo)})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["students"] == 1 and result["exercises"] >= 80
    unexpected = [f for f in result["false_failures"]
                  if not (f.split(":")[0] in OBJECT_CHECKS and "the grader cannot run this check" in f)]
    assert unexpected == [], unexpected


def test_the_grader_gives_the_student_editions_stubs_zero_in_every_chapter():
    """benchmarks/grading.py --stubs: one student hands in every chapter's student edition
    unanswered, graded through the sandboxed worker; no exercise scores."""
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "grading.py"), "--students", "1", "--jobs", "1",
                           "--timeout", "120", "--stubs"], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": str(repo)})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["students"] == 1 and result["exercises"] >= 80 and result["stubs"] is True
    assert result["false_passes"] == [], result["false_passes"]
