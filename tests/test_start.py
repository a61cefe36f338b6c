"""start.py, the README's quick start: which PyTorch build it installs where, what each role gets,
the work folder that nothing overwrites, and JupyterLab: .venv's own, with .venv's kernel, as root
too. (The whole set-up, a fresh .venv and the tests run in it, is what .ci/run does.)"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("start", ROOT / "start.py")
start = importlib.util.module_from_spec(spec)
spec.loader.exec_module(start)

CPU = ["--index-url", start.CPU_INDEX]


@pytest.mark.parametrize("system, gpu, local_wheel, expected", [
    # Linux without an NVIDIA GPU: a wheel this machine has (no download), else the CPU index
    ("Linux", False, True, [["--no-index", "--no-deps"]]),
    ("Linux", False, False, [["--no-index", "--no-deps"], CPU]),
    # elsewhere pip's default build: CUDA with a GPU on Linux, the only build on macOS and Windows
    ("Linux", True, False, [[]]),
    ("Darwin", False, False, [[]]),
    ("Windows", False, False, [[]]),
])
def test_the_torch_build_for_each_machine(monkeypatch, system, gpu, local_wheel, expected):
    calls = []

    def fake_run(*cmd, check=True, **kw):
        calls.append([str(c) for c in cmd])
        if "-c" in cmd:
            return 1  # torch is not installed yet
        return 0 if (local_wheel or "--no-index" not in cmd) else 1

    monkeypatch.setattr(start, "run", fake_run)
    monkeypatch.setattr(start.platform, "system", lambda: system)
    monkeypatch.setattr(start, "has_nvidia_gpu", lambda: gpu)
    start.install_torch(Path("python"))
    installs = [c for c in calls if "install" in c]
    assert len(installs) == len(expected)
    for call, flags in zip(installs, expected):
        assert start.TORCH in call and all(flag in call for flag in flags), call
        assert ("--index-url" in call) == ("--index-url" in flags)


def test_an_installed_torch_is_kept(monkeypatch):
    calls = []
    monkeypatch.setattr(start, "run", lambda *cmd, **kw: calls.append(cmd) or 0)
    start.install_torch(Path("python"))
    assert len(calls) == 1 and "-c" in calls[0]  # only the check


def test_arguments_go_on_only_after_open_or_test():
    proc = subprocess.run([sys.executable, str(ROOT / "start.py"), "--no-browser"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "arguments go on after `open`, to JupyterLab" in proc.stderr
    help_text = subprocess.run([sys.executable, str(ROOT / "start.py"), "--help"], cwd=ROOT,
                               capture_output=True, text=True, timeout=60).stdout
    assert "python3 start.py test" in help_text and "--no-open" in help_text and "--all" in help_text


# --- roles: what each command installs ------------------------------------------------------------

def _pyproject():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_a_student_gets_the_chapters_extras_and_jupyterlab_but_no_contributor_tools():
    extras = _pyproject()["project"]["optional-dependencies"]
    assert start.STUDENT == ["-e", ".[student]"]
    names = {re.split(r"[<>=\[ ;]", r)[0].lower() for r in extras["student"]}
    assert {re.split(r"[<>=\[ ;]", r)[0].lower() for r in extras["book"]} <= names and "jupyterlab" in names
    for tool in ("nbgrader", "jupyter-book", "playwright", "pytest", "ruff", "nbmake", "peft"):
        assert tool not in names
    required = (ROOT / "requirements.txt").read_text()
    for tool in ("nbgrader", "jupyter-book", "playwright", "pytest", "ruff"):  # what `test` and --all add
        assert re.search(rf"^{tool}\b", required, flags=re.M), tool


def test_test_installs_everything_and_a_changed_requirement_installs_again(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(start, "run", lambda *cmd, **kw: calls.append([str(c) for c in cmd]) or 0)
    monkeypatch.setattr(start, "VENV", tmp_path)
    monkeypatch.setattr(start, "ROLES", {r: tmp_path / f"{r}.done" for r in start.ROLES})
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    monkeypatch.setattr(start, "venv_python", lambda: tmp_path / "bin" / "python")
    start.set_up("student")
    installs = [c for c in calls if "install" in c and "-c" not in c]
    assert [c for c in installs if ".[student]" in c] and not [c for c in installs if "requirements.txt" in c]
    calls.clear()
    start.set_up("student")
    assert calls == []  # done: nothing again
    start.set_up("all")  # `test` and --all: requirements.txt on first use
    assert [c for c in calls if "requirements.txt" in c] and not [c for c in calls if ".[student]" in c]
    calls.clear()
    monkeypatch.setattr(start, "fingerprint", lambda role: "a newer pyproject.toml")
    start.set_up("student")
    assert [c for c in calls if ".[student]" in c]


# --- the work folder: nothing overwrites a student's notebook -------------------------------------

def _answer(path: Path, text: str | None = None) -> str:
    """The first answer cell's source (set it to ``text`` when given)."""
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if "answer" in c["metadata"].get("tags", []))
    if text is not None:
        cell["source"] = text
        path.write_text(json.dumps(nb, indent=1))
    return "".join(cell["source"])


