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


@pytest.mark.parametrize("block_size,causal,masked", [(4, False, False), (7, True, False), (16, False, True)])
def test_backward_by_recomputation_equals_autograd(block_size, causal, masked):
    from fundamentallm.flash import tiled_attention_backward

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 23, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = None
    if masked:
        mask = torch.rand(2, 3, 23, 23, generator=g) > 0.4
        mask[..., 0] = True
    d_out = torch.randn(2, 3, 23, 8, generator=g, dtype=torch.float64)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    expected = torch.autograd.grad(out, (q, k, v), d_out)
    with torch.no_grad():
        got = tiled_attention_backward(q, k, v, d_out, block_size, causal=causal, mask=mask)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    out, lse = tiled_attention(q.detach(), k.detach(), v.detach(), block_size, causal, mask, return_lse=True)
    assert lse.shape == (2, 3, 23, 1)


def test_the_score_matrix_is_measured_and_tiling_never_allocates_it():
    """largest_allocation measures, with torch.profiler, the biggest block one operation allocates:
    the T x T float32 scores of plain attention, one (T, block) block of scores for the tiled one."""
    from fundamentallm.flash import largest_allocation

    g = torch.Generator().manual_seed(0)
    T = 512
    q, k, v = (torch.randn(1, 1, T, 32, generator=g) for _ in range(3))
    full = largest_allocation(lambda: torch.softmax(q @ k.transpose(-2, -1), -1) @ v)
    tiled = largest_allocation(lambda: tiled_attention(q, k, v, block_size=64))
    assert full == T * T * 4
    assert T * 32 * 4 <= tiled <= T * 64 * 4 < full
