"""Chapter 17's explorer (fundamentallm/quantize_explorer.py): frames draw, errors fall with bits."""

import pytest
import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.quantize_explorer import quantization_explorer


def _model():
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=20, d_model=64, num_heads=4, num_layers=1, max_seq_len=16))


def test_frames_and_a_live_redraw():
    import matplotlib.pyplot as plt

    explorer = quantization_explorer(_model(), "blocks.0.ff.up")
    assert len(explorer.static.frames) == 2 * 2 * 2
    fig = explorer.draw(bits=3, group=16, codes="asymmetric")
    title = fig.axes[1].get_title()
    assert "bits per weight" in title and "asymmetric" in title
    errors = [line.get_ydata() for line in fig.axes[1].lines[:-1]]
    assert all(list(e) == sorted(e, reverse=True) for e in errors)  # more bits, less error
    plt.close(fig)


def test_bad_layer():
    with pytest.raises(ValueError, match="not a linear layer"):
        quantization_explorer(_model(), "nope")
