"""The grader's wire format: data between the grader and the worker that runs a student's code,
without pickle (unpickling runs code; these bytes come from the student's process).

A message is a JSON header plus raw buffers, framed as ``b"FLW1"``, the header's length and the
buffers' total length (8 bytes each, big-endian), the header, then the buffers. Data is what the
checks exchange with a student's function: ``None``, bools, ints, floats, strings, lists, tuples,
dicts (keys of these types), sets, NumPy arrays and torch tensors of numeric or boolean dtypes
(sent as their raw bytes), CPU ``torch.Generator`` objects (sent as their state) and records
(a dataclass instance such as a ``TransformerConfig``, or a ``types.SimpleNamespace``: sent as its
fields, received as a ``SimpleNamespace``, which has no behaviour), and Python generators of data
(drained as they are sent, each item encoded when it is yielded, received as an iterator over the
items: a stream of blocks that reuses one buffer arrives as the blocks it yielded). Anything else crosses as a
*handle* (``{"$h": id}``): an object that stays in the worker and whose methods the grader calls
through a proxy.

Every limit is checked before memory is allocated: the header's size, the buffers' total size,
the nesting depth, the number of items, the dtypes and shapes.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import select
import struct
import sys
import time
import types
from typing import Any, Callable, Optional

MAGIC = b"FLW1"
MAX_HEADER = 16 * 2 ** 20
MAX_BUFFERS = 512 * 2 ** 20
MAX_DEPTH = 40
MAX_ITEMS = 1_000_000
NUMPY_KINDS = "biufc"
TORCH_DTYPE_NAMES = ("float64", "float32", "float16", "bfloat16", "complex64", "complex128",
                     "int64", "int32", "int16", "int8", "uint8", "bool")
# torch and NumPy are imported only when a message holds a tensor or an array (a worker whose
# student code uses neither starts in a fraction of a second)


@functools.lru_cache(maxsize=1)
def torch_dtypes() -> dict:
    import torch

    return {name: getattr(torch, name) for name in TORCH_DTYPE_NAMES}


class WireError(Exception):
    """A message that breaks the format or its limits."""


class Handle:
    """A reference to an object that stays on the other side (``{"$h": id}``)."""

    def __init__(self, hid: int) -> None:
        self.hid = int(hid)


def encode(value: Any, to_handle: Optional[Callable[[Any], int]] = None) -> tuple[Any, list[bytes]]:
    """(JSON-able structure, buffers). Objects that are not data become handles via
    ``to_handle`` (the worker's side), or raise :class:`WireError` when it is None."""
    buffers: list[bytes] = []
    count = [0]
    torch, np = sys.modules.get("torch"), sys.modules.get("numpy")  # no tensor exists without them

    def enc(v: Any, depth: int) -> Any:
        count[0] += 1
        if depth > MAX_DEPTH or count[0] > MAX_ITEMS:
            raise WireError("the value is nested too deeply or holds too many items")
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (int, float)) and type(v) in (int, float):
            return v
        if np is not None and isinstance(v, np.generic) and v.dtype.kind in NUMPY_KINDS:
            return v.item()
        if isinstance(v, Handle):
            return {"$h": v.hid}
        if torch is not None and isinstance(v, torch.Tensor) and v.layout == torch.strided \
                and str(v.dtype).removeprefix("torch.") in TORCH_DTYPE_NAMES:
            # a subclass (nn.Parameter, or one of the student's) is sent as its plain data
            t = torch.Tensor.as_subclass(v.detach(), torch.Tensor).cpu().contiguous()
            buffers.append(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
            return {"$t": len(buffers) - 1, "dtype": str(t.dtype).removeprefix("torch."),
                    "shape": list(t.shape), "grad": bool(v.requires_grad)}
        if torch is not None and isinstance(v, torch.Generator) and v.device.type == "cpu":
            buffers.append(v.get_state().numpy().tobytes())  # a generator crosses as its state
            return {"$g": len(buffers) - 1}
        if np is not None and type(v) is np.ndarray and v.dtype.kind in NUMPY_KINDS:
            buffers.append(np.ascontiguousarray(v).tobytes())
            return {"$a": len(buffers) - 1, "dtype": v.dtype.str, "shape": list(v.shape)}
        if type(v) is list:
            return [enc(x, depth + 1) for x in v]
        if type(v) is tuple or (torch is not None and type(v) is torch.Size):
            return {"$tu": [enc(x, depth + 1) for x in v]}
        if type(v) in (set, frozenset):
            return {"$s": [enc(x, depth + 1) for x in v]}
        if isinstance(v, types.GeneratorType):  # drained here: each item encoded as it is yielded
            return {"$it": [enc(x, depth + 1) for x in v]}
        if type(v) in (dict, collections.OrderedDict):  # a state dict is an OrderedDict
            return {"$d": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        if type(v) is types.SimpleNamespace or (dataclasses.is_dataclass(v) and not isinstance(v, type)):
            fields = vars(v) if type(v) is types.SimpleNamespace else {
                f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
            return {"$r": [[str(k), enc(x, depth + 1)] for k, x in fields.items()]}
        if to_handle is not None:
            return {"$h": to_handle(v)}
        raise WireError(f"a {type(v).__name__} is not data (numbers, strings, tensors, arrays, "
                        f"lists, tuples, dicts)")

    return enc(value, 0), buffers


def decode(obj: Any, buffers: list[bytes], from_handle: Callable[[int], Any]) -> Any:
    """The value of ``encode``'s output; handles become ``from_handle(id)``."""
    count = [0]

    def dec(o: Any, depth: int) -> Any:
        count[0] += 1
        if depth > MAX_DEPTH or count[0] > MAX_ITEMS:
            raise WireError("the value is nested too deeply or holds too many items")
        if o is None or isinstance(o, (bool, int, float, str)):
            return o
        if isinstance(o, list):
            return [dec(x, depth + 1) for x in o]
        if not isinstance(o, dict) or len(o) == 0:
            raise WireError(f"unexpected {type(o).__name__} in a message")
        if "$t" in o:
            import numpy as np
            import torch

            dtype = torch_dtypes().get(o.get("dtype"))
            shape = _shape(o.get("shape"))
            buf = _buffer(buffers, o["$t"])
            if dtype is None:
                raise WireError(f"dtype {o.get('dtype')!r} is not allowed")
            size = torch.empty((), dtype=dtype).element_size()
            numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if numel * size != len(buf):
                raise WireError("a tensor's bytes do not match its shape")
            if numel == 0:
                t = torch.empty(shape, dtype=dtype)
            else:
                t = torch.frombuffer(bytearray(buf), dtype=torch.uint8).view(dtype).reshape(shape)
            return t.requires_grad_(True) if o.get("grad") is True and t.is_floating_point() else t
        if "$g" in o:
            import torch

            generator = torch.Generator()
            try:
                generator.set_state(torch.frombuffer(bytearray(_buffer(buffers, o["$g"])) or bytearray(1),
                                                     dtype=torch.uint8))
            except RuntimeError as e:
                raise WireError("a generator's state is not valid") from e
            return generator
        if "$a" in o:
            import numpy as np

            try:
                dtype = np.dtype(str(o.get("dtype")))
            except TypeError as e:
                raise WireError(f"dtype {o.get('dtype')!r} is not allowed") from e
            if dtype.kind not in NUMPY_KINDS:
                raise WireError(f"dtype {o.get('dtype')!r} is not allowed")
            shape, buf = _shape(o.get("shape")), _buffer(buffers, o["$a"])
            numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if numel * dtype.itemsize != len(buf):
                raise WireError("an array's bytes do not match its shape")
            return np.frombuffer(buf, dtype=dtype).reshape(shape).copy()
        if "$tu" in o:
            return tuple(dec(x, depth + 1) for x in _list(o["$tu"]))
        if "$s" in o:
            return {_hashable(dec(x, depth + 1)) for x in _list(o["$s"])}
        if "$it" in o:
            return iter([dec(x, depth + 1) for x in _list(o["$it"])])
        if "$d" in o:
            out = {}
            for pair in _list(o["$d"]):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise WireError("a dict entry is not a [key, value] pair")
                out[_hashable(dec(pair[0], depth + 1))] = dec(pair[1], depth + 1)
            return out
        if "$r" in o:  # a record: its fields, as attributes of an object with no behaviour
            fields = {}
            for pair in _list(o["$r"]):
                if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str) \
                        or not pair[0].isidentifier() or pair[0].startswith("_"):
                    raise WireError("a record field is not a [name, value] pair")
                fields[pair[0]] = dec(pair[1], depth + 1)
            return types.SimpleNamespace(**fields)
        if "$h" in o and isinstance(o["$h"], int) and not isinstance(o["$h"], bool):
            return from_handle(o["$h"])
        raise WireError("unknown value in a message")

    return dec(obj, 0)


def _shape(shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, list) or len(shape) > 16 or not all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2 ** 40 for n in shape):
        raise WireError("bad shape in a message")
    return tuple(shape)


def _buffer(buffers: list[bytes], index: Any) -> bytes:
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(buffers):
        raise WireError("bad buffer index in a message")
    return buffers[index]


def _list(value: Any) -> list:
    if not isinstance(value, list):
        raise WireError("expected a list in a message")
    return value


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError as e:
        raise WireError("a dict key or set item is not hashable") from e
    return value


def map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``value`` rebuilt with ``fn(t)`` in place of each torch tensor, visited in the order
    :func:`encode` visits them (lists, tuples, dict keys then values); other values unchanged."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return fn(value)
    if type(value) is list:
        return [map_tensors(v, fn) for v in value]
    if type(value) is tuple:
        return tuple(map_tensors(v, fn) for v in value)
    if type(value) is dict:
        return {map_tensors(k, fn): map_tensors(v, fn) for k, v in value.items()}
    return value


def grad_tensors(value: Any) -> list:
    """The tensors of ``value`` that require a gradient, in :func:`map_tensors` order."""
    found: list = []
    map_tensors(value, lambda t: found.append(t) if t.requires_grad else None)
    return found


# --- framing -----------------------------------------------------------------------------------

def send(fd: int, header: dict, buffers: list[bytes]) -> None:
    """Write one message to the file descriptor ``fd`` (blocking)."""
    head = json.dumps({**header, "buffers": [len(b) for b in buffers]}).encode("utf-8")
    total = sum(len(b) for b in buffers)
    if len(head) > MAX_HEADER or total > MAX_BUFFERS:
        raise WireError(f"message too large ({len(head)} + {total} bytes)")
    for chunk in (MAGIC + struct.pack(">QQ", len(head), total), head, *buffers):
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view):]


