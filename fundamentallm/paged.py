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

**Continuous batching** (Yu et al. 2022, Orca's iteration-level scheduling; vLLM's scheduler):
:class:`ContinuousBatcher` serves requests that arrive and finish at different steps from one
pool. Each step, the requests that arrived are admitted (their prompt prefilled into blocks of
their own), and every running request gets one token from a single batched forward; a request
that stops gives its blocks back at once, and the next one can take them. In that forward the
rows hold different numbers of positions, so each row's keys are gathered left-padded to the
longest and the padding is masked, each row keeping its own positions, as for padded prompts in
:func:`~fundamentallm.generation.generate`: every request's output equals decoding it alone
(the tests check it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
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


@dataclass
class Request:
    """One request of :class:`ContinuousBatcher`: ``prompt`` ids, up to ``max_new_tokens`` new tokens,
    arriving at step ``arrival``; ``stop`` ids end it (kept). The batcher fills ``output`` (the new
    tokens) and the steps it was ``admitted`` and ``finished``."""

    prompt: Sequence[int]
    max_new_tokens: int
    arrival: int = 0
    stop: Sequence[int] = ()
    generator: Optional[torch.Generator] = None
    output: list = field(default_factory=list)
    admitted: Optional[int] = None
    finished: Optional[int] = None


class _Ragged(KVCache):
    """The running requests' paged caches as one batch for a one-token step: row ``b`` holds
    ``caches[b].length`` positions; the batch's ``length`` is the longest, and :meth:`write` returns
    each row's keys left-padded to it (the caller masks the padding)."""

    def __init__(self, caches: list[PagedKVCache]) -> None:
        self.caches, self.pool = caches, caches[0].pool
        self.num_layers, self.max_seq_len = self.pool.num_layers, caches[0].max_seq_len
        self.length = max(c.length for c in caches)
        self.conv: dict = {}
        bs, L = self.pool.block_size, self.length + 1
        for c in caches:  # room for the new position, taken before any layer writes
            while len(c.block_tables[0]) * bs < c.length + 1:
                c.block_tables[0].append(self.pool.allocate())
        rows = [(c.block_tables[0], c.length, L - 1 - c.length) for c in caches]  # table, n, padding
        self.new = (torch.tensor([t[n // bs] for t, n, _ in rows]), torch.tensor([n % bs for _, n, _ in rows]))
        pos = [[max(j - pad, 0) for j in range(L)] for _, _, pad in rows]
        self.read = (torch.tensor([[t[q // bs] for q in ps] for (t, _, _), ps in zip(rows, pos)]),
                     torch.tensor([[q % bs for q in ps] for ps in pos]))
        self.mask = torch.tensor([[int(j >= pad) for j in range(L)] for _, _, pad in rows])  # (B, L)
        self.positions = torch.tensor([[n] for _, n, _ in rows])  # (B, 1): each row's own position

    def check_room(self, layer: int, shape: tuple) -> None:
        B, H, T, D = shape
        if B != len(self.caches) or T != 1:
            raise ValueError(f"a continuous batch steps one token for each of its {len(self.caches)} requests, "
                             f"got keys of shape {tuple(shape)}")
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer={layer} is outside the cache's {self.num_layers} layers")

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor,
              checked: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        if not checked:
            self.check_room(layer, tuple(k.shape))
        blocks, offsets = self.new
        self.pool.k[layer, blocks, :, offsets] = k[:, :, 0]  # (B, H, D) at each row's next position
        self.pool.v[layer, blocks, :, offsets] = v[:, :, 0]
        blocks, offsets = self.read  # (B, L): padding reads position 0, masked
        return (self.pool.k[layer, blocks, :, offsets].transpose(1, 2),
                self.pool.v[layer, blocks, :, offsets].transpose(1, 2))

    def advance(self, num_tokens: int) -> None:
        for c in self.caches:
            c.length += num_tokens


class ContinuousBatcher:
    """Serve :class:`Request` s from one :class:`BlockPool`: requests join and leave the running batch
    at any step (:meth:`run`). ``sampling`` (a :class:`~fundamentallm.sampling.SamplingConfig`,
    default greedy) applies to every request, each drawing with its own ``generator``.

    A request is admitted when the free blocks cover, besides what the running requests may still
    need to finish, its whole length (``prompt + max_new_tokens``): blocks are still taken only as
    positions fill, so the memory held is the paged one, and the pool can never run out mid-request
    (vLLM instead admits more and preempts when it does). ``trace`` records, for every step, the
    running requests (their indices) and the blocks in use."""

    def __init__(self, model, pool: BlockPool, sampling=None) -> None:
        from .sampling import SamplingConfig
        c = model.config
        if getattr(c, "canon", None) or getattr(c, "sliding_window", None):
            raise ValueError("continuous batching pads rows to the longest: models with canon layers or a "
                             "sliding window would see the padding; decode their requests one at a time")
        if not isinstance(pool, BlockPool):
            raise TypeError(f"pool must be a BlockPool, got {type(pool).__name__}")
        self.model, self.pool = model, pool
        self.sampling = SamplingConfig(greedy=True) if sampling is None else sampling
        self.trace: list[dict] = []

    def _blocks(self, n: int) -> int:
        return math.ceil(n / self.pool.block_size)

    def _check(self, r: Request) -> None:
        if not isinstance(r, Request):
            raise TypeError(f"requests must be Request objects, got {type(r).__name__}")
        _positive("max_new_tokens", r.max_new_tokens)
        need = len(r.prompt) + r.max_new_tokens
        if not r.prompt or need > self.model.config.max_seq_len:
            raise ValueError(f"a request needs a prompt and len(prompt) + max_new_tokens = {need} <= "
                             f"max_seq_len={self.model.config.max_seq_len}")
        if self._blocks(need) > self.pool.num_free:
            raise ValueError(f"a request of {need} positions needs {self._blocks(need)} blocks; the pool has "
                             f"{self.pool.num_free} free")
        self.model.check_values(torch.tensor([list(r.prompt)]))

    def _emit(self, r: Request, logits: torch.Tensor, step: int) -> bool:
        """Sample ``r``'s next token from ``logits (1, V)``; True when ``r`` is done."""
        from .sampling import _sample
        token = int(_sample(logits, self.sampling, r.generator))
        r.output.append(token)
        if token in r.stop or len(r.output) == r.max_new_tokens:
            r.finished = step
            return True
        return False

    def run(self, requests: Sequence[Request]) -> list[Request]:
        """Decode every request to its end; returns them with ``output`` filled."""
        for r in requests:
            self._check(r)
        index = {id(r): i for i, r in enumerate(requests)}
        waiting = sorted(requests, key=lambda r: r.arrival)
        running: list[tuple[Request, PagedKVCache]] = []
        step, was_training = 0, self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                while waiting or running:
                    batch, running = running, []
                    if batch:  # one token for every running request, one forward
                        view = _Ragged([c for _, c in batch])
                        logits = self.model.next_token_logits(
                            torch.tensor([[r.output[-1]] for r, _ in batch]), kv_cache=view,
                            attention_mask=view.mask, token_positions=view.positions)  # (B, V)
                        for i, (r, c) in enumerate(batch):
                            if self._emit(r, logits[i:i + 1], step):
                                c.free()  # its blocks go back to the pool now
                            else:
                                running.append((r, c))
                    promised = sum(self._blocks(len(r.prompt) + r.max_new_tokens) - len(c.block_tables[0])
                                   for r, c in running)  # what the running requests may still take
                    while waiting and waiting[0].arrival <= step and self._blocks(
                            len(waiting[0].prompt) + waiting[0].max_new_tokens) <= self.pool.num_free - promised:
                        r = waiting.pop(0)
                        promised += self._blocks(len(r.prompt) + r.max_new_tokens)
                        r.admitted, cache = step, PagedKVCache(self.pool, 1, self.model.config.max_seq_len)
                        logits = self.model.next_token_logits(torch.tensor([list(r.prompt)]), kv_cache=cache)
                        if self._emit(r, logits, step):  # prefill gives the first token
                            cache.free()
                        else:
                            running.append((r, cache))
                    if not running and waiting and waiting[0].arrival <= step:
                        raise RuntimeError("the pool's free blocks cannot hold the next request: is the pool "
                                           "shared with caches outside this batcher?")
                    self.trace.append({"step": step, "running": [index[id(r)] for r, _ in running],
                                       "blocks_used": self.pool.k.shape[1] - self.pool.num_free})
                    step += 1
        finally:
            self.model.train(was_training)
        return list(requests)