def _edition(folder: Path, version: str) -> None:
    """A generated edition of two chapters (stamped as the generator stamps them)."""
    from fundamentallm.course.colab import stamp

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("01_a.ipynb", "02_b.ipynb"):
        nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": [f"# {name} ", version]},
                        {"cell_type": "code", "metadata": {"tags": ["answer"]}, "source": "x = None",
                         "outputs": [], "execution_count": None}],
              "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        (folder / name).write_text(json.dumps(stamp(nb), indent=1))


def test_start_recognises_the_generators_stamp_without_the_package():
    """start.py (standard library only) computes the generator's stamp itself: the same SHA-256."""
    from fundamentallm.course.colab import render_edition

    text = render_edition(ROOT)["02_attention_by_hand.ipynb"]
    assert start.generated(text.encode())
    nb = json.loads(text)
    next(c for c in nb["cells"] if "answer" in c["metadata"].get("tags", []))["source"] = "mine = 1"
    assert not start.generated(json.dumps(nb).encode()) and not start.generated(b"{}")


def test_the_work_folder_keeps_every_change(tmp_path):
    edition, work = tmp_path / "colab", tmp_path / "work"
    _edition(edition, "v1")
    notes = start.sync_work(edition, work)
    assert sorted(p.name for p in work.glob("*.ipynb")) == ["01_a.ipynb", "02_b.ipynb"]
    assert len(notes) == 1 and "copied the chapters to work/" in notes[0]
    _answer(work / "01_a.ipynb", "x = 42  # mine")
    assert start.sync_work(edition, work) == []  # nothing new: nothing done
    # a newer edition: the untouched chapter is replaced, the changed one gets it beside
    _edition(edition, "v2")
    (edition / "03_c.ipynb").write_text((edition / "02_b.ipynb").read_text())
    notes = start.sync_work(edition, work)
    assert _answer(work / "01_a.ipynb") == "x = 42  # mine"
    assert "v2" in (work / "01_a.newer.ipynb").read_text() and "v2" in (work / "02_b.ipynb").read_text()
    assert (work / "03_c.ipynb").exists()
    assert len(notes) == 3 and any("01_a.newer.ipynb" in n for n in notes)
    # the student edits the newer copy too; v3 goes to a third name, nothing is overwritten
    _answer(work / "01_a.newer.ipynb", "x = 43")
    _edition(edition, "v3")
    start.sync_work(edition, work)
    assert _answer(work / "01_a.ipynb") == "x = 42  # mine" and _answer(work / "01_a.newer.ipynb") == "x = 43"
    assert "v3" in (work / "01_a.newer-2.ipynb").read_text()
    # a deleted chapter comes back fresh (how to start a chapter again)
    (work / "02_b.ipynb").unlink()
    assert start.sync_work(edition, work) == ["work/02_b.ipynb: new chapter"]
    # without the ledger (lost), a changed notebook still counts as the student's
    (work / start.PLACED).unlink()
    _edition(edition, "v4")
    start.sync_work(edition, work)
    assert _answer(work / "01_a.ipynb") == "x = 42  # mine"


