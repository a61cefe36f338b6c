"""Chapter 16's explorer (fundamentallm/pattern_explorer.py): frames draw, the scores it plots."""

import pytest
import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.pattern_explorer import DPI, induction_keys, pattern_explorer
from fundamentallm.tokenizers import CharacterTokenizer


def _model_and_tokenizer():
    torch.manual_seed(0)
    tokenizer = CharacterTokenizer.from_text("abcdefgh xyz")
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=16, num_heads=2, num_layers=2,
                               max_seq_len=16, pos_encoding="rope")
    return Transformer(config).eval(), tokenizer


def test_induction_keys():
    ids = torch.tensor([5, 6, 7, 5, 6, 5])
    # query 3 (a 5): last earlier 5 at 0 -> key 1; query 4 (a 6): key 2; query 5 (a 5): last at 3 -> 4
    assert induction_keys(ids).tolist() == [-1, -1, -1, 1, 2, 4]


def test_frames_every_control_has_two_values_and_a_live_redraw():
    import matplotlib.pyplot as plt

    model, tokenizer = _model_and_tokenizer()
    explorer = pattern_explorer(model, tokenizer, "abc abc", examples=("xyz",))
    assert all(len(c.frames) >= 2 for c in explorer.controls.values())
    assert explorer.dpi == DPI >= 144
    assert len(explorer.static.frames) == 2 * 2 * 2
    fig = explorer.draw(text="abcab", layer=1, head=0)
    prev, ind = fig.axes[1].lines[:2]
    pattern = fig.axes[0].images[0].get_array()
    assert prev.get_ydata()[1] == pytest.approx(float(pattern[1, 0]))
    assert ind.get_ydata()[3] == pytest.approx(float(pattern[3, 1]))  # "a" at 3: key after the "a" at 0
    plt.close(fig)


def test_bad_input_is_a_message():
    model, tokenizer = _model_and_tokenizer()
    explorer = pattern_explorer(model, tokenizer, "abc", examples=("xyz",))
    assert "empty" in explorer.draw(text="", layer=0, head=0)
    assert "never saw" in explorer.draw(text="abQ", layer=0, head=0)
    assert "at most 16" in explorer.draw(text="a" * 17, layer=0, head=0)
    with pytest.raises(ValueError, match="at least one example"):
        pattern_explorer(model, tokenizer, "abc")


def test_head_frames():
    model, tokenizer = _model_and_tokenizer()
    explorer = pattern_explorer(model, tokenizer, "abc", examples=("xyz",), head_frames=(1, 0))
    assert explorer.controls["head"].frames == (1, 0) and explorer.values["head"] == 1
    with pytest.raises(ValueError, match="head_frames"):
        pattern_explorer(model, tokenizer, "abc", examples=("xyz",), head_frames=(1,))