class Timeout(Exception):
    """No complete message before the deadline."""


class Closed(Exception):
    """The other side closed the stream (the worker ended)."""


def _read_exactly(fd: int, n: int, deadline: Optional[float]) -> bytearray:
    """``n`` bytes from ``fd``, read in place into one buffer (no copy of what was read)."""
    out = bytearray(n)
    view, got = memoryview(out), 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise Timeout()
        k = os.readv(fd, [view[got:got + (1 << 20)]])
        if not k:
            raise Closed()
        got += k
    return out


def recv(fd: int, deadline: Optional[float] = None, max_buffers: int = MAX_BUFFERS) -> tuple[dict, list]:
    """Read one message from ``fd`` before ``deadline`` (``time.monotonic()``), checking its
    limits (``max_buffers``: the bytes of its data) before reading its body; the buffers are views
    of one block read in place. Raises :class:`Timeout`, :class:`Closed` or :class:`WireError`."""
    prefix = _read_exactly(fd, len(MAGIC) + 16, deadline)
    if prefix[:4] != MAGIC:
        raise WireError("the stream is not in the grader's format")
    head_len, total = struct.unpack(">QQ", prefix[4:])
    if head_len > MAX_HEADER or total > min(max_buffers, MAX_BUFFERS):
        raise WireError(f"message too large ({head_len} + {total} bytes)")
    try:
        header = json.loads(_read_exactly(fd, head_len, deadline).decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise WireError(f"unreadable message header ({type(e).__name__})") from e
    sizes = header.get("buffers") if isinstance(header, dict) else None
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes) or sum(sizes) != total:
        raise WireError("message buffers do not add up")
    body = memoryview(_read_exactly(fd, total, deadline)) if total else memoryview(b"")
    buffers, at = [], 0
    for s in sizes:
        buffers.append(body[at:at + s])
        at += s
    return header, buffers