def test_answers_written_in_colab_move_to_work_and_stay_there(tmp_path):
    """A student who answered in colab/ (before work/ existed): the first run copies those answers
    to work/ and says so; a newer edition later goes beside them, never over them."""
    edition, work = tmp_path / "colab", tmp_path / "work"
    _edition(edition, "v1")
    _answer(edition / "01_a.ipynb", "x = 7  # written in colab/")
    notes = start.sync_work(edition, work)
    assert any("copied with the changes made in colab/01_a.ipynb" in n for n in notes)
    assert start.sync_work(edition, work) == []  # still edited in colab/: nothing more to do
    _edition(edition, "v2")  # git restored and updated colab/
    notes = start.sync_work(edition, work)
    assert _answer(work / "01_a.ipynb") == "x = 7  # written in colab/"
    assert "v2" in (work / "01_a.newer.ipynb").read_text() and "v2" in (work / "02_b.ipynb").read_text()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_an_unstamped_edition_counts_as_the_generators_when_git_has_it_unchanged(tmp_path):
    """colab/ of an older generator has no stamp: a notebook git has unchanged is the edition, one
    changed since the last commit is the student's."""
    edition, work = tmp_path / "colab", tmp_path / "work"
    _edition(edition, "v1")
    for path in edition.glob("*.ipynb"):
        nb = json.loads(path.read_text())
        nb["metadata"] = {}
        path.write_text(json.dumps(nb))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "colab"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "edition"], cwd=tmp_path, check=True)
    _answer(edition / "02_b.ipynb", "x = 2  # mine")
    assert start.git_clean(edition) == {"01_a.ipynb"}
    notes = start.sync_work(edition, work)
    assert [n for n in notes if "copied with the changes" in n] == [
        "work/02_b.ipynb: copied with the changes made in colab/02_b.ipynb (your answers?)"]


def test_git_ignores_the_work_folder():
    assert "/work/" in (ROOT / ".gitignore").read_text().splitlines()


# --- JupyterLab: its own, as root too ---------------------------------------------------------------

