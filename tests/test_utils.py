"""set_seed determinism and get_device errors."""

import random

import numpy as np
import pytest
import torch

from fundamentallm.utils import get_device, set_seed


def _draw():
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_set_seed_reproduces_python_numpy_torch():
    set_seed(123)
    a = _draw()
    set_seed(123)
    b = _draw()
    set_seed(124)
    c = _draw()
    assert a == b
    assert a[0] != c[0] and a[1] != c[1] and a[2] != c[2]


def test_set_seed_large_and_negative_seeds():
    set_seed(2**40 + 7)
    a = _draw()
    set_seed(2**40 + 7)
    assert _draw() == a


@pytest.mark.parametrize("seed", [1.5, "0", None, True])
def test_set_seed_rejects_non_integers(seed):
    with pytest.raises(ValueError, match="seed"):
        set_seed(seed)


def test_get_device(monkeypatch):
    monkeypatch.delenv("FUNDAMENTALLM_DEVICE", raising=False)
    assert get_device("cpu") == torch.device("cpu")
    assert get_device(torch.device("cpu")) == torch.device("cpu")
    auto = get_device()
    assert auto.type in ("cpu", "cuda", "mps") and get_device(None) == auto
    if not torch.cuda.is_available():
        assert auto.type in ("cpu", "mps")


@pytest.mark.parametrize("device", ["tpu", "gpu", "CPU", "", 3])
def test_get_device_rejects_unknown(device):
    with pytest.raises(ValueError) as err:
        get_device(device)
    msg = str(err.value)
    assert f"device={device!r}" in msg and "allowed values" in msg
    assert all(name in msg for name in ("auto", "cpu", "cuda", "mps"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_get_device_unavailable_cuda(device):
    with pytest.raises(ValueError, match="CUDA is not available"):
        get_device(device)


def test_device_switch_from_the_environment(monkeypatch):
    """FUNDAMENTALLM_DEVICE replaces "auto" (chapters, TrainConfig's default); a name passed
    explicitly still wins."""
    monkeypatch.setenv("FUNDAMENTALLM_DEVICE", "meta")
    assert get_device() == torch.device("meta") and get_device("auto") == torch.device("meta")
    assert get_device("cpu") == torch.device("cpu")
    monkeypatch.setenv("FUNDAMENTALLM_DEVICE", "cpu")
    assert get_device(None) == torch.device("cpu")
    monkeypatch.setenv("FUNDAMENTALLM_DEVICE", "auto")
    assert get_device().type in ("cpu", "cuda", "mps")
    monkeypatch.setenv("FUNDAMENTALLM_DEVICE", "tpu")
    with pytest.raises(ValueError, match=r"FUNDAMENTALLM_DEVICE='tpu' is not supported; allowed values"):
        get_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_switch_names_the_variable_when_cuda_is_missing(monkeypatch):
    monkeypatch.setenv("FUNDAMENTALLM_DEVICE", "cuda")
    with pytest.raises(ValueError, match=r"FUNDAMENTALLM_DEVICE='cuda' was requested but CUDA is not available"):
        get_device()
