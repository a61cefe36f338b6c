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


@pytest.mark.parametrize("kw", [{}, {"pos_encoding": "rope", "num_kv_heads": 2, "norm": "rmsnorm"}])
def test_generate_with_a_paged_cache_equals_contiguous(kw):
    """The one decoder fills a paged cache when given one (a pool, or a PagedKVCache)."""
    from fundamentallm.generation import generate

    model = _model(**kw)
    pool = BlockPool.for_model(model, num_blocks=40, block_size=4)
    ids = torch.randint(0, 30, (3, 9), generator=torch.Generator().manual_seed(1))
    expected = generate(model, ids, 15, greedy=True)
    assert torch.equal(generate(model, ids, 15, greedy=True, cache=pool), expected)
    assert pool.num_free == 40  # generate made the paged cache from the pool and gave its blocks back
    cache = PagedKVCache(pool, 3, model.config.max_seq_len)
    assert torch.equal(generate(model, ids, 15, greedy=True, cache=cache), expected)
    assert cache.blocks_held() == 3 * 6  # 9 + 14 positions fed, blocks of 4: the caller's to free
    cache.free()
    # left-padded prompts of different lengths, as with the contiguous cache
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[0, :4] = 0
    mask[2, :1] = 0
    assert torch.equal(generate(model, ids, 10, greedy=True, attention_mask=mask, cache=pool),
                       generate(model, ids, 10, greedy=True, attention_mask=mask))
    with pytest.raises(ValueError, match="must be empty"):
        generate(model, ids[:2], 3, cache=PagedKVCache(pool, 3, 40))
    with pytest.raises(ValueError, match="use_cache"):
        generate(model, ids, 3, cache=pool, use_cache=False)


@pytest.mark.parametrize("kw", [{}, {"pos_encoding": "rope", "num_kv_heads": 2, "norm": "rmsnorm"}])
def test_continuous_batching_equals_decoding_each_request_alone(kw):
    """Requests arriving and stopping at different steps share one pool and one forward per step;
    each one's tokens are those of generate() on it alone; blocks go back as requests end."""
    from fundamentallm.generation import generate
    from fundamentallm.paged import ContinuousBatcher, Request

    model = _model(**kw)
    g = torch.Generator().manual_seed(2)
    specs = [(5, 12, 0), (9, 4, 0), (3, 15, 2), (7, 6, 3), (11, 9, 9), (2, 3, 10)]  # prompt, new, arrival
    requests = [Request(torch.randint(0, 30, (n,), generator=g).tolist(), new, arrival)
                for n, new, arrival in specs]
    stop = int(generate(model, torch.tensor(requests[2].prompt), 15, greedy=True)[3 + 6])
    requests[2].stop = (stop,)  # one request ends at a stop token
    pool = BlockPool.for_model(model, num_blocks=10, block_size=4)  # too few blocks for all at once
    batcher = ContinuousBatcher(model, pool)
    batcher.run(requests)
    for r in requests:
        alone = generate(model, torch.tensor(r.prompt), r.max_new_tokens, greedy=True, stop=r.stop or None)
        assert r.output == alone[len(r.prompt):].tolist()
        assert r.admitted >= r.arrival and r.finished == r.admitted + len(r.output) - 1
    assert len(requests[2].output) < 15  # the stop fired
    assert pool.num_free == 10  # every block returned
    batch_sizes = [len(t["running"]) for t in batcher.trace]
    assert max(batch_sizes) >= 2 and max(t["blocks_used"] for t in batcher.trace) <= 10
    assert any(r.admitted > r.arrival for r in requests)  # one waited until blocks were given back


def test_continuous_batching_refuses():
    from fundamentallm.paged import ContinuousBatcher, Request

    model = _model()
    pool = BlockPool.for_model(model, num_blocks=3, block_size=4)
    with pytest.raises(ValueError, match="needs 4 blocks"):
        ContinuousBatcher(model, pool).run([Request([1, 2, 3], 10)])
    with pytest.raises(ValueError, match="max_seq_len"):
        ContinuousBatcher(model, pool).run([Request([1] * 39, 5)])
    with pytest.raises(ValueError, match="sliding window"):
        ContinuousBatcher(_model(sliding_window=8), pool)


def test_stream_with_a_paged_cache():
    from fundamentallm.generation import generate, stream

    model = _model()
    pool = BlockPool.for_model(model, num_blocks=20, block_size=4)
    ids = torch.randint(0, 30, (2, 6), generator=torch.Generator().manual_seed(3))
    tokens = torch.stack(list(stream(model, ids, 12, greedy=True, cache=pool)), dim=1)
    assert torch.equal(tokens, generate(model, ids, 12, greedy=True)[:, 6:])
    assert pool.num_free == 20
    it = stream(model, ids, 12, greedy=True, cache=pool)
    next(it)
    assert pool.num_free < 20
    it.close()  # a stream closed early gives its blocks back
    assert pool.num_free == 20
