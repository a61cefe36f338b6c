"""A paged KV cache (Kwon et al. 2023, vLLM's PagedAttention): the keys and values live in
fixed-size *blocks* taken from one shared pool, and each sequence keeps a *block table*, the list
of its blocks in order, as an operating system keeps a page table.

The contiguous :class:`~fundamentallm.attention.KVCache` reserves ``max_seq_len`` positions for
every sequence when it starts, because it cannot know how long the sequence will grow. A request
that stops after 40 tokens of a 1024-position window leaves 984 positions reserved and unused,
and a server that holds such reservations fits fewer requests at once. A paged cache takes one
block of ``block_size`` positions at a time, when the sequence reaches it, and gives its blocks
back to the pool when the sequence ends: at most ``block_size - 1`` positions per sequence are
wasted. :func:`kv_memory` computes both for a batch of lengths.

Position ``p`` of sequence ``b`` lives in block ``table[b][p // block_size]`` at offset
``p % block_size``. :class:`PagedKVCache` is a ``KVCache`` to the model (same ``write``/``advance``
contract, ``length`` shared by the rows as in the contiguous cache): ``write`` scatters the new
keys and values into their blocks and gathers the sequence back in order for attention, so
decoding with it equals decoding with the contiguous cache (the tests check the tokens and the
logits). vLLM's attention kernel reads the blocks in place instead of gathering them.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from .attention import KVCache


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be an integer >= 1")


class BlockPool:
    """``num_blocks`` blocks of ``block_size`` positions, for every layer:
    ``k``/``v`` ``(num_layers, num_blocks, H_kv, block_size, D)``; ``allocate`` and ``free`` blocks."""

    def __init__(self, num_blocks: int, block_size: int, num_layers: int, num_kv_heads: int, head_dim: int,
                 device: Optional[torch.device] = None, dtype: torch.dtype = torch.float32) -> None:
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size), ("num_layers", num_layers),
                            ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
            _positive(name, value)
        shape = (num_layers, num_blocks, num_kv_heads, block_size, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.block_size, self.num_layers = block_size, num_layers
        self.free_blocks = list(range(num_blocks - 1, -1, -1))  # a stack: pop() gives block 0 first

    @classmethod
    def for_model(cls, model, num_blocks: int, block_size: int) -> BlockPool:
        """A pool shaped for a ``Transformer``'s layers and key/value heads."""
        c, ref = model.config, model.lm_head.weight
        return cls(num_blocks, block_size, len(model.blocks), c.kv_heads, c.head_dim, ref.device, ref.dtype)

    @property
    def num_free(self) -> int:
        return len(self.free_blocks)

    def allocate(self) -> int:
        if not self.free_blocks:
            raise RuntimeError("the block pool is full: free finished sequences or make a larger pool "
                               "(num_blocks)")
        return self.free_blocks.pop()

    def free(self, blocks: Sequence[int]) -> None:
        self.free_blocks.extend(reversed(list(blocks)))

    def block_bytes(self) -> int:
        """Memory of one block: K and V of ``block_size`` positions in every layer."""
        L, _, H, S, D = self.k.shape
        return 2 * L * H * S * D * self.k.element_size()


class PagedKVCache(KVCache):
    """A :class:`KVCache` for ``batch_size`` sequences whose positions live in blocks of ``pool``.
    Blocks are taken as the sequences grow; :meth:`free` gives them back."""

    def __init__(self, pool: BlockPool, batch_size: int, max_seq_len: int) -> None:
        # subtle: KVCache.__init__ is not called: it would allocate the contiguous storage we avoid
        if not isinstance(pool, BlockPool):
            raise TypeError(f"pool must be a BlockPool, got {type(pool).__name__}")
        _positive("batch_size", batch_size)
        _positive("max_seq_len", max_seq_len)
        self.pool, self.batch_size = pool, batch_size
        self.num_layers, self.max_seq_len = pool.num_layers, max_seq_len
        self.block_tables: list[list[int]] = [[] for _ in range(batch_size)]
        self.length = 0
        self.conv: dict = {}

    def _index(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Block ids and offsets ``(B, end - start)`` of positions ``start .. end-1`` of every row."""
        pos = torch.arange(start, end)
        table = torch.tensor(self.block_tables, dtype=torch.long)  # (B, blocks held)
        return table[:, pos // self.pool.block_size], (pos % self.pool.block_size).expand(self.batch_size, -1)

    def check_room(self, layer: int, shape: tuple) -> None:
        B, H, T, D = shape
        if B != self.batch_size:
            raise ValueError(f"the paged cache holds {self.batch_size} sequences, got keys for {B}")
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer={layer} is outside the cache's {self.num_layers} layers")
        if self.length + T > self.max_seq_len:
            raise ValueError(f"KV cache overflow: {self.length} cached + {T} new positions > "
                             f"max_seq_len={self.max_seq_len}")

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor,
              checked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        start, T = self.length, k.shape[2]
        if not checked:
            self.check_room(layer, tuple(k.shape))
        needed = math.ceil((start + T) / self.pool.block_size)
        for table in self.block_tables:  # the first layer to write takes the blocks for all layers
            while len(table) < needed:
                table.append(self.pool.allocate())
        blocks, offsets = self._index(start, start + T)  # (B, T)
        self.pool.k[layer, blocks, :, offsets] = k.transpose(1, 2)  # (B, T, H, D) into the blocks
        self.pool.v[layer, blocks, :, offsets] = v.transpose(1, 2)
        blocks, offsets = self._index(0, start + T)
        # gather the sequence back in order: (B, start + T, H, D) -> (B, H, start + T, D)
        return self.pool.k[layer, blocks, :, offsets].transpose(1, 2), self.pool.v[layer, blocks, :, offsets].transpose(1, 2)

    def bytes_per_token(self) -> int:
        return self.pool.block_bytes() // self.pool.block_size * self.batch_size

    def blocks_held(self) -> int:
        return sum(len(t) for t in self.block_tables)

    def free(self) -> None:
        """Give every block back to the pool; the cache is empty again."""
        for table in self.block_tables:
            self.pool.free(table)
            table.clear()
        self.length = 0

    def reset(self) -> None:
        self.free()


def kv_memory(lengths: Sequence[int], max_seq_len: int, block_size: int, bytes_per_position: int = 1) -> dict:
    """Memory for a batch of sequences of ``lengths`` positions, in units of ``bytes_per_position``:
    ``used`` (what the positions need), ``contiguous`` (``max_seq_len`` reserved per sequence),
    ``paged`` (whole blocks of ``block_size``), and the wasted fraction of each."""
    _positive("max_seq_len", max_seq_len)
    _positive("block_size", block_size)
    _positive("bytes_per_position", bytes_per_position)
    lengths = list(lengths)
    for n in lengths:
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= max_seq_len:
            raise ValueError(f"lengths holds {n!r}; every length must be an integer in [0, max_seq_len={max_seq_len}]")
    used = sum(lengths) * bytes_per_position
    contiguous = len(lengths) * max_seq_len * bytes_per_position
    paged = sum(math.ceil(n / block_size) for n in lengths) * block_size * bytes_per_position
    return {"used": used, "contiguous": contiguous, "paged": paged,
            "contiguous_waste": 1 - used / contiguous if contiguous else 0.0,
            "paged_waste": 1 - used / paged if paged else 0.0}
