"""The paged KV cache (fundamentallm/paged.py): decoding with it equals the contiguous cache."""

import pytest
import torch

from fundamentallm import Transformer, TransformerConfig
from fundamentallm.paged import BlockPool, PagedKVCache, kv_memory


def _model(**kw):
    torch.manual_seed(0)
    cfg = dict(vocab_size=30, d_model=32, num_heads=4, num_layers=2, max_seq_len=40)
    cfg.update(kw)
    return Transformer(TransformerConfig(**cfg)).eval()


@pytest.mark.parametrize("kw", [{}, {"pos_encoding": "rope", "num_kv_heads": 2, "norm": "rmsnorm"}])
@pytest.mark.parametrize("block_size", [1, 4, 7])
def test_paged_decoding_equals_contiguous(kw, block_size):
    model = _model(**kw)
    pool = BlockPool.for_model(model, num_blocks=64, block_size=block_size)
    ids = torch.randint(0, 30, (3, 9), generator=torch.Generator().manual_seed(1))
    caches = [model.make_kv_cache(3), PagedKVCache(pool, 3, model.config.max_seq_len)]
    tokens = [ids, ids]
    with torch.no_grad():
        for step in range(12):
            outs = []
            for i, cache in enumerate(caches):
                x = tokens[i] if step == 0 else tokens[i][:, -1:]
                logits = model.next_token_logits(x, kv_cache=cache)
                outs.append(logits)
                tokens[i] = torch.cat([tokens[i], logits.argmax(-1, keepdim=True)], 1)
            torch.testing.assert_close(outs[1], outs[0])
    assert torch.equal(tokens[0], tokens[1])
    paged = caches[1]
    assert paged.blocks_held() == 3 * -(-20 // block_size)  # 9 + 11 positions fed
    paged.free()
    assert pool.num_free == 64 and paged.length == 0


def test_blocks_are_shared_and_reused():
    model = _model()
    pool = BlockPool.for_model(model, num_blocks=6, block_size=4)
    a, b = PagedKVCache(pool, 1, 40), PagedKVCache(pool, 1, 40)
    with torch.no_grad():
        model.next_token_logits(torch.zeros(1, 8, dtype=torch.long), kv_cache=a)  # 2 blocks
        model.next_token_logits(torch.zeros(1, 13, dtype=torch.long), kv_cache=b)  # 4 blocks
        assert pool.num_free == 0
        with pytest.raises(RuntimeError, match="pool is full"):
            model.next_token_logits(torch.zeros(1, 1, dtype=torch.long), kv_cache=a)
        a.free()
        c = PagedKVCache(pool, 1, 40)
        model.next_token_logits(torch.zeros(1, 5, dtype=torch.long), kv_cache=c)
        assert sorted(c.block_tables[0] + b.block_tables[0]) == list(range(6))


def test_kv_memory():
    m = kv_memory([10, 100, 3, 64], max_seq_len=128, block_size=16, bytes_per_position=2)
    assert m["used"] == 177 * 2 and m["contiguous"] == 4 * 128 * 2
    assert m["paged"] == (1 + 7 + 1 + 4) * 16 * 2
    assert m["paged_waste"] < m["contiguous_waste"]
    with pytest.raises(ValueError, match="block_size=0"):
        kv_memory([1], 8, 0)
    with pytest.raises(ValueError, match="lengths holds 9"):
        kv_memory([9], 8, 4)
