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


def test_get_device():
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
