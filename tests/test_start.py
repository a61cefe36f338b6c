"""start.py, the README's quick start: which PyTorch build it installs where, and its arguments.
(The whole set-up, a fresh .venv and the tests run in it, is what .ci/run does.)"""

import importlib.util
import subprocess
import sys
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


def test_arguments_after_test_go_to_pytest_and_others_are_refused():
    proc = subprocess.run([sys.executable, str(ROOT / "start.py"), "open", "-k", "x"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "only `test` passes arguments on" in proc.stderr
    help_text = subprocess.run([sys.executable, str(ROOT / "start.py"), "--help"], cwd=ROOT,
                               capture_output=True, text=True, timeout=60).stdout
    assert "python3 start.py test" in help_text and "--no-open" in help_text
