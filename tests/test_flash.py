"""Tiled attention with the online softmax (fundamentallm/flash.py) equals softmax attention."""

import pytest
import torch
import torch.nn.functional as F

from fundamentallm.flash import tiled_attention


@pytest.mark.parametrize("block_size", [1, 5, 16, 64])
@pytest.mark.parametrize("causal", [False, True])
def test_equals_sdpa(block_size, causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 37, 8, generator=g) * 3 for _ in range(3))
    torch.testing.assert_close(tiled_attention(q, k, v, block_size, causal=causal),
                               F.scaled_dot_product_attention(q, k, v, is_causal=causal))


def test_equals_sdpa_with_a_mask_and_other_lengths():
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(2, 11, 8, generator=g), torch.randn(2, 29, 8, generator=g), torch.randn(2, 29, 5, generator=g)
    mask = torch.rand(2, 11, 29, generator=g) > 0.5
    mask[..., 0] = True  # every query sees a key
    torch.testing.assert_close(tiled_attention(q, k, v, 4, mask=mask),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_bad_block_size():
    x = torch.zeros(1, 2, 4)
    with pytest.raises(ValueError, match="block_size=0"):
        tiled_attention(x, x, x, 0)