def test_jupyterlab_is_the_venvs_and_root_gets_allow_root(monkeypatch, capsys):
    cmd = start.lab_command(Path("/x/.venv/bin/python"), ["--port", "9"], root_user=True)
    assert cmd[:3] == ["/x/.venv/bin/python", "-m", "jupyterlab"] and cmd[-3:] == ["--allow-root", "--port", "9"]
    assert f"--ServerApp.root_dir={start.WORK}" in cmd
    assert "--allow-root" not in start.lab_command(Path("p"), [], root_user=False)
    env = start.lab_env(Path("p"))
    assert env["JUPYTER_PATH"].split(os.pathsep)[0] == str(start.VENV / "share" / "jupyter")
    seen = []

    class FakePopen:
        def __init__(self, cmd, **kw):
            seen.append(cmd)

        def wait(self):
            return 0

    monkeypatch.setattr(start, "is_root", lambda: True)
    monkeypatch.setattr(start.subprocess, "Popen", FakePopen)
    assert start.open_lab(Path("py"), ["--no-browser"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "root" in ln and not ln.startswith("+")]
    assert len(lines) == 1 and "--allow-root" in lines[0]
    assert seen[0][-2:] == ["--allow-root", "--no-browser"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clone(tmp_path: Path, edition: bool = True) -> Path:
    """A clone's files that start.py reads, with a .venv whose Python sees this environment's
    packages (a .pth file: no install) and whose installation is marked done."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("start.py", "pyproject.toml", "requirements.txt"):
        shutil.copy(ROOT / name, clone / name)
    if edition:
        _edition(clone / "colab", "v1")
    venv.create(clone / ".venv", with_pip=False, symlinks=os.name != "nt")
    purelib = Path(sysconfig.get_paths(vars={"base": str(clone / ".venv"), "platbase": str(clone / ".venv")})["purelib"])
    purelib.mkdir(parents=True, exist_ok=True)
    (purelib / "outer.pth").write_text("\n".join(sorted({sysconfig.get_paths()["purelib"],
                                                         sysconfig.get_paths()["platlib"], str(ROOT)})) + "\n")
    kernels = Path(sys.prefix) / "share" / "jupyter" / "kernels" / "python3"
    if kernels.is_dir():  # what ipykernel's wheel installs into an environment
        shutil.copytree(kernels, clone / ".venv" / "share" / "jupyter" / "kernels" / "python3")
    for role, mark in start.ROLES.items():
        (clone / ".venv" / mark.name).write_text(start.fingerprint(role) + "\n")
    return clone


def _python(clone: Path) -> Path:
    return clone / ".venv" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


@pytest.mark.skipif(os.name == "nt", reason="the fake jupyter-lab is a shell script")
def test_start_opens_its_own_jupyterlab_whose_kernel_is_the_venvs_python(tmp_path):
    """Another `jupyter-lab`/`jupyter` first on PATH and another `python3` kernel registered for
    the user (Anaconda's, Homebrew's): start.py still runs .venv's JupyterLab on work/, whose
    kernel runs .venv's Python. Arguments after `open` reach JupyterLab."""
    pytest.importorskip("jupyterlab")
    jupyter_client = pytest.importorskip("jupyter_client")
    clone = _clone(tmp_path)
    fake_bin, marker = tmp_path / "bin", tmp_path / "the-other-jupyter-ran"
    fake_bin.mkdir()
    for name in ("jupyter-lab", "jupyter", "python3-other"):
        (fake_bin / name).write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
        (fake_bin / name).chmod(0o755)
    user_kernel = tmp_path / "home" / "data" / "kernels" / "python3"
    user_kernel.mkdir(parents=True)
    (user_kernel / "kernel.json").write_text(json.dumps({
        "argv": [str(fake_bin / "python3-other"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (another Jupyter)", "language": "python"}))
    runtime, port, token = tmp_path / "runtime", _free_port(), "start-test"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "JUPYTER_PATH", "VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PATH=os.pathsep.join([str(fake_bin), env.get("PATH", "")]), HOME=str(tmp_path / "home"),
               JUPYTER_DATA_DIR=str(tmp_path / "home" / "data"), JUPYTER_CONFIG_DIR=str(tmp_path / "home" / "config"),
               JUPYTER_RUNTIME_DIR=str(runtime), JUPYTER_PREFER_ENV_PATH="0", OMP_NUM_THREADS="1")
    log = tmp_path / "start.log"
    proc = subprocess.Popen(
        [sys.executable, str(clone / "start.py"), "open", "--no-browser", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--ServerApp.token={token}", "--LabApp.news_url=",
         "--ServerApp.port_retries=0"],
        cwd=clone, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"

    def api(path, method="GET", body=None):
        req = urllib.request.Request(f"{base}{path}?token={token}", method=method,
                                     data=None if body is None else json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read() or b"null")

    client, kernel = None, None
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                api("/api/status")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not start:\n" + log.read_text()[-3000:])
                time.sleep(0.5)
        assert sorted(i["name"] for i in api("/api/contents")["content"] if i["type"] == "notebook") == \
            ["01_a.ipynb", "02_b.ipynb"]  # it serves the work folder, which start.py filled
        assert (clone / "work" / "01_a.ipynb").exists()
        assert list(api("/api/kernelspecs")["kernelspecs"]) == ["python3"]
        kernel = api("/api/kernels", "POST", {"name": "python3"})
        client = jupyter_client.BlockingKernelClient()
        client.load_connection_file(str(runtime / f"kernel-{kernel['id']}.json"))
        client.start_channels(hb=False)  # a heartbeat (1 s) can miss on a loaded machine: wait for replies
        client.wait_for_ready(timeout=180)
        out = []
        client.execute_interactive("import sys; print(sys.prefix)", timeout=120,
                                   output_hook=lambda m: out.append(m["content"].get("text", "")))
        assert Path("".join(out).strip()).resolve() == (clone / ".venv").resolve(), out
        assert not marker.exists()  # the other jupyter-lab and the other kernel never ran
        text = log.read_text()
        assert ("--allow-root" in text) == (hasattr(os, "geteuid") and os.geteuid() == 0)
        assert f"{_python(clone)} -m jupyterlab" in text
    finally:
        if client is not None:
            client.stop_channels()
        if kernel is not None:
            try:
                api(f"/api/kernels/{kernel['id']}", "DELETE")
            except OSError:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


# --- every command of the README, on a student's answer ---------------------------------------------

README = (ROOT / "README.md").read_text(encoding="utf-8")
READ_ONLY = {"grade", "catches"}  # they read the book and the submissions; grade writes the CSVs named


def test_no_readme_command_overwrites_a_students_answer(tmp_path, capsys):
    """A student answers in work/ (and, out of old habit, in colab/); then the quick start runs
    again, every writing command of the README runs, and a newer edition arrives: both answers are
    intact, the newer chapter lies beside the changed one."""
    from fundamentallm.course import main as course

    clone = _clone(tmp_path, edition=False)
    for name in ("_toc.yml", "_config.yml"):
        shutil.copy(ROOT / name, clone / name)
    shutil.copytree(ROOT / "book", clone / "book", ignore=shutil.ignore_patterns(".ipynb_checkpoints", "_build"))
    assert course(["colab-edition", str(clone / "colab"), "--root", str(clone)]) == 0
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["CI"] = "true"

    def quick_start() -> str:  # `python3 start.py` with CI set: set up (done already), fill work/
        proc = subprocess.run([sys.executable, str(clone / "start.py")], cwd=clone, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc.stdout

    assert "copied the chapters to work/" in quick_start()
    mine, in_colab = "def softmax_rows(x):\n    return 'mine'\n", clone / "colab" / "03_multi_head_attention.ipynb"
    answer = clone / "work" / "02_attention_by_hand.ipynb"
    _answer(answer, mine)
    _answer(in_colab, "mine = 3\n")
    ran = set()
    quick_start()
    capsys.readouterr()
    assert course(["colab-edition", str(clone / "colab"), "--root", str(clone)]) == 2  # refuses: colab/03
    assert "03_multi_head_attention.ipynb" in capsys.readouterr().err and _answer(in_colab) == "mine = 3\n"
    assert course(["student-edition", str(clone / "student_edition"), "--root", str(clone), "--no-execute"]) == 0
    assert course(["nbgrader", str(clone / "course"), "--root", str(clone)]) == 0
    assert course(["exercise-table", "--write", "--root", str(clone)]) == 0
    ran |= {"colab-edition", "student-edition", "nbgrader", "exercise-table"}
    # a newer edition of chapter 2: the contributor regenerates (the colab/ answer moved out first)
    shutil.copy(in_colab, clone / "work" / "03_mine.ipynb")
    path = clone / "book" / "02_attention_by_hand.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"][0]["source"] = "".join(nb["cells"][0]["source"]) + "\n\nRevised."
    path.write_text(json.dumps(nb, indent=1))
    assert course(["colab-edition", str(clone / "colab"), "--root", str(clone), "--force"]) == 0
    out = quick_start()
    assert "work/02_attention_by_hand.newer.ipynb" in out and "Revised." in (
        clone / "work" / "02_attention_by_hand.newer.ipynb").read_text()
    assert _answer(answer) == mine and _answer(clone / "work" / "03_mine.ipynb") == "mine = 3\n"
    named = set(re.findall(r"python -m fundamentallm\.course ([\w-]+)", README))
    assert named and named <= ran | READ_ONLY, named - ran - READ_ONLY


# --- README's figures -----------------------------------------------------------------------------

def _collected(*args: str) -> int:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    m = re.search(r"(\d+) tests? collected", proc.stdout)
    assert m, proc.stdout[-2000:] + proc.stderr[-2000:]
    return int(m.group(1))


def test_readme_figures_match_the_repository():
    """The chapter count (the toc's NN_name notebooks), the test count (pytest collects it, within
    10 %), the browser tests that `start.py test` skips, and the chapter times quoted from
    benchmarks/README.md (the stored benchmark); the test order is random, not "unit tests, then"."""
    chapters = re.findall(r"^\s*- file: book/\d\d_\w+\s*$", (ROOT / "_toc.yml").read_text(), flags=re.M)
    assert f"The book has {len(chapters)} chapters" in README
    claimed = int(re.search(r"collects about ([\d,]+)\s+tests", README).group(1).replace(",", ""))
    total = _collected()
    assert abs(claimed - total) <= 0.1 * total, f"README says about {claimed} tests; pytest collects {total}"
    browser = int(re.search(r"the (\d+) browser tests", README).group(1))
    assert browser == _collected("tests/test_browser.py")
    assert re.search(rf"skips the {browser} browser tests", README)  # and the few whose condition fails
    # Chapter times: quoted from the stored run of benchmarks/chapter_times.py, which timed every
    # notebook of the toc (the chapters and the records page).
    times = json.loads((ROOT / "fundamentallm" / "results" / "chapter_times.json").read_text())
    toc = re.findall(r"^\s*- file: (book/\w+)\s*$", (ROOT / "_toc.yml").read_text(), flags=re.M)
    assert sorted(times["seconds"]) == sorted(f"{f}.ipynb" for f in toc if (ROOT / f"{f}.ipynb").exists())
    text = " ".join(README.split())
    assert f"on {times['date']}" in text and f"{times['cores']}-core {times['cpu']}" in text
    assert f"{round(times['total_cpu_s'])} s of kernel CPU time" in text
    assert f"{round(times['total_s'])} s of wall time" in text
    longest = max(times["cpu_seconds"], key=times["cpu_seconds"].get)
    assert f"the longest, {Path(longest).stem}, {times['cpu_seconds'][longest]} s of CPU" in text
    for name in times["over_budget"]:  # a chapter over the budget is named, with its figure
        assert f"{Path(name).stem} is over the {times['budget_s']:g} s budget" in text
    assert "then every chapter" not in README and "random order" in README
